// SPDX-License-Identifier: GPL-2.0
//! The pool's cells: the virtual blocks being provisioned, each with the
//! bios that arrived for it meanwhile (dm-thin's bio prison, reduced to what
//! rthin needs). A provision opens the cell of its block; a bio that finds
//! the cell open parks on it; closing the cell hands back exactly the bios
//! parked on it.
//!
//! Cells are hashed by device and block into a fixed number of buckets that
//! grow as needed, so lookups stay short and there is no cap on provisions
//! in flight other than memory: room for a cell is made before the
//! provision starts ([`CellTable::reserve`]), without sleeping or starting
//! I/O (a worker may be writing back on behalf of memory reclaim), and a
//! provision that finds none waits until the next cell closes or the pool's
//! next tick. A bucket keeps the room it grew to, so this rarely allocates.

use kernel::{
    alloc::flags::{__GFP_NOWARN, GFP_NOWAIT},
    prelude::*,
};

use crate::glue::bio::{BioList, OwnedBio};

/// Buckets of the table (a power of two).
const BUCKETS: usize = 256;

/// One virtual block being provisioned.
struct Cell {
    dev: u32,
    vblock: u64,
    parked: BioList,
}

/// The cells of one pool.
pub(crate) struct CellTable {
    buckets: KVec<KVec<Cell>>,
}

impl CellTable {
    /// An empty table.
    pub(crate) fn new() -> Result<Self> {
        let mut buckets = KVec::with_capacity(BUCKETS, GFP_KERNEL)?;
        for _ in 0..BUCKETS {
            // Cannot fail: the capacity covers every bucket.
            let _ = buckets.push_within_capacity(KVec::new());
        }
        Ok(Self { buckets })
    }

    fn bucket(&mut self, dev: u32, vblock: u64) -> Option<&mut KVec<Cell>> {
        let h = vblock ^ u64::from(dev).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let i = usize::try_from(h % BUCKETS as u64).ok()?;
        self.buckets.get_mut(i)
    }

    /// Parks `bio` on the open cell of `(dev, vblock)`; hands it back if no
    /// provision holds that block.
    pub(crate) fn park(&mut self, dev: u32, vblock: u64, bio: OwnedBio) -> Result<(), OwnedBio> {
        let cell = self
            .bucket(dev, vblock)
            .and_then(|b| b.iter_mut().find(|c| c.dev == dev && c.vblock == vblock));
        match cell {
            Some(c) => {
                c.parked.push(bio);
                Ok(())
            }
            None => Err(bio),
        }
    }

    /// Makes room for the cell of `(dev, vblock)`, so that [`Self::open`]
    /// will not need memory. False if there is none.
    pub(crate) fn reserve(&mut self, dev: u32, vblock: u64) -> bool {
        self.bucket(dev, vblock)
            .is_some_and(|b| b.reserve(1, GFP_NOWAIT | __GFP_NOWARN).is_ok())
    }

    /// Opens the cell of `(dev, vblock)`; false if [`Self::reserve`] made no
    /// room for it.
    pub(crate) fn open(&mut self, dev: u32, vblock: u64) -> bool {
        let cell = Cell {
            dev,
            vblock,
            parked: BioList::new(),
        };
        self.bucket(dev, vblock)
            .is_some_and(|b| b.push_within_capacity(cell).is_ok())
    }

    /// Closes the cell of `(dev, vblock)`; returns the bios parked on it.
    pub(crate) fn close(&mut self, dev: u32, vblock: u64) -> BioList {
        let Some(b) = self.bucket(dev, vblock) else {
            return BioList::new();
        };
        match b.iter().position(|c| c.dev == dev && c.vblock == vblock) {
            Some(i) => b.remove(i).map(|c| c.parked).unwrap_or_default(),
            None => BioList::new(),
        }
    }

    /// The lowest block of device `dev` in `[from, end)` that a provision
    /// holds.
    pub(crate) fn first_held(&self, dev: u32, from: u64, end: u64) -> Option<u64> {
        self.buckets
            .iter()
            .flat_map(|b| b.iter())
            .filter(|c| c.dev == dev && c.vblock >= from && c.vblock < end)
            .map(|c| c.vblock)
            .min()
    }
}
