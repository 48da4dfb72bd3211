// SPDX-License-Identifier: GPL-2.0
//! `meta check`: the trees and every reference count against the space
//! maps, as thin_check does.

use std::fs::OpenOptions;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};

use rthin_core::metadata::superblock::FLAG_NEEDS_CHECK;
use rthin_core::pdata::block_store::BlockStore;
use rthin_core::pdata::checksum::{seal, verify, BlockKind, BLOCK_SIZE};
use serde::Serialize;

use super::store::{damaged, FileStore, OpenMode};
use crate::explain::{exit, Error, Result};

/// `n` things, in good English: "1 problem", "3 problems".
fn count(n: usize, thing: &str) -> String {
    format!("{n} {thing}{}", if n == 1 { "" } else { "s" })
}

/// Problems listed in full; past this they are counted.
const MAX_SHOWN: usize = 100;

/// What `meta check` found, as printed and as JSON.
#[derive(Serialize, Debug)]
pub struct CheckReport {
    pub schema: &'static str,
    pub path: String,
    /// ok | leaked | damaged
    pub verdict: &'static str,
    pub exit: i32,
    pub live: bool,
    pub transaction_id: Option<u64>,
    pub devices: usize,
    pub mappings: u64,
    pub data_blocks_in_use: u64,
    pub metadata_blocks_in_use: u64,
    pub needs_check: bool,
    pub damage: Vec<String>,
    pub leaked_data_blocks: Vec<u64>,
    pub leaked_metadata_blocks: Vec<u64>,
    pub warnings: Vec<String>,
}

fn leak_lines(r: &CheckReport) -> Vec<String> {
    let mut v = Vec::new();
    for (what, blocks) in [
        ("data", &r.leaked_data_blocks),
        ("metadata", &r.leaked_metadata_blocks),
    ] {
        if blocks.is_empty() {
            continue;
        }
        let shown: Vec<String> = blocks.iter().take(10).map(u64::to_string).collect();
        v.push(format!(
            "{} {} leaked (counted in use, referenced by nothing): {}{}",
            count(blocks.len(), &format!("{what} block")),
            if blocks.len() == 1 { "has" } else { "have" },
            shown.join(" "),
            if blocks.len() > 10 { " ..." } else { "" }
        ));
    }
    v
}

/// Runs the core's checker over `store` and judges as thin_check does.
pub fn judge(path: &str, store: &FileStore, live: bool, ignore_leaks: bool) -> CheckReport {
    let rep = if live {
        rthin_core::metadata::checker::examine_held(store)
    } else {
        rthin_core::metadata::checker::examine(store)
    };
    let sb = store
        .read(0, BlockKind::Superblock)
        .ok()
        .and_then(|g| rthin_core::metadata::superblock::Superblock::decode(&g).ok());
    let leaked = !rep.data_leaks.is_empty() || !rep.meta_leaks.is_empty();
    let (verdict, code) = if !rep.errors.is_empty() {
        ("damaged", exit::REFUSED)
    } else if leaked && !ignore_leaks {
        ("leaked", exit::REFUSED)
    } else {
        ("ok", exit::OK)
    };
    CheckReport {
        schema: "rthinctl.meta-check/1",
        path: path.to_string(),
        verdict,
        exit: code,
        live,
        transaction_id: sb.map(|s| s.trans_id),
        devices: rep.devices,
        mappings: rep.mappings,
        data_blocks_in_use: rep.data_allocated,
        metadata_blocks_in_use: rep.meta_allocated,
        needs_check: sb.is_some_and(|s| s.flags & FLAG_NEEDS_CHECK != 0),
        damage: rep.errors,
        leaked_data_blocks: rep.data_leaks,
        leaked_metadata_blocks: rep.meta_leaks,
        warnings: rep.warnings,
    }
}

