// SPDX-License-Identifier: GPL-2.0
//! rthinctl: drive rthin (`rthin-pool`/`rthin`) and C dm-thin
//! (`thin-pool`/`thin`) pools through device-mapper ioctls.
//!
//! Layers: [`status`] parses kernel lines, [`units`] formats sizes,
//! [`explain`] turns errnos into sentences, [`dm`] is the ioctl transport,
//! [`model`] scans devices, [`report`] renders, [`ops`] runs the pool
//! messages and [`watch`] polls. See Documentation/rthinctl.md.

mod dm;
mod explain;
mod meta;
mod model;
mod ops;
mod report;
mod status;
mod units;
mod view;
mod watch;

use std::io::Write;
use std::process::ExitCode;

use clap::{Args, CommandFactory, Parser, Subcommand};

use explain::{exit, Error, Result};
use units::Units;

/// What POOL and DEV name, and which targets rthinctl drives.
const DEVICES: &[&str] = &[
    "Devices: POOL and DEV accept a device-mapper name, /dev/mapper/NAME, /dev/dm-N or MAJ:MIN.",
    "Targets: works with rthin's rthin-pool/rthin and with the C dm-thin thin-pool/thin.",
];

/// The exit codes, for `--help` and the man pages' EXIT STATUS sections.
const EXIT_CODES: &[(i32, &str)] = &[
    (exit::OK, "success"),
    (
        exit::REFUSED,
        "refused: by the kernel, by a check of the pool's state before sending, \
         or metadata found damaged or unreadable, or not thin metadata (meta)",
    ),
    (exit::USAGE, "bad command line"),
    (exit::NOT_FOUND, "no such device, pool or thin id"),
    (
        exit::PERMISSION,
        "permission denied (device-mapper needs root)",
    ),
    (
        exit::OTHER,
        "other failure (no /dev/mapper/control, unreadable kernel output, I/O)",
    ),
    (
        exit::UNSUPPORTED,
        "meta: the metadata uses features this rthinctl does not know",
    ),
];

/// The exit codes of `status --check`, a monitoring plugin's.
const CHECK_EXIT_CODES: &str = "With status --check: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.";

/// The text after `--help`'s options: devices, targets, exit status.
fn after_help() -> String {
    let mut t = DEVICES.join("\n");
    t.push_str("\n\nExit status:\n");
    for (code, meaning) in EXIT_CODES {
        t.push_str(&format!("  {code}  {meaning}\n"));
    }
    t.push_str(CHECK_EXIT_CODES);
    t
}

/// Manage thin-provisioning pools (rthin and dm-thin) through device-mapper.
#[derive(Parser, Debug)]
#[command(name = "rthinctl", version)]
struct Cli {
    #[command(flatten)]
    out: OutputArgs,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Args, Debug, Clone)]
struct OutputArgs {
    /// JSON output (versioned schema; sizes in bytes and blocks; null = unknown).
    #[arg(long, global = true)]
    json: bool,
    /// Script-friendly output: bytes, no suffix, no headings, ':' separated.
    #[arg(long, global = true)]
    raw: bool,
    /// Size units like lvs: h b s k m g t p e r (upper case = powers of 1000).
    #[arg(long, global = true, default_value = "h", value_parser = UnitsParser)]
    units: Units,
    /// Leave out unit suffixes.
    #[arg(long, global = true)]
    no_suffix: bool,
    /// Leave out the heading line.
    #[arg(long, global = true)]
    no_headings: bool,
    /// Separate columns with this string instead of aligning them.
    #[arg(long, global = true, value_name = "S", value_hint = clap::ValueHint::Other)]
    separator: Option<String>,
    /// Print each message and suspend/resume before doing it.
    #[arg(short, long, global = true)]
    verbose: bool,
}

/// `--units`: parsed by [`Units`], with its letters as the possible
/// values (the shell completions offer them, not file names).
#[derive(Clone)]
struct UnitsParser;

impl clap::builder::TypedValueParser for UnitsParser {
    type Value = Units;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> std::result::Result<Units, clap::Error> {
        value
            .to_str()
            .ok_or_else(|| "a unit letter".to_string())
            .and_then(str::parse)
            .map_err(|e| {
                clap::Error::raw(clap::error::ErrorKind::InvalidValue, format!("{e}\n"))
                    .with_cmd(cmd)
            })
    }

    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            "hbskmgtperHBSKMGTPER"
                .chars()
                .map(|c| clap::builder::PossibleValue::new(c.to_string())),
        ))
    }
}

/// A thin id: a number up to 16777215, or `auto` where allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdArg {
    Num(u32),
    Auto,
}

fn parse_id(s: &str) -> std::result::Result<IdArg, String> {
    if s == "auto" {
        return Ok(IdArg::Auto);
    }
    rthin_core::dm::thin_table::parse_dev_id(s.as_bytes())
        .map(IdArg::Num)
        .ok_or_else(|| {
            format!("invalid thin id {s:?}: a decimal number from 0 to 16777215 (or auto)")
        })
}

fn parse_fixed_id(s: &str) -> std::result::Result<u32, String> {
    rthin_core::dm::thin_table::parse_dev_id(s.as_bytes())
        .ok_or_else(|| format!("invalid thin id {s:?}: a decimal number from 0 to 16777215"))
}

