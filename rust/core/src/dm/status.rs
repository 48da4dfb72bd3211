// SPDX-License-Identifier: GPL-2.0
//! Pool and thin status lines (interface.md, "Status lines"), byte for byte
//! as dm-thin.
//!
//! Pool INFO (note the trailing space after every field, including the last):
//!
//! ```text
//! <trans id> <used meta>/<total meta> <used data>/<total data> <held root|-> <rw|ro|out_of_data_space> <discard_passdown|no_discard_passdown|ignore_discard> <queue_if_no_space|error_if_no_space> <needs_check|-> <meta low water>
//! ```
//!
//! or exactly `Fail` (pool in FAIL mode) or `Error` (a metadata query
//! failed). Thin INFO is `<mapped sectors> <highest mapped sector|->`, thin
//! anything in FAIL mode is `Fail`. The table lines live in
//! [`crate::dm::pool_table`] and [`crate::dm::thin_table`].
//!
//! All writers take any [`core::fmt::Write`]; the glue passes a
//! [`crate::dm::status_buf::StatusBuf`] over DM's `result`/`maxlen` buffer.
//! A `fmt::Error` means the buffer was too small (the prefix that fit is left
//! in place, as DM core expects).

use core::fmt;

use crate::dm::pool_mode::PoolMode;
use crate::dm::thin_table::{write_thin_table, ThinTableLine};

/// The status text for a pool in FAIL mode (and for thins of such a pool).
pub const FAIL: &str = "Fail";
/// The status text when a metadata query failed.
pub const ERROR: &str = "Error";

/// Status field 6, from the **live** (adjusted) features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscardStatus {
    /// Discard disabled (`ignore_discard`).
    Ignore,
    /// Discard enabled, passed down (`discard_passdown`).
    Passdown,
    /// Discard enabled, not passed down (`no_discard_passdown`), also when
    /// passdown was requested but the data device cannot discard.
    NoPassdown,
}

impl DiscardStatus {
    /// From the live `discard_enabled` and adjusted `discard_passdown` flags.
    pub fn from_flags(discard_enabled: bool, discard_passdown: bool) -> Self {
        match (discard_enabled, discard_passdown) {
            (false, _) => Self::Ignore,
            (true, true) => Self::Passdown,
            (true, false) => Self::NoPassdown,
        }
    }

    /// The word printed in the status line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ignore => "ignore_discard",
            Self::Passdown => "discard_passdown",
            Self::NoPassdown => "no_discard_passdown",
        }
    }
}

/// The numbers and flags behind a pool INFO line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolInfo {
    /// Userspace transaction id.
    pub transaction_id: u64,
    /// Total metadata blocks (metadata space map size).
    pub metadata_total: u64,
    /// Free metadata blocks **after subtracting the reserve** (clamped at 0);
    /// the line shows `total − free`.
    pub metadata_free: u64,
    /// Total data blocks (data space map size).
    pub data_total: u64,
    /// Free data blocks; the line shows `total − free`.
    pub data_free: u64,
    /// Block number of the held metadata snapshot root; 0 = none (`-`).
    pub held_root: u64,
    /// Current pool mode. [`PoolMode::Fail`] makes the whole line `Fail`.
    pub mode: PoolMode,
    /// Live discard configuration.
    pub discard: DiscardStatus,
    /// Live no-space policy (flips to true when the no-space timeout fires).
    pub error_if_no_space: bool,
    /// The metadata needs_check flag.
    pub needs_check: bool,
    /// Metadata low-water threshold in blocks, see
    /// [`crate::dm::pool_table::metadata_low_water_threshold`].
    pub metadata_low_water: u64,
}

/// Writes the pool INFO line (or `Fail` in FAIL mode). `used` values are
/// computed with wrap-around subtraction exactly like dm-thin's unsigned
/// arithmetic, so inconsistent inputs cannot panic.
pub fn write_pool_info<W: fmt::Write + ?Sized>(w: &mut W, s: &PoolInfo) -> fmt::Result {
    let Some(mode) = s.mode.status_str() else {
        return w.write_str(FAIL);
    };
    write!(
        w,
        "{} {}/{} {}/{} ",
        s.transaction_id,
        s.metadata_total.wrapping_sub(s.metadata_free),
        s.metadata_total,
        s.data_total.wrapping_sub(s.data_free),
        s.data_total
    )?;
    if s.held_root != 0 {
        write!(w, "{} ", s.held_root)?;
    } else {
        w.write_str("- ")?;
    }
    write!(
        w,
        "{} {} {} {} {} ",
        mode,
        s.discard.as_str(),
        if s.error_if_no_space {
            "error_if_no_space"
        } else {
            "queue_if_no_space"
        },
        if s.needs_check { "needs_check" } else { "-" },
        s.metadata_low_water
    )
}

