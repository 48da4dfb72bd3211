// SPDX-License-Identifier: GPL-2.0
//! Host tests of `crate::dm::pool_mode`.

use super::selftest;
use super::*;
use crate::dm::status_buf::StatusBuf;

const T: u32 = 60;

fn fresh(read_only: bool, eins: bool) -> PoolModeState {
    let mut s = PoolModeState::new();
    s.bind(BindRequest::NewTable { read_only }, eins, false, T);
    s
}

fn log_of(c: &ModeChange) -> std::string::String {
    let mut raw = [0u8; 80];
    let mut w = StatusBuf::new(&mut raw);
    c.write_log(&mut w).unwrap();
    std::string::String::from_utf8(w.as_bytes().to_vec()).unwrap()
}

#[test]
fn scenarios() {
    assert!(selftest::mode_table());
    assert!(selftest::out_of_data_space_round_trip());
    assert!(selftest::no_space_timeout_flips_policy());
    assert!(selftest::needs_check_and_fail_rules());
}

#[test]
fn ordering_matches_kernel_enum() {
    use PoolMode::*;
    assert!(Write < OutOfDataSpace);
    assert!(OutOfDataSpace < OutOfMetadataSpace);
    assert!(OutOfMetadataSpace < ReadOnly);
    assert!(ReadOnly < Fail);
}

#[test]
fn log_lines() {
    let mut s = fresh(false, false);
    let c = s.data_space_exhausted(false, T);
    assert_eq!(
        log_of(&c),
        "switching pool to out-of-data-space (queue IO) mode"
    );
    let c = s.set_mode(PoolMode::OutOfMetadataSpace, false, T);
    assert_eq!(log_of(&c), "switching pool to read-only mode");
    let c = s.metadata_operation_failed(false, false, T);
    assert_eq!(log_of(&c), "switching pool to fail mode");
    let mut s = fresh(false, true);
    let c = s.data_space_exhausted(false, T);
    assert_eq!(
        log_of(&c),
        "switching pool to out-of-data-space (error IO) mode"
    );
    assert_eq!(
        c.arm_no_space_timer, None,
        "error policy never arms the timer"
    );
    let c = s.after_commit(Some(1), Some(1), false, T);
    assert_eq!(log_of(&c), "switching pool to write mode");
}

#[test]
fn read_only_feature_and_reload() {
    let mut s = fresh(true, false);
    assert_eq!(s.mode(), PoolMode::ReadOnly);
    // Plain suspend/resume keeps the mode.
    let c = s.bind(BindRequest::SameTable, false, false, T);
    assert_eq!(c.new, PoolMode::ReadOnly);
    assert!(!c.notify);
    // Reload without read_only and needs_check clear → write.
    let c = s.bind(BindRequest::NewTable { read_only: false }, false, false, T);
    assert_eq!(c.new, PoolMode::Write);
    assert!(c.notify);
    assert_eq!(c.metadata_read_only, Some(false));
}

#[test]
fn needs_check_keeps_old_mode_when_not_write() {
    let mut s = fresh(false, false);
    s.data_space_exhausted(false, T);
    let c = s.set_mode(PoolMode::Write, true, T);
    assert!(c.write_refused_needs_check);
    assert_eq!(c.new, PoolMode::OutOfDataSpace);
    assert!(!c.notify);
    // Out-of-metadata-space pool whose metadata grew but needs_check set.
    let mut s = fresh(false, false);
    s.set_mode(PoolMode::OutOfMetadataSpace, false, T);
    let c = s.metadata_grew(true, T);
    assert_eq!(c.new, PoolMode::OutOfMetadataSpace);
    let c = s.metadata_grew(false, T);
    assert_eq!(c.new, PoolMode::Write);
}

