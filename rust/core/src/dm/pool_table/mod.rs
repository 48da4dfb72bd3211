// SPDX-License-Identifier: GPL-2.0
//! The pool target's constructor arguments and table line (interface.md,
//! "Pool target").
//!
//! ```text
//! <metadata dev> <data dev> <data block size> <low water mark> [<#features> <feature>*]
//! ```
//!
//! [`PoolTable::parse`] runs every check dm-thin's `pool_ctr` makes without
//! touching a device, in the kernel's order, and reports failures as a
//! [`PoolTableError`] whose [`PoolTableError::message`] is the exact
//! `ti->error` text. Two checks (block size, low water mark) come *after* the
//! devices are opened in dm-thin; see [`PoolTableError::after_device_open`]
//! for how the glue keeps the kernel's error precedence.
//!
//! [`write_pool_table`] formats the `STATUSTYPE_TABLE` line byte for byte.

use core::{ffi::CStr, fmt};

use crate::dm::args::{parse_dm_arg_u32, parse_kstrtoull};
use crate::dm::errno::EINVAL;
use crate::dm::pool_mode::PoolMode;
use crate::dm::status_buf::DevNum;

/// Smallest data block size, in sectors (64 KiB).
pub const DATA_BLOCK_SIZE_MIN_SECTORS: u32 = 128;
/// Largest data block size, in sectors (1 GiB).
pub const DATA_BLOCK_SIZE_MAX_SECTORS: u32 = 2_097_152;
/// Most feature arguments a table may carry.
pub const MAX_FEATURE_ARGS: u32 = 4;
/// Metadata block size in sectors (4 KiB).
pub const METADATA_BLOCK_SECTORS: u64 = 8;
/// Metadata beyond this many sectors is never used (255 × 16320 blocks).
pub const METADATA_MAX_SECTORS: u64 = 33_292_800;
/// A metadata device larger than this (16 GiB) draws a warning at ctr.
pub const METADATA_MAX_SECTORS_WARNING: u64 = 33_554_432;

/// `ti->error` texts the glue sets itself for the steps that need devices or
/// memory (the glue's steps of the check table in interface.md, "Pool
/// target"), so every pool ctr string lives in one place.
pub mod glue_errors {
    use core::ffi::CStr;

    /// Opening the metadata device failed.
    pub const OPEN_METADATA: &CStr = c"Error opening metadata block device";
    /// Opening the data device failed.
    pub const OPEN_DATA: &CStr = c"Error getting data device";
    /// Opening/formatting the metadata failed.
    pub const CREATE_METADATA: &CStr = c"Error creating metadata object";
    /// The metadata device belongs to another pool's DM device (EBUSY).
    pub const METADATA_IN_USE: &CStr = c"metadata device already in use by a pool";
    /// Same DM device and metadata, other data device (EBUSY).
    pub const DATA_IN_USE: &CStr = c"data device already in use by a pool";
    /// Same DM device, other metadata or data device (EINVAL).
    pub const DIFFERENT_POOL: &CStr = c"different pool cannot replace a pool";
    /// Reload changing `ignore_discard` (EINVAL).
    pub const DISCARD_CHANGED: &CStr = c"Discard support cannot be disabled once enabled";
    /// Registering the metadata low-water threshold failed.
    pub const THRESHOLD: &CStr = c"Error registering metadata threshold";
    /// Allocating the pool object failed.
    pub const ALLOC_POOL: &CStr = c"Error allocating memory for pool";
}

/// The feature words of a pool table; defaults are dm-thin's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolFeatures {
    /// Zero newly provisioned blocks (cleared by `skip_block_zeroing`).
    pub zero_new_blocks: bool,
    /// Discard support (cleared by `ignore_discard`).
    pub discard_enabled: bool,
    /// Pass discards down to the data device (cleared by `no_discard_passdown`).
    pub discard_passdown: bool,
    /// Start in read-only mode (`read_only`).
    pub read_only: bool,
    /// Error instead of queueing when out of data space (`error_if_no_space`).
    pub error_if_no_space: bool,
}

impl Default for PoolFeatures {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Feature keywords in the order the table line prints them.
const FEATURE_NAMES: [&str; 5] = [
    "skip_block_zeroing",
    "ignore_discard",
    "no_discard_passdown",
    "read_only",
    "error_if_no_space",
];

impl PoolFeatures {
    /// No feature words: zeroing, discard and passdown on, read-write, queue.
    pub const DEFAULT: Self = Self {
        zero_new_blocks: true,
        discard_enabled: true,
        discard_passdown: true,
        read_only: false,
        error_if_no_space: false,
    };

