// SPDX-License-Identifier: GPL-2.0
//! The pool target's messages (spec §1.5).
//!
//! ```text
//! create_thin <id>
//! create_snap <id> <origin id>
//! delete <id>
//! set_transaction_id <current id> <new id>
//! reserve_metadata_snap
//! release_metadata_snap
//! ```
//!
//! Glue flow for `pool_message`, mirroring dm-thin:
//! 1. [`PoolMessage::parse_in_mode`] (mode check first: OOMS/RO/FAIL refuse
//!    every message, even unknown ones, with EOPNOTSUPP; then name, word
//!    count and numbers). On error log [`MessageError::write_log`] (prefixed
//!    `<pool name>: ` only when [`MessageError::log_has_pool_prefix`]) and
//!    return `-errno`.
//! 2. For [`PoolMessage::ReserveMetadataSnap`] commit first (result ignored).
//! 3. Run the metadata operation; on failure log
//!    [`PoolMessage::write_failure_log`] and return its error.
//! 4. On success commit (result ignored) and return 0.

use core::fmt;

use crate::dm::args::parse_kstrtoull;
use crate::dm::errno::{EINVAL, EOPNOTSUPP};
use crate::dm::pool_mode::PoolMode;
use crate::dm::status_buf::BytesDisplay;
use crate::dm::thin_table::parse_dev_id;

/// A parsed pool message. Each variant keeps the argument words as given, for
/// the log lines, which print them verbatim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolMessage<'a> {
    /// `create_thin <id>`: new thin device with an empty mapping.
    CreateThin {
        /// New device id.
        dev_id: u32,
        /// The id word as given.
        arg: &'a [u8],
    },
    /// `create_snap <id> <origin id>`: new snapshot of an existing device.
    CreateSnap {
        /// New device id.
        dev_id: u32,
        /// Origin device id.
        origin_id: u32,
        /// The two words as given.
        args: [&'a [u8]; 2],
    },
    /// `delete <id>`: remove a device and release its mappings.
    Delete {
        /// Device id.
        dev_id: u32,
        /// The id word as given.
        arg: &'a [u8],
    },
    /// `set_transaction_id <current> <new>`: compare-and-swap of the id.
    SetTransactionId {
        /// Expected current id.
        current: u64,
        /// New id.
        new: u64,
        /// The two words as given.
        args: [&'a [u8]; 2],
    },
    /// `reserve_metadata_snap`: commit, then take a metadata snapshot.
    ReserveMetadataSnap,
    /// `release_metadata_snap`: drop the held metadata snapshot.
    ReleaseMetadataSnap,
}

/// Why a message was refused before any metadata operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageError<'a> {
    /// The pool is in out-of-metadata-space, read-only or fail mode
    /// (EOPNOTSUPP).
    ModeForbids,
    /// No words at all (DM core rejects empty messages before the target).
    Empty,
    /// Unknown message name (EINVAL).
    Unrecognised {
        /// The name word as given.
        name: &'a [u8],
    },
    /// Wrong number of words, counting the name (EINVAL).
    ArgumentCount {
        /// Words received.
        got: usize,
        /// Words the message takes.
        expected: usize,
    },
    /// A device id that is not a number up to 2^24 − 1 (EINVAL).
    InvalidDevId {
        /// The word as given.
        word: &'a [u8],
    },
    /// `set_transaction_id` current id not a u64 (EINVAL).
    InvalidTransactionId {
        /// The word as given.
        word: &'a [u8],
    },
    /// `set_transaction_id` new id not a u64 (EINVAL).
    InvalidNewTransactionId {
        /// The word as given.
        word: &'a [u8],
    },
}

