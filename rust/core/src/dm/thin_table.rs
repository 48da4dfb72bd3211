// SPDX-License-Identifier: GPL-2.0
//! The thin target's constructor arguments and table line (interface.md,
//! "Thin target").
//!
//! ```text
//! <pool dev> <dev id> [<external origin dev>]
//! ```
//!
//! [`ThinTable::parse`] makes dm-thin's pure `thin_ctr` checks in order and
//! reports [`ThinTableError`]s carrying the exact `ti->error` text.
//! [`write_thin_table`] formats the `STATUSTYPE_TABLE` line.

use core::{ffi::CStr, fmt};

use crate::dm::args::parse_kstrtoull;
use crate::dm::errno::EINVAL;
use crate::dm::status_buf::DevNum;

/// Largest thin device id accepted by messages and the thin ctr (2^24 − 1).
pub const MAX_DEV_ID: u32 = 16_777_215;

/// `ti->error` texts the glue sets itself for the steps that need devices,
/// memory or the pool (the glue's steps of the check table in interface.md,
/// "Thin target").
pub mod glue_errors {
    use core::ffi::CStr;

    /// Allocating the thin context failed (ENOMEM).
    pub const OUT_OF_MEMORY: &CStr = c"Out of memory";
    /// Opening the external origin failed.
    pub const OPEN_ORIGIN: &CStr = c"Error opening origin device";
    /// Opening the pool device failed.
    pub const OPEN_POOL: &CStr = c"Error opening pool device";
    /// The pool device is not a DM device (EINVAL).
    pub const POOL_MD: &CStr = c"Couldn't get pool mapped device";
    /// No pool object for that DM device (EINVAL).
    pub const POOL_OBJECT: &CStr = c"Couldn't find pool object";
    /// The pool is in FAIL mode (EINVAL).
    pub const POOL_FAIL: &CStr = c"Couldn't open thin device, Pool is in fail mode";
    /// Opening the thin device in the metadata failed (e.g. ENODATA).
    pub const OPEN_THIN: &CStr = c"Couldn't open thin internal device";
    /// The pool is suspended (EINVAL).
    pub const POOL_SUSPENDED: &CStr = c"Unable to activate thin device while pool is suspended";
}

/// Parses a device id like dm-thin's `read_dev_id`: `kstrtoull` rules (optional
/// `+`, one optional trailing newline) and at most [`MAX_DEV_ID`].
pub fn parse_dev_id(word: &[u8]) -> Option<u32> {
    parse_kstrtoull(word)
        .ok()
        .and_then(|v| u32::try_from(v).ok())
        .filter(|&v| v <= MAX_DEV_ID)
}

/// A thin constructor error; all are EINVAL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ThinTableError {
    /// Not two or three words.
    InvalidArgumentCount,
    /// The origin word equals the pool word.
    SameOriginDevice,
    /// The device id is not a number up to [`MAX_DEV_ID`].
    InvalidDeviceId,
}

impl ThinTableError {
    /// The exact `ti->error` string.
    pub fn message(self) -> &'static CStr {
        match self {
            Self::InvalidArgumentCount => c"Invalid argument count",
            Self::SameOriginDevice => c"Error setting origin device",
            Self::InvalidDeviceId => c"Invalid device id",
        }
    }

    /// The (positive) errno; the ctr returns its negation.
    pub fn errno(self) -> i32 {
        EINVAL
    }

    /// dm-thin checks the device id only after opening the origin (if any)
    /// and the pool device: on this error the glue must open them first and
    /// report an open failure instead if one happens.
    pub fn after_device_open(self) -> bool {
        self == Self::InvalidDeviceId
    }
}

impl fmt::Display for ThinTableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message().to_str().unwrap_or("?"))
    }
}

/// A parsed thin constructor line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThinTable<'a> {
    /// The pool device word, as given.
    pub pool_dev: &'a [u8],
    /// Thin device id (≤ [`MAX_DEV_ID`]).
    pub dev_id: u32,
    /// The external origin device word, if given (opened read-only).
    pub external_origin: Option<&'a [u8]>,
}

impl<'a> ThinTable<'a> {
    /// Parses the constructor words (without `<start> <len> thin`).
    pub fn parse<W: AsRef<[u8]>>(words: &'a [W]) -> Result<Self, ThinTableError> {
        let (pool_dev, id_word, external_origin) = match words {
            [p, i] => (p.as_ref(), i.as_ref(), None),
            [p, i, o] => (p.as_ref(), i.as_ref(), Some(o.as_ref())),
            _ => return Err(ThinTableError::InvalidArgumentCount),
        };
        if external_origin == Some(pool_dev) {
            return Err(ThinTableError::SameOriginDevice);
        }
        let dev_id = parse_dev_id(id_word).ok_or(ThinTableError::InvalidDeviceId)?;
        Ok(Self {
            pool_dev,
            dev_id,
            external_origin,
        })
    }
}

/// Everything the thin's `STATUSTYPE_TABLE` line shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThinTableLine {
    /// The pool device number.
    pub pool_dev: DevNum,
    /// Thin device id.
    pub dev_id: u32,
    /// The external origin's device number, if any.
    pub external_origin: Option<DevNum>,
}

