// SPDX-License-Identifier: GPL-2.0
//! The descent from a root to the leaf that holds (or would hold) a key,
//! over any source of node bytes: the transaction manager's store under the
//! metadata's owner, or copies of the last commit's nodes that a reader
//! without the owner's lock takes (`metadata::committed`).

use core::ops::Deref;

use crate::core_error::{corrupt, CoreResult, Corruption};
use crate::pdata::btree::node::{self, Header};
use crate::pdata::btree::{TreeKind, MAX_DEPTH};

/// Descends from `root` towards `key`, reading each node with `read` (which
/// checks the block number and validates the bytes as a node), and calls
/// `at_leaf` with the leaf's bytes, its header and the index of `key` in it
/// if it is there. `None` if a node on the way has no entry at or below
/// `key` (the key is not in the tree).
pub fn descend<G, R>(
    mut read: impl FnMut(u64) -> CoreResult<G>,
    root: u64,
    key: u64,
    kind: TreeKind,
    at_leaf: impl FnOnce(&[u8], &Header, Option<usize>) -> CoreResult<R>,
) -> CoreResult<Option<R>>
where
    G: Deref<Target = [u8]>,
{
    let mut cur = root;
    for _ in 0..MAX_DEPTH {
        let g = read(cur)?;
        let h = node::check(&g, kind.value_size())?;
        let idx = node::lower_bound(&g, &h, key)?;
        if h.leaf {
            let found = match idx {
                Some(i) if node::key(&g, &h, i)? == key => Some(i),
                _ => None,
            };
            return at_leaf(&g, &h, found).map(Some);
        }
        match idx {
            None => return Ok(None),
            Some(i) => cur = node::value_u64(&g, &h, i)?,
        }
    }
    Err(corrupt(Corruption::TooDeep))
}