/// Prints a check report (text or JSON) and gives the exit status.
pub fn report_check(r: &CheckReport, quiet: bool, json: bool) -> Result<i32> {
    if json {
        let s = serde_json::to_string_pretty(r)
            .map_err(|e| Error::new(exit::OTHER, format!("JSON encoding failed: {e}")))?;
        println!("{s}");
        return Ok(r.exit);
    }
    let path = &r.path;
    // -q: nothing at all when the check passes (cron mails what it prints).
    if !quiet {
        for w in &r.warnings {
            eprintln!("rthinctl: warning: {path}: {w}");
        }
    }
    let leaks = leak_lines(r);
    let cut = |v: &[String]| -> Vec<String> {
        let mut o: Vec<String> = v.iter().take(MAX_SHOWN).cloned().collect();
        if v.len() > MAX_SHOWN {
            o.push(format!("... and {} more problems", v.len() - MAX_SHOWN));
        }
        o
    };
    if r.verdict == "damaged" {
        let mut notes = cut(&r.damage);
        notes.extend(leaks);
        return Err(Error {
            text: format!(
                "{path}: metadata is damaged ({}); {}",
                count(r.damage.len(), "problem"),
                if r.live {
                    "take the pool down, check its metadata with rthinctl meta check, then thin_repair it to a new device"
                } else {
                    "thin_repair writes a repaired copy to a new device"
                }
            ),
            code: exit::REFUSED,
            notes,
        });
    }
    if r.verdict == "leaked" {
        return Err(Error {
            text: format!(
                "{path}: space is leaked, no data is at risk; thin_check --auto-repair (or thin_repair) reclaims it, --ignore-non-fatal-errors accepts it"
            ),
            code: exit::REFUSED,
            notes: leaks,
        });
    }
    if !quiet {
        for l in &leaks {
            eprintln!("rthinctl: warning: {path}: {l}");
        }
        if r.live {
            println!(
                "{path}: metadata snapshot ok: {}, transaction {}; {}, every mapped block counted in use by the data space map",
                count(r.devices, "device"),
                r.transaction_id.unwrap_or(0),
                count(r.mappings as usize, "mapping")
            );
        } else {
            println!(
                "{path}: metadata ok: {}, transaction {}; {}, {} data and {} metadata blocks in use, reference counts agree{}{}",
                count(r.devices, "device"),
                r.transaction_id.unwrap_or(0),
                count(r.mappings as usize, "mapping"),
                r.data_blocks_in_use,
                r.metadata_blocks_in_use,
                if leaks.is_empty() {
                    ""
                } else {
                    " apart from the leaks"
                },
                if r.needs_check {
                    " (needs_check is set: --clear-needs-check-flag clears it)"
                } else {
                    ""
                }
            );
        }
    }
    Ok(exit::OK)
}

/// `meta check`: the core's checker (`rthin_core::metadata::checker`, the one the
/// core's property and crash tests use) walks the superblock, the details
/// tree, every mapping tree, the held snapshot's trees and both space maps
/// (every node read through the core's validators), recounts the references
/// to every data and metadata block and compares them with the space maps.
/// As in thin_check: a leak (a block the space map counts once that nothing
/// references) fails the check unless `ignore_leaks` (thin_check's
/// --ignore-non-fatal-errors); every other finding is damage and always
/// fails it. Search hints that disagree are warnings.
#[cfg(test)]
pub fn check(path: &str, quiet: bool, ignore_leaks: bool) -> Result<i32> {
    check_with(
        path,
        &CheckOptions {
            quiet,
            ignore_leaks,
            ..CheckOptions::default()
        },
    )
}

/// What `meta check PATH` is asked to do (thin_check's options).
#[derive(Debug, Clone, Copy, Default)]
pub struct CheckOptions {
    /// -q: print nothing when the check passes.
    pub quiet: bool,
    /// --ignore-non-fatal-errors: leaks pass.
    pub ignore_leaks: bool,
    /// --json.
    pub json: bool,
    /// --clear-needs-check-flag: clear needs_check when the check passes.
    pub clear_needs_check: bool,
    /// --super-block-only.
    pub super_block_only: bool,
    /// -m: the held metadata snapshot's trees only.
    pub snapshot: bool,
}

