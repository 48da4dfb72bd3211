// SPDX-License-Identifier: GPL-2.0
//! Errors, exit codes, and the errno-to-sentence table.
//!
//! A pool message answers only with an errno; dm-thin's explanation goes to
//! the kernel log. This module turns (operation, errno, what we know about
//! the pool) into one sentence that says what happened and what to do, plus
//! the equivalent `dmsetup` command and a pointer to the kernel log.

use std::fmt;

use nix::errno::Errno;

use rthin_core::dm::errno::{
    EBUSY, EEXIST, EINVAL, EIO, ENODATA, ENOMEM, ENOSPC, EOPNOTSUPP, EPERM,
};

/// Exit codes (also in `--help` and Documentation/rthinctl.md).
pub mod exit {
    /// Success.
    pub const OK: i32 = 0;
    /// The kernel (or a pre-check on the pool's state) refused the operation,
    /// or offline metadata is damaged.
    pub const REFUSED: i32 = 1;
    /// Bad command line.
    pub const USAGE: i32 = 2;
    /// No such device-mapper device, pool or thin id.
    pub const NOT_FOUND: i32 = 3;
    /// Permission denied (device-mapper needs CAP_SYS_ADMIN).
    pub const PERMISSION: i32 = 4;
    /// Anything else: control device missing, unreadable kernel output, I/O.
    pub const OTHER: i32 = 5;
    /// Offline metadata uses features (incompat flags) this rthinctl does
    /// not know: it cannot be read safely, which is not damage.
    pub const UNSUPPORTED: i32 = 6;
    /// `status --check`: warning.
    pub const CHECK_WARN: i32 = 1;
    /// `status --check`: critical.
    pub const CHECK_CRIT: i32 = 2;
    /// `status --check`: unknown (the state could not be read).
    pub const CHECK_UNKNOWN: i32 = 3;
}

// The errnos of the ioctl path that the kernel's dm errno list (shared with
// the module, `dm_errno`) does not name.
const ENOENT: i32 = Errno::ENOENT as i32;
const ENXIO: i32 = Errno::ENXIO as i32;
const EACCES: i32 = Errno::EACCES as i32;
const ENODEV: i32 = Errno::ENODEV as i32;
const ENOTTY: i32 = Errno::ENOTTY as i32;

/// An rthinctl failure: a sentence, an exit code, and optional extra lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// What happened and what to do, as one or two sentences.
    pub text: String,
    /// Process exit code.
    pub code: i32,
    /// Further lines (the equivalent dmsetup command, where to look).
    pub notes: Vec<String>,
}

impl Error {
    /// A new error.
    pub fn new(code: i32, text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            code,
            notes: Vec::new(),
        }
    }

    /// Adds a note line.
    pub fn note(mut self, n: impl Into<String>) -> Self {
        self.notes.push(n.into());
        self
    }

    /// A usage error.
    pub fn usage(text: impl Into<String>) -> Self {
        Self::new(exit::USAGE, text)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)?;
        for n in &self.notes {
            write!(f, "\n  {n}")?;
        }
        Ok(())
    }
}

/// Result alias.
pub type Result<T> = std::result::Result<T, Error>;

/// Short errno name for messages (`EEXIST`), from nix's table.
pub fn errno_name(e: i32) -> String {
    match Errno::from_raw(e) {
        Errno::UnknownErrno => format!("errno {e}"),
        n => format!("{n:?}"),
    }
}

/// A pool message as rthinctl sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Msg {
    /// `create_thin <id>`.
    CreateThin(u32),
    /// `create_snap <id> <origin>`.
    CreateSnap(u32, u32),
    /// `delete <id>`.
    Delete(u32),
    /// `set_transaction_id <old> <new>`.
    SetTransactionId(u64, u64),
    /// `reserve_metadata_snap`.
    ReserveMetadataSnap,
    /// `release_metadata_snap`.
    ReleaseMetadataSnap,
    /// Anything else, sent verbatim.
    Raw(String),
}

impl fmt::Display for Msg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Msg::CreateThin(id) => write!(f, "create_thin {id}"),
            Msg::CreateSnap(id, o) => write!(f, "create_snap {id} {o}"),
            Msg::Delete(id) => write!(f, "delete {id}"),
            Msg::SetTransactionId(a, b) => write!(f, "set_transaction_id {a} {b}"),
            Msg::ReserveMetadataSnap => f.write_str("reserve_metadata_snap"),
            Msg::ReleaseMetadataSnap => f.write_str("release_metadata_snap"),
            Msg::Raw(s) => f.write_str(s),
        }
    }
}