    /// Applies one feature word (case-insensitive). Returns false for an
    /// unknown word.
    pub fn apply(&mut self, word: &[u8]) -> bool {
        let Some(idx) = FEATURE_NAMES
            .iter()
            .position(|n| n.as_bytes().eq_ignore_ascii_case(word))
        else {
            return false;
        };
        match idx {
            0 => self.zero_new_blocks = false,
            1 => self.discard_enabled = false,
            2 => self.discard_passdown = false,
            3 => self.read_only = true,
            _ => self.error_if_no_space = true,
        }
        true
    }

    fn flags(&self) -> [bool; 5] {
        [
            !self.zero_new_blocks,
            !self.discard_enabled,
            !self.discard_passdown,
            self.read_only,
            self.error_if_no_space,
        ]
    }

    /// Number of non-default features (the count the table line prints;
    /// duplicates in the input are counted once).
    pub fn count(&self) -> u32 {
        self.flags().iter().map(|&f| u32::from(f)).sum()
    }

    /// Writes `"<count> "` and each non-default feature followed by a space, in
    /// the canonical order `skip_block_zeroing ignore_discard
    /// no_discard_passdown read_only error_if_no_space`.
    pub fn write_table_flags<W: fmt::Write + ?Sized>(&self, w: &mut W) -> fmt::Result {
        write!(w, "{} ", self.count())?;
        for (name, set) in FEATURE_NAMES.iter().zip(self.flags()) {
            if set {
                w.write_str(name)?;
                w.write_str(" ")?;
            }
        }
        Ok(())
    }

    /// The mode this table requests when first bound.
    pub fn requested_mode(&self) -> PoolMode {
        if self.read_only {
            PoolMode::ReadOnly
        } else {
            PoolMode::Write
        }
    }

    /// True if discards are forwarded to the data device by the pool target
    /// (sets `num_discard_bios = 1`, `discards_supported`,
    /// `max_discard_granularity` at ctr).
    pub fn passes_discards(&self) -> bool {
        self.discard_enabled && self.discard_passdown
    }
}

/// A pool constructor error; [`PoolTableError::message`] is dm-thin's exact
/// `ti->error` and [`PoolTableError::errno`] the return value (all EINVAL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PoolTableError {
    /// Fewer than four words.
    InvalidArgumentCount,
    /// Metadata and data device words are the same string.
    SameDevice,
    /// Feature count not a number, above 4, or more than the words left.
    InvalidFeatureCount,
    /// A feature word is not one of the five keywords.
    UnrecognisedFeature,
    /// Block size not a number, 0, out of 128..=2097152 or not a multiple of 128.
    InvalidBlockSize,
    /// Low water mark not a u64.
    InvalidLowWaterMark,
}

impl PoolTableError {
    /// The exact `ti->error` string.
    pub fn message(self) -> &'static CStr {
        match self {
            Self::InvalidArgumentCount => c"Invalid argument count",
            Self::SameDevice => c"Error setting metadata or data device",
            Self::InvalidFeatureCount => c"Invalid number of pool feature arguments",
            Self::UnrecognisedFeature => c"Unrecognised pool feature requested",
            Self::InvalidBlockSize => c"Invalid block size",
            Self::InvalidLowWaterMark => c"Invalid low water mark",
        }
    }

    /// The (positive) errno; the ctr returns its negation.
    pub fn errno(self) -> i32 {
        EINVAL
    }

    /// dm-thin makes this check only after opening the metadata and data
    /// devices. The glue must therefore open them first when it gets such an
    /// error, and report an open failure instead if one happens; errors for
    /// which this is false are reported before any device is touched.
    pub fn after_device_open(self) -> bool {
        matches!(self, Self::InvalidBlockSize | Self::InvalidLowWaterMark)
    }
}

impl fmt::Display for PoolTableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message().to_str().unwrap_or("?"))
    }
}

