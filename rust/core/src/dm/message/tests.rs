// SPDX-License-Identifier: GPL-2.0
//! Host tests of `crate::dm::message`.

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