impl MessageError<'_> {
    /// The (positive) errno; `pool_message` returns its negation.
    pub fn errno(&self) -> i32 {
        match self {
            Self::ModeForbids => EOPNOTSUPP,
            _ => EINVAL,
        }
    }

    /// The log line is an error (`DMERR`) rather than a warning (`DMWARN`).
    pub fn log_is_error(&self) -> bool {
        matches!(self, Self::ModeForbids)
    }

    /// The glue must prefix the log line with `<pool name>: `.
    pub fn log_has_pool_prefix(&self) -> bool {
        matches!(self, Self::ModeForbids)
    }

    /// Writes dm-thin's log line for this error (without the
    /// `device-mapper: thin: ` prefix). [`MessageError::Empty`] writes DM
    /// core's text.
    pub fn write_log<W: fmt::Write + ?Sized>(&self, w: &mut W) -> fmt::Result {
        match self {
            Self::ModeForbids => {
                w.write_str("unable to service pool target messages in READ_ONLY or FAIL mode")
            }
            Self::Empty => w.write_str("Empty message received."),
            Self::Unrecognised { name } => write!(
                w,
                "Unrecognised thin pool target message received: {}",
                BytesDisplay(name)
            ),
            Self::ArgumentCount { got, expected } => write!(
                w,
                "Message received with {} arguments instead of {}.",
                got, expected
            ),
            Self::InvalidDevId { word } => write!(
                w,
                "Message received with invalid device id: {}",
                BytesDisplay(word)
            ),
            Self::InvalidTransactionId { word } => write!(
                w,
                "set_transaction_id message: Unrecognised id {}.",
                BytesDisplay(word)
            ),
            Self::InvalidNewTransactionId { word } => write!(
                w,
                "set_transaction_id message: Unrecognised new id {}.",
                BytesDisplay(word)
            ),
        }
    }
}

fn dev_id(word: &[u8]) -> Result<u32, MessageError<'_>> {
    parse_dev_id(word).ok_or(MessageError::InvalidDevId { word })
}

const NAMES: [&str; 6] = [
    "create_thin",
    "create_snap",
    "delete",
    "set_transaction_id",
    "reserve_metadata_snap",
    "release_metadata_snap",
];

impl<'a> PoolMessage<'a> {
    /// Parses a message (all words, name first) regardless of the pool mode.
    /// The name is matched case-insensitively; then the word count is checked,
    /// then the numbers left to right.
    pub fn parse<W: AsRef<[u8]>>(words: &'a [W]) -> Result<Self, MessageError<'a>> {
        let (name, _) = words.split_first().ok_or(MessageError::Empty)?;
        let name = name.as_ref();
        let idx = NAMES
            .iter()
            .position(|n| n.as_bytes().eq_ignore_ascii_case(name))
            .ok_or(MessageError::Unrecognised { name })?;
        let expected = match idx {
            0 | 2 => 2,
            1 | 3 => 3,
            _ => 1,
        };
        if words.len() != expected {
            return Err(MessageError::ArgumentCount {
                got: words.len(),
                expected,
            });
        }
        let a1 = words.get(1).map(|w| w.as_ref()).unwrap_or(&[]);
        let a2 = words.get(2).map(|w| w.as_ref()).unwrap_or(&[]);
        Ok(match idx {
            0 => Self::CreateThin {
                dev_id: dev_id(a1)?,
                arg: a1,
            },
            1 => Self::CreateSnap {
                dev_id: dev_id(a1)?,
                origin_id: dev_id(a2)?,
                args: [a1, a2],
            },
            2 => Self::Delete {
                dev_id: dev_id(a1)?,
                arg: a1,
            },
            3 => Self::SetTransactionId {
                current: parse_kstrtoull(a1)
                    .map_err(|_| MessageError::InvalidTransactionId { word: a1 })?,
                new: parse_kstrtoull(a2)
                    .map_err(|_| MessageError::InvalidNewTransactionId { word: a2 })?,
                args: [a1, a2],
            },
            4 => Self::ReserveMetadataSnap,
            _ => Self::ReleaseMetadataSnap,
        })
    }

    /// Parses a message the way `pool_message` does: first the mode check
    /// (EOPNOTSUPP for every message in OOMS/RO/FAIL), then [`PoolMessage::parse`].
    pub fn parse_in_mode<W: AsRef<[u8]>>(
        mode: PoolMode,
        words: &'a [W],
    ) -> Result<Self, MessageError<'a>> {
        if !mode.accepts_messages() {
            return Err(MessageError::ModeForbids);
        }
        Self::parse(words)
    }

