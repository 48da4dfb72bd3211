// SPDX-License-Identifier: GPL-2.0
//! Per-CPU deferred bio lists and the workers that drain them.
//!
//! A map call that cannot finish a bio by itself pushes it on the list of the
//! CPU it runs on and queues that CPU's work item on the pool's workqueue
//! (`WQ_MEM_RECLAIM`, bound per CPU). Each list has its own spinlock, held for
//! a push or for swapping the whole list out, so CPUs never contend with each
//! other on the map path (interrupts are off while it is held: completions of
//! hooked writes are queued from interrupt context); the work item runs on the same CPU, drains what
//! accumulated and processes it in a `memalloc_noio` scope (allocations in
//! the worker must not recurse into block I/O).

use kernel::{
    cpu, new_spinlock_irq, new_work,
    prelude::*,
    sync::{Arc, SpinLockIrq},
    workqueue::{impl_has_work, Work, WorkItem},
};

use super::{
    bindings as dm,
    bio::{BioList, OwnedBio},
    queue::{flush_work, IoQueue},
};
use crate::dm::pool_mode::IoError;

/// Which of its owner's lists a set of per-CPU lists is. An owner keeps
/// work that may wait for other work (commits wait for provisions) apart
/// from the work it waits for (completions that end provisions): a work item
/// never runs concurrently with itself, so putting both on one list could
/// leave a completion queued behind the worker that waits for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// Bios from the map call (and anything that may wait).
    Deferred,
    /// Completions that must never wait behind [`Lane::Deferred`] work.
    Completed,
}

/// The owner of a set of per-CPU lists: what the worker calls.
pub(crate) trait Drain: Send + Sync + 'static {
    /// Processes a batch of bios from `lane` (in a worker, may sleep).
    fn drain(self: &Arc<Self>, lane: Lane, bios: BioList);
}

/// What a CPU's lock guards.
struct SlotState<T> {
    bios: BioList,
    /// Whom the worker calls: set by [`CpuQueues::set_owner`], taken back by
    /// [`CpuQueues::close`].
    owner: Option<Arc<T>>,
    /// Closed: pushes are refused.
    closed: bool,
}

/// One CPU's list and work item. Each slot is an `Arc` of its own, so that
/// a queued work item holds its slot (`kernel::workqueue`'s model: the
/// queue owns a reference until the work has run).
#[pin_data]
struct CpuSlot<T: Drain> {
    #[pin]
    work: Work<CpuSlot<T>>,
    /// The CPU's list: irq-safe, last in the lock order
    /// (`Documentation/io-path.md`, "The rules of the I/O path").
    #[pin]
    state: SpinLockIrq<SlotState<T>>,
    cpu: u32,
    lane: Lane,
}

impl_has_work! {
    impl{T: Drain} HasWork<Self> for CpuSlot<T> { self.work }
}

impl<T: Drain> WorkItem for CpuSlot<T> {
    type Pointer = Arc<Self>;

    /// Drains the CPU's list in a `memalloc_noio` scope until it stays
    /// empty, holding the owner for the run.
    fn run(this: Arc<Self>) {
        let Some(owner) = this.state.lock().owner.clone() else {
            // Closed: `close` completed what the list held.
            return;
        };
        // SAFETY: paired with the restore below, on this task.
        let noio = unsafe { dm::rthin_memalloc_noio_save() };
        loop {
            let batch = core::mem::take(&mut this.state.lock().bios);
            if batch.is_empty() {
                break;
            }
            owner.drain(this.lane, batch);
        }
        // SAFETY: restores what `rthin_memalloc_noio_save` returned above.
        unsafe { dm::rthin_memalloc_noio_restore(noio) };
    }
}

/// Per-CPU deferred lists of one owner `T`.
///
/// The lists hold their owner from [`Self::set_owner`] to [`Self::close`]
/// (an owner that keeps its own lists is kept alive by them until then), so
/// a worker never runs for an owner that has gone; dropping the lists closes
/// them.
pub(crate) struct CpuQueues<T: Drain> {
    slots: KVec<Arc<CpuSlot<T>>>,
}