/// What a thin target's status callback should show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinStatus {
    /// The pool is in FAIL mode: `Fail` for INFO, TABLE and IMA alike.
    PoolFailed,
    /// The thin has no open metadata device (`-` for every status type).
    NoDevice,
    /// A metadata query failed: `Error` (INFO only).
    Error,
    /// INFO of a healthy thin.
    Info {
        /// Mapped blocks (in-core, including uncommitted ones).
        mapped_blocks: u64,
        /// Highest mapped virtual block, `None` if nothing is mapped.
        highest_mapped: Option<u64>,
        /// Pool data block size in sectors.
        block_size: u32,
    },
    /// TABLE of a healthy thin.
    Table(ThinTableLine),
    /// IMA measurement: empty.
    Ima,
}

/// Writes a thin status: `<mapped sectors> <highest mapped sector>` (no
/// trailing space; `-` for an empty device; sector arithmetic wraps like
/// dm-thin's unsigned C), the table line, `Fail`, `Error`, `-` or nothing.
pub fn write_thin_status<W: fmt::Write + ?Sized>(w: &mut W, s: &ThinStatus) -> fmt::Result {
    match s {
        ThinStatus::PoolFailed => w.write_str(FAIL),
        ThinStatus::NoDevice => w.write_str("-"),
        ThinStatus::Error => w.write_str(ERROR),
        ThinStatus::Info {
            mapped_blocks,
            highest_mapped,
            block_size,
        } => {
            let bs = u64::from(*block_size);
            write!(w, "{} ", mapped_blocks.wrapping_mul(bs))?;
            match highest_mapped {
                Some(h) => write!(w, "{}", h.wrapping_add(1).wrapping_mul(bs).wrapping_sub(1)),
                None => w.write_str("-"),
            }
        }
        ThinStatus::Table(t) => write_thin_table(w, t),
        ThinStatus::Ima => Ok(()),
    }
}

/// Scenarios shared by the host tests and the module's KUnit suite.
#[cfg(any(test, feature = "selftest"))]
pub mod selftest {
    use super::*;
    use crate::dm::status_buf::StatusBuf;

    /// The fresh pool of interface.md's "Status lines" example (2 MiB
    /// metadata, 64 KiB blocks, 1 GiB).
    pub fn fresh_pool_example() -> PoolInfo {
        PoolInfo {
            transaction_id: 0,
            metadata_total: 512,
            metadata_free: 512 - 12 - 51,
            data_total: 16384,
            data_free: 16384,
            held_root: 0,
            mode: PoolMode::Write,
            discard: DiscardStatus::Passdown,
            error_if_no_space: false,
            needs_check: false,
            metadata_low_water: 128,
        }
    }

    fn check_pool(info: &PoolInfo, want: &[u8]) -> bool {
        let mut raw = [0u8; 160];
        let mut w = StatusBuf::new(&mut raw);
        write_pool_info(&mut w, info).is_ok() && w.as_bytes() == want
    }

    /// Fresh pool line, with its trailing space.
    pub fn pool_fresh() -> bool {
        check_pool(
            &fresh_pool_example(),
            b"0 63/512 0/16384 - rw discard_passdown queue_if_no_space - 128 ",
        )
    }

    /// A degraded pool: held root, out of data space, error policy,
    /// ignore_discard, needs_check; and FAIL.
    pub fn pool_odd_lines() -> bool {
        let mut i = fresh_pool_example();
        i.transaction_id = 7;
        i.data_free = 0;
        i.held_root = 4242;
        i.mode = PoolMode::OutOfDataSpace;
        i.discard = DiscardStatus::Ignore;
        i.error_if_no_space = true;
        i.needs_check = true;
        let a = check_pool(
            &i,
            b"7 63/512 16384/16384 4242 out_of_data_space ignore_discard error_if_no_space needs_check 128 ",
        );
        i.mode = PoolMode::Fail;
        a && check_pool(&i, b"Fail")
    }

    /// Thin INFO lines of checklist D30 and the FAIL case.
    pub fn thin_lines() -> bool {
        let mut raw = [0u8; 64];
        let mut w = StatusBuf::new(&mut raw);
        let mut ok = true;
        let cases: [(ThinStatus, &[u8]); 4] = [
            (
                ThinStatus::Info {
                    mapped_blocks: 0,
                    highest_mapped: None,
                    block_size: 128,
                },
                b"0 -",
            ),
            (
                ThinStatus::Info {
                    mapped_blocks: 1,
                    highest_mapped: Some(0),
                    block_size: 128,
                },
                b"128 127",
            ),
            (
                ThinStatus::Info {
                    mapped_blocks: 2,
                    highest_mapped: Some(9),
                    block_size: 128,
                },
                b"256 1279",
            ),
            (ThinStatus::PoolFailed, b"Fail"),
        ];
        for (s, want) in cases.iter() {
            w.clear();
            ok &= write_thin_status(&mut w, s).is_ok() && w.as_bytes() == *want;
        }
        ok
    }

    /// A status line that does not fit is reported, never overrun.
    pub fn truncated_status() -> bool {
        let mut raw = [0u8; 20];
        let mut w = StatusBuf::new(&mut raw);
        write_pool_info(&mut w, &fresh_pool_example()).is_err()
            && w.is_truncated()
            && w.as_bytes() == b"0 63/512 0/16384 - "
    }
}

#[cfg(test)]
mod tests {
    use super::selftest;
    use super::*;
    use crate::dm::status_buf::{DevNum, StatusBuf};
    use std::string::String;

