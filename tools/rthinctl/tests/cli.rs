// SPDX-License-Identifier: GPL-2.0
//! The rthinctl binary run on generated metadata images: exit codes, what
//! it prints and where (stdout, stderr), as an administrator and a cron job
//! see them. No device-mapper device is needed (the commands that would
//! reach the kernel are refused before it, on their command line).

#[path = "common/image.rs"]
#[allow(dead_code)]
mod image;

use image::{image, image_bytes_with, patch_superblock, TempPath};
use rthin_core::metadata::superblock::off;
use rthin_core::pdata::checksum::{verify, BlockKind, BLOCK_SIZE};

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn rthinctl(args: &[&str]) -> Out {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_rthinctl"))
        .args(args)
        .output()
        .unwrap();
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

/// The test image with its superblock changed by `f` (and resealed).
fn image_with_superblock(f: impl FnOnce(&mut [u8])) -> TempPath {
    let mut img = image_bytes_with(|_| {});
    patch_superblock(&mut img, f);
    TempPath::new(&img)
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Messages name no Rust type and count in good English.
fn assert_human(s: &str) {
    for bad in [
        "Corrupt(",
        "Checksum)",
        "BlockNr",
        "(Superblock)",
        "1 problems",
        "Unsupported",
    ] {
        assert!(!s.contains(bad), "{bad:?} in {s:?}");
    }
}

#[test]
fn valid_metadata_whose_checksum_looks_like_text_is_read() {
    // The first transaction id whose superblock checksum starts with a
    // byte a text file starts with ('<', '{', '#' or white space).
    let texty = |b: u8| b"<{#".contains(&b) || b.is_ascii_whitespace();
    let (tid, img) = (0u64..100_000)
        .find_map(|tid| {
            let mut img = image_bytes_with(|_| {});
            patch_superblock(&mut img, |sb| {
                sb[off::TRANS_ID..off::TRANS_ID + 8].copy_from_slice(&tid.to_le_bytes())
            });
            texty(img[0]).then_some((tid, img))
        })
        .unwrap();
    let p = TempPath::new(&img);
    for cmd in ["check", "dump", "ls"] {
        let o = rthinctl(&["meta", cmd, &p.0]);
        assert_eq!(o.code, 0, "meta {cmd}, transaction {tid}: {}", o.stderr);
    }
}

#[test]
fn unknown_incompat_features_are_unsupported_not_damage() {
    let p = image_with_superblock(|sb| put_u32(sb, off::INCOMPAT, 0xff));
    for cmd in ["check", "dump", "ls"] {
        let o = rthinctl(&["meta", cmd, &p.0]);
        assert_eq!(o.code, 6, "meta {cmd}: {}", o.stderr);
        assert!(o.stderr.contains("unsupported feature"), "{}", o.stderr);
        assert!(o.stderr.contains("0xff"), "{}", o.stderr);
        for bad in ["damaged", "thin_repair", "thin_check"] {
            assert!(!o.stderr.contains(bad), "meta {cmd}: {bad} in {}", o.stderr);
        }
    }
}

#[test]
fn unknown_compat_ro_features_allow_reading() {
    // rthinctl only reads: a compat_ro feature only forbids writing.
    let p = image_with_superblock(|sb| put_u32(sb, off::COMPAT_RO, 1));
    for cmd in ["check", "dump", "ls"] {
        let o = rthinctl(&["meta", cmd, &p.0]);
        assert_eq!(o.code, 0, "meta {cmd}: {}", o.stderr);
    }
}

#[test]
fn damage_is_named_in_words() {
    // A mapping leaf with a bad checksum.
    let (_t, path) = image();
    let mut img = std::fs::read(&path).unwrap();
    let broken = img
        .chunks(BLOCK_SIZE)
        .enumerate()
        .position(|(b, blk)| {
            verify(BlockKind::Node, b as u64, blk).is_ok()
                && rthin_core::pdata::btree::node::check(blk, 8)
                    .is_ok_and(|h| h.leaf && h.nr_entries > 0)
        })
        .unwrap();
    img[broken * BLOCK_SIZE + 200] ^= 0xff;
    std::fs::write(&path, &img).unwrap();
    let o = rthinctl(&["meta", "check", &path]);
    assert_eq!(o.code, 1);
    let want = format!("bad checksum in btree node (block {broken})");
    assert!(o.stderr.contains(&want), "{want} not in {}", o.stderr);
    assert_human(&o.stderr);

    // A superblock with a bad checksum: one problem.
    let mut img = image_bytes_with(|_| {});
    img[100] ^= 0xff;
    let p = TempPath::new(&img);
    let o = rthinctl(&["meta", "check", &p.0]);
    assert_eq!(o.code, 1);
    assert!(o.stderr.contains("(1 problem)"), "{}", o.stderr);
    assert!(
        o.stderr.contains("bad checksum in superblock"),
        "{}",
        o.stderr
    );
    assert_human(&o.stderr);
    for cmd in ["dump", "ls"] {
        let o = rthinctl(&["meta", cmd, &p.0]);
        assert_eq!(o.code, 1);
        assert!(
            o.stderr.contains("bad checksum in superblock"),
            "{}",
            o.stderr
        );
        assert_human(&o.stderr);
    }
}

#[test]
fn a_truncated_image_is_called_truncated() {
    let mut img = image_bytes_with(|_| {});
    img.truncate(16 * BLOCK_SIZE);
    let p = TempPath::new(&img);
    for cmd in ["check", "dump", "ls"] {
        let o = rthinctl(&["meta", cmd, &p.0]);
        assert_eq!(o.code, 1, "meta {cmd}");
        assert!(
            o.stderr.contains("16 blocks")
                && o.stderr.contains("1024")
                && o.stderr.contains("truncated"),
            "meta {cmd}: {}",
            o.stderr
        );
        assert_human(&o.stderr);
    }
}

#[test]
fn quiet_check_prints_nothing_and_json_only_json() {
    let (_t, path) = image();
    image::thin_restore_090_hints(&path);
    let o = rthinctl(&["meta", "check", "-q", &path]);
    assert_eq!((o.code, o.stdout.as_str(), o.stderr.as_str()), (0, "", ""));
    let o = rthinctl(&["meta", "check", &path]);
    assert_eq!(o.code, 0);
    assert!(o.stderr.contains("warning"), "{}", o.stderr);
    let o = rthinctl(&["--json", "meta", "check", &path]);
    assert_eq!((o.code, o.stderr.as_str()), (0, ""));
    let j: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    assert_eq!(j["warnings"].as_array().map(Vec::len), Some(1), "{j}");
}

#[test]
fn the_command_line_is_checked_before_device_mapper_is_opened() {
    for args in [
        &["message", "nosuchpool", "create_thin", "x"][..],
        &["message", "nosuchpool", "create_snap", "1"],
        &["message", "nosuchpool", "delete", "16777216"],
        &["message", "nosuchpool", "set_transaction_id", "1"],
        &["message", "nosuchpool", "reserve_metadata_snap", "1"],
    ] {
        let o = rthinctl(args);
        assert_eq!(o.code, 2, "{args:?}: {}", o.stderr);
    }
}

#[test]
fn help_lists_only_options_the_command_takes() {
    for (cmd, refused) in [
        (&["status", "--help"][..], "--verbose"),
        (&["version", "--help"], "--units"),
        (&["meta", "dump", "--help"], "--json"),
        (&["meta", "check", "--help"], "--separator"),
    ] {
        let o = rthinctl(cmd);
        assert_eq!(o.code, 0);
        assert!(!o.stdout.contains(refused), "{cmd:?} lists {refused}");
    }
    let o = rthinctl(&["status", "--help"]);
    assert!(o.stdout.contains("--units"), "{}", o.stdout);
}

#[test]
fn version_names_rthinctl_first() {
    let o = rthinctl(&["version"]);
    assert!(
        o.stdout
            .starts_with(&format!("rthinctl {}", env!("CARGO_PKG_VERSION"))),
        "{}",
        o.stdout
    );
}

#[test]
fn what_is_not_metadata_exits_alike() {
    let empty = TempPath::new(b"");
    let dir = std::env::temp_dir();
    let dir = dir.to_string_lossy();
    for p in [&*dir, "/dev/null", &empty.0] {
        let o = rthinctl(&["meta", "check", p]);
        assert_eq!(o.code, 1, "{p}: {}", o.stderr);
        assert!(
            o.stderr.contains("not thin-pool metadata"),
            "{p}: {}",
            o.stderr
        );
    }
}

#[test]
fn meta_ls_json_has_bytes_and_refuses_units() {
    let (_t, path) = image();
    let o = rthinctl(&["--json", "meta", "ls", &path]);
    assert_eq!(o.code, 0);
    let j: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    let d = &j["devices"][0];
    assert_eq!(d["mapped_blocks"], 6);
    assert_eq!(d["mapped_bytes"], 6 * 65536);
    assert_eq!(
        d["exclusive_bytes"],
        d["exclusive_blocks"].as_u64().unwrap() * 65536
    );
    assert_eq!(
        d["shared_bytes"],
        d["shared_blocks"].as_u64().unwrap() * 65536
    );
    for extra in [&["--units", "m"][..], &["--no-suffix"], &["--raw"]] {
        let mut args = vec!["--json", "meta", "ls", &path];
        args.extend_from_slice(extra);
        let o = rthinctl(&args);
        assert_eq!(o.code, 2, "{extra:?}: {}", o.stderr);
        assert!(o.stderr.contains("--json"), "{}", o.stderr);
    }
}

#[test]
fn a_zero_data_block_size_is_damage() {
    let p = image_with_superblock(|sb| put_u32(sb, off::DATA_BLOCK_SIZE, 0));
    for cmd in ["check", "dump", "ls"] {
        let o = rthinctl(&["meta", cmd, &p.0]);
        assert_eq!(o.code, 1, "meta {cmd}: {}", o.stdout);
        assert!(
            o.stderr.contains("data block size 0"),
            "meta {cmd}: {}",
            o.stderr
        );
    }
}

/// The image with needs_check set in its superblock.
fn image_needing_check() -> TempPath {
    image_with_superblock(|sb| put_u32(sb, off::FLAGS, 1))
}

fn needs_check(path: &str) -> bool {
    let o = rthinctl(&["--json", "meta", "ls", path]);
    assert_eq!(o.code, 0, "{}", o.stderr);
    let j: serde_json::Value = serde_json::from_str(&o.stdout).unwrap();
    j["needs_check"].as_bool().unwrap()
}

#[test]
fn rthin_check_takes_what_lvm_passes() {
    // LVM runs its thin_check_executable with "-q --clear-needs-check-flag".
    let dir = std::env::temp_dir().join(format!("rthinctl-lvm-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let rthin_check = dir.join("rthin_check");
    let _ = std::fs::remove_file(&rthin_check);
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_rthinctl"), &rthin_check).unwrap();
    let run = |args: &[&str]| {
        let o = std::process::Command::new(&rthin_check)
            .args(args)
            .output()
            .unwrap();
        (
            o.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr),
        )
    };
    let p = image_needing_check();
    assert!(needs_check(&p.0));
    assert_eq!(
        run(&["-q", "--clear-needs-check-flag", &p.0]),
        (0, String::new())
    );
    assert!(!needs_check(&p.0), "needs_check was not cleared");
    // The other options LVM users put in thin_check_options.
    for opts in [
        &["-q", "--skip-mappings"][..],
        &["-q", "--super-block-only"],
        &["-q", "--ignore-non-fatal-errors"],
    ] {
        let mut a = opts.to_vec();
        a.push(&p.0);
        assert_eq!(run(&a), (0, String::new()), "{opts:?}");
    }
    // -m: the held snapshot, which this image has none of.
    let (code, out) = run(&["-q", "-m", &p.0]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("no metadata snapshot"), "{out}");
    // Damage: exit 1, and needs_check stays set.
    let mut img = std::fs::read(&image_needing_check().0).unwrap();
    let leaf = img
        .chunks(BLOCK_SIZE)
        .enumerate()
        .position(|(b, blk)| {
            verify(BlockKind::Node, b as u64, blk).is_ok()
                && rthin_core::pdata::btree::node::check(blk, 8)
                    .is_ok_and(|h| h.leaf && h.nr_entries > 0)
        })
        .unwrap();
    img[leaf * BLOCK_SIZE + 200] ^= 0xff;
    let bad = TempPath::new(&img);
    let (code, out) = run(&["-q", "--clear-needs-check-flag", &bad.0]);
    assert_eq!(code, 1, "{out}");
    let flags = std::fs::read(&bad.0).unwrap()[off::FLAGS];
    assert_eq!(flags & 1, 1, "needs_check cleared on damaged metadata");
    // --super-block-only reads nothing but the superblock.
    assert_eq!(run(&["-q", "--super-block-only", &bad.0]).0, 0);
    let _ = std::fs::remove_dir_all(&dir);
}
