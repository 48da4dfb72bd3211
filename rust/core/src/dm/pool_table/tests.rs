// SPDX-License-Identifier: GPL-2.0
//! Host tests of `crate::dm::pool_table`.

use super::selftest;
use super::*;
use crate::dm::status_buf::StatusBuf;
use std::borrow::ToOwned;
use std::string::String;
use std::vec::Vec;

fn words(s: &str) -> Vec<&[u8]> {
    s.split(' ').map(str::as_bytes).collect()
}

/// Parses a space-separated line; the words are leaked (tests only) so
/// the borrowed table can be returned.
fn parse(s: &str) -> Result<PoolTable<'static>, PoolTableError> {
    let s: &'static str = std::boxed::Box::leak(s.to_owned().into_boxed_str());
    let w: &'static [&'static [u8]] = std::boxed::Box::leak(words(s).into_boxed_slice());
    PoolTable::parse(w)
}

fn err(s: &str) -> PoolTableError {
    parse(s).unwrap_err()
}

fn table_line(t: &PoolTable<'_>, live_bs: u32) -> String {
    let line = PoolTableLine {
        metadata_dev: DevNum::new(253, 1),
        data_dev: DevNum::new(253, 2),
        block_size: live_bs,
        low_water_blocks: t.low_water_blocks,
        requested: t.features,
    };
    let mut raw = [0u8; 256];
    let mut w = StatusBuf::new(&mut raw);
    write_pool_table(&mut w, &line).unwrap();
    String::from_utf8(w.as_bytes().to_vec()).unwrap()
}

#[test]
fn scenarios() {
    assert!(selftest::parses_minimal());
    assert!(selftest::canonical_feature_order());
    assert!(selftest::error_strings());
    assert!(selftest::io_limits());
}

#[test]
fn block_sizes_checklist_a3() {
    // 192 is not a multiple of 128 and dm-thin's `bs & 127` test rejects
    // it (compatibility.md, "Block size 192").
    for bad in [
        "0", "64", "127", "129", "192", "2097280", "abc", "128x", "", "-128", "0x80",
    ] {
        assert_eq!(
            parse_block_size(bad.as_bytes()),
            Err(PoolTableError::InvalidBlockSize),
            "{bad:?}"
        );
    }
    for (good, v) in [
        ("128", 128),
        ("640", 640),
        ("384", 384),
        ("2097152", 2_097_152),
        ("+256", 256),
        ("256\n", 256),
        ("00128", 128),
    ] {
        assert_eq!(parse_block_size(good.as_bytes()), Ok(v), "{good:?}");
    }
    assert_eq!(
        parse_block_size(b"18446744073709551616"),
        Err(PoolTableError::InvalidBlockSize)
    );
}

#[test]
fn low_water_checklist_a4() {
    assert_eq!(err("m d 128 -1"), PoolTableError::InvalidLowWaterMark);
    assert_eq!(err("m d 128 1k"), PoolTableError::InvalidLowWaterMark);
    assert_eq!(
        parse("m d 128 18446744073709551615")
            .unwrap()
            .low_water_blocks,
        u64::MAX
    );
    assert_eq!(
        err("m d 128 18446744073709551616"),
        PoolTableError::InvalidLowWaterMark
    );
}

#[test]
fn check_order() {
    // Count before everything.
    assert_eq!(err("m m 0"), PoolTableError::InvalidArgumentCount);
    assert_eq!(err("m"), PoolTableError::InvalidArgumentCount);
    // Same-device before features and numbers.
    assert_eq!(err("m m 0 x 9 bogus"), PoolTableError::SameDevice);
    // Features before block size / low water mark.
    assert_eq!(err("m d 0 x 1 bogus"), PoolTableError::UnrecognisedFeature);
    assert_eq!(err("m d 0 x 5"), PoolTableError::InvalidFeatureCount);
    // Block size before low water mark.
    assert_eq!(err("m d 0 x"), PoolTableError::InvalidBlockSize);
    assert!(PoolTableError::InvalidBlockSize.after_device_open());
    assert!(PoolTableError::InvalidLowWaterMark.after_device_open());
    assert!(!PoolTableError::UnrecognisedFeature.after_device_open());
    assert!(!PoolTableError::SameDevice.after_device_open());
    // Different spellings of one device are not caught here.
    assert!(parse("/dev/dm-1 253:1 128 0").is_ok());
}