#[derive(Args, Debug, Clone)]
struct Guard {
    /// Refuse unless the pool's transaction id is N (read from status first).
    #[arg(long, value_name = "N")]
    expect_txn: Option<u64>,
    /// Print the equivalent dmsetup commands instead of doing anything.
    #[arg(long)]
    dry_run: bool,
    /// Change the pool even if LVM or Stratis owns it (they keep their own
    /// record of its thin devices and transaction id).
    #[arg(long)]
    force: bool,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Show pools and thins (no-flush status: never forces a metadata commit).
    Status(StatusArgs),
    /// List pools, each followed by its active thins.
    Ls {
        /// Only this pool.
        pool: Option<String>,
        #[command(flatten)]
        view: ViewArgs,
    },
    /// Poll pool usage: fill rate and time to full; wakes early on a watched pool's DM event.
    Watch(watch::WatchArgs),
    /// Create a thin device in a pool (message create_thin).
    #[command(alias = "create_thin")]
    CreateThin {
        /// The pool.
        pool: String,
        /// The new thin id (or `auto`), as positional argument.
        #[arg(value_parser = parse_id, conflicts_with = "id")]
        id_pos: Option<IdArg>,
        /// The new thin id, or `auto` to pick an unused one.
        #[arg(long, value_parser = parse_id)]
        id: Option<IdArg>,
        #[command(flatten)]
        guard: Guard,
    },
    /// Snapshot a thin device (message create_snap); active origin thins are
    /// suspended around the message and resumed even on error.
    #[command(alias = "create_snap")]
    CreateSnap {
        /// The pool.
        pool: String,
        /// New id (or `auto`), positional like the kernel message.
        #[arg(value_parser = parse_id, conflicts_with = "id")]
        id_pos: Option<IdArg>,
        /// Origin id, positional like the kernel message.
        #[arg(value_parser = parse_fixed_id, conflicts_with = "origin")]
        origin_pos: Option<u32>,
        /// The new snapshot's id, or `auto`.
        #[arg(long, value_parser = parse_id)]
        id: Option<IdArg>,
        /// The origin thin id.
        #[arg(long, value_parser = parse_fixed_id)]
        origin: Option<u32>,
        /// Do not suspend active origin devices (unsafe if they are written to).
        #[arg(long)]
        no_suspend: bool,
        #[command(flatten)]
        guard: Guard,
    },
    /// Delete a thin device and its mappings (message delete); irreversible.
    Delete {
        /// The pool.
        pool: String,
        /// Thin id, positional.
        #[arg(value_parser = parse_fixed_id, conflicts_with = "id")]
        id_pos: Option<u32>,
        /// Thin id.
        #[arg(long, value_parser = parse_fixed_id)]
        id: Option<u32>,
        #[command(flatten)]
        guard: Guard,
    },
    /// Compare-and-set the pool's transaction id (message set_transaction_id).
    #[command(alias = "set_transaction_id")]
    SetTransactionId {
        /// The pool.
        pool: String,
        /// Expected current id.
        #[arg(required_unless_present = "bump")]
        old: Option<u64>,
        /// New id.
        #[arg(required_unless_present = "bump")]
        new: Option<u64>,
        /// Read the current id and set it to current + 1.
        #[arg(long, conflicts_with_all = ["old", "new"])]
        bump: bool,
        /// Print the equivalent dmsetup command instead.
        #[arg(long)]
        dry_run: bool,
        /// Change the pool even if LVM or Stratis owns it.
        #[arg(long)]
        force: bool,
    },
    /// Reserve, release or show the pool's metadata snapshot (held root).
    #[command(subcommand)]
    MetadataSnap(MetaSnapCmd),
    /// Alias of `metadata-snap reserve`.
    #[command(name = "reserve_metadata_snap", hide = true)]
    ReserveAlias {
        /// The pool.
        pool: String,
    },
    /// Alias of `metadata-snap release`.
    #[command(name = "release_metadata_snap", hide = true)]
    ReleaseAlias {
        /// The pool.
        pool: String,
    },
    /// Send a raw message to a pool and print any output (escape hatch).
    Message {
        /// Send even if LVM or Stratis owns the pool.
        #[arg(long)]
        force: bool,
        /// The pool.
        pool: String,
        /// Message words, e.g. `create_thin 7`.
        #[arg(required = true, num_args = 1.., allow_hyphen_values = true, trailing_var_arg = true)]
        words: Vec<String>,
    },
    /// Show rthinctl's version, the DM ioctl version and thin target versions.
    Version,
    /// Offline metadata of an inactive pool (device or image file), read with
    /// the same core crate as the kernel module.
    #[command(subcommand)]
    Meta(MetaCmd),
    /// Write the man pages (section 8) and the bash, zsh and fish
    /// completions into DIR (used by `make install`).
    #[command(hide = true)]
    GenerateDocs {
        /// Output directory (man8/ and completions/ are made in it).
        dir: std::path::PathBuf,
    },
}