/// A parsed pool constructor line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolTable<'a> {
    /// The metadata device word, as given (path or `maj:min`).
    pub metadata_dev: &'a [u8],
    /// The data device word, as given.
    pub data_dev: &'a [u8],
    /// Data block size in sectors (validated).
    pub block_size: u32,
    /// Low water mark in data blocks.
    pub low_water_blocks: u64,
    /// Requested features.
    pub features: PoolFeatures,
    /// Words after the feature group, silently ignored like dm-thin does.
    pub ignored_words: usize,
}

/// Whether `sectors` is a data block size dm-thin accepts: a multiple of
/// 128 (64 KiB) from 128 to 2097152 (1 GiB).
pub fn valid_block_size(sectors: u64) -> bool {
    let min = u64::from(DATA_BLOCK_SIZE_MIN_SECTORS);
    (min..=u64::from(DATA_BLOCK_SIZE_MAX_SECTORS)).contains(&sectors) && sectors % min == 0
}

/// Validates a data block size word (`kstrtoul` then range/alignment).
pub fn parse_block_size(word: &[u8]) -> Result<u32, PoolTableError> {
    let v = parse_kstrtoull(word).map_err(|_| PoolTableError::InvalidBlockSize)?;
    if !valid_block_size(v) {
        return Err(PoolTableError::InvalidBlockSize);
    }
    u32::try_from(v).map_err(|_| PoolTableError::InvalidBlockSize)
}

impl<'a> PoolTable<'a> {
    /// Parses the constructor words (without `<start> <len> thin-pool`),
    /// checking in dm-thin's order: word count, identical device strings,
    /// feature group, block size, low water mark.
    pub fn parse<W: AsRef<[u8]>>(words: &'a [W]) -> Result<Self, PoolTableError> {
        let (metadata_dev, data_dev, bs_word, lwm_word, rest) = match words {
            [m, d, b, l, rest @ ..] => (m.as_ref(), d.as_ref(), b.as_ref(), l.as_ref(), rest),
            _ => return Err(PoolTableError::InvalidArgumentCount),
        };
        if metadata_dev == data_dev {
            return Err(PoolTableError::SameDevice);
        }
        let mut features = PoolFeatures::DEFAULT;
        let mut ignored_words = 0;
        if let Some((count_word, rest)) = rest.split_first() {
            let count = parse_dm_arg_u32(count_word.as_ref())
                .ok()
                .filter(|&n| n <= MAX_FEATURE_ARGS)
                .and_then(|n| usize::try_from(n).ok())
                .filter(|&n| n <= rest.len())
                .ok_or(PoolTableError::InvalidFeatureCount)?;
            let (feature_words, tail) = rest.split_at(count);
            for word in feature_words {
                if !features.apply(word.as_ref()) {
                    return Err(PoolTableError::UnrecognisedFeature);
                }
            }
            ignored_words = tail.len();
        }
        let block_size = parse_block_size(bs_word)?;
        let low_water_blocks =
            parse_kstrtoull(lwm_word).map_err(|_| PoolTableError::InvalidLowWaterMark)?;
        Ok(Self {
            metadata_dev,
            data_dev,
            block_size,
            low_water_blocks,
            features,
            ignored_words,
        })
    }
}

/// Everything the pool's `STATUSTYPE_TABLE` line shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolTableLine {
    /// Metadata device number.
    pub metadata_dev: DevNum,
    /// Data device number.
    pub data_dev: DevNum,
    /// The **live pool object's** block size (a reload with a different size
    /// keeps the old one, as in dm-thin: compatibility.md, "Reload with
    /// another block size").
    pub block_size: u32,
    /// This table's low water mark.
    pub low_water_blocks: u64,
    /// This table's **requested** features (not the adjusted/live ones).
    pub requested: PoolFeatures,
}

/// Writes the table line:
/// `<meta maj:min> <data maj:min> <block size> <low water mark> <n> [<feature> ]*`
/// — every field, including the last feature, followed by one space.
pub fn write_pool_table<W: fmt::Write + ?Sized>(w: &mut W, t: &PoolTableLine) -> fmt::Result {
    write!(
        w,
        "{} {} {} {} ",
        t.metadata_dev, t.data_dev, t.block_size, t.low_water_blocks
    )?;
    t.requested.write_table_flags(w)
}

/// Number of data blocks for a pool target of `target_sectors` sectors
/// (`floor(len / block size)`); 0 for a zero block size.
pub fn nr_data_blocks(target_sectors: u64, block_size: u32) -> u64 {
    target_sectors
        .checked_div(u64::from(block_size))
        .unwrap_or(0)
}