    /// The message name in canonical (lower) case.
    pub fn name(&self) -> &'static str {
        match self {
            Self::CreateThin { .. } => "create_thin",
            Self::CreateSnap { .. } => "create_snap",
            Self::Delete { .. } => "delete",
            Self::SetTransactionId { .. } => "set_transaction_id",
            Self::ReserveMetadataSnap => "reserve_metadata_snap",
            Self::ReleaseMetadataSnap => "release_metadata_snap",
        }
    }

    /// The pool commits (ignoring the result) before running this message.
    pub fn commits_first(&self) -> bool {
        matches!(self, Self::ReserveMetadataSnap)
    }

    /// Writes the warning dm-thin logs when the metadata operation of this
    /// message fails (without the `device-mapper: thin: ` prefix). The
    /// metadata layer logs its own detail (e.g. `mismatched transaction id`).
    pub fn write_failure_log<W: fmt::Write + ?Sized>(&self, w: &mut W) -> fmt::Result {
        match self {
            Self::CreateThin { arg, .. } => write!(
                w,
                "Creation of new thinly-provisioned device with id {} failed.",
                BytesDisplay(arg)
            ),
            Self::CreateSnap { args, .. } => write!(
                w,
                "Creation of new snapshot {} of device {} failed.",
                BytesDisplay(args[0]),
                BytesDisplay(args[1])
            ),
            Self::Delete { arg, .. } => {
                write!(w, "Deletion of thin device {} failed.", BytesDisplay(arg))
            }
            Self::SetTransactionId { args, .. } => write!(
                w,
                "Failed to change transaction id from {} to {}.",
                BytesDisplay(args[0]),
                BytesDisplay(args[1])
            ),
            Self::ReserveMetadataSnap => w.write_str("reserve_metadata_snap message failed."),
            Self::ReleaseMetadataSnap => w.write_str("release_metadata_snap message failed."),
        }
    }
}

/// Scenarios shared by the host tests and the module's KUnit suite.
#[cfg(any(test, feature = "selftest"))]
pub mod selftest {
    use super::*;
    use crate::dm::status_buf::StatusBuf;

    /// The six messages parse, names case-insensitive.
    pub fn parses_all() -> bool {
        let ct: [&[u8]; 2] = [b"CREATE_THIN", b"7"];
        let cs: [&[u8]; 3] = [b"create_snap", b"1", b"0"];
        let de: [&[u8]; 2] = [b"delete", b"+3"];
        let st: [&[u8]; 3] = [b"set_transaction_id", b"1", b"18446744073709551615"];
        let rs: [&[u8]; 1] = [b"reserve_metadata_snap"];
        let rl: [&[u8]; 1] = [b"Release_Metadata_Snap"];
        matches!(
            PoolMessage::parse(&ct),
            Ok(PoolMessage::CreateThin { dev_id: 7, .. })
        ) && matches!(
            PoolMessage::parse(&cs),
            Ok(PoolMessage::CreateSnap {
                dev_id: 1,
                origin_id: 0,
                ..
            })
        ) && matches!(
            PoolMessage::parse(&de),
            Ok(PoolMessage::Delete { dev_id: 3, .. })
        ) && matches!(
            PoolMessage::parse(&st),
            Ok(PoolMessage::SetTransactionId {
                current: 1,
                new: u64::MAX,
                ..
            })
        ) && PoolMessage::parse(&rs) == Ok(PoolMessage::ReserveMetadataSnap)
            && PoolMessage::parse(&rl) == Ok(PoolMessage::ReleaseMetadataSnap)
    }

    /// Checklist C19/C25/C26 errors and their errno.
    pub fn errors() -> bool {
        let e = |w: &[&[u8]]| PoolMessage::parse(w).err().map(|e| e.errno());
        let m = |mode, w: &[&[u8]]| PoolMessage::parse_in_mode(mode, w).err().map(|e| e.errno());
        e(&[b"create_thin", b"16777215"]).is_none()
            && e(&[b"create_thin", b"16777216"]) == Some(EINVAL)
            && e(&[b"create_thin", b"0x10"]) == Some(EINVAL)
            && e(&[b"create_thin"]) == Some(EINVAL)
            && e(&[b"create_thin", b"1", b"2"]) == Some(EINVAL)
            && e(&[b"frobnicate"]) == Some(EINVAL)
            && m(PoolMode::ReadOnly, &[b"frobnicate"]) == Some(EOPNOTSUPP)
            && m(PoolMode::OutOfMetadataSpace, &[b"create_thin", b"1"]) == Some(EOPNOTSUPP)
            && m(PoolMode::Fail, &[b"delete", b"1"]) == Some(EOPNOTSUPP)
            && m(PoolMode::OutOfDataSpace, &[b"delete", b"1"]).is_none()
    }

