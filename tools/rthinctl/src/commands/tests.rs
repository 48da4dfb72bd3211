// SPDX-License-Identifier: GPL-2.0
//! The message commands against a scripted device-mapper: their
//! pre-checks and guards, suspending around a snapshot, `--id auto`.

use crate::cli::{Guard, IdArg};
use crate::context::Ctx;
use crate::dm::fake::Fake;
use crate::explain::exit;
use crate::report::Style;

use super::{create, delete, snap, transaction_id};

fn ctx() -> Ctx {
    Ctx {
        json: false,
        verbose: false,
        style: Style::raw(),
        force: false,
    }
}

fn guard() -> Guard {
    Guard {
        expect_txn: None,
        dry_run: false,
        force: false,
    }
}

fn calls(f: &Fake, prefix: &[&str]) -> Vec<String> {
    f.calls
        .borrow()
        .iter()
        .filter(|c| prefix.iter().any(|p| c.starts_with(p)))
        .cloned()
        .collect()
}

#[test]
fn create_snap_suspends_active_origins_and_resumes_on_error() {
    let f = Fake::new(|m| {
        if m.starts_with("create_snap") {
            Err(17)
        } else {
            Ok(None)
        }
    });
    let e = snap::run(&ctx(), &f, "pool", IdArg::Num(9), 1, false, &guard()).unwrap_err();
    assert!(e.text.contains("thin device id 9 is already in use"), "{e}");
    assert_eq!(
        calls(&f, &["suspend", "resume", "message"]),
        [
            "suspend a",
            "suspend b",
            "message pool create_snap 9 1",
            "resume b",
            "resume a"
        ]
    );
}

#[test]
fn create_snap_auto_id_and_no_suspend() {
    // ids 2 (active as "other") .. : 3 is taken, 4 is free.
    let f = Fake::new(|m| {
        if m == "create_snap 3 1" {
            Err(17)
        } else {
            Ok(None)
        }
    });
    assert_eq!(
        snap::run(&ctx(), &f, "pool", IdArg::Auto, 1, false, &guard()),
        Ok(exit::OK)
    );
    assert_eq!(
        calls(&f, &["message"]),
        [
            "message pool create_snap 3 1",
            "message pool create_snap 4 1"
        ]
    );
    let f = Fake::new(|_| Ok(None));
    assert_eq!(
        snap::run(&ctx(), &f, "pool", IdArg::Num(5), 1, true, &guard()),
        Ok(exit::OK)
    );
    assert!(calls(&f, &["suspend", "resume"]).is_empty());
}

#[test]
fn delete_busy_names_the_devices() {
    let f = Fake::new(|_| Err(16));
    let e = delete::run(&ctx(), &f, "pool", 1, &guard()).unwrap_err();
    assert!(e.text.contains("active as a, b, s"), "{e}");
}

#[test]
fn prechecks_and_guards() {
    let f = Fake::new(|_| Ok(None));
    let g = Guard {
        expect_txn: Some(4),
        dry_run: false,
        force: false,
    };
    let e = create::run(&ctx(), &f, "pool", IdArg::Num(1), &g).unwrap_err();
    assert!(e.text.contains("transaction id is 3, not 4"), "{e}");
    let e = transaction_id::run(&ctx(), &f, "pool", Some((1, 2)), false, false).unwrap_err();
    assert!(e.text.contains("transaction id is 3, not 1"), "{e}");
    assert!(calls(&f, &["message"]).is_empty(), "guards must not send");
    let e = create::run(&ctx(), &f, "lin", IdArg::Num(1), &guard()).unwrap_err();
    assert!(e.text.contains("lin is a linear device"), "{e}");
    let e = create::run(&ctx(), &f, "a", IdArg::Num(1), &guard()).unwrap_err();
    assert!(e.text.contains("not a thin pool"), "{e}");
    let e = create::run(&ctx(), &f, "nope", IdArg::Num(1), &guard()).unwrap_err();
    assert_eq!(e.code, exit::NOT_FOUND);
    let dry = Guard {
        expect_txn: None,
        dry_run: true,
        force: false,
    };
    assert_eq!(delete::run(&ctx(), &f, "pool", 1, &dry), Ok(exit::OK));
    assert_eq!(
        snap::run(&ctx(), &f, "pool", IdArg::Auto, 1, false, &dry),
        Ok(exit::OK)
    );
    assert_eq!(
        create::run(&ctx(), &f, "pool", IdArg::Auto, &dry),
        Ok(exit::OK)
    );
    assert!(calls(&f, &["suspend", "resume"]).is_empty());
    assert!(
        calls(&f, &["message"]).is_empty(),
        "--dry-run must not send"
    );
}