    fn pool(i: &PoolInfo) -> String {
        let mut raw = [0u8; 256];
        let mut w = StatusBuf::new(&mut raw);
        write_pool_info(&mut w, i).unwrap();
        String::from_utf8(w.as_bytes().to_vec()).unwrap()
    }

    fn thin(s: &ThinStatus) -> String {
        let mut raw = [0u8; 128];
        let mut w = StatusBuf::new(&mut raw);
        write_thin_status(&mut w, s).unwrap();
        String::from_utf8(w.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn scenarios() {
        assert!(selftest::pool_fresh());
        assert!(selftest::pool_odd_lines());
        assert!(selftest::thin_lines());
        assert!(selftest::truncated_status());
    }

    #[test]
    fn pool_field_variants() {
        let base = selftest::fresh_pool_example();
        let mut i = base;
        i.mode = PoolMode::ReadOnly;
        assert_eq!(
            pool(&i),
            "0 63/512 0/16384 - ro discard_passdown queue_if_no_space - 128 "
        );
        i.mode = PoolMode::OutOfMetadataSpace;
        i.metadata_free = 0;
        assert_eq!(
            pool(&i),
            "0 512/512 0/16384 - ro discard_passdown queue_if_no_space - 128 "
        );
        let mut i = base;
        i.discard = DiscardStatus::NoPassdown;
        i.error_if_no_space = true;
        assert_eq!(
            pool(&i),
            "0 63/512 0/16384 - rw no_discard_passdown error_if_no_space - 128 "
        );
        let mut i = base;
        i.mode = PoolMode::ReadOnly;
        i.needs_check = true;
        i.transaction_id = u64::MAX;
        i.held_root = u64::MAX;
        assert_eq!(
            pool(&i),
            "18446744073709551615 63/512 0/16384 18446744073709551615 ro discard_passdown \
queue_if_no_space needs_check 128 "
        );
        // Checklist A11: >16 GiB metadata.
        let mut i = base;
        i.metadata_total = 4_161_600;
        i.metadata_free = 4_161_600 - 4096 - 20;
        i.metadata_low_water = 1024;
        assert_eq!(
            pool(&i),
            "0 4116/4161600 0/16384 - rw discard_passdown queue_if_no_space - 1024 "
        );
    }

    #[test]
    fn inconsistent_counts_wrap_like_c() {
        let mut i = selftest::fresh_pool_example();
        i.metadata_free = 513;
        i.data_free = 16385;
        assert_eq!(
            pool(&i),
            "0 18446744073709551615/512 18446744073709551615/16384 - rw discard_passdown \
queue_if_no_space - 128 "
        );
    }

    #[test]
    fn discard_status_from_flags() {
        assert_eq!(
            DiscardStatus::from_flags(false, true),
            DiscardStatus::Ignore
        );
        assert_eq!(
            DiscardStatus::from_flags(false, false),
            DiscardStatus::Ignore
        );
        assert_eq!(
            DiscardStatus::from_flags(true, true),
            DiscardStatus::Passdown
        );
        assert_eq!(
            DiscardStatus::from_flags(true, false),
            DiscardStatus::NoPassdown
        );
    }

    #[test]
    fn thin_other_cases() {
        assert_eq!(thin(&ThinStatus::NoDevice), "-");
        assert_eq!(thin(&ThinStatus::Error), "Error");
        assert_eq!(thin(&ThinStatus::Ima), "");
        assert_eq!(
            thin(&ThinStatus::Table(ThinTableLine {
                pool_dev: DevNum::new(253, 0),
                dev_id: 3,
                external_origin: Some(DevNum::new(7, 2)),
            })),
            "253:0 3 7:2"
        );
        // Large block sizes and extreme values do not panic.
        assert_eq!(
            thin(&ThinStatus::Info {
                mapped_blocks: 3,
                highest_mapped: Some(1 << 40),
                block_size: 2_097_152,
            }),
            "6291456 2305843009215791103"
        );
        let _ = thin(&ThinStatus::Info {
            mapped_blocks: u64::MAX,
            highest_mapped: Some(u64::MAX),
            block_size: 2_097_152,
        });
    }

    #[test]
    fn status_truncation_every_length() {
        let i = selftest::fresh_pool_example();
        let full = pool(&i);
        for n in 0..=full.len() + 1 {
            let mut raw = std::vec![0x55u8; n];
            let mut w = StatusBuf::new(&mut raw);
            let r = write_pool_info(&mut w, &i);
            assert_eq!(r.is_ok(), n > full.len(), "n={n}");
            assert!(full.as_bytes().starts_with(w.as_bytes()));
            assert_eq!(w.len(), n.saturating_sub(1).min(full.len()));
        }
        let s = ThinStatus::Info {
            mapped_blocks: 2,
            highest_mapped: Some(9),
            block_size: 128,
        };
        let mut raw = [0u8; 5];
        let mut w = StatusBuf::new(&mut raw);
        assert!(write_thin_status(&mut w, &s).is_err());
        assert_eq!(w.as_bytes(), b"256 ");
    }
}
