// SPDX-License-Identifier: GPL-2.0
//! rthinctl: drive rthin (`rthin-pool`/`rthin`) and C dm-thin
//! (`thin-pool`/`thin`) pools through device-mapper ioctls.
//!
//! Only the process is here: parsing, dispatch to the commands, exit codes
//! and SIGPIPE. The commands and the library under them are in lib.rs;
//! see Documentation/rthinctl.md.

use std::io::Write;
use std::process::ExitCode;

use rthinctl::cli::{self, Cli, Cmd, MetaCmd, MetaSnapCmd, Validated};
use rthinctl::commands::metadata_snap::SnapOp;
use rthinctl::commands::{
    check, create, delete, generate_docs, ls, message, meta_check, meta_dump, meta_ls,
    metadata_snap, prometheus, snap, status, transaction_id, version, watch,
};
use rthinctl::{exit, open, CheckOptions, Result};

/// Runs the command `cli` (whose matches are `m`) and returns its exit code.
fn run(cli: Cli, m: &clap::ArgMatches) -> Result<i32> {
    let (prepared, ctx) = cli::prepare(&cli, m)?;
    match &cli.cmd {
        Cmd::Status(a) if a.check => return Ok(check::run(&ctx, a)),
        Cmd::Meta(MetaCmd::Check {
            path,
            live,
            quiet,
            ignore_non_fatal_errors,
            clear_needs_check_flag,
            super_block_only,
            metadata_snap,
            ..
        }) => {
            let o = CheckOptions {
                quiet: *quiet,
                ignore_leaks: *ignore_non_fatal_errors,
                json: ctx.json,
                clear_needs_check: *clear_needs_check_flag,
                super_block_only: *super_block_only,
                snapshot: *metadata_snap,
            };
            return meta_check::run(&ctx, path.as_deref(), live.as_deref(), &o);
        }
        Cmd::Meta(MetaCmd::Dump {
            path,
            metadata_snap,
        }) => return meta_dump::run(path, *metadata_snap),
        Cmd::Meta(MetaCmd::Ls {
            path,
            metadata_snap,
        }) => return meta_ls::run(&ctx, path, *metadata_snap),
        Cmd::GenerateDocs { dir } => return generate_docs::run(dir),
        Cmd::Version => return version::run(&ctx),
        _ => {}
    }
    let t = open()?;
    let t = &t;
    match (cli.cmd, prepared) {
        (_, Validated::CreateThin(pool, id, guard)) => create::run(&ctx, t, &pool, id, &guard),
        (_, Validated::CreateSnap(pool, id, origin, no_suspend, guard)) => {
            snap::run(&ctx, t, &pool, id, origin, no_suspend, &guard)
        }
        (_, Validated::Delete(pool, id, guard)) => delete::run(&ctx, t, &pool, id, &guard),
        (Cmd::Status(a), _) if a.prometheus => prometheus::run(t, &a.devs),
        (Cmd::Status(a), _) => status::run(&ctx, t, &a.devs),
        (Cmd::Ls { pool, .. }, _) => ls::run(&ctx, t, pool.as_deref()),
        (Cmd::Watch(a), _) => watch::run(&ctx, t, &a),
        (
            Cmd::SetTransactionId {
                pool,
                old,
                new,
                bump,
                dry_run,
                ..
            },
            _,
        ) => transaction_id::run(&ctx, t, &pool, old.zip(new), bump, dry_run),
        (Cmd::MetadataSnap(MetaSnapCmd::Reserve { pool }) | Cmd::ReserveAlias { pool }, _) => {
            metadata_snap::run(&ctx, t, &pool, SnapOp::Reserve)
        }
        (Cmd::MetadataSnap(MetaSnapCmd::Release { pool }) | Cmd::ReleaseAlias { pool }, _) => {
            metadata_snap::run(&ctx, t, &pool, SnapOp::Release)
        }
        (Cmd::MetadataSnap(MetaSnapCmd::Show { pool }), _) => {
            metadata_snap::run(&ctx, t, &pool, SnapOp::Show)
        }
        (_, Validated::Message(pool, msg)) => message::run(&ctx, t, &pool, &msg),
        _ => Ok(exit::OK),
    }
}

fn main() -> ExitCode {
    // A closed pipe ends rthinctl as it ends cat and dmsetup: quietly, by
    // SIGPIPE, not with a panic from print!.
    // SAFETY: SIG_DFL installs no handler; nothing else handles SIGPIPE.
    unsafe {
        let _ = nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGPIPE,
            nix::sys::signal::SigHandler::SigDfl,
        );
    }
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    // Installed (linked) as rthin_check, rthinctl is `rthinctl meta check`
    // with thin_check's options: LVM's thin_check_executable.
    let called = args.first().map(std::path::Path::new);
    if called.and_then(|p| p.file_name()) == Some(std::ffi::OsStr::new("rthin_check")) {
        args.splice(1..1, ["meta".into(), "check".into()]);
    }
    let in_check = cli::check_mode(&args);
    let usage_code = if in_check {
        exit::CHECK_UNKNOWN
    } else {
        exit::USAGE
    };
    let m = match cli::command().try_get_matches_from(&args) {
        Ok(m) => m,
        Err(e) => {
            let _ = e.print();
            if in_check && e.use_stderr() {
                // The one line a monitoring system shows.
                let first = e.to_string();
                let first = first
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim_start_matches("error: ");
                println!("UNKNOWN: bad command line: {first}");
            }
            let code = if e.use_stderr() { usage_code } else { 0 };
            return ExitCode::from(code as u8);
        }
    };
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&m) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(usage_code as u8);
        }
    };
    let code = match run(cli, &m) {
        Ok(c) => c,
        Err(e) if e.text.is_empty() => e.code,
        Err(e) => {
            let _ = std::io::stdout().flush();
            if in_check {
                // Monitoring: one line on stdout, UNKNOWN.
                println!("UNKNOWN: {}", e.text);
                exit::CHECK_UNKNOWN
            } else {
                eprintln!("rthinctl: {e}");
                e.code
            }
        }
    };
    ExitCode::from(u8::try_from(code).unwrap_or(exit::OTHER as u8))
}
