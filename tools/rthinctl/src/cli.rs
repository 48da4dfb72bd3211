// SPDX-License-Identifier: GPL-2.0
//! The command line: clap's types, the checks of a whole command line
//! before anything is opened, and the command definition the help, man
//! pages and completions come from.

use clap::{Args, CommandFactory, Parser, Subcommand};

use crate::context::Ctx;
use crate::explain::{exit, Error, Msg, Result};
use crate::report;
use crate::units::Units;
use crate::view;

/// What POOL and DEV name, and which targets rthinctl drives.
pub const DEVICES: &[&str] = &[
    "Devices: POOL and DEV accept a device-mapper name, /dev/mapper/NAME, /dev/dm-N or MAJ:MIN.",
    "Targets: works with rthin's rthin-pool/rthin and with the C dm-thin thin-pool/thin.",
];

/// The exit codes, for `--help` and the man pages' EXIT STATUS sections.
pub const EXIT_CODES: &[(i32, &str)] = &[
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
pub const CHECK_EXIT_CODES: &str = "With status --check: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.";

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
pub struct Cli {
    #[command(flatten)]
    pub out: OutputArgs,
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Args, Debug, Clone)]
pub struct OutputArgs {
    /// JSON output (versioned schema; sizes in bytes and blocks; null = unknown).
    #[arg(long, global = true)]
    pub json: bool,
    /// Script-friendly output: bytes, no suffix, no headings, ':' separated.
    #[arg(long, global = true)]
    pub raw: bool,
    /// Size units like lvs: h b s k m g t p e r (upper case = powers of 1000).
    #[arg(long, global = true, default_value = "h", value_parser = UnitsParser)]
    pub units: Units,
    /// Leave out unit suffixes.
    #[arg(long, global = true)]
    pub no_suffix: bool,
    /// Leave out the heading line.
    #[arg(long, global = true)]
    pub no_headings: bool,
    /// Separate columns with this string instead of aligning them.
    #[arg(long, global = true, value_name = "S", value_hint = clap::ValueHint::Other)]
    pub separator: Option<String>,
    /// Print each message and suspend/resume before doing it.
    #[arg(short, long, global = true)]
    pub verbose: bool,
}

/// `--units`: parsed by [`Units`], with its letters as the possible
/// values (the shell completions offer them, not file names).
#[derive(Clone)]
pub struct UnitsParser;

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
pub enum IdArg {
    Num(u32),
    Auto,
}

pub fn parse_id(s: &str) -> std::result::Result<IdArg, String> {
    if s == "auto" {
        return Ok(IdArg::Auto);
    }
    rthin_core::dm::thin_table::parse_dev_id(s.as_bytes())
        .map(IdArg::Num)
        .ok_or_else(|| {
            format!("invalid thin id {s:?}: a decimal number from 0 to 16777215 (or auto)")
        })
}

pub fn parse_fixed_id(s: &str) -> std::result::Result<u32, String> {
    rthin_core::dm::thin_table::parse_dev_id(s.as_bytes())
        .ok_or_else(|| format!("invalid thin id {s:?}: a decimal number from 0 to 16777215"))
}

#[derive(Args, Debug, Clone)]
pub struct Guard {
    /// Refuse unless the pool's transaction id is N (read from status first).
    #[arg(long, value_name = "N")]
    pub expect_txn: Option<u64>,
    /// Print the equivalent dmsetup commands instead of doing anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Change the pool even if LVM or Stratis owns it (they keep their own
    /// record of its thin devices and transaction id).
    #[arg(long)]
    pub force: bool,
}