impl Msg {
    /// Classifies raw words with the core crate's message parser: a valid
    /// pool message becomes its typed variant; a known message name with
    /// bad arguments is a usage error carrying dm-thin's own log text (so it
    /// never reaches the kernel); an unknown name stays [`Msg::Raw`].
    pub fn from_words(words: &[String]) -> Result<Msg> {
        use rthin_core::dm::message::{MessageError, PoolMessage};
        match PoolMessage::parse(words) {
            Ok(m) => Ok(match m {
                PoolMessage::CreateThin { dev_id, .. } => Msg::CreateThin(dev_id),
                PoolMessage::CreateSnap {
                    dev_id, origin_id, ..
                } => Msg::CreateSnap(dev_id, origin_id),
                PoolMessage::Delete { dev_id, .. } => Msg::Delete(dev_id),
                PoolMessage::SetTransactionId { current, new, .. } => {
                    Msg::SetTransactionId(current, new)
                }
                PoolMessage::ReserveMetadataSnap => Msg::ReserveMetadataSnap,
                PoolMessage::ReleaseMetadataSnap => Msg::ReleaseMetadataSnap,
            }),
            Err(MessageError::Empty) => Err(Error::usage(
                "empty message: give the message words after the pool",
            )),
            Err(MessageError::Unrecognised { .. }) => Ok(Msg::Raw(words.join(" "))),
            Err(e) => {
                let mut log = String::new();
                let _ = e.write_log(&mut log);
                Err(Error::usage(format!(
                    "the pool would refuse this message with EINVAL (\"{log}\"); fix the arguments (device ids are decimal, 0..16777215)"
                )))
            }
        }
    }
}

/// What rthinctl knew about the pool when the message failed; used to make
/// the sentence concrete.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Facts {
    /// Current transaction id from the status line.
    pub transaction_id: Option<u64>,
    /// Held metadata root from the status line.
    pub held_root: Option<u64>,
    /// Active dm devices using the thin id in question.
    pub active_as: Vec<String>,
    /// The pool's mode word and needs_check flag, if known.
    pub mode: Option<String>,
    /// needs_check was set.
    pub needs_check: bool,
}

/// Errors any ioctl can get, independent of the message.
pub fn explain_ioctl(op: &str, dev: &str, errno: Option<i32>, text: &str) -> Error {
    match errno {
        Some(EACCES) | Some(EPERM) => Error::new(
            exit::PERMISSION,
            format!("{op}: permission denied: device-mapper ioctls need root (CAP_SYS_ADMIN); run rthinctl as root"),
        ),
        Some(ENXIO) | Some(ENODEV) => Error::new(
            exit::NOT_FOUND,
            format!("{op}: there is no device-mapper device {dev:?}; `rthinctl ls` lists pools and thins, `dmsetup ls` every device"),
        ),
        Some(ENOENT) => Error::new(
            exit::OTHER,
            format!("{op}: /dev/mapper/control does not exist: load device-mapper (modprobe dm-mod) or create the node (dmsetup mknodes)"),
        ),
        Some(ENOTTY) => Error::new(
            exit::OTHER,
            format!("{op}: /dev/mapper/control does not accept device-mapper ioctls (ENOTTY); is it really the device-mapper control node?"),
        ),
        Some(ENOMEM) => Error::new(
            exit::OTHER,
            format!("{op}: the kernel ran out of memory (ENOMEM); retry when memory is available"),
        ),
        Some(e) => Error::new(
            exit::OTHER,
            format!("{op} on {dev:?} failed with {} ({text})", errno_name(e)),
        )
        .note("see `dmesg | tail` for the kernel's explanation"),
        None => Error::new(exit::OTHER, format!("{op}: {text}")),
    }
}