#[test]
fn enospc_survives_move_to_read_only() {
    let mut s = fresh(false, false);
    s.data_space_exhausted(false, T);
    let c = s.metadata_operation_failed(true, true, T);
    assert_eq!(c.new, PoolMode::ReadOnly);
    assert_eq!(c.error_retry_lists, Some(IoError::NoSpace));
    assert_eq!(s.pool_io_error(), IoError::NoSpace);
    assert_eq!(
        s.decide_prepared_mapping(true, false),
        PreparedMappingAction::Release(IoError::NoSpace)
    );
    // Unserviceable bios in RO still get EIO.
    assert_eq!(s.unserviceable(), BioAction::Error(IoError::Io));
    // Without the detour through OODS: EIO.
    let mut s = fresh(false, false);
    let c = s.metadata_operation_failed(true, true, T);
    assert_eq!(c.error_retry_lists, Some(IoError::Io));
}

#[test]
fn fail_mode_errors() {
    let mut s = fresh(false, false);
    s.data_space_exhausted(false, T);
    s.metadata_operation_failed(false, true, T);
    assert!(s.mode().fails_all_io());
    let any = Lookup::Mapped { shared: false };
    assert_eq!(
        s.decide_bio(WorkItem::Bio, BioDir::Read, any),
        BioAction::Error(IoError::Io)
    );
    assert_eq!(
        s.decide_bio(WorkItem::Cell, BioDir::Read, any),
        BioAction::Error(IoError::NoSpace)
    );
    assert_eq!(
        s.decide_discard(WorkItem::Bio),
        DiscardAction::Error(IoError::Io)
    );
    assert_eq!(
        s.decide_prepared_discard(),
        DiscardAction::Error(IoError::Io)
    );
    // Nothing leaves FAIL.
    for m in [
        PoolMode::Write,
        PoolMode::OutOfDataSpace,
        PoolMode::OutOfMetadataSpace,
        PoolMode::ReadOnly,
    ] {
        let c = s.set_mode(m, false, T);
        assert_eq!(c.new, PoolMode::Fail);
        assert!(!c.notify);
    }
    assert!(!s.no_space_timeout().notify);
    assert_eq!(
        s.after_commit(Some(0), Some(5), false, T).new,
        PoolMode::Fail
    );
}

#[test]
fn write_mode_decisions() {
    let s = fresh(false, false);
    let w = |d, l| s.decide_bio(WorkItem::Cell, d, l);
    assert_eq!(w(BioDir::Read, Lookup::Unmapped), BioAction::ReadHole);
    assert_eq!(w(BioDir::Write, Lookup::Unmapped), BioAction::Provision);
    assert_eq!(w(BioDir::EmptyWrite, Lookup::Unmapped), BioAction::Remap);
    assert_eq!(
        w(BioDir::Write, Lookup::Mapped { shared: true }),
        BioAction::BreakSharing
    );
    assert_eq!(
        w(BioDir::EmptyWrite, Lookup::Mapped { shared: true }),
        BioAction::Remap
    );
    assert_eq!(
        w(BioDir::Read, Lookup::Mapped { shared: true }),
        BioAction::Remap
    );
    assert_eq!(s.decide_discard(WorkItem::Bio), DiscardAction::Process);
}

#[test]
fn read_only_path_decisions() {
    for (mode, unserviceable) in [
        (PoolMode::OutOfMetadataSpace, BioAction::Error(IoError::Io)),
        (PoolMode::ReadOnly, BioAction::Error(IoError::Io)),
    ] {
        let mut s = fresh(false, false);
        s.set_mode(mode, false, T);
        let w = |d, l| s.decide_bio(WorkItem::Cell, d, l);
        assert_eq!(w(BioDir::Read, Lookup::Unmapped), BioAction::ReadHole);
        assert_eq!(w(BioDir::Write, Lookup::Unmapped), unserviceable);
        // As dm-thin: an empty flush to an unmapped vblock is unserviceable
        // (compatibility.md, "Empty flush to an unmapped block").
        assert_eq!(w(BioDir::EmptyWrite, Lookup::Unmapped), unserviceable);
        assert_eq!(
            w(BioDir::Write, Lookup::Mapped { shared: true }),
            unserviceable
        );
        assert_eq!(
            w(BioDir::Write, Lookup::Mapped { shared: false }),
            BioAction::Remap
        );
        assert_eq!(s.decide_discard(WorkItem::Bio), DiscardAction::Ignore);
        assert_eq!(s.decide_prepared_discard(), DiscardAction::Ignore);
        assert_eq!(
            s.decide_prepared_mapping(true, false),
            PreparedMappingAction::Release(IoError::Io)
        );
    }
}