/// [`check`], with thin_check's options.
pub fn check_with(path: &str, o: &CheckOptions) -> Result<i32> {
    let mode = OpenMode {
        snap: false,
        shared: o.snapshot,
    };
    let store = FileStore::open(path, mode)?;
    if o.super_block_only {
        let sb = rthin_core::metadata::checker::superblock(&store)
            .map_err(|t| Error::new(exit::REFUSED, format!("{path}: metadata is damaged: {t}")))?;
        let needs_check = sb.flags & FLAG_NEEDS_CHECK != 0;
        if o.json {
            let j = serde_json::json!({
                "schema": "rthinctl.meta-check-superblock/1",
                "path": path,
                "verdict": "ok",
                "transaction_id": sb.trans_id,
                "needs_check": needs_check,
            });
            println!("{j:#}");
        } else if !o.quiet {
            println!(
                "{path}: superblock ok: transaction {}, {} metadata blocks{}",
                sb.trans_id,
                sb.meta_sm.nr_blocks,
                if needs_check { ", needs_check set" } else { "" }
            );
        }
        return Ok(exit::OK);
    }
    let r = judge(path, &store, o.snapshot, o.ignore_leaks);
    // The exclusive (read-only) open ends before the one that writes.
    drop(store);
    let code = report_check(&r, o.quiet, o.json)?;
    if o.clear_needs_check && r.needs_check {
        clear_needs_check(path)?;
        if !o.quiet && !o.json {
            println!("{path}: needs_check cleared");
        }
    }
    Ok(code)
}