/// Usable metadata size in 4 KiB blocks for a metadata device of
/// `dev_sectors` sectors (capped at [`METADATA_MAX_SECTORS`]).
pub fn metadata_dev_blocks(dev_sectors: u64) -> u64 {
    dev_sectors.min(METADATA_MAX_SECTORS) / METADATA_BLOCK_SECTORS
}

/// dm-thin's `warn_if_metadata_device_too_big`: a metadata device over 16 GiB
/// works, but its space past [`METADATA_MAX_SECTORS`] is never used, which
/// the ctr and a metadata resize log as a warning.
pub fn metadata_dev_too_big(dev_sectors: u64) -> bool {
    dev_sectors > METADATA_MAX_SECTORS_WARNING
}

/// The metadata low-water threshold (status field 9) for a metadata device of
/// `dev_blocks` usable blocks: `min(1024, dev_blocks / 4)`.
pub fn metadata_low_water_threshold(dev_blocks: u64) -> u64 {
    (dev_blocks / 4).min(1024)
}

/// The queue limits a pool device gets on top of those dm stacked from its
/// data device (dm-thin's `pool_io_hints`; interface.md, "Pool target").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolIoLimits {
    /// `max_sectors`: a value below one block that does not divide the block
    /// size becomes the largest power of two below it that does.
    pub max_sectors: u32,
    /// New `io_min` and `io_opt` in bytes; `None` keeps the stacked ones,
    /// which happens when the data device's `io_opt` is a whole number of
    /// blocks (a RAID stripe of one or more blocks).
    pub io_min_opt: Option<(u32, u32)>,
}

/// What dm-thin's pool makes of the stacked `max_sectors` and `io_opt`
/// (bytes) for blocks of `block_sectors`. Unless `io_opt` is already a
/// multiple of the block, `io_opt` becomes one block and `io_min` the
/// (adjusted) `max_sectors` when that divides the block, else one block:
/// filesystems then align their allocations to the pool's blocks.
pub fn pool_io_limits(block_sectors: u32, max_sectors: u32, io_opt_bytes: u32) -> PoolIoLimits {
    let divides_block = |n: u32| n != 0 && block_sectors % n == 0;
    let mut max = max_sectors;
    if max != 0 && max < block_sectors && !divides_block(max) {
        // The powers of two dividing the block are those up to its lowest
        // set bit; take the largest that is also below `max`.
        let below_max = 1u32 << (31 - max.leading_zeros());
        let block_pow2 = 1u32 << block_sectors.trailing_zeros();
        max = below_max.min(block_pow2);
    }
    let io_opt_sectors = io_opt_bytes >> 9;
    let whole_blocks = io_opt_sectors >= block_sectors
        && block_sectors != 0
        && io_opt_sectors % block_sectors == 0;
    let block_bytes = block_sectors.saturating_mul(512);
    let io_min_opt = (!whole_blocks).then(|| {
        let io_min = if divides_block(max) {
            max.saturating_mul(512)
        } else {
            block_bytes
        };
        (io_min, block_bytes)
    });
    PoolIoLimits {
        max_sectors: max,
        io_min_opt,
    }
}

/// Why dm-thin turns discard passdown off for a data device
/// (`disable_discard_passdown_if_not_supported`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassdownOff {
    /// The data device does not discard at all.
    DiscardUnsupported,
    /// Its largest discard is smaller than one data block.
    MaxDiscardBelowBlock,
}

impl PassdownOff {
    /// The reason as dm-thin's log line words it: "Data device (NAME)
    /// REASON: Disabling discard passdown."
    pub fn reason(self) -> &'static str {
        match self {
            Self::DiscardUnsupported => "discard unsupported",
            Self::MaxDiscardBelowBlock => "max discard sectors smaller than a block",
        }
    }
}

/// Whether a data device whose `max_discard_sectors` is given can take the
/// passdown of whole blocks of `block_sectors`; `Some(why)` if not.
pub fn passdown_off(max_discard_sectors: u32, block_sectors: u32) -> Option<PassdownOff> {
    if max_discard_sectors == 0 {
        Some(PassdownOff::DiscardUnsupported)
    } else if max_discard_sectors < block_sectors {
        Some(PassdownOff::MaxDiscardBelowBlock)
    } else {
        None
    }
}

