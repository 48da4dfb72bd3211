// SPDX-License-Identifier: GPL-2.0
//! The pool target's messages (interface.md, "Pool messages").
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
mod tests;
