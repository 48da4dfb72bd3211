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

/// Result type of the metadata core.
pub type CoreResult<T> = Result<T, CoreError>;

/// Shorthand for a corruption error.
#[inline(always)]
pub(crate) const fn corrupt(c: Corruption) -> CoreError {
    CoreError::Corrupt(c)
}
