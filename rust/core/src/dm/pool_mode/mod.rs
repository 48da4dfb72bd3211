// SPDX-License-Identifier: GPL-2.0
//! The pool mode state machine (spec §1.11, §1.12, §3.6) as pure decisions.
//!
//! [`PoolModeState`] holds what dm-thin keeps in `pool->pf.mode`, the live
//! `error_if_no_space` flag, the sticky `out_of_data_space` flag and the mode
//! last synced to the bound table. Every mode request goes through
//! [`PoolModeState::set_mode`] (dm-thin's `set_pool_mode`), which applies the
//! needs_check and FAIL rules and returns a [`ModeChange`] listing the side
//! effects the glue must carry out (event + log, erroring the retry lists,
//! switching the metadata block manager read-only/read-write, arming or
//! cancelling the no-space timer, re-queueing parked bios).
//!
//! The per-bio questions ("may this bio provision?", "queue, error or
//! proceed?") are answered by [`PoolModeState::decide_bio`],
//! [`PoolModeState::decide_discard`] and friends, mirroring the mode →
//! function table of spec §3.6.

use core::fmt;

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

/// Completion error for a bio, as a `blk_status_t` class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoError {
    /// `BLK_STS_IOERR` (EIO).
    Io,
    /// `BLK_STS_NOSPC` (ENOSPC).
    NoSpace,
}

impl IoError {
    /// The errno value (positive) behind this status.
    pub fn errno(self) -> i32 {
        match self {
            IoError::Io => crate::dm::errno::EIO,
            IoError::NoSpace => crate::dm::errno::ENOSPC,
        }
    }
}

/// What the metadata lookup found for the bio's virtual block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// No mapping for the block.
    Unmapped,
    /// Mapped; `shared` per the snapshot time-stamp rule.
    Mapped {
        /// The data block is shared with another device (needs CoW to write).
        shared: bool,
    },
}

/// The kind of a (non-discard) bio handled by the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BioDir {
    /// A read.
    Read,
    /// A write carrying data.
    Write,
    /// A write without data (an empty flush).
    EmptyWrite,
}

/// How deferred work reached the worker; only matters in FAIL mode, where a
/// bare bio gets EIO but a bio prison cell gets [`PoolModeState::pool_io_error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkItem {
    /// A deferred bio (flushes, discards).
    Bio,
    /// A cell holding bios for one virtual block (ordinary data bios).
    Cell,
}

/// The worker's decision for a bio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BioAction {
    /// Remap to the mapped data block (an unmapped empty write is just
    /// forwarded: empty flushes never provision).
    Remap,
    /// Unmapped read: zero-fill, or read the external origin if any.
    ReadHole,
    /// Allocate a data block (zero or copy from the origin, then write).
    Provision,
    /// Copy-on-write of a shared block.
    BreakSharing,
    /// Park on the thin's retry-on-resume list (out of data space, queueing).
    Queue,
    /// Complete the bio with this error.
    Error(IoError),
}

/// The worker's decision for a discard bio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscardAction {
    /// Unmap the whole blocks in range (and pass down if enabled).
    Process,
    /// Complete successfully without doing anything.
    Ignore,
    /// Complete with this error.
    Error(IoError),
}

/// What to do with a provisioning/CoW whose copy or zeroing has completed
/// (`process_prepared_mapping`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreparedMappingAction {
    /// Insert the new mapping and issue the held bios.
    Insert,
    /// Do not insert; error the held bios.
    Error(IoError),
}

/// Side effects of one mode request, for the glue to carry out in this order:
/// metadata block manager mode, erroring the retry lists, timer, requeue,
/// event + log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModeChange {
    /// Mode before the request.
    pub old: PoolMode,
    /// Mode after the request.
    pub new: PoolMode,
    /// The request was for WRITE but needs_check is set: log
    /// `<pool>: unable to switch pool to write mode until repaired.`
    pub write_refused_needs_check: bool,
    /// `Some(true)`: set the metadata block manager read-only;
    /// `Some(false)`: read-write; `None`: leave it.
    pub metadata_read_only: Option<bool>,
    /// Complete every bio parked on the thins' retry-on-resume lists with
    /// this error.
    pub error_retry_lists: Option<IoError>,
    /// Arm (if not already pending) the no-space timer for this many seconds.
    pub arm_no_space_timer: Option<u32>,
    /// Cancel the no-space timer (synchronously).
    pub cancel_no_space_timer: bool,
    /// Move retry-on-resume bios back to the deferred lists and wake the
    /// worker (leaving out-of-data-space because space appeared).
    pub requeue_retry_lists: bool,
    /// Raise a DM table event on the pool and log the switch (see
    /// [`ModeChange::write_log`]).
    pub notify: bool,
    /// Live `error_if_no_space` after the request (for the log suffix).
    pub error_if_no_space: bool,
}

