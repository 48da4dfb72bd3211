// SPDX-License-Identifier: GPL-2.0
//! The pool's operating modes and what each allows (dm-thin's
//! `enum pool_mode` and its predicates).

/// The pool's operating mode, ordered like dm-thin's `enum pool_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PoolMode {
    /// Normal operation (`rw`).
    Write,
    /// No free data blocks: provisioning/CoW bios are queued or get ENOSPC.
    OutOfDataSpace,
    /// No free metadata blocks (beyond the reserve): read-only behaviour.
    OutOfMetadataSpace,
    /// Read-only metadata (table feature, or after a metadata failure).
    ReadOnly,
    /// Terminal failure: every bio errors; only re-creating the pool leaves it.
    Fail,
}

impl PoolMode {
    /// Status field 5: `rw`, `out_of_data_space` or `ro`; `None` for
    /// [`PoolMode::Fail`], whose whole status line is `Fail`.
    pub fn status_str(self) -> Option<&'static str> {
        match self {
            PoolMode::Write => Some("rw"),
            PoolMode::OutOfDataSpace => Some("out_of_data_space"),
            PoolMode::OutOfMetadataSpace | PoolMode::ReadOnly => Some("ro"),
            PoolMode::Fail => None,
        }
    }

    /// The mode name in the `switching pool to <name> mode` log line
    /// (`read-only` is used for both read-only and out-of-metadata-space).
    pub fn log_name(self) -> &'static str {
        match self {
            PoolMode::Write => "write",
            PoolMode::OutOfDataSpace => "out-of-data-space",
            PoolMode::OutOfMetadataSpace | PoolMode::ReadOnly => "read-only",
            PoolMode::Fail => "fail",
        }
    }

    /// dm-thin's `is_read_only_pool_mode`: out-of-metadata-space or read-only
    /// (not FAIL).
    pub fn is_read_only(self) -> bool {
        matches!(self, PoolMode::OutOfMetadataSpace | PoolMode::ReadOnly)
    }

    /// Pool messages are serviced (else every message, even an unknown one,
    /// fails with EOPNOTSUPP).
    pub fn accepts_messages(self) -> bool {
        self < PoolMode::OutOfMetadataSpace
    }

    /// A metadata commit may be attempted (dm-thin's `commit()` returns
    /// EINVAL without touching the metadata otherwise).
    pub fn may_commit(self) -> bool {
        self < PoolMode::OutOfMetadataSpace
    }

    /// Data blocks may be allocated (`alloc_data_block` only runs in WRITE).
    pub fn may_provision(self) -> bool {
        self == PoolMode::Write
    }

    /// New thin targets may be constructed (refused only in FAIL, with
    /// "Couldn't open thin device, Pool is in fail mode").
    pub fn allows_new_thins(self) -> bool {
        self != PoolMode::Fail
    }

    /// The thin map fast path errors every bio with EIO at once.
    pub fn fails_all_io(self) -> bool {
        self == PoolMode::Fail
    }
}