/// The sentence for a failed pool message.
pub fn explain_message(pool: &str, msg: &Msg, errno: i32, facts: &Facts) -> Error {
    let refused = |t: String| Error::new(exit::REFUSED, t);
    let e = match (msg, errno) {
        (_, EACCES) | (_, EPERM) | (_, ENXIO) | (_, ENODEV) | (_, ENOENT) | (_, ENOTTY) => {
            return explain_ioctl(&format!("message {msg:?}", msg = msg.to_string()), pool, Some(errno), "")
        }
        (_, EOPNOTSUPP) => refused(format!(
            "pool {pool} refuses all messages because it is read-only, out of metadata space or failed{}; deactivate it, run thin_check on its metadata device and thin_repair if that reports damage{}",
            match (&facts.mode, facts.needs_check) {
                (Some(m), true) => format!(" (mode {m}, needs_check set)"),
                (Some(m), false) => format!(" (mode {m})"),
                (None, true) => " (needs_check set)".to_string(),
                (None, false) => String::new(),
            },
            if facts.needs_check { ", then clear the flag with thin_check --clear-needs-check-flag" } else { "" }
        )),
        (Msg::CreateThin(id), EEXIST) | (Msg::CreateSnap(id, _), EEXIST) => refused(format!(
            "thin device id {id} is already in use in pool {pool}; pick another id (`rthinctl ls {pool}` shows active ones, `--id auto` picks a free one)"
        )),
        (Msg::CreateSnap(_, origin), ENODATA) => Error::new(
            exit::NOT_FOUND,
            format!("origin thin id {origin} does not exist in pool {pool}; check the id with `rthinctl ls {pool}`"),
        ),
        (Msg::Delete(id), ENODATA) => Error::new(
            exit::NOT_FOUND,
            format!("pool {pool} has no thin device with id {id}; nothing was deleted"),
        ),
        (Msg::Delete(id), EBUSY) => refused(if facts.active_as.is_empty() {
            format!("thin id {id} in pool {pool} is still open by an active thin device; remove that device first (dmsetup remove NAME)")
        } else {
            format!(
                "thin id {id} in pool {pool} is active as {}; remove it first (dmsetup remove {})",
                facts.active_as.join(", "),
                facts.active_as.join(" ")
            )
        }),
        (Msg::SetTransactionId(old, _), EINVAL) => refused(match facts.transaction_id {
            Some(cur) if cur != *old => format!(
                "pool {pool}'s transaction id is {cur}, not {old}; nothing was changed (pass {cur} as the old id if you mean to move on from it)"
            ),
            _ => format!(
                "pool {pool} refused to change the transaction id from {old} (mismatch); read the current id with `rthinctl status {pool}`"
            ),
        }),
        (Msg::ReserveMetadataSnap, EBUSY) => refused(match facts.held_root {
            Some(b) => format!("pool {pool} already holds a metadata snapshot (at block {b}); release it first with `rthinctl metadata-snap release {pool}`"),
            None => format!("pool {pool} already holds a metadata snapshot; release it first with `rthinctl metadata-snap release {pool}`"),
        }),
        (Msg::ReleaseMetadataSnap, EINVAL) => refused(format!(
            "pool {pool} holds no metadata snapshot, so there is nothing to release"
        )),
        (Msg::Raw(m), EINVAL) => refused(format!(
            "pool {pool} rejected message {m:?} (EINVAL): unknown message, wrong argument count or a bad number; the pool messages are create_thin, create_snap, delete, set_transaction_id, reserve_metadata_snap and release_metadata_snap"
        )),
        (_, EINVAL) => refused(format!(
            "pool {pool} rejected the message (EINVAL); it may not be a thin pool, or it has no live table (created but not resumed?)"
        )),
        (_, ENOSPC) => refused(format!(
            "pool {pool} has no metadata space left for this (ENOSPC); grow the metadata device (reload the pool table on a bigger one) before retrying"
        )),
        (_, ENOMEM) => refused(format!(
            "the kernel ran out of memory while pool {pool} processed the message (ENOMEM); retry later"
        )),
        (_, EIO) | (_, 84) => refused(format!(
            "pool {pool} hit a metadata I/O error or corruption ({}); it has probably switched to read-only: check `rthinctl status {pool}`, then deactivate it and run thin_check",
            errno_name(errno)
        )),
        (_, e) => refused(format!(
            "pool {pool} refused the message with {}",
            errno_name(e)
        )),
    };
    e.note(format!("equivalent: dmsetup message {pool} 0 \"{msg}\""))
        .note("the kernel's own explanation is in the kernel log: dmesg | grep thin")
}

