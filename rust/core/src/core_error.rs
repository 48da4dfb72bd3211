// SPDX-License-Identifier: GPL-2.0
//! Error values of the metadata core.
//!
//! Every failure is a value; nothing in the core panics. The kernel glue maps
//! these to errnos (see [`CoreError::errno`]).

/// Which check found the metadata inconsistent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Corruption {
    /// A block checksum did not match.
    Checksum,
    /// A block does not carry its own block number.
    BlockNr,
    /// The superblock magic is wrong.
    Magic,
    /// A superblock field is out of range or unsupported.
    Superblock,
    /// A B-tree node header is invalid (flags, sizes, entry counts).
    NodeHeader,
    /// B-tree keys are not strictly increasing or lie outside their parent's range.
    KeyOrder,
    /// A tree is deeper than the core accepts (or contains a cycle).
    TooDeep,
    /// A block number points outside the device or at the superblock.
    BlockOutOfRange,
    /// A space map structure (index, bitmap, overflow count) is inconsistent.
    SpaceMap,
    /// A reference count would drop below zero or is zero for a live block.
    RefCount,
    /// A field offset fell outside a block (internal layout error).
    Layout,
}

/// Errors returned by the metadata core.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoreError {
    /// The block store failed with this (negative) errno.
    Io(i32),
    /// On-disk metadata failed validation.
    Corrupt(Corruption),
    /// No free block in the metadata or data space map.
    NoSpace,
    /// The device, mapping or snapshot does not exist (ENODATA).
    NotFound,
    /// The device already exists (EEXIST).
    Exists,
    /// A metadata snapshot is already held (EBUSY).
    Busy,
    /// Invalid argument (EINVAL), e.g. a transaction id mismatch.
    Invalid,
    /// Block 0 is all zeroes: the device has never been formatted.
    Unformatted,
    /// Unsupported feature flags (EINVAL in dm-thin).
    Unsupported,
    /// An internal limit of the core was exceeded (recursion, reservation slots).
    Internal,
}

impl CoreError {
    /// Linux errno (positive) corresponding to this error.
    pub fn errno(self) -> i32 {
        match self {
            CoreError::Io(e) => e.checked_neg().unwrap_or(5).max(1),
            CoreError::Corrupt(_) => 84, // EILSEQ
            CoreError::NoSpace => 28,    // ENOSPC
            CoreError::NotFound => 61,   // ENODATA
            CoreError::Exists => 17,     // EEXIST
            CoreError::Busy => 16,       // EBUSY
            CoreError::Invalid | CoreError::Unsupported => 22,
            CoreError::Unformatted => 19, // ENODEV
            CoreError::Internal => 5,     // EIO
        }
    }
}

impl core::fmt::Display for Corruption {
    /// What is wrong, as a noun phrase a checker report puts before the
    /// structure and block it concerns ("bad checksum in btree node").
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Corruption::Checksum => "bad checksum",
            Corruption::BlockNr => "wrong block number (a block written elsewhere)",
            Corruption::Magic => "bad magic number",
            Corruption::Superblock => "invalid superblock field",
            Corruption::NodeHeader => "invalid node header",
            Corruption::KeyOrder => "keys out of order",
            Corruption::TooDeep => "tree too deep (or a cycle)",
            Corruption::BlockOutOfRange => "block number beyond the metadata device",
            Corruption::SpaceMap => "inconsistent space map",
            Corruption::RefCount => "bad reference count",
            Corruption::Layout => "field outside its block",
        })
    }
}

impl core::fmt::Display for CoreError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            CoreError::Io(e) => write!(f, "read error (errno {})", e.unsigned_abs()),
            CoreError::Corrupt(c) => write!(f, "{c}"),
            CoreError::NoSpace => f.write_str("no free block"),
            CoreError::NotFound => f.write_str("no such device"),
            CoreError::Exists => f.write_str("device exists"),
            CoreError::Busy => f.write_str("a metadata snapshot is already held"),
            CoreError::Invalid => f.write_str("invalid argument"),
            CoreError::Unformatted => f.write_str("never formatted (all zero)"),
            CoreError::Unsupported => f.write_str("unsupported feature flags"),
            CoreError::Internal => f.write_str("internal limit exceeded"),
        }
    }
}

/// Result type of the metadata core.
pub type CoreResult<T> = Result<T, CoreError>;

/// Shorthand for a corruption error.
#[inline(always)]
pub(crate) const fn corrupt(c: Corruption) -> CoreError {
    CoreError::Corrupt(c)
}
