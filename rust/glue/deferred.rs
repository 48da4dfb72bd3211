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

use core::{
    marker::PhantomPinned,
    ptr,
    sync::atomic::{AtomicPtr, Ordering},
};
use kernel::{bindings, cpu, new_spinlock_irq, prelude::*, sync::SpinLockIrq, types::Opaque};

use super::{
    bindings as dm,
    bio::{BioList, OwnedBio},
    queue::IoQueue,
};

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
    fn drain(&self, lane: Lane, bios: BioList);
}

/// One CPU's list and work item.
#[repr(C)]
#[pin_data]
pub(crate) struct CpuSlot<T: Drain> {
    #[pin]
    work: Opaque<bindings::work_struct>,
    /// The CPU's list: irq-safe, last in the lock order
    /// (`Documentation/io-path.md`, "The rules of the I/O path").
    #[pin]
    bios: SpinLockIrq<BioList>,
    cpu: u32,
    lane: Lane,
    owner: AtomicPtr<T>,
    #[pin]
    _pin: PhantomPinned,
}

// SAFETY: the work item is only touched through the workqueue API, the list
// under its lock; `owner` is an atomic pointer to a `Sync` owner.
unsafe impl<T: Drain> Send for CpuSlot<T> {}
// SAFETY: as above.
unsafe impl<T: Drain> Sync for CpuSlot<T> {}

/// The work function of every slot.
///
/// # Safety
/// Called by the workqueue with the `work` field of a live `CpuSlot<T>` whose
/// owner was set ([`CpuQueues::new`]'s contract keeps both alive while work is
/// queued).
unsafe extern "C" fn run<T: Drain>(work: *mut bindings::work_struct) {
    let offset = core::mem::offset_of!(CpuSlot<T>, work);
    // SAFETY: `work` is the `work` field of a `CpuSlot<T>` (only `CpuQueues`
    // initialises these work items), so stepping back gives the slot.
    let slot = unsafe { &*work.cast::<u8>().sub(offset).cast::<CpuSlot<T>>() };
    let owner = slot.owner.load(Ordering::Acquire);
    if owner.is_null() {
        return;
    }
    // SAFETY: the owner outlives its queues' work (`CpuQueues::flush`).
    let owner = unsafe { &*owner };
    // SAFETY: paired with the restore below, on this task.
    let noio = unsafe { dm::rthin_memalloc_noio_save() };
    loop {
        let batch = core::mem::take(&mut *slot.bios.lock());
        if batch.is_empty() {
            break;
        }
        owner.drain(slot.lane, batch);
    }
    // SAFETY: restores what `rthin_memalloc_noio_save` returned above.
    unsafe { dm::rthin_memalloc_noio_restore(noio) };
}

/// Per-CPU deferred lists of one owner `T`.
pub(crate) struct CpuQueues<T: Drain> {
    slots: Pin<KBox<[CpuSlot<T>]>>,
}

impl<T: Drain> CpuQueues<T> {
    /// One slot per possible CPU id. The owner must be set with
    /// [`Self::set_owner`] before the first push, and must call
    /// [`Self::flush`] before it goes away.
    pub(crate) fn new(lane: Lane) -> Result<Self> {
        let n = cpu::nr_cpu_ids() as usize;
        let slots = KBox::pin_slice(
            |i| {
                pin_init!(CpuSlot {
                    // SAFETY: INIT_WORK on the slot's own, pinned work item.
                    work <- Opaque::ffi_init(|w| unsafe { dm::rthin_init_work(w, Some(run::<T>)) }),
                    bios <- new_spinlock_irq!(BioList::new(), "rthin_deferred"),
                    cpu: i as u32,
                    lane,
                    owner: AtomicPtr::new(ptr::null_mut()),
                    _pin: PhantomPinned,
                }? Error)
            },
            n.max(1),
            GFP_KERNEL,
        )?;
        Ok(Self { slots })
    }

    /// Tells the workers whom to call. `owner` must stay at this address
    /// until [`Self::flush`] has returned for the last time.
    pub(crate) fn set_owner(&self, owner: &T) {
        for slot in self.slots.iter() {
            slot.owner
                .store(ptr::from_ref(owner).cast_mut(), Ordering::Release);
        }
    }

    fn slot_here(&self) -> Option<&CpuSlot<T>> {
        let here = cpu::CpuId::current().as_u32() as usize;
        self.slots
            .get(here.checked_rem(self.slots.len()).unwrap_or(0))
    }

    fn kick(&self, wq: &IoQueue, slot: &CpuSlot<T>) {
        // SAFETY: the queue and the slot's initialised work item are live;
        // queueing an already pending item is a no-op.
        unsafe { bindings::queue_work_on(slot.cpu as i32, wq.raw(), slot.work.get()) };
    }

    /// Defers a bio on the current CPU's list and wakes that CPU's worker.
    pub(crate) fn push(&self, wq: &IoQueue, bio: OwnedBio) {
        let Some(slot) = self.slot_here() else {
            // Unreachable: the slice has at least one slot.
            bio.complete(Some(crate::dm::pool_mode::IoError::Io));
            return;
        };
        slot.bios.lock().push(bio);
        self.kick(wq, slot);
    }

    /// Defers a whole list on the current CPU.
    pub(crate) fn push_list(&self, wq: &IoQueue, bios: &mut BioList) {
        if bios.is_empty() {
            return;
        }
        if let Some(slot) = self.slot_here() {
            slot.bios.lock().append(bios);
            self.kick(wq, slot);
        }
    }

    /// Waits until no worker runs or is queued for these lists.
    pub(crate) fn flush(&self) {
        for slot in self.slots.iter() {
            // SAFETY: the work item is initialised and live.
            unsafe { bindings::flush_work(slot.work.get()) };
        }
    }
}

/// Scenarios for the module's KUnit suite (they need a running kernel).
pub(crate) mod selftest {
    use core::{
        ptr::{self, NonNull},
        sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    };
    use kernel::bindings;

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
        fn drain(&self, lane: Lane, mut bios: BioList) {
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
        let owner = Collector {
            seen: AtomicUsize::new(0),
            sector_sum: AtomicU64::new(0),
            reordered: AtomicBool::new(false),
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
        drop(wq);
        pushed == N as usize
            && owner.seen.load(Ordering::Relaxed) == pushed
            && owner.sector_sum.load(Ordering::Relaxed) == N * (N + 1) / 2
            && ENDED.load(Ordering::Relaxed) == pushed
            && !owner.reordered.load(Ordering::Relaxed)
    }
}