impl ModeChange {
    fn unchanged(state: &PoolModeState) -> Self {
        Self {
            old: state.mode,
            new: state.mode,
            write_refused_needs_check: false,
            metadata_read_only: None,
            error_retry_lists: None,
            arm_no_space_timer: None,
            cancel_no_space_timer: false,
            requeue_retry_lists: false,
            notify: false,
            error_if_no_space: state.error_if_no_space,
        }
    }

    /// True if the mode actually changed.
    pub fn changed(&self) -> bool {
        self.old != self.new
    }

    /// Writes the body of the mode-change log line (the glue prefixes
    /// `<pool name>: `): `switching pool to <mode><suffix> mode`, suffix
    /// ` (queue IO)`/` (error IO)` only for out-of-data-space.
    pub fn write_log<W: fmt::Write + ?Sized>(&self, w: &mut W) -> fmt::Result {
        write_switch_log(w, self.new, self.error_if_no_space)
    }
}

fn write_switch_log<W: fmt::Write + ?Sized>(
    w: &mut W,
    mode: PoolMode,
    error_if_no_space: bool,
) -> fmt::Result {
    let suffix = match (mode, error_if_no_space) {
        (PoolMode::OutOfDataSpace, false) => " (queue IO)",
        (PoolMode::OutOfDataSpace, true) => " (error IO)",
        _ => "",
    };
    write!(w, "switching pool to {}{} mode", mode.log_name(), suffix)
}

/// Which mode a table asks for when it is bound at resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BindRequest {
    /// A table that was not bound before (first load or reload): requests
    /// READ_ONLY if it has the `read_only` feature, else WRITE.
    NewTable {
        /// The table has the `read_only` feature.
        read_only: bool,
    },
    /// The already-bound table again (plain suspend/resume): its requested
    /// mode has been kept in sync with the live mode, so the mode survives.
    SameTable,
}

/// The live mode state of one pool object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolModeState {
    mode: PoolMode,
    error_if_no_space: bool,
    requested_error_if_no_space: bool,
    out_of_data_space: bool,
}

impl Default for PoolModeState {
    fn default() -> Self {
        Self::new()
    }
}

impl PoolModeState {
    /// A freshly created pool object: WRITE, queue on no space (the table's
    /// mode and policy are applied by the first [`PoolModeState::bind`]).
    pub const fn new() -> Self {
        Self {
            mode: PoolMode::Write,
            error_if_no_space: false,
            requested_error_if_no_space: false,
            out_of_data_space: false,
        }
    }

    /// The current mode.
    pub fn mode(&self) -> PoolMode {
        self.mode
    }

    /// Live no-space policy (status field 7): true = error, false = queue.
    /// Becomes true when the no-space timeout fires, until WRITE is re-entered.
    pub fn error_if_no_space(&self) -> bool {
        self.error_if_no_space
    }

    /// The sticky out-of-data-space flag: set on entering OODS, cleared only
    /// on entering WRITE ([QUIRK] 9: it survives a move to RO/FAIL).
    pub fn out_of_data_space(&self) -> bool {
        self.out_of_data_space
    }

    /// dm-thin's `get_pool_io_error_code`: the error for erroring retry lists,
    /// cells in FAIL mode and failed prepared mappings — ENOSPC while the
    /// out-of-data-space flag is set, else EIO.
    pub fn pool_io_error(&self) -> IoError {
        if self.out_of_data_space {
            IoError::NoSpace
        } else {
            IoError::Io
        }
    }

