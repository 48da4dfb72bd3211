// SPDX-License-Identifier: GPL-2.0
//! The pool's cells: the virtual blocks being provisioned, each with the
//! bios that arrived for it meanwhile (dm-thin's bio prison, reduced to what
//! rthin needs). A provision opens the cell of its block; a bio that finds
//! the cell open parks on it; closing the cell hands back exactly the bios
//! parked on it.
//!
//! Only bios of the target that holds the cell park on it: two dm devices
//! may be tables of one thin id, and a bio is always handed back to the
//! target whose map call received it, never to another that may go away
//! before the bio ends. A bio of another target finds the cell held by
//! another ([`Parking::HeldByOther`]); its own target keeps it on its
//! waiters, and the cell, marked, has them requeued when it closes
//! ([`CellTable::close`]).
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
    /// The target whose provision holds the cell ([`TargetKey`]).
    holder: TargetKey,
    /// Bios of the holder that wait for the provision.
    parked: BioList,
    /// Bios of other targets of the device wait on their targets' waiters.
    others_wait: bool,
}

/// Which thin target (one table's `rthin` target): the address of its I/O
/// state, compared, never followed. A cell's holder lives until the cell
/// closes (its provision holds it), so no other target has that address
/// meanwhile.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct TargetKey(usize);

impl TargetKey {
    /// The key of the target whose I/O state `thin` is.
    pub(crate) fn of<T: ?Sized>(thin: &T) -> Self {
        Self(core::ptr::from_ref(thin).cast::<()>().addr())
    }
}

/// What [`CellTable::park`] did with a bio.
pub(crate) enum Parking {
    /// Parked on the cell, which the bio's own target holds.
    Parked,
    /// Another target of the device holds the cell: the bio's own target
    /// keeps it on its waiters (pushed under the pool lock of this call),
    /// which the cell's close requeues.
    HeldByOther(OwnedBio),
    /// No provision holds the block.
    NotHeld(OwnedBio),
}

/// What [`CellTable::close`] hands back.
pub(crate) struct Closed {
    /// The bios of the holder that parked on the cell.
    pub(crate) parked: BioList,
    /// Bios of other targets of the device waited for the cell.
    pub(crate) others_wait: bool,
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

    /// The open cell of `(dev, vblock)`, if any.
    fn cell_mut(&mut self, dev: u32, vblock: u64) -> Option<&mut Cell> {
        self.bucket(dev, vblock)
            .and_then(|b| b.iter_mut().find(|c| c.dev == dev && c.vblock == vblock))
    }

    /// Parks `bio`, a bio of target `parker`, on the open cell of
    /// `(dev, vblock)` if `parker` holds it; see [`Parking`].
    pub(crate) fn park(
        &mut self,
        dev: u32,
        vblock: u64,
        parker: TargetKey,
        bio: OwnedBio,
    ) -> Parking {
        match self.cell_mut(dev, vblock) {
            Some(c) if c.holder == parker => {
                c.parked.push(bio);
                Parking::Parked
            }
            Some(c) => {
                c.others_wait = true;
                Parking::HeldByOther(bio)
            }
            None => Parking::NotHeld(bio),
        }
    }

    /// Makes room for the cell of `(dev, vblock)`, so that [`Self::open`]
    /// will not need memory. False if there is none.
    pub(crate) fn reserve(&mut self, dev: u32, vblock: u64) -> bool {
        self.bucket(dev, vblock)
            .is_some_and(|b| b.reserve(1, GFP_NOWAIT | __GFP_NOWARN).is_ok())
    }

    /// Opens the cell of `(dev, vblock)` for target `holder`; false if
    /// [`Self::reserve`] made no room for it.
    pub(crate) fn open(&mut self, dev: u32, vblock: u64, holder: TargetKey) -> bool {
        let cell = Cell {
            dev,
            vblock,
            holder,
            parked: BioList::new(),
            others_wait: false,
        };
        self.bucket(dev, vblock)
            .is_some_and(|b| b.push_within_capacity(cell).is_ok())
    }

    /// The bios parked on the open cell of `(dev, vblock)`, taken off it
    /// (the cell stays open).
    pub(crate) fn take_parked(&mut self, dev: u32, vblock: u64) -> BioList {
        self.cell_mut(dev, vblock)
            .map(|c| core::mem::take(&mut c.parked))
            .unwrap_or_default()
    }

    /// Parks `bios` back on the open cell of `(dev, vblock)`, in front of
    /// any parked since; they end with an I/O error if the cell is gone.
    pub(crate) fn return_parked(&mut self, dev: u32, vblock: u64, mut bios: BioList) {
        if let Some(c) = self.cell_mut(dev, vblock) {
            bios.append(&mut c.parked);
            c.parked = bios;
        }
    }

    /// Closes the cell of `(dev, vblock)`; returns the bios parked on it
    /// and whether bios of other targets waited for it.
    pub(crate) fn close(&mut self, dev: u32, vblock: u64) -> Closed {
        let none = || Closed {
            parked: BioList::new(),
            others_wait: false,
        };
        let Some(b) = self.bucket(dev, vblock) else {
            return none();
        };
        match b.iter().position(|c| c.dev == dev && c.vblock == vblock) {
            Some(i) => b.remove(i).map_or_else(
                |_| none(),
                |c| Closed {
                    parked: c.parked,
                    others_wait: c.others_wait,
                },
            ),
            None => none(),
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