/// Writes `<pool maj:min> <dev id>[ <origin maj:min>]` (no trailing space).
/// In FAIL mode the glue writes `Fail` instead (see
/// [`crate::dm::status::write_thin_status`]).
pub fn write_thin_table<W: fmt::Write + ?Sized>(w: &mut W, t: &ThinTableLine) -> fmt::Result {
    write!(w, "{} {}", t.pool_dev, t.dev_id)?;
    if let Some(origin) = t.external_origin {
        write!(w, " {}", origin)?;
    }
    Ok(())
}

/// Scenarios shared by the host tests and the module's KUnit suite.
#[cfg(any(test, feature = "selftest"))]
pub mod selftest {
    use super::*;
    use crate::dm::status_buf::StatusBuf;

    /// Two- and three-word forms parse; ids follow `read_dev_id`.
    pub fn parses_forms() -> bool {
        let two: [&[u8]; 2] = [b"/dev/mapper/pool", b"+5"];
        let three: [&[u8]; 3] = [b"253:3", b"16777215", b"/dev/sdb"];
        matches!(ThinTable::parse(&two), Ok(t)
                if t.dev_id == 5 && t.external_origin.is_none())
            && matches!(ThinTable::parse(&three), Ok(t)
                if t.dev_id == MAX_DEV_ID && t.external_origin == Some(&b"/dev/sdb"[..]))
    }

    /// Error strings and order.
    pub fn errors() -> bool {
        let e = |w: &[&[u8]]| {
            ThinTable::parse(w)
                .err()
                .and_then(|e| e.message().to_str().ok())
        };
        e(&[b"p"]) == Some("Invalid argument count")
            && e(&[b"p", b"1", b"o", b"x"]) == Some("Invalid argument count")
            && e(&[b"p", b"bad", b"p"]) == Some("Error setting origin device")
            && e(&[b"p", b"16777216"]) == Some("Invalid device id")
    }

    /// Table lines with and without origin, no trailing space.
    pub fn table_lines() -> bool {
        let mut raw = [0u8; 64];
        let mut w = StatusBuf::new(&mut raw);
        let a = write_thin_table(
            &mut w,
            &ThinTableLine {
                pool_dev: DevNum::new(253, 3),
                dev_id: 0,
                external_origin: None,
            },
        )
        .is_ok()
            && w.as_bytes() == b"253:3 0";
        w.clear();
        let b = write_thin_table(
            &mut w,
            &ThinTableLine {
                pool_dev: DevNum::new(253, 3),
                dev_id: 16_777_215,
                external_origin: Some(DevNum::new(8, 16)),
            },
        )
        .is_ok()
            && w.as_bytes() == b"253:3 16777215 8:16";
        a && b
    }
}

#[cfg(test)]
mod tests {
    use super::selftest;
    use super::*;
    use crate::dm::status_buf::StatusBuf;

    #[test]
    fn scenarios() {
        assert!(selftest::parses_forms());
        assert!(selftest::errors());
        assert!(selftest::table_lines());
    }

    #[test]
    fn dev_ids_checklist_b14() {
        for (w, v) in [
            ("0", 0),
            ("+5", 5),
            ("7\n", 7),
            ("16777215", MAX_DEV_ID),
            ("000016777215", MAX_DEV_ID),
        ] {
            assert_eq!(parse_dev_id(w.as_bytes()), Some(v), "{w:?}");
        }
        for w in [
            "16777216",
            "4294967296",
            "18446744073709551616",
            "0x10",
            "-1",
            "",
            "1 ",
            " 1",
            "1\n\n",
        ] {
            assert_eq!(parse_dev_id(w.as_bytes()), None, "{w:?}");
        }
    }

    #[test]
    fn order_of_checks() {
        // Same origin wins over a bad id (checked before opening anything).
        let w: [&[u8]; 3] = [b"p", b"x", b"p"];
        assert_eq!(ThinTable::parse(&w), Err(ThinTableError::SameOriginDevice));
        assert!(!ThinTableError::SameOriginDevice.after_device_open());
        assert!(ThinTableError::InvalidDeviceId.after_device_open());
        assert_eq!(ThinTableError::InvalidDeviceId.errno(), 22);
        let w: [&[u8]; 0] = [];
        assert_eq!(
            ThinTable::parse(&w),
            Err(ThinTableError::InvalidArgumentCount)
        );
    }

    #[test]
    fn round_trip() {
        let words: [&[u8]; 3] = [b"253:3", b"+42", b"8:16"];
        let t = ThinTable::parse(&words).unwrap();
        let line = ThinTableLine {
            pool_dev: DevNum::new(253, 3),
            dev_id: t.dev_id,
            external_origin: Some(DevNum::new(8, 16)),
        };
        let mut raw = [0u8; 64];
        let mut w = StatusBuf::new(&mut raw);
        write_thin_table(&mut w, &line).unwrap();
        assert_eq!(w.as_bytes(), b"253:3 42 8:16");
        let out: std::vec::Vec<&[u8]> = w.as_bytes().split(|&c| c == b' ').collect();
        assert_eq!(ThinTable::parse(&out).unwrap().dev_id, 42);
        // Truncation is reported.
        let mut small = [0u8; 8];
        let mut w = StatusBuf::new(&mut small);
        assert!(write_thin_table(&mut w, &line).is_err());
        assert_eq!(w.as_bytes(), b"253:3 4");
    }
}