    /// Log lines match dm-thin's text.
    pub fn log_lines() -> bool {
        let mut raw = [0u8; 96];
        let mut w = StatusBuf::new(&mut raw);
        let words: [&[u8]; 2] = [b"create_thin", b"1"];
        let words3: [&[u8]; 3] = [b"create_thin", b"1", b"2"];
        let a = match PoolMessage::parse(&words3) {
            Err(e) => e.write_log(&mut w).is_ok(),
            Ok(_) => false,
        } && w.as_bytes() == b"Message received with 3 arguments instead of 2.";
        w.clear();
        let b = match PoolMessage::parse(&words) {
            Ok(msg) => msg.write_failure_log(&mut w).is_ok(),
            Err(_) => false,
        } && w.as_bytes() == b"Creation of new thinly-provisioned device with id 1 failed.";
        a && b
    }
}

#[cfg(test)]
mod tests {
    use super::selftest;
    use super::*;
    use crate::dm::status_buf::StatusBuf;
    use std::string::String;
    use std::vec::Vec;

    fn words(s: &str) -> Vec<&[u8]> {
        s.split(' ').map(str::as_bytes).collect()
    }

    fn err_log(s: &str, mode: PoolMode) -> (i32, String) {
        let w = words(s);
        let e = PoolMessage::parse_in_mode(mode, &w).unwrap_err();
        let mut raw = [0u8; 128];
        let mut b = StatusBuf::new(&mut raw);
        e.write_log(&mut b).unwrap();
        (e.errno(), String::from_utf8(b.as_bytes().to_vec()).unwrap())
    }

    fn fail_log(s: &str) -> String {
        let w = words(s);
        let m = PoolMessage::parse(&w).unwrap();
        let mut raw = [0u8; 128];
        let mut b = StatusBuf::new(&mut raw);
        m.write_failure_log(&mut b).unwrap();
        String::from_utf8(b.as_bytes().to_vec()).unwrap()
    }

    #[test]
    fn scenarios() {
        assert!(selftest::parses_all());
        assert!(selftest::errors());
        assert!(selftest::log_lines());
    }

    #[test]
    fn every_error_log_line() {
        let w = PoolMode::Write;
        assert_eq!(
            err_log("create_thin 1", PoolMode::ReadOnly),
            (
                95,
                "unable to service pool target messages in READ_ONLY or FAIL mode".into()
            )
        );
        assert_eq!(
            err_log("Bogus 1", w),
            (
                22,
                "Unrecognised thin pool target message received: Bogus".into()
            )
        );
        assert_eq!(
            err_log("delete", w),
            (22, "Message received with 1 arguments instead of 2.".into())
        );
        assert_eq!(
            err_log("reserve_metadata_snap x", w),
            (22, "Message received with 2 arguments instead of 1.".into())
        );
        assert_eq!(
            err_log("create_snap 1", w),
            (22, "Message received with 2 arguments instead of 3.".into())
        );
        assert_eq!(
            err_log("create_snap 1 16777216", w),
            (
                22,
                "Message received with invalid device id: 16777216".into()
            )
        );
        assert_eq!(
            err_log("create_snap x 16777216", w),
            (22, "Message received with invalid device id: x".into())
        );
        assert_eq!(
            err_log("set_transaction_id -1 2", w),
            (22, "set_transaction_id message: Unrecognised id -1.".into())
        );
        assert_eq!(
            err_log("set_transaction_id 1 18446744073709551616", w),
            (
                22,
                "set_transaction_id message: Unrecognised new id 18446744073709551616.".into()
            )
        );
        let empty: [&[u8]; 0] = [];
        assert_eq!(PoolMessage::parse(&empty), Err(MessageError::Empty));
        assert!(MessageError::ModeForbids.log_has_pool_prefix());
        assert!(MessageError::ModeForbids.log_is_error());
        assert!(!MessageError::Empty.log_has_pool_prefix());
    }

    #[test]
    fn failure_logs_print_words_verbatim() {
        assert_eq!(
            fail_log("create_thin +5"),
            "Creation of new thinly-provisioned device with id +5 failed."
        );
        assert_eq!(
            fail_log("create_snap 2 1"),
            "Creation of new snapshot 2 of device 1 failed."
        );
        assert_eq!(fail_log("delete 9"), "Deletion of thin device 9 failed.");
        assert_eq!(
            fail_log("set_transaction_id 0 2"),
            "Failed to change transaction id from 0 to 2."
        );
        assert_eq!(
            fail_log("reserve_metadata_snap"),
            "reserve_metadata_snap message failed."
        );
        assert_eq!(
            fail_log("release_metadata_snap"),
            "release_metadata_snap message failed."
        );
    }