impl<T: Drain> CpuQueues<T> {
    /// One slot per possible CPU id, with no owner yet: bios pushed before
    /// [`Self::set_owner`] wait on the lists.
    pub(crate) fn new(lane: Lane) -> Result<Self> {
        let n = (cpu::nr_cpu_ids() as usize).max(1);
        let mut slots = KVec::with_capacity(n, GFP_KERNEL)?;
        for cpu in 0..n {
            let slot = Arc::pin_init(
                pin_init!(CpuSlot {
                    work <- new_work!("rthin_deferred"),
                    state <- new_spinlock_irq!(
                        SlotState {
                            bios: BioList::new(),
                            owner: None,
                            closed: false,
                        },
                        "rthin_deferred"
                    ),
                    cpu: cpu as u32,
                    lane,
                }),
                GFP_KERNEL,
            )?;
            slots.push(slot, GFP_KERNEL)?;
        }
        Ok(Self { slots })
    }

    /// Tells the workers whom to call; the lists hold `owner` until
    /// [`Self::close`]. No effect once closed.
    pub(crate) fn set_owner(&self, owner: &Arc<T>) {
        for slot in self.slots.iter() {
            let mut state = slot.state.lock();
            if !state.closed {
                state.owner = Some(owner.clone());
            }
        }
    }

    fn slot_here(&self) -> Option<&Arc<CpuSlot<T>>> {
        let here = cpu::CpuId::current().as_u32() as usize;
        self.slots
            .get(here.checked_rem(self.slots.len()).unwrap_or(0))
    }

    fn kick(wq: &IoQueue, slot: &Arc<CpuSlot<T>>) {
        // Already queued: that run will see what was just pushed (it takes
        // the list after it starts), and the reference comes back here.
        let _ = wq.enqueue_on(slot.cpu, slot.clone());
    }

    /// Defers a bio on the current CPU's list and wakes that CPU's worker;
    /// once the lists are closed, completes it with an I/O error.
    pub(crate) fn push(&self, wq: &IoQueue, bio: OwnedBio) {
        let Some(slot) = self.slot_here() else {
            // Unreachable: there is at least one slot.
            bio.complete(Some(IoError::Io));
            return;
        };
        let mut state = slot.state.lock();
        if state.closed {
            drop(state);
            bio.complete(Some(IoError::Io));
            return;
        }
        state.bios.push(bio);
        // Queued before the list is unlocked: once it is, the bio may be
        // drained and ended, and with it may go the last reference to the
        // owner of these lists (a hooked bio's completion pushes from
        // interrupt context, `bio/hook.rs`).
        Self::kick(wq, slot);
    }

    /// Defers a whole list on the current CPU, as [`Self::push`].
    pub(crate) fn push_list(&self, wq: &IoQueue, bios: &mut BioList) {
        if bios.is_empty() {
            return;
        }
        let Some(slot) = self.slot_here() else {
            return;
        };
        let mut state = slot.state.lock();
        if state.closed {
            drop(state);
            while let Some(bio) = bios.pop() {
                bio.complete(Some(IoError::Io));
            }
            return;
        }
        state.bios.append(bios);
        drop(state);
        Self::kick(wq, slot);
    }

    /// Waits until no worker runs or is queued for these lists.
    pub(crate) fn flush(&self) {
        for slot in self.slots.iter() {
            flush_work(&slot.work);
        }
    }

    /// Refuses pushes from now on, completes what the lists still hold
    /// with an I/O error, waits for the workers, and lets the owner go.
    pub(crate) fn close(&self) {
        for slot in self.slots.iter() {
            let (mut left, owner) = {
                let mut state = slot.state.lock();
                state.closed = true;
                (core::mem::take(&mut state.bios), state.owner.take())
            };
            while let Some(bio) = left.pop() {
                bio.complete(Some(IoError::Io));
            }
            // A worker that took the owner before the close keeps it until
            // it returns: wait for it, so that none runs once closed.
            flush_work(&slot.work);
            drop(owner);
        }
    }
}

impl<T: Drain> Drop for CpuQueues<T> {
    fn drop(&mut self) {
        self.close();
    }
}