#[derive(Subcommand, Debug)]
pub enum Cmd {
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
    Watch(WatchArgs),
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
pub enum MetaCmd {
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
pub struct ViewArgs {
    /// Show these fields, in this order: column headings or lvs names
    /// (lv_name, lv_size, data_percent, metadata_percent, pool_lv, thin_id, ...).
    #[arg(short = 'o', long = "options", value_name = "FIELDS")]
    pub fields: Option<String>,
    /// Sort rows by these fields (comma list; a leading '-' sorts descending).
    #[arg(short = 'O', long, value_name = "FIELDS", allow_hyphen_values = true)]
    pub sort: Option<String>,
    /// Show only rows that match: FIELD OP VALUE with OP = != < <= > >=,
    /// conditions joined with '&&' (sizes compare as sizes: lv_size>1g).
    #[arg(short = 'S', long, value_name = "SELECTION")]
    pub select: Option<String>,
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
pub struct StatusArgs {
    /// Pools or thins (default: all).
    pub devs: Vec<String>,
    #[command(flatten)]
    pub view: ViewArgs,
    /// Monitoring mode: one summary line, exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.
    #[arg(long)]
    pub check: bool,
    /// --check: warn at this data or metadata use (percent).
    #[arg(long, default_value_t = 80.0, value_name = "PCT")]
    pub warn: f64,
    /// --check: critical at this data or metadata use (percent).
    #[arg(long, default_value_t = 95.0, value_name = "PCT")]
    pub crit: f64,
    /// --check: metadata warning threshold (default: --warn).
    #[arg(long, value_name = "PCT")]
    pub meta_warn: Option<f64>,
    /// --check: metadata critical threshold (default: --crit).
    #[arg(long, value_name = "PCT")]
    pub meta_crit: Option<f64>,
    /// --check: warn when a pool's free data space is below SIZE (bytes,
    /// or with an lvs unit: 10g; upper case: powers of 1000).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub warn_free: Option<u64>,
    /// --check: critical when a pool's free data space is below SIZE.
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub crit_free: Option<u64>,
    /// --check: perfdata labels start with LABEL_ instead of the pool's
    /// name (one POOL only).
    #[arg(long, value_name = "LABEL", requires = "check")]
    pub label: Option<String>,
    /// --check: perfdata for each thin too (LABEL_THIN_mapped, in bytes).
    #[arg(long, requires = "check")]
    pub thin_perfdata: bool,
    /// Print the pools' and their thins' figures in Prometheus's text
    /// format (for node_exporter's textfile collector).
    #[arg(long, conflicts_with = "check")]
    pub prometheus: bool,
}

/// `watch` options.
#[derive(Args, Debug)]
pub struct WatchArgs {
    /// Pools to watch (default: all).
    pub pools: Vec<String>,
    /// Seconds between samples.
    #[arg(long, default_value_t = 2.0, value_name = "SECS")]
    pub interval: f64,
    /// Stop after this many samples (default: run until interrupted).
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// Seconds of history used for the fill rate.
    #[arg(long, default_value_t = 60.0, value_name = "SECS")]
    pub window: f64,
}

/// A size: bytes, or a number with an lvs unit (`10g`, `1.5T`).
fn parse_size(s: &str) -> std::result::Result<u64, String> {
    view::number(s)
        .filter(|x| x.is_finite() && *x >= 0.0)
        .map(|x| x as u64)
        .ok_or_else(|| format!("invalid size {s:?}: bytes, or a number with a unit: 512m, 10g"))
}

#[derive(Subcommand, Debug)]
pub enum MetaSnapCmd {
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
pub fn honoured_by(name: &str) -> &'static [&'static str] {
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

/// A command line checked whole: the ids and message words of the commands
/// that change a pool, parsed as the kernel would parse them, so that
/// nothing is opened before the command line is known to be good.
pub enum Validated {
    CreateThin(String, IdArg, Guard),
    CreateSnap(String, IdArg, u32, bool, Guard),
    Delete(String, u32, Guard),
    Message(String, Msg),
    Other,
}

fn validate(cmd: &Cmd) -> Result<Validated> {
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
            Validated::CreateThin(pool.clone(), id, guard.clone())
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
            Validated::CreateSnap(pool.clone(), id, origin, *no_suspend, guard.clone())
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
            Validated::Delete(pool.clone(), id, guard.clone())
        }
        Cmd::Message { pool, words, .. } => {
            // One word may hold several (`message pool "create_thin 7"`).
            let words: Vec<String> = words
                .iter()
                .flat_map(|w| w.split_whitespace().map(String::from))
                .collect();
            Validated::Message(pool.clone(), Msg::from_words(&words)?)
        }
        Cmd::SetTransactionId { old, new, bump, .. } => {
            if !bump && old.zip(*new).is_none() {
                return Err(Error::usage("give OLD and NEW, or --bump"));
            }
            Validated::Other
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
            Validated::Other
        }
        _ => Validated::Other,
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

/// Checks the whole command line `cli` (its matches `m`) before anything
/// is opened, and gives what the command then runs with.
pub fn prepare(cli: &Cli, m: &clap::ArgMatches) -> Result<(Validated, Ctx)> {
    check_globals(&cli.cmd, m)?;
    let prepared = validate(&cli.cmd)?;
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
    let ctx = Ctx {
        json: cli.out.json,
        verbose: cli.out.verbose,
        style,
        force,
    };
    Ok((prepared, ctx))
}

/// Whether the command line asks for `status --check` (whose every failure,
/// a bad command line included, is UNKNOWN to a monitoring system).
pub fn check_mode(args: &[std::ffi::OsString]) -> bool {
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