/// A closed stdout (the reader went away) ends the command quietly.
pub fn io_error(e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return Error::new(exit::OK, "");
    }
    Error::new(exit::OTHER, format!("cannot write the output: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn messages_are_validated_by_core() {
        assert_eq!(
            Msg::from_words(&words("create_thin 7")),
            Ok(Msg::CreateThin(7))
        );
        assert_eq!(
            Msg::from_words(&words("CREATE_SNAP 2 1")),
            Ok(Msg::CreateSnap(2, 1))
        );
        assert_eq!(
            Msg::from_words(&words("set_transaction_id 1 18446744073709551615")),
            Ok(Msg::SetTransactionId(1, u64::MAX))
        );
        assert_eq!(
            Msg::from_words(&words("frobnicate 1")),
            Ok(Msg::Raw("frobnicate 1".into()))
        );
        for bad in [
            "create_thin 16777216",
            "create_thin 0x10",
            "create_thin",
            "delete 1 2",
            "set_transaction_id a 1",
        ] {
            let e = Msg::from_words(&words(bad)).unwrap_err();
            assert_eq!(e.code, exit::USAGE, "{bad}");
            assert!(e.text.contains("EINVAL"), "{bad}: {}", e.text);
        }
        let e = Msg::from_words(&words("create_thin 1 2")).unwrap_err();
        assert!(
            e.text
                .contains("Message received with 3 arguments instead of 2."),
            "{}",
            e.text
        );
        assert_eq!(Msg::from_words(&[]).unwrap_err().code, exit::USAGE);
    }

    #[test]
    fn every_documented_errno_has_a_sentence() {
        let f = Facts::default();
        let cases: &[(Msg, i32, &str, i32)] = &[
            (Msg::CreateThin(3), EEXIST, "already in use", exit::REFUSED),
            (
                Msg::CreateSnap(3, 1),
                EEXIST,
                "already in use",
                exit::REFUSED,
            ),
            (
                Msg::CreateSnap(3, 1),
                ENODATA,
                "origin thin id 1 does not exist",
                exit::NOT_FOUND,
            ),
            (
                Msg::Delete(9),
                ENODATA,
                "no thin device with id 9",
                exit::NOT_FOUND,
            ),
            (
                Msg::Delete(9),
                EBUSY,
                "remove that device first",
                exit::REFUSED,
            ),
            (
                Msg::SetTransactionId(1, 2),
                EINVAL,
                "mismatch",
                exit::REFUSED,
            ),
            (
                Msg::ReserveMetadataSnap,
                EBUSY,
                "release it first",
                exit::REFUSED,
            ),
            (
                Msg::ReleaseMetadataSnap,
                EINVAL,
                "nothing to release",
                exit::REFUSED,
            ),
            (
                Msg::Raw("x".into()),
                EINVAL,
                "unknown message",
                exit::REFUSED,
            ),
            (Msg::CreateThin(1), EOPNOTSUPP, "thin_check", exit::REFUSED),
            (Msg::CreateThin(1), EACCES, "root", exit::PERMISSION),
            (
                Msg::CreateThin(1),
                ENXIO,
                "no device-mapper device",
                exit::NOT_FOUND,
            ),
            (Msg::CreateThin(1), ENOSPC, "metadata space", exit::REFUSED),
            (Msg::CreateThin(1), EIO, "thin_check", exit::REFUSED),
            (Msg::CreateThin(1), 200, "errno 200", exit::REFUSED),
        ];
        for (m, e, want, code) in cases {
            let err = explain_message("pool0", m, *e, &f);
            assert!(err.to_string().contains(want), "{m} {e}: {err}");
            assert_eq!(err.code, *code, "{m} {e}");
        }
        let e = explain_message("pool0", &Msg::Delete(1), EEXIST, &f);
        assert!(e
            .to_string()
            .contains("dmsetup message pool0 0 \"delete 1\""));
        assert!(e.to_string().contains("dmesg"));
    }

    #[test]
    fn facts_make_sentences_concrete() {
        let f = Facts {
            transaction_id: Some(5),
            held_root: Some(17),
            active_as: vec!["thin1".into()],
            mode: Some("ro".into()),
            needs_check: true,
        };
        let t = explain_message("p", &Msg::SetTransactionId(1, 2), EINVAL, &f).text;
        assert!(t.contains("transaction id is 5, not 1"), "{t}");
        let t = explain_message("p", &Msg::ReserveMetadataSnap, EBUSY, &f).text;
        assert!(t.contains("block 17"), "{t}");
        let t = explain_message("p", &Msg::Delete(1), EBUSY, &f).text;
        assert!(
            t.contains("active as thin1") && t.contains("dmsetup remove thin1"),
            "{t}"
        );
        let t = explain_message("p", &Msg::CreateThin(1), EOPNOTSUPP, &f).text;
        assert!(
            t.contains("mode ro, needs_check set") && t.contains("--clear-needs-check-flag"),
            "{t}"
        );
    }

    #[test]
    fn ioctl_errors() {
        assert_eq!(
            explain_ioctl("status", "x", Some(EACCES), "").code,
            exit::PERMISSION
        );
        assert_eq!(
            explain_ioctl("status", "x", Some(ENXIO), "").code,
            exit::NOT_FOUND
        );
        assert!(explain_ioctl("status", "x", Some(ENOENT), "")
            .text
            .contains("modprobe dm-mod"));
        assert_eq!(explain_ioctl("status", "x", None, "boom").code, exit::OTHER);
        assert_eq!(errno_name(EEXIST), "EEXIST");
    }
}
