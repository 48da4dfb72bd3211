// SPDX-License-Identifier: GPL-2.0
//! Parsing of the kernel's pool and thin status and table lines
//! (interface.md, "Status lines"), as returned by `DM_TABLE_STATUS`.
//!
//! The parser is deliberately tolerant, like libdm's and dmtest-python's:
//! the first four pool fields are positional (they have been stable since
//! the target's first release); everything after them is read as a set of
//! words. Known words fill typed fields, a trailing number is the metadata
//! low-water mark, and anything else is kept in `extra_flags` rather than
//! rejected, so a newer kernel that adds a flag does not break `rthinctl`.
//! `Fail`, `Error` and `-` are values, not errors.
//!
//! The table lines are parsed with the core crate's constructor parsers
//! ([`rthin_core::dm::pool_table::PoolTable`], [`rthin_core::dm::thin_table::ThinTable`]):
//! the kernel prints its table line in constructor syntax.

use std::fmt;

use rthin_core::dm::pool_table::PoolTable;
use rthin_core::dm::thin_table::ThinTable;

/// A status or table line that does not have the expected shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// What was being parsed (`pool status`, `thin table`, ...).
    pub what: &'static str,
    /// Why it failed.
    pub why: String,
    /// The line as received.
    pub line: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot parse {} line {:?}: {}",
            self.what, self.line, self.why
        )
    }
}

impl std::error::Error for ParseError {}

fn perr(what: &'static str, line: &str, why: impl Into<String>) -> ParseError {
    ParseError {
        what,
        why: why.into(),
        line: line.to_string(),
    }
}

/// Pool status field 5.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolModeWord {
    /// `rw`.
    ReadWrite,
    /// `ro` (read-only or out of metadata space).
    ReadOnly,
    /// `out_of_data_space`.
    OutOfDataSpace,
}

impl PoolModeWord {
    /// The kernel word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadWrite => "rw",
            Self::ReadOnly => "ro",
            Self::OutOfDataSpace => "out_of_data_space",
        }
    }
}

/// Pool status field 6.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscardWord {
    /// `ignore_discard`.
    Ignore,
    /// `discard_passdown`.
    Passdown,
    /// `no_discard_passdown`.
    NoPassdown,
}

impl DiscardWord {
    /// The kernel word.
    #[cfg(test)]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ignore => "ignore_discard",
            Self::Passdown => "discard_passdown",
            Self::NoPassdown => "no_discard_passdown",
        }
    }

    /// The short name used in tables and JSON.
    pub fn short(self) -> &'static str {
        match self {
            Self::Ignore => "ignore",
            Self::Passdown => "passdown",
            Self::NoPassdown => "nopassdown",
        }
    }
}

/// A healthy pool's INFO status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolUsage {
    /// Userspace transaction id.
    pub transaction_id: u64,
    /// Used metadata blocks (4 KiB), including the metadata reserve.
    pub meta_used: u64,
    /// Total metadata blocks.
    pub meta_total: u64,
    /// Used data blocks.
    pub data_used: u64,
    /// Total data blocks.
    pub data_total: u64,
    /// Block number of the held metadata snapshot, if any.
    pub held_root: Option<u64>,
    /// Mode word; `None` if the kernel printed none we know.
    pub mode: Option<PoolModeWord>,
    /// Discard word, if present.
    pub discard: Option<DiscardWord>,
    /// `Some(true)` for `error_if_no_space`, `Some(false)` for
    /// `queue_if_no_space`, `None` if absent.
    pub error_if_no_space: Option<bool>,
    /// `needs_check` was present.
    pub needs_check: bool,
    /// Metadata low-water threshold in blocks (absent on old kernels).
    pub meta_low_water: Option<u64>,
    /// Words we did not recognise, in order.
    pub extra_flags: Vec<String>,
}

/// A pool INFO status line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolStatus {
    /// The usual line.
    Working(Box<PoolUsage>),
    /// `Fail`: the pool is in FAIL mode.
    Fail,
    /// `Error`: a metadata query failed in the kernel.
    Error,
}