    #[test]
    fn mode_gate_precedes_everything() {
        for mode in [
            PoolMode::OutOfMetadataSpace,
            PoolMode::ReadOnly,
            PoolMode::Fail,
        ] {
            for m in ["", "x", "create_thin 1", "release_metadata_snap"] {
                let w = words(m);
                assert_eq!(
                    PoolMessage::parse_in_mode(mode, &w),
                    Err(MessageError::ModeForbids)
                );
            }
        }
        for mode in [PoolMode::Write, PoolMode::OutOfDataSpace] {
            let w = words("create_snap 1 0");
            assert!(PoolMessage::parse_in_mode(mode, &w).is_ok());
        }
    }

    #[test]
    fn numbers_follow_kstrtoull() {
        let w = words("create_thin 5\n");
        assert!(matches!(
            PoolMessage::parse(&w),
            Ok(PoolMessage::CreateThin { dev_id: 5, .. })
        ));
        for bad in [
            "create_thin  ",
            "create_thin -0",
            "create_thin 1.0",
            "delete 1e3",
        ] {
            let w = words(bad);
            // "create_thin  " splits into three words: a count error.
            assert_eq!(PoolMessage::parse(&w).unwrap_err().errno(), 22, "{bad:?}");
        }
        let w = words("set_transaction_id +0 +18446744073709551615\n");
        assert!(matches!(
            PoolMessage::parse(&w),
            Ok(PoolMessage::SetTransactionId {
                current: 0,
                new: u64::MAX,
                ..
            })
        ));
    }

    /// Random words (biased towards keywords, digits and separators) never
    /// panic any of the interface parsers, and accepted input re-validates.
    #[test]
    fn no_panic_on_random_words() {
        use crate::dm::pool_table::PoolTable;
        use crate::dm::thin_table::{ThinTable, MAX_DEV_ID};
        const PIECES: [&[u8]; 12] = [
            b"create_thin",
            b"CREATE_SNAP",
            b"read_only",
            b"4",
            b"128",
            b"+",
            b"\n",
            b"16777215",
            b"18446744073709551616",
            b" ",
            b"\xff",
            b"",
        ];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let n = (next() % 8) as usize;
            let mut owned: Vec<Vec<u8>> = Vec::new();
            for _ in 0..n {
                let mut w = Vec::new();
                for _ in 0..(next() % 3) {
                    if next() % 4 == 0 {
                        w.push((next() & 0xff) as u8);
                    } else {
                        w.extend_from_slice(PIECES[(next() % 12) as usize]);
                    }
                }
                owned.push(w);
            }
            let words: Vec<&[u8]> = owned.iter().map(|w| w.as_slice()).collect();
            for mode in [PoolMode::Write, PoolMode::ReadOnly] {
                if let Ok(m) = PoolMessage::parse_in_mode(mode, &words) {
                    let mut raw = [0u8; 48];
                    let mut b = StatusBuf::new(&mut raw);
                    let _ = m.write_failure_log(&mut b);
                    if let PoolMessage::CreateThin { dev_id, .. } = m {
                        assert!(dev_id <= MAX_DEV_ID);
                    }
                } else if let Err(e) = PoolMessage::parse_in_mode(mode, &words) {
                    let mut raw = [0u8; 48];
                    let mut b = StatusBuf::new(&mut raw);
                    let _ = e.write_log(&mut b);
                }
            }
            if let Ok(t) = PoolTable::parse(&words) {
                assert!(t.block_size % 128 == 0 && t.block_size >= 128);
                assert!(t.features.count() <= 4);
            }
            if let Ok(t) = ThinTable::parse(&words) {
                assert!(t.dev_id <= MAX_DEV_ID);
            }
        }
    }

    #[test]
    fn names_and_commit_first() {
        let all = [
            "create_thin 1",
            "create_snap 2 1",
            "delete 1",
            "set_transaction_id 0 1",
            "reserve_metadata_snap",
            "release_metadata_snap",
        ];
        for s in all {
            let w = words(s);
            let m = PoolMessage::parse(&w).unwrap();
            assert!(s.starts_with(m.name()));
            assert_eq!(m.commits_first(), s == "reserve_metadata_snap");
        }
        // Non-UTF-8 words are logged escaped.
        let w: [&[u8]; 1] = [b"\xff"];
        let e = PoolMessage::parse(&w).unwrap_err();
        let mut raw = [0u8; 80];
        let mut b = StatusBuf::new(&mut raw);
        e.write_log(&mut b).unwrap();
        assert_eq!(
            b.as_bytes(),
            b"Unrecognised thin pool target message received: \\xff"
        );
    }
}