#[derive(Subcommand, Debug)]
enum MetaCmd {
    /// Check the metadata as thin_check does: every tree, and the reference
    /// count of every data and metadata block against the space maps.
    /// With --live POOL: check a running pool through a metadata snapshot.
    Check {
        /// Metadata device or image.
        #[arg(required_unless_present = "live", conflicts_with = "live")]
        path: Option<String>,
        /// Check the running pool POOL: reserve a metadata snapshot, check
        /// its trees and that the data space map counts every block it maps,
        /// release it (leaks and exact counts need the pool down).
        #[arg(long, value_name = "POOL")]
        live: Option<String>,
        /// Print nothing when the metadata is fine.
        #[arg(short, long)]
        quiet: bool,
        /// Leaked blocks (allocated, referenced by nothing) are a warning,
        /// not a failure (as thin_check's option of the same name).
        #[arg(long)]
        ignore_non_fatal_errors: bool,
        /// When the check passes, clear the superblock's needs_check flag
        /// (the one write rthinctl makes; LVM passes this by default).
        #[arg(long, conflicts_with_all = ["live", "metadata_snap", "super_block_only"])]
        clear_needs_check_flag: bool,
        /// Accepted as thin_check's: the mapping trees are checked anyway.
        #[arg(long)]
        skip_mappings: bool,
        /// Check the superblock only (checksum and fields).
        #[arg(long, conflicts_with = "live")]
        super_block_only: bool,
        /// Check the held metadata snapshot's trees only, as --live does
        /// (the device may belong to a running pool).
        #[arg(short = 'm', long, conflicts_with = "live")]
        metadata_snap: bool,
    },
    /// Print the metadata as thin_dump XML (streamed).
    Dump {
        /// Metadata device or image.
        path: String,
        /// Read the held metadata snapshot (the device may belong to a
        /// running pool).
        #[arg(short = 'm', long)]
        metadata_snap: bool,
    },
    /// List the thin devices in the metadata with thin_ls's figures.
    Ls {
        /// Metadata device or image.
        path: String,
        /// Read the held metadata snapshot (the device may belong to a
        /// running pool).
        #[arg(short = 'm', long)]
        metadata_snap: bool,
    },
}

/// Columns, order and rows of the `ls` and `status` tables, as lvs's options.
#[derive(Args, Debug, Clone, Default)]
struct ViewArgs {
    /// Show these fields, in this order: column headings or lvs names
    /// (lv_name, lv_size, data_percent, metadata_percent, pool_lv, thin_id, ...).
    #[arg(short = 'o', long = "options", value_name = "FIELDS")]
    fields: Option<String>,
    /// Sort rows by these fields (comma list; a leading '-' sorts descending).
    #[arg(short = 'O', long, value_name = "FIELDS", allow_hyphen_values = true)]
    sort: Option<String>,
    /// Show only rows that match: FIELD OP VALUE with OP = != < <= > >=,
    /// conditions joined with '&&' (sizes compare as sizes: lv_size>1g).
    #[arg(short = 'S', long, value_name = "SELECTION")]
    select: Option<String>,
}

impl ViewArgs {
    fn view(&self) -> Result<view::View> {
        view::View::parse(
            self.fields.as_deref(),
            self.sort.as_deref(),
            self.select.as_deref(),
        )
    }
}

#[derive(Args, Debug)]
struct StatusArgs {
    /// Pools or thins (default: all).
    devs: Vec<String>,
    #[command(flatten)]
    view: ViewArgs,
    /// Monitoring mode: one summary line, exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.
    #[arg(long)]
    check: bool,
    /// --check: warn at this data or metadata use (percent).
    #[arg(long, default_value_t = 80.0, value_name = "PCT")]
    warn: f64,
    /// --check: critical at this data or metadata use (percent).
    #[arg(long, default_value_t = 95.0, value_name = "PCT")]
    crit: f64,
    /// --check: metadata warning threshold (default: --warn).
    #[arg(long, value_name = "PCT")]
    meta_warn: Option<f64>,
    /// --check: metadata critical threshold (default: --crit).
    #[arg(long, value_name = "PCT")]
    meta_crit: Option<f64>,
    /// --check: warn when a pool's free data space is below SIZE (bytes,
    /// or with an lvs unit: 10g; upper case: powers of 1000).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    warn_free: Option<u64>,
    /// --check: critical when a pool's free data space is below SIZE.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    crit_free: Option<u64>,
    /// --check: perfdata labels start with LABEL_ instead of the pool's
    /// name (one POOL only).
    #[arg(long, value_name = "LABEL", requires = "check")]
    label: Option<String>,
    /// --check: perfdata for each thin too (LABEL_THIN_mapped, in bytes).
    #[arg(long, requires = "check")]
    thin_perfdata: bool,
    /// Print the pools' and their thins' figures in Prometheus's text
    /// format (for node_exporter's textfile collector).
    #[arg(long, conflicts_with = "check")]
    prometheus: bool,
}

/// A size: bytes, or a number with an lvs unit (`10g`, `1.5T`).
fn parse_size(s: &str) -> std::result::Result<u64, String> {
    view::number(s)
        .filter(|x| x.is_finite() && *x >= 0.0)
        .map(|x| x as u64)
        .ok_or_else(|| format!("invalid size {s:?}: bytes, or a number with a unit: 512m, 10g"))
}

#[derive(Subcommand, Debug)]
enum MetaSnapCmd {
    /// Take a metadata snapshot (message reserve_metadata_snap).
    #[command(alias = "reserve_metadata_snap")]
    Reserve {
        /// The pool.
        pool: String,
    },
    /// Drop the metadata snapshot (message release_metadata_snap).
    #[command(alias = "release_metadata_snap")]
    Release {
        /// The pool.
        pool: String,
    },
    /// Show the held root block, if any.
    Show {
        /// The pool.
        pool: String,
    },
}

fn style_of(o: &OutputArgs) -> report::Style {
    if o.raw {
        let mut s = report::Style::raw();
        if let Some(sep) = &o.separator {
            s.separator = Some(sep.clone());
        }
        return s;
    }
    report::Style {
        units: o.units,
        suffix: !o.no_suffix,
        headings: !o.no_headings,
        separator: o.separator.clone(),
        view: view::View::default(),
    }
}