#[test]
fn feature_group_checklist_a6() {
    assert_eq!(
        err("m d 128 0 5 a b c d e"),
        PoolTableError::InvalidFeatureCount
    );
    assert_eq!(
        err("m d 128 0 2 read_only"),
        PoolTableError::InvalidFeatureCount
    );
    assert_eq!(err("m d 128 0 x"), PoolTableError::InvalidFeatureCount);
    assert_eq!(
        err("m d 128 0 +1 read_only"),
        PoolTableError::InvalidFeatureCount
    );
    assert_eq!(
        err("m d 128 0 1\n read_only"),
        PoolTableError::InvalidFeatureCount
    );
    assert_eq!(
        err("m d 128 0 1 bogus"),
        PoolTableError::UnrecognisedFeature
    );
    assert_eq!(
        err("m d 128 0 1 read-only"),
        PoolTableError::UnrecognisedFeature
    );
    let t = parse("m d 128 0 1 SKIP_BLOCK_ZEROING").unwrap();
    assert!(!t.features.zero_new_blocks);
    // Words after the group are ignored, even unknown ones.
    let t = parse("m d 128 0 1 read_only junk more").unwrap();
    assert!(t.features.read_only);
    assert_eq!(t.ignored_words, 2);
    let t = parse("m d 128 0 0 bogus").unwrap();
    assert_eq!(t.features, PoolFeatures::DEFAULT);
    // Duplicates accepted and printed once.
    let t = parse("m d 128 0 2 read_only READ_ONLY").unwrap();
    assert_eq!(table_line(&t, 128), "253:1 253:2 128 0 1 read_only ");
    // Kernel sscanf truncates the count to 32 bits: 2^32 means 0.
    let t = parse("m d 128 0 4294967296 bogus").unwrap();
    assert_eq!(t.features, PoolFeatures::DEFAULT);
    assert_eq!(t.ignored_words, 1);
    // The five keywords exist but at most four fit.
    let t = parse("m d 128 0 4 skip_block_zeroing ignore_discard no_discard_passdown read_only")
        .unwrap();
    assert_eq!(t.features.count(), 4);
}

#[test]
fn table_lines_checklist_a10() {
    let t = parse("m d 128 0").unwrap();
    assert_eq!(table_line(&t, 128), "253:1 253:2 128 0 0 ");
    let t = parse("m d 128 7 4 error_if_no_space read_only no_discard_passdown ignore_discard")
        .unwrap();
    assert_eq!(
        table_line(&t, 128),
        "253:1 253:2 128 7 4 ignore_discard no_discard_passdown read_only error_if_no_space "
    );
    // The live block size is printed, not the table's (compatibility.md,
    // "Reload with another block size").
    let t = parse("m d 256 0").unwrap();
    assert_eq!(table_line(&t, 128), "253:1 253:2 128 0 0 ");
    let mut f = PoolFeatures::DEFAULT;
    for w in FEATURE_NAMES {
        assert!(f.apply(w.as_bytes()));
    }
    assert_eq!(f.count(), 5);
    let line = PoolTableLine {
        metadata_dev: DevNum::new(7, 0),
        data_dev: DevNum::new(7, 1),
        block_size: 2_097_152,
        low_water_blocks: u64::MAX,
        requested: f,
    };
    let mut raw = [0u8; 200];
    let mut w = StatusBuf::new(&mut raw);
    write_pool_table(&mut w, &line).unwrap();
    assert_eq!(
        w.as_bytes(),
        &b"7:0 7:1 2097152 18446744073709551615 5 skip_block_zeroing ignore_discard \
no_discard_passdown read_only error_if_no_space "[..]
    );
}

#[test]
fn round_trip_every_feature_subset() {
    for mask in 0u32..32 {
        let mut feature_words = Vec::new();
        // Reverse of canonical order, to exercise reordering.
        for (i, name) in FEATURE_NAMES.iter().enumerate().rev() {
            if mask & (1 << i) != 0 {
                feature_words.push(*name);
            }
        }
        if feature_words.len() > 4 {
            continue;
        }
        let mut line = String::from("253:1 253:2 384 42");
        if !feature_words.is_empty() {
            line.push_str(&std::format!(" {}", feature_words.len()));
            for w in &feature_words {
                line.push(' ');
                line.push_str(w);
            }
        }
        let t = parse(&line).unwrap();
        let out = table_line(&t, t.block_size);
        // Formatting yields a table the parser accepts, with the same meaning.
        let trimmed = out.trim_end();
        let t2 = parse(trimmed).unwrap();
        assert_eq!(t2.features, t.features);
        assert_eq!(t2.block_size, 384);
        assert_eq!(t2.low_water_blocks, 42);
        assert_eq!(table_line(&t2, 384), out);
        assert_eq!(t.features.count() as usize, feature_words.len());
    }
}