#[test]
fn ooms_after_commit() {
    let mut s = fresh(false, false);
    assert_eq!(
        PoolModeState::ooms_reason(Some(0)),
        Some("No free metadata blocks")
    );
    assert_eq!(
        PoolModeState::ooms_reason(None),
        Some("Could not get free metadata blocks")
    );
    let c = s.after_commit(Some(0), Some(10), false, T);
    assert_eq!(c.new, PoolMode::OutOfMetadataSpace);
    assert_eq!(c.metadata_read_only, Some(true));
    // Already read-only: no further change.
    let c = s.after_commit(None, Some(10), false, T);
    assert!(!c.changed());
    // OODS + free metadata 0 → OOMS, no requeue.
    let mut s = fresh(false, false);
    s.data_space_exhausted(false, T);
    let c = s.after_commit(Some(0), Some(10), false, T);
    assert_eq!(c.new, PoolMode::OutOfMetadataSpace);
    assert!(!c.requeue_retry_lists);
    // OODS, still no data space → unchanged.
    let mut s = fresh(false, false);
    s.data_space_exhausted(false, T);
    assert!(!s.after_commit(Some(5), Some(0), false, T).changed());
    assert!(!s.after_commit(Some(5), None, false, T).changed());
}

#[test]
fn timeout_zero_and_rebind_reset_policy() {
    let mut s = fresh(false, false);
    let c = s.data_space_exhausted(false, 0);
    assert_eq!(c.arm_no_space_timer, None);
    let mut s = fresh(false, false);
    s.data_space_exhausted(false, T);
    s.no_space_timeout();
    assert!(s.error_if_no_space());
    // Suspend/resume without reload: the table's policy (queue) is
    // restored and the timer re-armed, mode stays OODS.
    let c = s.bind(BindRequest::SameTable, false, false, T);
    assert_eq!(c.new, PoolMode::OutOfDataSpace);
    assert!(!s.error_if_no_space());
    assert_eq!(c.arm_no_space_timer, Some(T));
    // Reload asks for write (space question answered by the next commit).
    let c = s.bind(BindRequest::NewTable { read_only: false }, false, false, T);
    assert_eq!(c.new, PoolMode::Write);
    assert!(c.cancel_no_space_timer);
}

#[test]
fn io_error_errno() {
    assert_eq!(IoError::Io.errno(), 5);
    assert_eq!(IoError::NoSpace.errno(), 28);
}

/// A provision ending after the metadata rolled back leaves its block alone
/// whether or not its fill succeeded: the rollback freed the block, and
/// giving it back again would fail a second metadata operation (or free a
/// block that is someone else's by then). Otherwise a failed fill gives the
/// block back, and a filled block is mapped in the modes that allow it.
#[test]
fn prepared_mapping_after_rollback_or_failed_fill() {
    let s = fresh(false, false);
    assert_eq!(
        s.decide_prepared_mapping(true, false),
        PreparedMappingAction::Insert
    );
    assert_eq!(
        s.decide_prepared_mapping(false, false),
        PreparedMappingAction::Release(IoError::Io)
    );
    assert_eq!(
        s.decide_prepared_mapping(true, true),
        PreparedMappingAction::Forget(IoError::Io)
    );
    assert_eq!(
        s.decide_prepared_mapping(false, true),
        PreparedMappingAction::Forget(IoError::Io)
    );
}
