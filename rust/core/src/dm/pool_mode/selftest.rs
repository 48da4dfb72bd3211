// SPDX-License-Identifier: GPL-2.0
//! Scenarios shared by the host tests and the module's KUnit suite.

use super::*;

const T: u32 = 60;

/// Status strings and per-mode permissions (the table of interface.md, "Pool
/// modes").
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