    /// Requests `requested` (dm-thin `set_pool_mode`). `needs_check` is the
    /// metadata's needs_check flag now; `no_space_timeout_secs` the current
    /// value of the module parameter (0 = never time out).
    pub fn set_mode(
        &mut self,
        requested: PoolMode,
        needs_check: bool,
        no_space_timeout_secs: u32,
    ) -> ModeChange {
        let old = self.mode;
        let mut new = requested;
        let mut refused = false;
        if new == PoolMode::Write && needs_check {
            refused = true;
            new = if old != PoolMode::Write {
                old
            } else {
                PoolMode::ReadOnly
            };
        }
        if old == PoolMode::Fail {
            new = PoolMode::Fail;
        }
        let mut c = ModeChange::unchanged(self);
        c.write_refused_needs_check = refused;
        match new {
            PoolMode::Fail | PoolMode::OutOfMetadataSpace | PoolMode::ReadOnly => {
                c.metadata_read_only = Some(true);
                c.error_retry_lists = Some(self.pool_io_error());
            }
            PoolMode::OutOfDataSpace => {
                self.out_of_data_space = true;
                if !self.error_if_no_space && no_space_timeout_secs != 0 {
                    c.arm_no_space_timer = Some(no_space_timeout_secs);
                }
            }
            PoolMode::Write => {
                c.cancel_no_space_timer = old == PoolMode::OutOfDataSpace;
                self.out_of_data_space = false;
                self.error_if_no_space = self.requested_error_if_no_space;
                c.metadata_read_only = Some(false);
            }
        }
        self.mode = new;
        c.new = new;
        c.notify = old != new;
        c.error_if_no_space = self.error_if_no_space;
        c
    }

    /// Binds a table at resume (`bind_control_target`): the table's
    /// `error_if_no_space` becomes the live and requested policy, then the
    /// table's mode is requested. FAIL is never left.
    pub fn bind(
        &mut self,
        request: BindRequest,
        table_error_if_no_space: bool,
        needs_check: bool,
        no_space_timeout_secs: u32,
    ) -> ModeChange {
        let requested = match request {
            BindRequest::NewTable { read_only: true } => PoolMode::ReadOnly,
            BindRequest::NewTable { read_only: false } => PoolMode::Write,
            BindRequest::SameTable => self.mode,
        };
        self.requested_error_if_no_space = table_error_if_no_space;
        self.error_if_no_space = table_error_if_no_space;
        self.set_mode(requested, needs_check, no_space_timeout_secs)
    }

    /// A metadata operation failed (`metadata_operation_failed`): the glue has
    /// logged `metadata operation '<op>' failed: error = <r>`, tried to roll
    /// back (`abort_ok`) and to set needs_check (`needs_check_ok`). Either
    /// failure means FAIL; otherwise READ_ONLY.
    pub fn metadata_operation_failed(
        &mut self,
        abort_ok: bool,
        needs_check_ok: bool,
        no_space_timeout_secs: u32,
    ) -> ModeChange {
        let target = if abort_ok && needs_check_ok {
            PoolMode::ReadOnly
        } else {
            PoolMode::Fail
        };
        self.set_mode(target, true, no_space_timeout_secs)
    }

    /// The data space map has no free block even after a commit (or refused an
    /// allocation with ENOSPC): enter out-of-data-space. The allocation fails
    /// with ENOSPC and the bio becomes unserviceable.
    pub fn data_space_exhausted(&mut self, needs_check: bool, timeout_secs: u32) -> ModeChange {
        self.set_mode(PoolMode::OutOfDataSpace, needs_check, timeout_secs)
    }

    /// After a successful commit (`check_for_metadata_space` then
    /// `check_for_data_space`): `free_metadata` is the free metadata count
    /// after subtracting the reserve (`None` if the query failed), `free_data`
    /// the free data count (`None` if the query failed). Returns the change
    /// (possibly none). When entering OOMS the glue logs `No free metadata
    /// blocks` or `Could not get free metadata blocks`
    /// ([`PoolModeState::ooms_reason`]).
    pub fn after_commit(
        &mut self,
        free_metadata: Option<u64>,
        free_data: Option<u64>,
        needs_check: bool,
        timeout_secs: u32,
    ) -> ModeChange {
        let mut change = ModeChange::unchanged(self);
        if Self::ooms_reason(free_metadata).is_some() && !self.mode.is_read_only() {
            change = self.set_mode(PoolMode::OutOfMetadataSpace, needs_check, timeout_secs);
        }
        if self.mode == PoolMode::OutOfDataSpace && matches!(free_data, Some(n) if n > 0) {
            let old = change.old;
            let mut c = self.set_mode(PoolMode::Write, needs_check, timeout_secs);
            c.old = old;
            c.notify = old != c.new;
            c.requeue_retry_lists = true;
            change = c;
        }
        change
    }

