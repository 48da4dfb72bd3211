// SPDX-License-Identifier: GPL-2.0
//! Walks of a whole B-tree in key order, bounded by the metadata device
//! size so that a corrupt tree cannot make one run for ever.

use crate::core_error::{corrupt, CoreResult, Corruption};
use crate::pdata::block_store::BlockStore;
use crate::pdata::btree::node;
use crate::pdata::btree::{TreeKind, Value, MAX_DEPTH};
use crate::pdata::checksum::BlockKind;
use crate::pdata::tm::{CacheMem, Tm};

impl<S: BlockStore, C: CacheMem> Tm<S, C> {
    /// Calls `f` for every entry in key order.
    pub(crate) fn btree_walk(
        &self,
        root: u64,
        kind: TreeKind,
        f: &mut dyn FnMut(u64, &[u8]) -> CoreResult<()>,
    ) -> CoreResult<()> {
        let mut budget = self.node_budget();
        self.walk_rec(root, kind, 0, &mut budget, f)
    }

    /// Upper bound on the nodes a walk of one valid tree can visit: the
    /// metadata device size. A corrupt tree whose pointers form a DAG with
    /// huge fan-out therefore ends with `TooDeep` instead of running for ever.
    pub(super) fn node_budget(&self) -> u64 {
        self.msm.nr_blocks.max(self.msm_c.nr_blocks)
    }

    fn walk_rec(
        &self,
        b: u64,
        kind: TreeKind,
        depth: usize,
        budget: &mut u64,
        f: &mut dyn FnMut(u64, &[u8]) -> CoreResult<()>,
    ) -> CoreResult<()> {
        if depth >= MAX_DEPTH || *budget == 0 {
            return Err(corrupt(Corruption::TooDeep));
        }
        *budget -= 1;
        let h = self.node_header(b, kind)?;
        if h.leaf {
            // Entries are copied out in small batches so that no guard is
            // held while the callback runs (it may call back into the core).
            const BATCH: usize = 8;
            let mut start = 0;
            while start < h.nr_entries {
                let n = (h.nr_entries - start).min(BATCH);
                let mut batch = [(0u64, Value::from_slice(&[])); BATCH];
                {
                    let g = self.store.read(b, BlockKind::Node)?;
                    for (j, slot) in batch.iter_mut().take(n).enumerate() {
                        *slot = (
                            node::key(&g, &h, start + j)?,
                            Value::from_slice(node::value(&g, &h, start + j)?),
                        );
                    }
                }
                for (k, v) in batch.iter().take(n) {
                    f(*k, v.as_slice())?;
                }
                start += n;
            }
            return Ok(());
        }
        for i in 0..h.nr_entries {
            let c = self.node_value_u64(b, &h, i)?;
            self.walk_rec(c, kind, depth + 1, budget, f)?;
        }
        Ok(())
    }
}
