// SPDX-License-Identifier: GPL-2.0
//! The pool mode state machine (interface.md, "Pool modes") as pure decisions.
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
//! [`PoolModeState::decide_discard`] and friends, mirroring the functions
//! dm-thin's `set_pool_mode` installs for each mode (`process_bio`,
//! `process_bio_read_only`, `process_bio_fail`, ...).
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | [`PoolModeState`] and its transitions, [`ModeChange`] |
//! | `mode.rs` | [`PoolMode`] and what each mode allows |
//! | `bio_decisions.rs` | the per-bio decisions and their types |
//! | `selftest.rs` | scenarios shared by the host tests and KUnit |

use core::fmt;

mod bio_decisions;
mod mode;
/// Scenarios shared by the host tests and the module's KUnit suite.
#[cfg(any(test, feature = "selftest"))]
pub mod selftest;

pub use bio_decisions::{
    BioAction, BioDir, DiscardAction, IoError, Lookup, PreparedMappingAction, WorkItem,
};
pub use mode::PoolMode;

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
    /// on entering WRITE, so it survives a move to RO/FAIL as dm-thin's does
    /// (compatibility.md, "The out-of-data-space error survives a mode
    /// change").
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
}

#[cfg(test)]
mod tests;