/// The global output flags a command honours, by its name as typed
/// without aliases (`meta dump`); any other given on its command line is
/// refused rather than silently ignored, and left out of its `--help`.
fn honoured_by(name: &str) -> &'static [&'static str] {
    const TABLE: &[&str] = &[
        "json",
        "raw",
        "units",
        "no_suffix",
        "no_headings",
        "separator",
    ];
    const CHANGE: &[&str] = &["json", "verbose"];
    match name {
        "status" | "ls" | "watch" | "meta ls" => TABLE,
        "create-thin"
        | "create-snap"
        | "delete"
        | "set-transaction-id"
        | "message"
        | "reserve_metadata_snap"
        | "release_metadata_snap" => CHANGE,
        n if n.starts_with("metadata-snap ") => CHANGE,
        "version" | "meta check" => &["json"],
        _ => &[],
    }
}

/// The flags that shape a table; JSON has its own fixed form (sizes in
/// bytes and in blocks), so they mean nothing with --json.
const TABLE_FORMAT: &[&str] = &["raw", "units", "no_suffix", "no_headings", "separator"];

/// Refuses global flags given to a command that has no use for them.
fn check_globals(cmd: &Cmd, m: &clap::ArgMatches) -> Result<()> {
    let mut leaf = m;
    let mut name = Vec::new();
    while let Some((n, sub)) = leaf.subcommand() {
        name.push(n);
        leaf = sub;
    }
    let name = name.join(" ");
    let ok = match cmd {
        Cmd::Status(a) if a.check => &["json"][..],
        Cmd::Status(a) if a.prometheus => &[][..],
        _ => honoured_by(&name),
    };
    let given = |id: &str| {
        matches!(
            leaf.value_source(id),
            Some(clap::parser::ValueSource::CommandLine)
        )
    };
    let flag = |id: &str| format!("--{}", id.replace('_', "-"));
    // Every global flag of the CLI definition: a new one is refused where
    // `honoured_by` does not list it.
    let globals = Cli::command();
    for id in globals
        .get_arguments()
        .filter(|a| a.is_global_set())
        .map(|a| a.get_id().as_str())
    {
        if given(id) && !ok.contains(&id) {
            let name = if matches!(cmd, Cmd::Status(a) if a.check) {
                "status --check"
            } else {
                &name
            };
            return Err(Error::usage(format!(
                "{} has no meaning for {name}",
                flag(id)
            )));
        }
        if given(id) && given("json") && TABLE_FORMAT.contains(&id) {
            return Err(Error::usage(format!(
                "{} has no meaning with --json (JSON gives sizes in bytes and in blocks)",
                flag(id)
            )));
        }
    }
    Ok(())
}

/// A closed stdout (the reader went away) ends the command quietly.
pub fn io_error(e: std::io::Error) -> Error {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        return Error::new(exit::OK, "");
    }
    Error::new(exit::OTHER, format!("cannot write the output: {e}"))
}

/// A command whose arguments are all checked, ready to run against the
/// kernel: nothing is opened before the command line is known to be good.
enum Ready {
    CreateThin(String, IdArg, Guard),
    CreateSnap(String, IdArg, u32, bool, Guard),
    Delete(String, u32, Guard),
    Message(String, explain::Msg),
    Other,
}

fn ready(cmd: &Cmd) -> Result<Ready> {
    Ok(match cmd {
        Cmd::CreateThin {
            pool,
            id_pos,
            id,
            guard,
        } => {
            let id = id
                .or(*id_pos)
                .ok_or_else(|| Error::usage("create-thin needs a thin id: --id N or --id auto"))?;
            Ready::CreateThin(pool.clone(), id, guard.clone())
        }
        Cmd::CreateSnap {
            pool,
            id_pos,
            origin_pos,
            id,
            origin,
            no_suspend,
            guard,
        } => {
            let id = id
                .or(*id_pos)
                .ok_or_else(|| Error::usage("create-snap needs the new id: --id N or --id auto"))?;
            let origin = origin
                .or(*origin_pos)
                .ok_or_else(|| Error::usage("create-snap needs the origin id: --origin M"))?;
            Ready::CreateSnap(pool.clone(), id, origin, *no_suspend, guard.clone())
        }
        Cmd::Delete {
            pool,
            id_pos,
            id,
            guard,
        } => {
            let id = id
                .or(*id_pos)
                .ok_or_else(|| Error::usage("delete needs a thin id: --id N"))?;
            Ready::Delete(pool.clone(), id, guard.clone())
        }
        Cmd::Message { pool, words, .. } => {
            // One word may hold several (`message pool "create_thin 7"`).
            let words: Vec<String> = words
                .iter()
                .flat_map(|w| w.split_whitespace().map(String::from))
                .collect();
            Ready::Message(pool.clone(), explain::Msg::from_words(&words)?)
        }
        Cmd::SetTransactionId { old, new, bump, .. } => {
            if !bump && old.zip(*new).is_none() {
                return Err(Error::usage("give OLD and NEW, or --bump"));
            }
            Ready::Other
        }
        Cmd::Status(a) => {
            validate_thresholds(a)?;
            if a.label.is_some() && a.devs.len() != 1 {
                return Err(Error::usage(
                    "--label names the perfdata of one pool: give exactly one POOL",
                ));
            }
            for (given, flag) in [
                (a.warn_free.is_some(), "--warn-free"),
                (a.crit_free.is_some(), "--crit-free"),
            ] {
                if given && !a.check {
                    return Err(Error::usage(format!(
                        "{flag} has a meaning only with --check"
                    )));
                }
            }
            Ready::Other
        }
        _ => Ready::Other,
    })
}