/// Scenarios for the module's KUnit suite (they need a running kernel).
#[cfg(feature = "selftest")]
pub(crate) mod selftest {
    use core::{
        ptr::{self, NonNull},
        sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    };
    use kernel::{bindings, prelude::*, sync::Arc};

    use super::{CpuQueues, Drain, IoQueue, Lane};
    use crate::glue::bio::{Bio, BioList};

    /// Bios whose test completion ran.
    static ENDED: AtomicUsize = AtomicUsize::new(0);

    /// Completion of a test bio: count it and free it.
    ///
    /// # Safety
    /// Only for bios made by `test_bio`.
    unsafe extern "C" fn end_test_bio(bio: *mut bindings::bio) {
        ENDED.fetch_add(1, Ordering::Relaxed);
        // SAFETY: `test_bio` made the bio with `bio_kmalloc` + `bio_init`;
        // this completion is its last use.
        unsafe {
            bindings::bio_uninit(bio);
            bindings::kfree(bio.cast());
        }
    }

    /// A bio with no data at `sector` that ends with `end_test_bio`.
    fn test_bio(sector: u64) -> Option<Bio<'static>> {
        // SAFETY: plain allocation; NULL on failure.
        let raw = NonNull::new(unsafe { bindings::bio_kmalloc(0, bindings::GFP_KERNEL) })?;
        // SAFETY: `raw` is a fresh allocation of a bio with no vecs, ours
        // until its completion frees it.
        unsafe {
            bindings::bio_init(raw.as_ptr(), ptr::null_mut(), ptr::null_mut(), 0, 0);
            (*raw.as_ptr()).bi_iter.bi_sector = sector;
            (*raw.as_ptr()).bi_end_io = Some(end_test_bio);
            // The test owns it for as long as a map call would.
            Some(Bio::from_raw(raw, false))
        }
    }

    /// Records what the workers drain.
    struct Collector {
        seen: AtomicUsize,
        sector_sum: AtomicU64,
        /// A batch came in descending order (lists are FIFO).
        reordered: AtomicBool,
    }

    impl Drain for Collector {
        fn drain(self: &Arc<Self>, lane: Lane, mut bios: BioList) {
            if lane != Lane::Deferred {
                self.reordered.store(true, Ordering::Relaxed);
            }
            let mut last = 0;
            while let Some(mut bio) = bios.pop() {
                let sector = bio.view().sector();
                if sector < last {
                    self.reordered.store(true, Ordering::Relaxed);
                }
                last = sector;
                self.seen.fetch_add(1, Ordering::Relaxed);
                self.sector_sum.fetch_add(sector, Ordering::Relaxed);
                bio.complete(None);
            }
        }
    }

    /// Pushes bios from one task (which may move between CPUs), lets the
    /// per-CPU workers drain them, and checks that each was processed and
    /// completed exactly once, and that each batch kept push order.
    pub(crate) fn push_and_drain() -> bool {
        const N: u64 = 200;
        let (Ok(wq), Ok(queues)) = (
            IoQueue::new(c"rthin_kunit"),
            CpuQueues::<Collector>::new(Lane::Deferred),
        ) else {
            return false;
        };
        let Ok(owner) = Arc::new(
            Collector {
                seen: AtomicUsize::new(0),
                sector_sum: AtomicU64::new(0),
                reordered: AtomicBool::new(false),
            },
            GFP_KERNEL,
        ) else {
            return false;
        };
        queues.set_owner(&owner);
        ENDED.store(0, Ordering::Relaxed);
        let mut pushed = 0;
        for sector in 1..=N {
            let Some(bio) = test_bio(sector) else {
                break;
            };
            queues.push(&wq, bio.defer());
            pushed += 1;
        }
        queues.flush();
        queues.close();
        drop(wq);
        pushed == N as usize
            && owner.seen.load(Ordering::Relaxed) == pushed
            && owner.sector_sum.load(Ordering::Relaxed) == N * (N + 1) / 2
            && ENDED.load(Ordering::Relaxed) == pushed
            && !owner.reordered.load(Ordering::Relaxed)
    }
}