    /// The log line for entering out-of-metadata-space after a commit, if
    /// `free_metadata` (see [`PoolModeState::after_commit`]) calls for it.
    pub fn ooms_reason(free_metadata: Option<u64>) -> Option<&'static str> {
        match free_metadata {
            None => Some("Could not get free metadata blocks"),
            Some(0) => Some("No free metadata blocks"),
            Some(_) => None,
        }
    }

    /// The metadata device grew at resume (`maybe_resize_metadata_dev`): an
    /// out-of-metadata-space pool asks for WRITE before extending.
    pub fn metadata_grew(&mut self, needs_check: bool, timeout_secs: u32) -> ModeChange {
        if self.mode == PoolMode::OutOfMetadataSpace {
            self.set_mode(PoolMode::Write, needs_check, timeout_secs)
        } else {
            ModeChange::unchanged(self)
        }
    }

    /// The no-space timer fired: if still out of data space and queueing,
    /// switch the live policy to error, notify (log `... out-of-data-space
    /// (error IO) mode`) and fail the parked bios with ENOSPC.
    pub fn no_space_timeout(&mut self) -> ModeChange {
        let mut c = ModeChange::unchanged(self);
        if self.mode == PoolMode::OutOfDataSpace && !self.error_if_no_space {
            self.error_if_no_space = true;
            c.error_if_no_space = true;
            c.notify = true;
            c.error_retry_lists = Some(IoError::NoSpace);
        }
        c
    }

    /// Resolution of a bio that needs a metadata change the mode does not
    /// allow (`should_error_unserviceable_bio`): out of data space → queue,
    /// or ENOSPC if the live policy is error; every other mode → EIO.
    pub fn unserviceable(&self) -> BioAction {
        match self.mode {
            PoolMode::OutOfDataSpace if !self.error_if_no_space => BioAction::Queue,
            PoolMode::OutOfDataSpace => BioAction::Error(IoError::NoSpace),
            _ => BioAction::Error(IoError::Io),
        }
    }

    /// The worker's decision for a non-discard bio given the lookup result.
    /// In WRITE mode normal processing; in OODS/OOMS/RO the read-only path
    /// (an empty write to an unmapped block is unserviceable there:
    /// [QUIRK] 3); in FAIL an error.
    pub fn decide_bio(&self, item: WorkItem, dir: BioDir, lookup: Lookup) -> BioAction {
        match self.mode {
            PoolMode::Fail => BioAction::Error(self.fail_error(item)),
            PoolMode::Write => match (dir, lookup) {
                (BioDir::Read, Lookup::Unmapped) => BioAction::ReadHole,
                (BioDir::Write, Lookup::Unmapped) => BioAction::Provision,
                (BioDir::Write, Lookup::Mapped { shared: true }) => BioAction::BreakSharing,
                _ => BioAction::Remap,
            },
            _ => match (dir, lookup) {
                (BioDir::Read, Lookup::Unmapped) => BioAction::ReadHole,
                (_, Lookup::Unmapped) | (BioDir::Write, Lookup::Mapped { shared: true }) => {
                    self.unserviceable()
                }
                _ => BioAction::Remap,
            },
        }
    }

    /// The worker's decision for a discard: processed in WRITE and OODS,
    /// completed as a no-op in OOMS/RO, errored in FAIL.
    pub fn decide_discard(&self, item: WorkItem) -> DiscardAction {
        match self.mode {
            PoolMode::Write | PoolMode::OutOfDataSpace => DiscardAction::Process,
            PoolMode::OutOfMetadataSpace | PoolMode::ReadOnly => DiscardAction::Ignore,
            PoolMode::Fail => DiscardAction::Error(self.fail_error(item)),
        }
    }

    /// A prepared discard (unmap done, passdown pending) in the current mode:
    /// processed in WRITE/OODS, completed OK in OOMS/RO, EIO in FAIL.
    pub fn decide_prepared_discard(&self) -> DiscardAction {
        match self.mode {
            PoolMode::Write | PoolMode::OutOfDataSpace => DiscardAction::Process,
            PoolMode::OutOfMetadataSpace | PoolMode::ReadOnly => DiscardAction::Ignore,
            PoolMode::Fail => DiscardAction::Error(IoError::Io),
        }
    }

    /// A provisioning/CoW finished copying or zeroing: insert it in WRITE and
    /// OODS, otherwise error its bios with [`PoolModeState::pool_io_error`].
    pub fn decide_prepared_mapping(&self) -> PreparedMappingAction {
        match self.mode {
            PoolMode::Write | PoolMode::OutOfDataSpace => PreparedMappingAction::Insert,
            _ => PreparedMappingAction::Error(self.pool_io_error()),
        }
    }

    fn fail_error(&self, item: WorkItem) -> IoError {
        match item {
            WorkItem::Bio => IoError::Io,
            WorkItem::Cell => self.pool_io_error(),
        }
    }
}