/// `status --check` thresholds: percentages from 0 to 100, warn <= crit.
fn validate_thresholds(a: &StatusArgs) -> Result<()> {
    let mw = a.meta_warn.unwrap_or(a.warn);
    let mc = a.meta_crit.unwrap_or(a.crit);
    for (n, v) in [
        ("--warn", a.warn),
        ("--crit", a.crit),
        ("--meta-warn", mw),
        ("--meta-crit", mc),
    ] {
        if !v.is_finite() || !(0.0..=100.0).contains(&v) {
            return Err(Error::usage(format!("{n} {v}: a percentage from 0 to 100")));
        }
    }
    if a.warn > a.crit {
        return Err(Error::usage(format!(
            "--warn {} is above --crit {}",
            a.warn, a.crit
        )));
    }
    if mw > mc {
        return Err(Error::usage(format!(
            "metadata warning threshold {mw} is above the critical one {mc}"
        )));
    }
    if let (Some(w), Some(c)) = (a.warn_free, a.crit_free) {
        if w < c {
            return Err(Error::usage(format!(
                "--warn-free {w} is below --crit-free {c}: warn first, while more space is free"
            )));
        }
    }
    Ok(())
}

fn run(cli: Cli, m: &clap::ArgMatches) -> Result<i32> {
    check_globals(&cli.cmd, m)?;
    let prepared = ready(&cli.cmd)?;
    let mut style = style_of(&cli.out);
    match &cli.cmd {
        Cmd::Status(a) => {
            style.view = a.view.view()?;
            if a.check && style.view != view::View::default() {
                return Err(Error::usage(
                    "-o, --sort and -S choose table columns and rows: they have no meaning with --check",
                ));
            }
            style
                .view
                .check(&[report::POOL_COLUMNS, report::THIN_COLUMNS])?;
        }
        Cmd::Ls { view, .. } => {
            style.view = view.view()?;
            style.view.check(&[report::LS_COLUMNS])?;
        }
        _ => {}
    }
    let force = match &cli.cmd {
        Cmd::CreateThin { guard, .. }
        | Cmd::CreateSnap { guard, .. }
        | Cmd::Delete { guard, .. } => guard.force,
        Cmd::SetTransactionId { force, .. } | Cmd::Message { force, .. } => *force,
        _ => false,
    };
    let ctx = ops::Ctx {
        json: cli.out.json,
        verbose: cli.out.verbose,
        style,
        force,
    };
    if let Cmd::Status(a) = &cli.cmd {
        if a.check {
            return Ok(ops::status_check(&ctx, a));
        }
    }
    if let Cmd::Meta(m) = &cli.cmd {
        let snap = |s: bool| meta::OpenMode { snap: s, shared: s };
        return match m {
            MetaCmd::Check {
                path: Some(path),
                quiet,
                ignore_non_fatal_errors,
                clear_needs_check_flag,
                super_block_only,
                metadata_snap,
                ..
            } => meta::check_with(
                path,
                &meta::CheckOptions {
                    quiet: *quiet,
                    ignore_leaks: *ignore_non_fatal_errors,
                    json: ctx.json,
                    clear_needs_check: *clear_needs_check_flag,
                    super_block_only: *super_block_only,
                    snapshot: *metadata_snap,
                },
            ),
            MetaCmd::Check {
                live: Some(pool),
                quiet,
                ignore_non_fatal_errors,
                ..
            } => {
                let t = ops::open()?;
                ops::check_live(&ctx, &t, pool, *quiet, *ignore_non_fatal_errors)
            }
            MetaCmd::Check { .. } => Err(Error::usage("meta check needs PATH or --live POOL")),
            MetaCmd::Dump {
                path,
                metadata_snap,
            } => meta::dump(path, snap(*metadata_snap)),
            MetaCmd::Ls {
                path,
                metadata_snap,
            } => meta::ls(path, snap(*metadata_snap), ctx.json, &ctx.style),
        };
    }
    if let Cmd::GenerateDocs { dir } = &cli.cmd {
        return generate_docs(dir)
            .map(|_| exit::OK)
            .map_err(|e| Error::new(exit::OTHER, format!("{}: {e}", dir.display())));
    }
    if matches!(cli.cmd, Cmd::Version) && !ctx.json {
        // Its own version, whether or not device-mapper can be opened.
        println!("rthinctl {}", env!("CARGO_PKG_VERSION"));
    }
    let t = ops::open()?;
    let t: &dyn dm::Transport = &t;
    match (cli.cmd, prepared) {
        (_, Ready::CreateThin(pool, id, guard)) => ops::create_thin(&ctx, t, &pool, id, &guard),
        (_, Ready::CreateSnap(pool, id, origin, no_suspend, guard)) => {
            ops::create_snap(&ctx, t, &pool, id, origin, no_suspend, &guard)
        }
        (_, Ready::Delete(pool, id, guard)) => ops::delete(&ctx, t, &pool, id, &guard),
        (Cmd::Status(a), _) if a.prometheus => ops::prometheus(t, &a.devs),
        (Cmd::Status(a), _) => ops::status(&ctx, t, &a.devs),
        (Cmd::Ls { pool, .. }, _) => ops::ls(&ctx, t, pool.as_deref()),
        (Cmd::Watch(a), _) => watch::watch(&ctx, t, &a),
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
        ) => ops::set_transaction_id(&ctx, t, &pool, old.zip(new), bump, dry_run),
        (Cmd::MetadataSnap(MetaSnapCmd::Reserve { pool }) | Cmd::ReserveAlias { pool }, _) => {
            ops::metadata_snap(&ctx, t, &pool, ops::SnapOp::Reserve)
        }
        (Cmd::MetadataSnap(MetaSnapCmd::Release { pool }) | Cmd::ReleaseAlias { pool }, _) => {
            ops::metadata_snap(&ctx, t, &pool, ops::SnapOp::Release)
        }
        (Cmd::MetadataSnap(MetaSnapCmd::Show { pool }), _) => {
            ops::metadata_snap(&ctx, t, &pool, ops::SnapOp::Show)
        }
        (_, Ready::Message(pool, msg)) => ops::message(&ctx, t, &pool, &msg),
        (Cmd::Version, _) => ops::version(&ctx, t),
        _ => Ok(exit::OK),
    }
}