fn parse_u64(what: &'static str, line: &str, field: &str, w: &str) -> Result<u64, ParseError> {
    w.parse::<u64>()
        .map_err(|_| perr(what, line, format!("{field} {w:?} is not a number")))
}

fn parse_ratio(
    what: &'static str,
    line: &str,
    field: &str,
    w: &str,
) -> Result<(u64, u64), ParseError> {
    let (a, b) = w
        .split_once('/')
        .ok_or_else(|| perr(what, line, format!("{field} {w:?} is not <used>/<total>")))?;
    Ok((
        parse_u64(what, line, field, a)?,
        parse_u64(what, line, field, b)?,
    ))
}

/// Parses a pool INFO status line (the params part of `DM_TABLE_STATUS`).
pub fn parse_pool_status(line: &str) -> Result<PoolStatus, ParseError> {
    const W: &str = "pool status";
    let words: Vec<&str> = line.split_ascii_whitespace().collect();
    match words.as_slice() {
        ["Fail"] => return Ok(PoolStatus::Fail),
        ["Error"] => return Ok(PoolStatus::Error),
        [] => return Err(perr(W, line, "empty")),
        _ => {}
    }
    if words.len() < 4 {
        return Err(perr(
            W,
            line,
            format!("{} fields, expected at least 4", words.len()),
        ));
    }
    let transaction_id = parse_u64(W, line, "transaction id", words[0])?;
    let (meta_used, meta_total) = parse_ratio(W, line, "metadata usage", words[1])?;
    let (data_used, data_total) = parse_ratio(W, line, "data usage", words[2])?;
    let held_root = match words[3] {
        "-" => None,
        w => Some(parse_u64(W, line, "held metadata root", w)?),
    };
    let mut u = PoolUsage {
        transaction_id,
        meta_used,
        meta_total,
        data_used,
        data_total,
        held_root,
        mode: None,
        discard: None,
        error_if_no_space: None,
        needs_check: false,
        meta_low_water: None,
        extra_flags: Vec::new(),
    };
    let rest = &words[4..];
    for (i, w) in rest.iter().enumerate() {
        match *w {
            "rw" => u.mode = Some(PoolModeWord::ReadWrite),
            "ro" => u.mode = Some(PoolModeWord::ReadOnly),
            "out_of_data_space" => u.mode = Some(PoolModeWord::OutOfDataSpace),
            "ignore_discard" => u.discard = Some(DiscardWord::Ignore),
            "discard_passdown" => u.discard = Some(DiscardWord::Passdown),
            "no_discard_passdown" => u.discard = Some(DiscardWord::NoPassdown),
            "queue_if_no_space" => u.error_if_no_space = Some(false),
            "error_if_no_space" => u.error_if_no_space = Some(true),
            "needs_check" => u.needs_check = true,
            "-" => {}
            w if i + 1 == rest.len() && w.bytes().all(|b| b.is_ascii_digit()) => {
                u.meta_low_water = w.parse().ok();
                if u.meta_low_water.is_none() {
                    u.extra_flags.push(w.to_string());
                }
            }
            w => u.extra_flags.push(w.to_string()),
        }
    }
    Ok(PoolStatus::Working(Box::new(u)))
}

/// A thin INFO status line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinStatus {
    /// The usual line.
    Working {
        /// Mapped sectors (a multiple of the pool block size).
        mapped_sectors: u64,
        /// Highest mapped sector, `None` if nothing is mapped.
        highest_mapped_sector: Option<u64>,
    },
    /// `Fail`: the pool is in FAIL mode.
    Fail,
    /// `Error`: a metadata query failed.
    Error,
    /// `-`: the thin has no open device in the pool.
    NoDevice,
}

/// Parses a thin INFO status line.
pub fn parse_thin_status(line: &str) -> Result<ThinStatus, ParseError> {
    const W: &str = "thin status";
    let words: Vec<&str> = line.split_ascii_whitespace().collect();
    match words.as_slice() {
        ["Fail"] => Ok(ThinStatus::Fail),
        ["Error"] => Ok(ThinStatus::Error),
        ["-"] => Ok(ThinStatus::NoDevice),
        [m, h] => Ok(ThinStatus::Working {
            mapped_sectors: parse_u64(W, line, "mapped sectors", m)?,
            highest_mapped_sector: match *h {
                "-" => None,
                h => Some(parse_u64(W, line, "highest mapped sector", h)?),
            },
        }),
        _ => Err(perr(W, line, format!("{} fields, expected 2", words.len()))),
    }
}