#[test]
fn table_truncation() {
    let t = parse("m d 128 0 1 read_only").unwrap();
    let line = PoolTableLine {
        metadata_dev: DevNum::new(253, 1),
        data_dev: DevNum::new(253, 2),
        block_size: 128,
        low_water_blocks: 0,
        requested: t.features,
    };
    let full = "253:1 253:2 128 0 1 read_only ";
    for n in 0..=full.len() + 1 {
        let mut raw = std::vec![0u8; n];
        let mut w = StatusBuf::new(&mut raw);
        let r = write_pool_table(&mut w, &line);
        assert_eq!(r.is_ok(), n > full.len());
        assert!(full.as_bytes().starts_with(w.as_bytes()));
    }
}

/// dm-thin's rule for `max_sectors` as `pool_io_hints` applies it, one step at a
/// time: while it does not divide the block, the next power of two down
/// (strictly down from a power of two).
fn max_sectors_stepwise(block: u32, max: u32) -> u32 {
    let mut m = max;
    if m == 0 || m >= block {
        return m;
    }
    while block % m != 0 {
        let start = if m.is_power_of_two() { m - 1 } else { m };
        m = 1 << (31 - start.leading_zeros());
    }
    m
}

#[test]
fn io_limits_every_block_size() {
    let maxes = [
        1, 8, 96, 127, 128, 200, 254, 255, 256, 1000, 2048, 2560, 4095, 8192,
    ];
    let opts = [
        0,
        512,
        65536,
        131072,
        196608,
        262144,
        1 << 20,
        3 << 20,
        1 << 30,
    ];
    for block in (128..=DATA_BLOCK_SIZE_MAX_SECTORS)
        .step_by(128)
        .filter(|b| b % 1024 == 128 || b.is_power_of_two() || *b > 2_096_000)
    {
        for max in maxes {
            let want_max = max_sectors_stepwise(block, max);
            for opt in opts {
                let got = pool_io_limits(block, max, opt);
                assert_eq!(got.max_sectors, want_max, "block {block} max {max}");
                let opt_sectors = opt / 512;
                let keep = opt_sectors >= block && opt_sectors % block == 0;
                let want = (!keep).then(|| {
                    let min = if block % want_max == 0 {
                        want_max
                    } else {
                        block
                    };
                    (min * 512, block * 512)
                });
                assert_eq!(got.io_min_opt, want, "block {block} max {max} opt {opt}");
            }
        }
    }
    // A max_sectors of 0 (never stacked by dm) is left alone.
    assert_eq!(pool_io_limits(128, 0, 0).io_min_opt, Some((65536, 65536)));
}

#[test]
fn passdown_checks() {
    assert_eq!(
        passdown_off(0, 2_097_152),
        Some(PassdownOff::DiscardUnsupported)
    );
    assert_eq!(
        passdown_off(2_097_151, 2_097_152),
        Some(PassdownOff::MaxDiscardBelowBlock)
    );
    assert_eq!(passdown_off(2_097_152, 2_097_152), None);
    assert_eq!(passdown_off(u32::MAX, 128), None);
    assert_eq!(
        PassdownOff::DiscardUnsupported.reason(),
        "discard unsupported"
    );
}

#[test]
fn helpers() {
    assert_eq!(nr_data_blocks(2 * 1024 * 1024, 128), 16384);
    assert_eq!(nr_data_blocks(127, 128), 0);
    assert_eq!(nr_data_blocks(5, 0), 0);
    assert_eq!(metadata_dev_blocks(4096), 512);
    assert_eq!(metadata_dev_blocks(u64::MAX), 4_161_600);
    // Between the cap and 16 GiB the excess is unused without a warning.
    assert!(!metadata_dev_too_big(METADATA_MAX_SECTORS + 8));
    assert!(!metadata_dev_too_big(33_554_432));
    assert!(metadata_dev_too_big(33_554_433));
    assert_eq!(metadata_low_water_threshold(512), 128);
    assert_eq!(metadata_low_water_threshold(4_161_600), 1024);
    assert_eq!(metadata_low_water_threshold(3), 0);
    let ro = PoolFeatures {
        read_only: true,
        ..PoolFeatures::DEFAULT
    };
    assert_eq!(ro.requested_mode(), PoolMode::ReadOnly);
    assert_eq!(PoolFeatures::DEFAULT.requested_mode(), PoolMode::Write);
    assert!(PoolFeatures::DEFAULT.passes_discards());
    assert_eq!(PoolTableError::InvalidBlockSize.errno(), 22);
}