/// The man pages (`rthinctl.8`, `rthinctl-SUB.8` for each subcommand) and
/// the shell completions, generated from the command definition so they
/// cannot drift from `--help`.
fn generate_docs(dir: &std::path::Path) -> std::io::Result<()> {
    let man = dir.join("man8");
    let comp = dir.join("completions");
    std::fs::create_dir_all(&man)?;
    std::fs::create_dir_all(&comp)?;
    // `rthinctl help` is `--help`: no page of its own, so none listed.
    let mut cmd = without_help_subcommand(command().version(env!("CARGO_PKG_VERSION")));
    cmd.build();
    fn pages(cmd: &clap::Command, prefix: &str, dir: &std::path::Path) -> std::io::Result<()> {
        let name = if prefix.is_empty() {
            cmd.get_name().to_string()
        } else {
            format!("{prefix}-{}", cmd.get_name())
        };
        let mut f = std::io::BufWriter::new(std::fs::File::create(dir.join(format!("{name}.8")))?);
        man_page(cmd.clone().name(name.clone()), &mut f)?;
        f.flush()?;
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            pages(sub, &name, dir)?;
        }
        Ok(())
    }
    pages(&cmd, "", &man)?;
    use clap_complete::Shell;
    // Hidden commands (generate-docs, the underscore aliases) are not offered.
    let globals: Vec<clap::Arg> = cmd
        .get_arguments()
        .filter(|a| a.is_global_set())
        .cloned()
        .collect();
    let mut visible = visible_only(&cmd, "", &globals);
    for sh in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let path = clap_complete::generate_to(sh, &mut visible, "rthinctl", &comp)?;
        match sh {
            Shell::Bash | Shell::Fish => {
                let names = if sh == Shell::Bash {
                    BASH_NAMES
                } else {
                    FISH_NAMES
                };
                let mut f = std::fs::OpenOptions::new().append(true).open(path)?;
                f.write_all(names.as_bytes())?;
            }
            Shell::Zsh => {
                let text = std::fs::read_to_string(&path)?;
                std::fs::write(&path, zsh_with_names(&text))?;
            }
            _ => {}
        }
    }
    Ok(())
}

/// Zsh: clap's specs complete a POOL or DEV argument with `_default`
/// (file names); they get pool (and, for status, thin) names from
/// device-mapper instead, from functions put before the script's end.
fn zsh_with_names(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let names = if line.starts_with("'*::devs -- ") {
            Some("_rthinctl_devs")
        } else if line.starts_with("':pool -- ")
            || line.starts_with("'::pool -- ")
            || line.starts_with("'*::pools -- ")
            || line.starts_with("'--live=[")
        {
            Some("_rthinctl_pools")
        } else {
            None
        };
        match names {
            Some(f) => out.push_str(&line.replacen(":_default'", &format!(":{f}'"), 1)),
            None if line.starts_with("if [ \"$funcstack[1]\" = \"_rthinctl\" ]") => {
                out.push_str(ZSH_NAMES);
                out.push_str(line);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// Zsh: the name functions [`zsh_with_names`] points the specs at.
const ZSH_NAMES: &str = r#"# Pool and thin names from device-mapper (added by rthinctl).
_rthinctl_dm_names() {
    local t
    local -a names
    for t in "$@"; do
        names+=(${${(f)"$(dmsetup ls --target $t 2>/dev/null)"}%%[[:space:]]*})
    done
    names=(${names:#No})
    compadd -a names
}
_rthinctl_pools() { _rthinctl_dm_names thin-pool rthin-pool }
_rthinctl_devs() { _rthinctl_dm_names thin-pool rthin-pool thin rthin }

"#;

/// `c` and its subcommands without the implicit `help` subcommand.
fn without_help_subcommand(c: clap::Command) -> clap::Command {
    let mut c = c.disable_help_subcommand(true);
    for sub in c.get_subcommands_mut() {
        *sub = without_help_subcommand(sub.clone());
    }
    c
}

/// A copy of the command `c` (named `path`, "" for rthinctl itself) for
/// the completions: clap's generators offer hidden subcommands and flags
/// too, so they are left out, and each subcommand gets, as its own flags,
/// the global flags it honours (all of them before a subcommand).
fn visible_only(c: &clap::Command, path: &str, globals: &[clap::Arg]) -> clap::Command {
    let ok = honoured_by(path);
    let own = c.get_arguments().filter(|a| {
        !a.is_hide_set() && !a.is_global_set() && !matches!(a.get_id().as_str(), "help" | "version")
    });
    let global = globals
        .iter()
        .filter(|g| path.is_empty() || ok.contains(&g.get_id().as_str()))
        .map(|g| g.clone().global(false));
    let mut v = clap::Command::new(c.get_name().to_string())
        .args(own.cloned().chain(global))
        .disable_help_subcommand(true);
    if let Some(a) = c.get_about() {
        v = v.about(a.clone());
    }
    for sub in c.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("{path} {}", sub.get_name())
            .trim_start()
            .to_string();
        v = v.subcommand(visible_only(sub, &name, globals));
    }
    v
}

/// One man page: clap_mangen's sections, then the devices note and the
/// exit status as man pages set them (a tagged paragraph per code; clap's
/// after-help text would be reflowed into one paragraph).
fn man_page(cmd: clap::Command, w: &mut dyn Write) -> std::io::Result<()> {
    let has_args = cmd.get_arguments().any(|a| !a.is_hide_set());
    let has_subs = cmd.get_subcommands().any(|s| !s.is_hide_set());
    let has_version = cmd.get_version().is_some();
    let man = clap_mangen::Man::new(cmd)
        .section("8")
        .manual("System Administration")
        .source(format!("rthinctl {}", env!("CARGO_PKG_VERSION")));
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    if has_args {
        man.render_options_section(w)?;
    }
    if has_subs {
        man.render_subcommands_section(w)?;
    }
    writeln!(w, ".SH DEVICES")?;
    for (i, line) in DEVICES.iter().enumerate() {
        writeln!(w, "{}{line}", if i == 0 { "" } else { ".br\n" })?;
    }
    writeln!(w, ".SH \"EXIT STATUS\"")?;
    for (code, meaning) in EXIT_CODES {
        writeln!(w, ".TP\n{code}\n{meaning}")?;
    }
    writeln!(w, ".PP\n{CHECK_EXIT_CODES}")?;
    if has_version {
        man.render_version_section(w)?;
    }
    Ok(())
}

/// Bash: pool and thin names from device-mapper (either target) where a
/// command takes one, after clap's completion of the options.
const BASH_NAMES: &str = r#"
# Pool and thin names, where a command takes one (added by rthinctl).
_rthinctl_dm_names() {
	local t
	for t in "$@"; do dmsetup ls --target "$t" 2>/dev/null; done |
		awk '$1 != "No" { print $1 }'
}
_rthinctl_names() {
	_rthinctl "$@"
	local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} w words=
	[[ $cur == -* ]] && return 0
	for w in "${COMP_WORDS[@]:1:COMP_CWORD-1}"; do
		case $w in -*) ;; *) words="$words $w" ;; esac
	done
	local pools="thin-pool rthin-pool" names=
	case "$prev" in
	--live) names=$(_rthinctl_dm_names $pools) ;;
	*)
		case "$words" in
		" status"*) names=$(_rthinctl_dm_names $pools thin rthin) ;;
		" ls" | " watch"* | " create-thin" | " create-snap" | " delete" | " set-transaction-id" | 			" message" | " metadata-snap reserve" | " metadata-snap release" | " metadata-snap show")
			names=$(_rthinctl_dm_names $pools) ;;
		*) return 0 ;;
		esac
		;;
	esac
	COMPREPLY=($(compgen -W "$names" -- "$cur"))
}
complete -F _rthinctl_names -o nosort -o bashdefault -o default rthinctl
"#;