/// Clears the needs_check flag in the superblock of `path` (checked just
/// before, by the caller) and reseals it, as thin_check
/// --clear-needs-check-flag does. A block device is opened exclusively.
fn clear_needs_check(path: &str) -> Result<()> {
    let fail = |what: &str, e: std::io::Error| {
        Error::new(
            exit::OTHER,
            format!("{path}: cannot clear needs_check: {what}: {e}"),
        )
    };
    let block = std::fs::metadata(path)
        .map(|m| m.file_type().is_block_device())
        .unwrap_or(false);
    let mut o = OpenOptions::new();
    o.read(true).write(true);
    if block {
        o.custom_flags(nix::libc::O_EXCL);
    }
    let f = o.open(path).map_err(|e| fail("open", e))?;
    let mut sb = vec![0u8; BLOCK_SIZE];
    f.read_exact_at(&mut sb, 0).map_err(|e| fail("read", e))?;
    verify(BlockKind::Superblock, 0, &sb)
        .map_err(|e| damaged(path, format!("{e} in superblock (block 0)")))?;
    let at = rthin_core::metadata::superblock::off::FLAGS;
    let flags = u32::from_le_bytes(sb[at..at + 4].try_into().unwrap_or([0; 4]));
    sb[at..at + 4].copy_from_slice(&(flags & !FLAG_NEEDS_CHECK).to_le_bytes());
    seal(BlockKind::Superblock, 0, &mut sb).map_err(|e| {
        Error::new(
            exit::OTHER,
            format!("{path}: cannot seal the superblock: {e}"),
        )
    })?;
    f.write_all_at(&sb, 0).map_err(|e| fail("write", e))?;
    f.sync_all().map_err(|e| fail("sync", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::test_image::{image, image_with, patch_nodes, thin_restore_090_hints};

    #[test]
    fn check_recounts_references() {
        // A data block allocated and never mapped: a leak, which fails the
        // check unless leaks are accepted (thin_check's exit status).
        let (_t, path) = image_with(|md| {
            assert_eq!(md.alloc_data_block().unwrap(), 7);
        });
        let e = check(&path, true, false).unwrap_err();
        assert_eq!(e.code, exit::REFUSED);
        assert!(e.text.contains("space is leaked"), "{}", e.text);
        assert_eq!(
            e.notes,
            ["1 data block has leaked (counted in use, referenced by nothing): 7"]
        );
        assert_eq!(check(&path, true, true), Ok(exit::OK));

        // A mapped block counted once too often: damage, whatever the option.
        let (_t, path) = image_with(|md| md.data_block_inc(5).unwrap());
        for ignore in [false, true] {
            let e = check(&path, true, ignore).unwrap_err();
            assert_eq!(e.code, exit::REFUSED);
            assert!(e.text.contains("damaged"), "{}", e.text);
            assert_eq!(
                e.notes,
                ["data block 5 (thin device 1, block 9): space map says 3, references 2"]
            );
        }

        // A mapping whose block the space map calls free.
        let (_t, path) = image_with(|md| md.data_block_dec(6).unwrap());
        let e = check(&path, true, true).unwrap_err();
        assert_eq!(
            e.notes,
            ["data block 6 (thin device 2, block 0): free in space map but referenced 1 time"]
        );
    }

    /// A snapshot shares its origin's leaves: the walk reads them once
    /// and counts their mappings for both devices (each device's count is
    /// compared with its details; a count it could not make is left out
    /// of the total, so the total shows both were made).
    #[test]
    fn shared_subtrees_count_for_every_device() {
        let (_t, path) = image_with(|md| {
            md.create_thin(3).unwrap();
            for v in 0..900 {
                let b = md.alloc_data_block().unwrap();
                md.insert_mapping(3, v, b).unwrap();
            }
            md.create_snap(4, 3).unwrap();
            let b = md.alloc_data_block().unwrap();
            md.insert_mapping(4, 0, b).unwrap();
        });
        let store = FileStore::open(&path, OpenMode::default()).unwrap();
        let r = judge(&path, &store, false, false);
        assert_eq!(r.verdict, "ok", "{r:?}");
        assert_eq!((r.devices, r.mappings), (4, 6 + 6 + 900 + 900), "{r:?}");
    }

    #[test]
    fn search_hints_are_warnings() {
        // thin_restore 0.9.0 counts nr_free over the valid entries of the
        // last bitmap only (1000 blocks, 7 in use: 993, not 16313), and
        // can leave none_free_before past a free entry: both are hints.
        let (_t, path) = image();
        thin_restore_090_hints(&path);
        let store = FileStore::open(&path, OpenMode::default()).unwrap();
        let r = judge(&path, &store, false, false);
        assert_eq!(r.verdict, "ok", "{r:?}");
        assert_eq!(r.warnings.len(), 1, "{r:?}");
        assert!(
            r.warnings[0].contains("entry 7 is free, below none_free_before 9"),
            "{r:?}"
        );
        assert_eq!(check(&path, true, false), Ok(exit::OK));
        // Neither convention: still only a warning.
        patch_nodes(
            &path,
            |blk| {
                let Some(h) = rthin_core::pdata::btree::node::check(blk, 16)
                    .ok()
                    .filter(|h| h.leaf && h.value_size == 16)
                else {
                    return false;
                };
                let v = h.val_off(0);
                blk[v + 8..v + 12].copy_from_slice(&5u32.to_le_bytes());
                true
            },
            true,
        );
        let r = judge(
            &path,
            &FileStore::open(&path, OpenMode::default()).unwrap(),
            false,
            false,
        );
        assert_eq!(r.verdict, "ok", "{r:?}");
        assert!(
            r.warnings
                .iter()
                .any(|w| w.contains("index says 5 free, the bitmap has 993")),
            "{r:?}"
        );
    }

    #[test]
    fn every_damaged_tree_is_named() {
        // Break the mapping leaves of both devices (each maps block 9):
        // both are reported, by device, and the walk goes on.
        let (_t, path) = image();
        let mut n = 0;
        patch_nodes(
            &path,
            |blk| {
                let Some(h) = rthin_core::pdata::btree::node::check(blk, 8)
                    .ok()
                    .filter(|h| h.leaf)
                else {
                    return false;
                };
                let has9 = (0..h.nr_entries)
                    .any(|i| rthin_core::pdata::btree::node::key(blk, &h, i) == Ok(9));
                if has9 {
                    blk[200] ^= 0xff;
                    n += 1;
                }
                has9
            },
            false,
        );
        assert_eq!(n, 2);
        let e = check(&path, true, true).unwrap_err();
        assert!(e.text.contains("damaged (3 problems)"), "{e}");
        assert!(
            e.notes[0].starts_with("thin device 1, blocks all: bad checksum in btree node (block "),
            "{:?}",
            e.notes
        );
        assert!(
            e.notes[1].starts_with("thin device 2, blocks all: bad checksum in btree node (block "),
            "{:?}",
            e.notes
        );
        assert!(e.notes[2].contains("not compared"), "{:?}", e.notes);
    }
}
