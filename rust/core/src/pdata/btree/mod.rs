// SPDX-License-Identifier: GPL-2.0
//! Copy-on-write B+trees with u64 keys in the dm-persistent-data node format
//! (format.md, "B-tree nodes").
//!
//! [`node`] decodes and edits one node in place inside a block buffer; the
//! tree algorithms are methods of the transaction manager (`pdata::tm::Tm`),
//! because shadowing a node needs the transaction manager and the space
//! maps, one file each: [`ops`] (reads and lookups), [`shadow`] (copy-on-write),
//! [`release`] (dropping a tree reference, at once or in pieces), [`insert`],
//! [`remove`] and [`walk`].

pub mod descend;
pub mod insert;
pub mod node;
pub mod ops;
pub mod release;
pub mod remove;
pub mod shadow;
pub mod walk;

/// Maximum tree depth accepted. With at least one entry per internal node and
/// the kernel's fill rules, real trees are far shallower; this bounds every
/// descent, so a cyclic or corrupt tree ends with [`crate::core_error::Corruption::TooDeep`].
pub const MAX_DEPTH: usize = 16;

/// Largest value size of any tree used by thin metadata.
pub const MAX_VALUE_SIZE: usize = 24;

/// What the values of a tree are, which decides the leaf value size and what
/// sharing a leaf means for reference counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TreeKind {
    /// Top level of the mapping tree: value = root of a device's mapping tree
    /// (a counted metadata reference).
    TopLevel,
    /// Bottom level of the mapping tree: value = block_time (a counted data
    /// block reference).
    Mapping,
    /// Device details (24-byte records, no references).
    Details,
    /// Space-map overflow counts (u32, no references).
    RefCount,
    /// Data space-map index entries (16 bytes; the bitmap block is owned by
    /// the index entry, not counted through the tree).
    DataIndex,
}

impl TreeKind {
    /// Value size of this tree's leaves.
    pub const fn value_size(self) -> usize {
        match self {
            TreeKind::TopLevel | TreeKind::Mapping => 8,
            TreeKind::Details => 24,
            TreeKind::RefCount => 4,
            TreeKind::DataIndex => 16,
        }
    }
}

/// A value copied out of a leaf (up to [`MAX_VALUE_SIZE`] bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Value {
    buf: [u8; MAX_VALUE_SIZE],
    len: usize,
}

impl Value {
    /// Copies `v` (truncated to [`MAX_VALUE_SIZE`] bytes).
    pub fn from_slice(v: &[u8]) -> Self {
        let mut buf = [0u8; MAX_VALUE_SIZE];
        let len = v.len().min(MAX_VALUE_SIZE);
        if let (Some(d), Some(s)) = (buf.get_mut(..len), v.get(..len)) {
            d.copy_from_slice(s);
        }
        Value { buf, len }
    }

    /// A value holding a little-endian u64.
    pub fn from_u64(v: u64) -> Self {
        Self::from_slice(&v.to_le_bytes())
    }

    /// The value's bytes.
    pub fn as_slice(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }

    /// The first 8 bytes as a little-endian u64 (0 if shorter).
    pub fn as_u64(&self) -> u64 {
        crate::pdata::codec::get_u64(&self.buf, 0).unwrap_or(0)
    }

    /// The first 4 bytes as a little-endian u32.
    pub fn as_u32(&self) -> u32 {
        crate::pdata::codec::get_u32(&self.buf, 0).unwrap_or(0)
    }
}