/// Scenarios shared by the host tests and the module's KUnit suite.
#[cfg(any(test, feature = "selftest"))]
pub mod selftest {
    use super::*;

    const T: u32 = 60;

    /// Status strings and per-mode permissions (spec §1.11 table).
    pub fn mode_table() -> bool {
        use PoolMode::*;
        Write.status_str() == Some("rw")
            && OutOfDataSpace.status_str() == Some("out_of_data_space")
            && OutOfMetadataSpace.status_str() == Some("ro")
            && ReadOnly.status_str() == Some("ro")
            && Fail.status_str().is_none()
            && Write.accepts_messages()
            && OutOfDataSpace.accepts_messages()
            && !OutOfMetadataSpace.accepts_messages()
            && !ReadOnly.accepts_messages()
            && !Fail.accepts_messages()
            && ReadOnly.allows_new_thins()
            && !Fail.allows_new_thins()
            && Write.may_provision()
            && !OutOfDataSpace.may_provision()
            && OutOfDataSpace.may_commit()
            && !OutOfMetadataSpace.may_commit()
    }

    /// WRITE → OODS (queue, timer) → WRITE when space appears after a commit.
    pub fn out_of_data_space_round_trip() -> bool {
        let mut s = PoolModeState::new();
        let b = s.bind(BindRequest::NewTable { read_only: false }, false, false, T);
        let c = s.data_space_exhausted(false, T);
        let queued = s.decide_bio(WorkItem::Cell, BioDir::Write, Lookup::Unmapped);
        let overwrite = s.decide_bio(
            WorkItem::Cell,
            BioDir::Write,
            Lookup::Mapped { shared: false },
        );
        let back = s.after_commit(Some(100), Some(3), false, T);
        !b.notify
            && c.notify
            && c.new == PoolMode::OutOfDataSpace
            && c.arm_no_space_timer == Some(T)
            && queued == BioAction::Queue
            && overwrite == BioAction::Remap
            && back.new == PoolMode::Write
            && back.notify
            && back.cancel_no_space_timer
            && back.requeue_retry_lists
            && !s.out_of_data_space()
    }

    /// The no-space timeout flips the live policy to error, once.
    pub fn no_space_timeout_flips_policy() -> bool {
        let mut s = PoolModeState::new();
        s.bind(BindRequest::NewTable { read_only: false }, false, false, T);
        s.data_space_exhausted(false, T);
        let c = s.no_space_timeout();
        let again = s.no_space_timeout();
        let mut raw = [0u8; 64];
        let mut log = crate::dm::status_buf::StatusBuf::new(&mut raw);
        let _ = c.write_log(&mut log);
        let logged = log.as_bytes() == b"switching pool to out-of-data-space (error IO) mode";
        c.notify
            && c.error_retry_lists == Some(IoError::NoSpace)
            && s.error_if_no_space()
            && !again.notify
            && s.decide_bio(WorkItem::Cell, BioDir::Write, Lookup::Unmapped)
                == BioAction::Error(IoError::NoSpace)
            && logged
    }

    /// needs_check: a pool bound with it set comes up read-only and never
    /// reaches WRITE; FAIL is terminal.
    pub fn needs_check_and_fail_rules() -> bool {
        let mut s = PoolModeState::new();
        let c = s.bind(BindRequest::NewTable { read_only: false }, false, true, T);
        let ro = c.new == PoolMode::ReadOnly && c.write_refused_needs_check && c.notify;
        let c2 = s.bind(BindRequest::NewTable { read_only: false }, false, true, T);
        let stays = c2.new == PoolMode::ReadOnly && !c2.notify;
        let f = s.metadata_operation_failed(false, true, T);
        let fail = f.new == PoolMode::Fail && f.notify;
        let c3 = s.bind(BindRequest::NewTable { read_only: false }, false, false, T);
        ro && stays && fail && c3.new == PoolMode::Fail && !c3.notify
    }
}

#[cfg(test)]
mod tests;