/// Fish: the same names.
const FISH_NAMES: &str = r#"
# Pool and thin names, where a command takes one (added by rthinctl).
function __rthinctl_dm_names
	for t in $argv
		dmsetup ls --target $t 2>/dev/null | string match -rv '^No devices' | string replace -r '\s.*' ''
	end
end
complete -c rthinctl -n "__fish_seen_subcommand_from ls watch create-thin create-snap delete set-transaction-id message reserve release show" -f -a "(__rthinctl_dm_names thin-pool rthin-pool)"
complete -c rthinctl -n "__fish_seen_subcommand_from status" -f -a "(__rthinctl_dm_names thin-pool rthin-pool thin rthin)"
complete -c rthinctl -l live -x -a "(__rthinctl_dm_names thin-pool rthin-pool)"
"#;

/// Whether the command line asks for `status --check` (whose every failure,
/// a bad command line included, is UNKNOWN to a monitoring system).
fn check_mode(args: &[std::ffi::OsString]) -> bool {
    let a: Vec<&str> = args.iter().filter_map(|x| x.to_str()).collect();
    a.contains(&"status") && a.contains(&"--check")
}

/// The command definition (also used to generate the man pages and the
/// shell completions), each subcommand's help without the global flags
/// it refuses.
pub fn command() -> clap::Command {
    /// Gives each subcommand under `c` a hidden copy of the global flags
    /// it refuses (clap then propagates only the others into it).
    fn hide_refused(c: &mut clap::Command, path: &str, globals: &[clap::Arg]) {
        for sub in c.get_subcommands_mut() {
            let name = format!("{path} {}", sub.get_name())
                .trim_start()
                .to_string();
            let ok = honoured_by(&name);
            for g in globals {
                if !ok.contains(&g.get_id().as_str()) {
                    *sub = sub.clone().arg(g.clone().hide(true));
                }
            }
            hide_refused(sub, &name, globals);
        }
    }
    let mut cmd = Cli::command().after_help(after_help());
    let globals: Vec<clap::Arg> = cmd
        .get_arguments()
        .filter(|a| a.is_global_set())
        .cloned()
        .collect();
    hide_refused(&mut cmd, "", &globals);
    cmd
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
    let in_check = check_mode(&args);
    let usage_code = if in_check {
        exit::CHECK_UNKNOWN
    } else {
        exit::USAGE
    };
    let m = match command().try_get_matches_from(&args) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_is_consistent() {
        command().debug_assert();
    }

    #[test]
    fn help_documents_exit_codes() {
        let h = command().render_long_help().to_string();
        for s in ["Exit status:", "3  no such device", "UNKNOWN", "rthin-pool"] {
            assert!(h.contains(s), "{s}");
        }
    }

    #[test]
    fn aliases_and_positional_ids() {
        let p = |args: &[&str]| Cli::try_parse_from(args);
        assert!(p(&["rthinctl", "create_thin", "pool", "7"]).is_ok());
        assert!(p(&["rthinctl", "create-thin", "pool", "--id", "auto"]).is_ok());
        assert!(p(&["rthinctl", "create_snap", "pool", "8", "7"]).is_ok());
        assert!(p(&[
            "rthinctl",
            "create-snap",
            "pool",
            "--id",
            "8",
            "--origin",
            "7"
        ])
        .is_ok());
        assert!(p(&["rthinctl", "set_transaction_id", "pool", "0", "1"]).is_ok());
        assert!(p(&["rthinctl", "set-transaction-id", "pool", "--bump"]).is_ok());
        assert!(p(&["rthinctl", "reserve_metadata_snap", "pool"]).is_ok());
        assert!(p(&["rthinctl", "metadata-snap", "release", "pool"]).is_ok());
        assert!(p(&["rthinctl", "message", "pool", "create_thin", "1"]).is_ok());
        assert!(p(&["rthinctl", "status", "--json", "--units", "G"]).is_ok());
        // Rejected before anything is sent.
        for bad in [
            &["rthinctl", "create_thin", "pool", "16777216"][..],
            &["rthinctl", "create_thin", "pool", "0x10"],
            &["rthinctl", "delete", "pool", "--id", "auto"],
            &["rthinctl", "set_transaction_id", "pool", "1"],
            &["rthinctl", "status", "--units", "q"],
            &["rthinctl", "frobnicate"],
        ] {
            let e = p(bad).unwrap_err();
            assert!(e.use_stderr(), "{bad:?}");
        }
    }

    /// The generated man pages name only pages that exist, each has an
    /// EXIT STATUS section with a paragraph per code, and the completions
    /// offer no hidden command, unit letters rather than file names after
    /// --units, and pool names from device-mapper.
    #[test]
    fn generated_pages_and_completions_are_true() {
        let dir = std::env::temp_dir().join(format!("rthinctl-docs-{}", std::process::id()));
        generate_docs(&dir).unwrap();
        let man = dir.join("man8");
        let mut pages = 0;
        for e in std::fs::read_dir(&man).unwrap() {
            let page = std::fs::read_to_string(e.unwrap().path()).unwrap();
            pages += 1;
            for (i, _) in page.match_indices("(8)") {
                let start = page[..i]
                    .rfind(|c: char| c.is_whitespace())
                    .map_or(0, |s| s + 1);
                let name = page[start..i]
                    .trim_start_matches("\\fB")
                    .replace("\\-", "-");
                assert!(
                    man.join(format!("{name}.8")).exists(),
                    "{name}(8) is listed but not generated"
                );
            }
            assert!(
                page.contains(".SH \"EXIT STATUS\"\n.TP\n0\nsuccess\n.TP\n1\n"),
                "{page}"
            );
            assert!(page.contains(".TP\n6\n"), "{page}");
        }
        assert!(pages > 10, "{pages} pages");
        let comp = dir.join("completions");
        for f in ["rthinctl.bash", "_rthinctl", "rthinctl.fish"] {
            let c = std::fs::read_to_string(comp.join(f)).unwrap();
            assert!(!c.contains("generate-docs"), "{f} offers generate-docs");
            // The about text of the hidden underscore aliases.
            assert!(!c.contains("Alias of"), "{f} offers a hidden alias");
        }
        let bash = std::fs::read_to_string(comp.join("rthinctl.bash")).unwrap();
        let units = bash.find("--units)").unwrap();
        let case = &bash[units..units + bash[units..].find(";;").unwrap()];
        assert!(
            !case.contains("compgen -f") && case.contains("h b s k"),
            "{case}"
        );
        assert!(
            bash.contains("dmsetup ls --target") && bash.contains("complete -F _rthinctl_names")
        );
        // Each command is offered the global flags it honours, no others.
        let dump = bash.find("rthinctl__subcmd__meta__subcmd__dump)").unwrap();
        let opts = bash[dump..].lines().nth(1).unwrap();
        assert_eq!(opts.trim(), r#"opts="-m -h --metadata-snap --help""#);
        let zsh = std::fs::read_to_string(comp.join("_rthinctl")).unwrap();
        assert!(
            zsh.contains("':pool -- The pool:_rthinctl_pools'"),
            "zsh: no pool names"
        );
        assert!(
            zsh.contains(":_rthinctl_devs'"),
            "zsh: no device names for status"
        );
        let defined = zsh.find("_rthinctl_pools() {").unwrap();
        assert!(defined < zsh.rfind("if [ \"$funcstack[1]\"").unwrap());
        let fish = std::fs::read_to_string(comp.join("rthinctl.fish")).unwrap();
        assert!(fish.contains("__rthinctl_dm_names thin-pool rthin-pool"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Documentation/rthinctl.md names every command and every option of
    /// the CLI definition (the man pages are generated from it).
    #[test]
    fn documentation_covers_the_cli() {
        let doc = include_str!("../../../Documentation/rthinctl.md");
        fn walk(c: &clap::Command, path: &str, doc: &str, missing: &mut Vec<String>) {
            for a in c.get_arguments() {
                if a.is_hide_set() {
                    continue;
                }
                if let Some(l) = a.get_long() {
                    if l != "help" && l != "version" && !doc.contains(&format!("--{l}")) {
                        missing.push(format!("{path} --{l}"));
                    }
                }
            }
            for sub in c.get_subcommands() {
                if sub.is_hide_set() || sub.get_name() == "help" {
                    continue;
                }
                let p = format!("{path} {}", sub.get_name()).trim().to_string();
                if !doc.contains(&format!("`{}", sub.get_name()))
                    && !doc.contains(&format!("{} ", p))
                {
                    missing.push(p.clone());
                }
                walk(sub, &p, doc, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "", doc, &mut missing);
        assert!(
            missing.is_empty(),
            "not in Documentation/rthinctl.md: {missing:?}"
        );
    }
}