/// Scenarios shared by the host tests and the module's KUnit suite.
#[cfg(any(test, feature = "selftest"))]
pub mod selftest {
    use super::*;
    use crate::dm::status_buf::StatusBuf;

    /// A plain four-word table parses with default features.
    pub fn parses_minimal() -> bool {
        let words: [&[u8]; 4] = [b"/dev/meta", b"/dev/data", b"128", b"0"];
        matches!(PoolTable::parse(&words), Ok(t)
            if t.metadata_dev == b"/dev/meta" && t.data_dev == b"/dev/data"
                && t.block_size == 128 && t.low_water_blocks == 0
                && t.features == PoolFeatures::DEFAULT && t.ignored_words == 0)
    }

    /// Features are case-insensitive, printed in canonical order.
    pub fn canonical_feature_order() -> bool {
        let words: [&[u8]; 7] = [
            b"253:1",
            b"253:2",
            b"1024",
            b"100",
            b"2",
            b"ERROR_IF_NO_SPACE",
            b"skip_block_zeroing",
        ];
        let Ok(t) = PoolTable::parse(&words) else {
            return false;
        };
        let line = PoolTableLine {
            metadata_dev: DevNum::new(253, 1),
            data_dev: DevNum::new(253, 2),
            block_size: t.block_size,
            low_water_blocks: t.low_water_blocks,
            requested: t.features,
        };
        let mut raw = [0u8; 96];
        let mut w = StatusBuf::new(&mut raw);
        write_pool_table(&mut w, &line).is_ok()
            && w.as_bytes() == b"253:1 253:2 1024 100 2 skip_block_zeroing error_if_no_space "
    }

    /// Every pure ctr error carries dm-thin's exact message.
    pub fn error_strings() -> bool {
        let e = |w: &[&[u8]]| {
            PoolTable::parse(w)
                .err()
                .and_then(|e| e.message().to_str().ok())
        };
        e(&[b"a", b"b", b"128"]) == Some("Invalid argument count")
            && e(&[b"a", b"a", b"128", b"0"]) == Some("Error setting metadata or data device")
            && e(&[b"a", b"b", b"128", b"0", b"5", b"a", b"b", b"c", b"d", b"e"])
                == Some("Invalid number of pool feature arguments")
            && e(&[b"a", b"b", b"128", b"0", b"1", b"bogus"])
                == Some("Unrecognised pool feature requested")
            && e(&[b"a", b"b", b"129", b"0"]) == Some("Invalid block size")
            && e(&[b"a", b"b", b"128", b"-1"]) == Some("Invalid low water mark")
    }

    /// The pool's queue limits and passdown checks, for data devices of the
    /// kinds the VM test `31-io-limits.sh` builds.
    pub fn io_limits() -> bool {
        let l = |bs, max, opt| {
            let r = pool_io_limits(bs, max, opt);
            (r.max_sectors, r.io_min_opt)
        };
        // 64 KiB blocks on brd (max_sectors 254, no io_opt).
        l(128, 254, 0) == (254, Some((65536, 65536)))
            // 2 MiB blocks on null_blk with max_sectors 1000: 512 sectors.
            && l(4096, 1000, 0) == (512, Some((262144, 2097152)))
            // max_sectors 96 divides 192 KiB blocks; for 320 KiB ones the
            // largest power of two below it that divides them is 64.
            && l(384, 96, 0) == (96, Some((49152, 196608)))
            && l(640, 96, 0) == (64, Some((32768, 327680)))
            // A 2-way stripe of 64 KiB (io_opt 128 KiB): kept for 64 and
            // 128 KiB blocks, replaced for 192 KiB ones.
            && l(128, 8192, 131072) == (8192, None)
            && l(256, 8192, 131072) == (8192, None)
            && l(384, 8192, 131072) == (8192, Some((196608, 196608)))
            // 1 GiB blocks on the default 2560-sector max_sectors.
            && l(2_097_152, 2560, 0) == (2048, Some((1_048_576, 1_073_741_824)))
            && passdown_off(0, 128) == Some(PassdownOff::DiscardUnsupported)
            && passdown_off(64, 128) == Some(PassdownOff::MaxDiscardBelowBlock)
            && passdown_off(128, 128).is_none()
            && PassdownOff::MaxDiscardBelowBlock.reason() == "max discard sectors smaller than a block"
    }
}

#[cfg(test)]
mod tests;