/// A `major:minor` device number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DevT {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

impl fmt::Display for DevT {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

impl DevT {
    /// Parses `MAJ:MIN`.
    pub fn parse(s: &str) -> Option<Self> {
        let (a, b) = s.split_once(':')?;
        Some(Self {
            major: a.parse().ok()?,
            minor: b.parse().ok()?,
        })
    }
}

/// A pool TABLE line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolTableInfo {
    /// Metadata device.
    pub metadata_dev: Option<DevT>,
    /// Data device.
    pub data_dev: Option<DevT>,
    /// Data block size in sectors.
    pub block_size_sectors: u32,
    /// Data low-water mark in blocks.
    pub low_water_blocks: u64,
    /// Feature words of the table, in order.
    pub features: Vec<String>,
}

/// Parses a pool TABLE line with the core crate's constructor parser.
pub fn parse_pool_table(line: &str) -> Result<PoolTableInfo, ParseError> {
    let words: Vec<&str> = line.split_ascii_whitespace().collect();
    let t = PoolTable::parse(&words).map_err(|e| perr("pool table", line, e.to_string()))?;
    let n = words.len().saturating_sub(t.ignored_words);
    let features = words
        .get(5..n)
        .unwrap_or_default()
        .iter()
        .map(|s| s.to_string())
        .collect();
    Ok(PoolTableInfo {
        metadata_dev: std::str::from_utf8(t.metadata_dev)
            .ok()
            .and_then(DevT::parse),
        data_dev: std::str::from_utf8(t.data_dev).ok().and_then(DevT::parse),
        block_size_sectors: t.block_size,
        low_water_blocks: t.low_water_blocks,
        features,
    })
}

/// A thin TABLE line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinTableInfo {
    /// The usual line.
    Working {
        /// The pool device.
        pool: DevT,
        /// Thin device id in the pool.
        dev_id: u32,
        /// External origin device, if any.
        origin: Option<DevT>,
    },
    /// `Fail`: the pool is in FAIL mode (the table line is not shown).
    Fail,
    /// `-`: no device.
    NoDevice,
}

/// Parses a thin TABLE line with the core crate's constructor parser.
pub fn parse_thin_table(line: &str) -> Result<ThinTableInfo, ParseError> {
    const W: &str = "thin table";
    let words: Vec<&str> = line.split_ascii_whitespace().collect();
    match words.as_slice() {
        ["Fail"] => return Ok(ThinTableInfo::Fail),
        ["-"] => return Ok(ThinTableInfo::NoDevice),
        _ => {}
    }
    let t = ThinTable::parse(&words).map_err(|e| perr(W, line, e.to_string()))?;
    let dev = |b: &[u8]| std::str::from_utf8(b).ok().and_then(DevT::parse);
    let pool = dev(t.pool_dev).ok_or_else(|| perr(W, line, "pool is not MAJ:MIN"))?;
    let origin = match t.external_origin {
        None => None,
        Some(o) => Some(dev(o).ok_or_else(|| perr(W, line, "origin is not MAJ:MIN"))?),
    };
    Ok(ThinTableInfo::Working {
        pool,
        dev_id: t.dev_id,
        origin,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rthin_core::dm::pool_mode::PoolMode;
    use rthin_core::dm::status::{self as core_status, DiscardStatus, PoolInfo};

    fn working(line: &str) -> PoolUsage {
        match parse_pool_status(line) {
            Ok(PoolStatus::Working(u)) => *u,
            other => panic!("{line:?}: {other:?}"),
        }
    }

    #[test]
    fn fresh_pool_golden() {
        // interface.md's "Status lines" example, with 51 reserve + 10 really used.
        let u = working("0 61/512 0/16384 - rw discard_passdown queue_if_no_space - 128 ");
        assert_eq!(u.transaction_id, 0);
        assert_eq!((u.meta_used, u.meta_total), (61, 512));
        assert_eq!((u.data_used, u.data_total), (0, 16384));
        assert_eq!(u.held_root, None);
        assert_eq!(u.mode, Some(PoolModeWord::ReadWrite));
        assert_eq!(u.discard, Some(DiscardWord::Passdown));
        assert_eq!(u.error_if_no_space, Some(false));
        assert!(!u.needs_check);
        assert_eq!(u.meta_low_water, Some(128));
        assert!(u.extra_flags.is_empty());
    }

    #[test]
    fn odd_pool_lines() {
        assert_eq!(parse_pool_status("Fail"), Ok(PoolStatus::Fail));
        assert_eq!(parse_pool_status("Error"), Ok(PoolStatus::Error));
        assert_eq!(parse_pool_status("Fail "), Ok(PoolStatus::Fail));

        let u = working(
            "5 300/4096 16384/16384 - out_of_data_space ignore_discard error_if_no_space - 1024 ",
        );
        assert_eq!(u.mode, Some(PoolModeWord::OutOfDataSpace));
        assert_eq!(u.discard, Some(DiscardWord::Ignore));
        assert_eq!(u.error_if_no_space, Some(true));

        let u = working(
            "7 300/4096 10/100 - ro no_discard_passdown queue_if_no_space needs_check 1024 ",
        );
        assert_eq!(u.mode, Some(PoolModeWord::ReadOnly));
        assert!(u.needs_check);
        assert_eq!(u.discard, Some(DiscardWord::NoPassdown));

        // A held metadata root.
        let u = working("1 20/512 3/16384 17 rw discard_passdown queue_if_no_space - 128 ");
        assert_eq!(u.held_root, Some(17));

        // Old kernels: no needs_check field, no low-water mark.
        let u = working("0 9/512 0/16384 - rw discard_passdown queue_if_no_space");
        assert_eq!(u.meta_low_water, None);
        assert!(!u.needs_check);

        // A future flag is kept, not rejected.
        let u = working("0 9/512 0/16384 - rw discard_passdown queue_if_no_space - shiny_new 128 ");
        assert_eq!(u.extra_flags, vec!["shiny_new".to_string()]);
        assert_eq!(u.meta_low_water, Some(128));

        // u64 maximum transaction id.
        let u = working(
            "18446744073709551615 9/512 0/16384 - rw discard_passdown queue_if_no_space - 128 ",
        );
        assert_eq!(u.transaction_id, u64::MAX);
    }

    #[test]
    fn bad_pool_lines_are_errors_not_panics() {
        for l in [
            "",
            "   ",
            "x",
            "0 1/2",
            "a 1/2 3/4 -",
            "0 12 3/4 -",
            "0 1/2 3/x -",
            "0 1/2 3/4 root",
            "0 /2 3/4 -",
            "0 1/2/3 3/4 -",
            "99999999999999999999 1/2 3/4 -",
        ] {
            assert!(parse_pool_status(l).is_err(), "{l:?}");
        }
    }

    #[test]
    fn round_trip_with_core_formatter() {
        let base = rthin_core::dm::status::selftest::fresh_pool_example();
        let cases = [
            base,
            PoolInfo {
                held_root: 42,
                needs_check: true,
                mode: PoolMode::ReadOnly,
                discard: DiscardStatus::Ignore,
                error_if_no_space: true,
                ..base
            },
            PoolInfo {
                mode: PoolMode::OutOfDataSpace,
                data_free: 0,
                discard: DiscardStatus::NoPassdown,
                ..base
            },
            PoolInfo {
                mode: PoolMode::OutOfMetadataSpace,
                ..base
            },
        ];
        for info in cases {
            let mut line = String::new();
            core_status::write_pool_info(&mut line, &info).unwrap();
            let u = working(&line);
            assert_eq!(u.transaction_id, info.transaction_id);
            assert_eq!(u.meta_total, info.metadata_total);
            assert_eq!(u.meta_used, info.metadata_total - info.metadata_free);
            assert_eq!(u.data_used, info.data_total - info.data_free);
            assert_eq!(u.held_root.unwrap_or(0), info.held_root);
            assert_eq!(u.mode.map(|m| m.as_str()), info.mode.status_str());
            assert_eq!(u.discard.map(|d| d.as_str()), Some(info.discard.as_str()));
            assert_eq!(u.error_if_no_space, Some(info.error_if_no_space));
            assert_eq!(u.needs_check, info.needs_check);
            assert_eq!(u.meta_low_water, Some(info.metadata_low_water));
            assert!(u.extra_flags.is_empty(), "{line:?}");
        }
        let mut line = String::new();
        let failed = PoolInfo {
            mode: PoolMode::Fail,
            ..base
        };
        core_status::write_pool_info(&mut line, &failed).unwrap();
        assert_eq!(parse_pool_status(&line), Ok(PoolStatus::Fail));
    }

    #[test]
    fn thin_lines() {
        assert_eq!(
            parse_thin_status("0 -"),
            Ok(ThinStatus::Working {
                mapped_sectors: 0,
                highest_mapped_sector: None
            })
        );
        assert_eq!(
            parse_thin_status("256 1279"),
            Ok(ThinStatus::Working {
                mapped_sectors: 256,
                highest_mapped_sector: Some(1279)
            })
        );
        assert_eq!(parse_thin_status("Fail"), Ok(ThinStatus::Fail));
        assert_eq!(parse_thin_status("Error"), Ok(ThinStatus::Error));
        assert_eq!(parse_thin_status("-"), Ok(ThinStatus::NoDevice));
        for l in ["", "1", "1 2 3", "x -", "1 y", "-1 -"] {
            assert!(parse_thin_status(l).is_err(), "{l:?}");
        }
        // Round trip through the core formatter.
        let mut line = String::new();
        core_status::write_thin_status(
            &mut line,
            &core_status::ThinStatus::Info {
                mapped_blocks: 2,
                highest_mapped: Some(9),
                block_size: 128,
            },
        )
        .unwrap();
        assert_eq!(
            parse_thin_status(&line),
            Ok(ThinStatus::Working {
                mapped_sectors: 256,
                highest_mapped_sector: Some(1279)
            })
        );
    }

    #[test]
    fn tables() {
        let t = parse_pool_table("253:1 253:2 128 0 0 ").unwrap();
        assert_eq!(
            t.metadata_dev,
            Some(DevT {
                major: 253,
                minor: 1
            })
        );
        assert_eq!(
            t.data_dev,
            Some(DevT {
                major: 253,
                minor: 2
            })
        );
        assert_eq!(t.block_size_sectors, 128);
        assert_eq!(t.low_water_blocks, 0);
        assert!(t.features.is_empty());
        let t =
            parse_pool_table("1:2 1:3 1024 100 2 skip_block_zeroing error_if_no_space ").unwrap();
        assert_eq!(t.block_size_sectors, 1024);
        assert_eq!(t.low_water_blocks, 100);
        assert_eq!(t.features, vec!["skip_block_zeroing", "error_if_no_space"]);
        assert!(parse_pool_table("1:2 1:3 7 0 0").is_err());
        assert!(parse_pool_table("").is_err());

        assert_eq!(
            parse_thin_table("253:3 1"),
            Ok(ThinTableInfo::Working {
                pool: DevT {
                    major: 253,
                    minor: 3
                },
                dev_id: 1,
                origin: None
            })
        );
        assert_eq!(
            parse_thin_table("253:3 16777215 7:0"),
            Ok(ThinTableInfo::Working {
                pool: DevT {
                    major: 253,
                    minor: 3
                },
                dev_id: 16_777_215,
                origin: Some(DevT { major: 7, minor: 0 })
            })
        );
        assert_eq!(parse_thin_table("Fail"), Ok(ThinTableInfo::Fail));
        assert_eq!(parse_thin_table("-"), Ok(ThinTableInfo::NoDevice));
        for l in [
            "",
            "253:3",
            "253:3 16777216",
            "253:3 x",
            "pool 1",
            "1:1 1 1:1",
        ] {
            assert!(parse_thin_table(l).is_err(), "{l:?}");
        }
    }
}
