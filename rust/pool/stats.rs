// SPDX-License-Identifier: GPL-2.0
//! What can be read of a pool without its lock: the flags and change
//! generations of the map path ([`PoolFlags`]), and the debugfs counters of
//! the pool and of each thin device (`/sys/kernel/debug/rthin-<pool>/`).

use core::{
    fmt,
    sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering},
};
use kernel::{
    debugfs::File as DebugFile,
    prelude::*,
    str::CString,
    sync::Arc,
    time::{Instant, Monotonic},
    uaccess::UserSliceReader,
};

use super::{cpu_counter::CpuCounter, PoolObj, SharedPool};

/// What the map path reads of a pool without taking its lock.
///
/// **Change generations.** Every metadata change is made under the pool lock
/// and bumps `changes`; a commit notes the generation it covers before it
/// starts writing and publishes it in `committed` only once its superblock
/// is on stable storage. A bio that asks for durability may complete once
/// `committed` has reached the generation of the last change it depends on
/// (its thin's, see `ThinIo::changed`); a commit in progress never counts,
/// and a failed one never advances `committed`.
#[derive(Default)]
pub(crate) struct PoolFlags {
    /// Metadata changes made (the change generation).
    pub(super) changes: AtomicU64,
    /// The change generation that the last successful commit covers.
    pub(super) committed: AtomicU64,
    /// The pool is in FAIL mode: every bio errors at once.
    pub(super) fails_io: AtomicBool,
    /// Metadata commits done.
    pub(super) commits: AtomicU64,
    /// Of those, the ones the waker made (dm-thin's `COMMIT_PERIOD`): the
    /// rest were asked for, by a flush, a message or a status.
    pub(super) periodic_commits: AtomicU64,
    /// Set through debugfs by tests: the waker makes no commit, so that a
    /// test can tell which call committed however slow the kernel is.
    pub(super) periodic_commits_held: AtomicBool,
    /// Set through debugfs by tests: the next table load of this pool fails
    /// after it has found the pool object (as an allocation failing there
    /// would), so that a test can see the failed load give its hold back.
    pub(super) fail_next_table_load: AtomicBool,
    /// Slots of the pool's mapping cache.
    pub(super) mapping_cache_slots: AtomicU64,
}

impl PoolFlags {
    /// The pool's debugfs file text.
    pub(super) fn write(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "commits {}", self.commits.load(Ordering::Relaxed))?;
        let periodic = self.periodic_commits.load(Ordering::Relaxed);
        writeln!(f, "periodic_commits {periodic}")?;
        let held = self.periodic_commits_held.load(Ordering::Relaxed);
        writeln!(f, "hold_periodic_commits {}", u8::from(held))?;
        let fail_load = self.fail_next_table_load.load(Ordering::Relaxed);
        writeln!(f, "fail_next_table_load {}", u8::from(fail_load))?;
        writeln!(f, "dirty {}", u8::from(self.dirty()))?;
        writeln!(f, "changes {}", self.changes())?;
        writeln!(f, "committed {}", self.committed())?;
        let slots = self.mapping_cache_slots.load(Ordering::Relaxed);
        writeln!(f, "mapping_cache_slots {slots}")
    }

    /// A write to the pool's debugfs file: `hold_periodic_commits 1` stops
    /// the waker's commits, `hold_periodic_commits 0` lets them go on;
    /// `fail_next_table_load 1` makes the next pool table load fail (0
    /// cancels that).
    pub(super) fn write_knob(&self, input: &mut UserSliceReader) -> Result {
        let mut buf = [0u8; 32];
        let n = input.len();
        let text = buf.get_mut(..n).ok_or(EINVAL)?;
        input.read_slice(text)?;
        let (knob, on) = match text.trim_ascii() {
            b"hold_periodic_commits 1" => (&self.periodic_commits_held, true),
            b"hold_periodic_commits 0" => (&self.periodic_commits_held, false),
            b"fail_next_table_load 1" => (&self.fail_next_table_load, true),
            b"fail_next_table_load 0" => (&self.fail_next_table_load, false),
            _ => return Err(EINVAL),
        };
        knob.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// True once after `fail_next_table_load 1` was written (see
    /// [`Self::write_knob`]).
    pub(crate) fn take_table_load_fault(&self) -> bool {
        self.fail_next_table_load.swap(false, Ordering::Relaxed)
    }

    /// The waker may commit.
    pub(super) fn periodic_commits_allowed(&self) -> bool {
        !self.periodic_commits_held.load(Ordering::Relaxed)
    }

    /// Metadata changed since the last commit that reached stable storage.
    pub(crate) fn dirty(&self) -> bool {
        self.changes.load(Ordering::Acquire) > self.committed()
    }

    /// The change generation on stable storage.
    pub(crate) fn committed(&self) -> u64 {
        self.committed.load(Ordering::Acquire)
    }

    /// The current change generation.
    pub(crate) fn changes(&self) -> u64 {
        self.changes.load(Ordering::Acquire)
    }

    /// Records a metadata change (caller holds the pool lock); returns its
    /// generation.
    pub(super) fn change(&self) -> u64 {
        self.changes.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Every bio must fail.
    pub(crate) fn fails_io(&self) -> bool {
        self.fails_io.load(Ordering::Acquire)
    }
}

/// Counters of one thin target, shown in debugfs
/// (`/sys/kernel/debug/rthin-<pool>/<thin>`). The ones the map call and
/// the workers bump without the pool lock are spread over the CPUs.
pub(crate) struct ThinCounters {
    /// Bios remapped in the map call.
    pub(crate) fast_remaps: CpuCounter,
    /// Bios deferred to a worker.
    pub(crate) deferred: CpuCounter,
    /// Deferred reads and writes a worker remapped from the last commit's tree,
    /// without the pool lock.
    pub(crate) unlocked_lookups: CpuCounter,
    /// Blocks provisioned (zeroed or written whole).
    pub(crate) provisioned: AtomicU64,
    /// Shared blocks replaced by a private copy before a write.
    pub(crate) sharing_broken: AtomicU64,
    /// Of those provisioned or broken, the blocks written by several writes
    /// together, zeroed or copied only where none of them wrote
    /// (`io/covering.rs`).
    pub(crate) coalesced: AtomicU64,
    /// Of those provisioned, the blocks held open for more writes, each
    /// completed as soon as it was written (`io/open_block.rs`).
    pub(crate) held_open: AtomicU64,
}

impl ThinCounters {
    /// All zero.
    pub(crate) fn new() -> Result<Self> {
        Ok(Self {
            fast_remaps: CpuCounter::new()?,
            deferred: CpuCounter::new()?,
            unlocked_lookups: CpuCounter::new()?,
            provisioned: AtomicU64::new(0),
            sharing_broken: AtomicU64::new(0),
            coalesced: AtomicU64::new(0),
            held_open: AtomicU64::new(0),
        })
    }

    /// The debugfs file's text, one `name value` pair per line.
    pub(crate) fn write(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        writeln!(f, "fast_remaps {}", self.fast_remaps.sum())?;
        writeln!(f, "deferred {}", self.deferred.sum())?;
        writeln!(f, "unlocked_lookups {}", self.unlocked_lookups.sum())?;
        writeln!(f, "provisioned {}", get(&self.provisioned))?;
        writeln!(f, "sharing_broken {}", get(&self.sharing_broken))?;
        writeln!(f, "coalesced {}", get(&self.coalesced))?;
        writeln!(f, "held_open {}", get(&self.held_open))
    }
}

/// cannot exist. The counters go on across the reload.
pub(crate) struct ThinCountersEntry {
    name: CString,
    users: usize,
    counters: Arc<ThinCounters>,
    _file: Option<Pin<KBox<DebugFile<Arc<ThinCounters>>>>>,
}

/// A thin target's hold on its device's counters ([`PoolObj::thin_counters`]).
pub(crate) struct ThinCountersHold {
    pool: SharedPool,
    /// The entry's counters (which also identify the entry).
    pub(crate) counters: Arc<ThinCounters>,
}

impl Drop for ThinCountersHold {
    fn drop(&mut self) {
        let mut files = self.pool.thin_files.lock();
        let mine = |e: &ThinCountersEntry| Arc::ptr_eq(&e.counters, &self.counters);
        if let Some(i) = files.iter().position(mine) {
            if let Some(e) = files.get_mut(i) {
                e.users = e.users.saturating_sub(1);
                if e.users == 0 {
                    // Removes the file.
                    let _ = files.remove(i);
                }
            }
        }
    }
}

impl PoolObj {
    /// The counters of the thin device named `name` (its `maj:min`), with
    /// their debugfs file: the ones a live target of the device already
    /// has, else new ones (without a file if debugfs cannot take it: the
    /// counters are informational).
    pub(crate) fn thin_counters(self: &SharedPool, name: &str) -> Result<ThinCountersHold> {
        let name = CString::try_from_fmt(fmt!("{}", name))?;
        let mut files = self.thin_files.lock();
        let hold = |counters: &Arc<ThinCounters>| ThinCountersHold {
            pool: self.clone(),
            counters: counters.clone(),
        };
        if let Some(e) = files
            .iter_mut()
            .find(|e| e.name.to_bytes() == name.to_bytes())
        {
            e.users += 1;
            return Ok(hold(&e.counters));
        }
        let counters = Arc::new(ThinCounters::new()?, GFP_KERNEL)?;
        let show = &|c: &Arc<ThinCounters>, f: &mut fmt::Formatter<'_>| c.write(f);
        let file = KBox::pin_init(
            self.debugfs
                .read_callback_file(&name, counters.clone(), show),
            GFP_KERNEL,
        )
        .ok();
        let held = hold(&counters);
        let entry = ThinCountersEntry {
            name,
            users: 1,
            counters,
            _file: file,
        };
        files.push(entry, GFP_KERNEL)?;
        Ok(held)
    }
}

/// The rate limit of a repeated error line, as dm-thin's `DMERR_LIMIT`: at
/// most 10 lines in 5 seconds. One per pool, so that each pool's first
/// errors are always logged.
pub(crate) struct LogLimit {
    since: Instant<Monotonic>,
    /// Milliseconds since `since` when the current window began.
    window: AtomicI64,
    /// Lines asked for in the current window.
    count: AtomicU32,
}

impl LogLimit {
    const WINDOW_MS: i64 = 5000;
    const BURST: u32 = 10;

    pub(crate) fn new() -> Self {
        Self {
            since: Instant::now(),
            window: AtomicI64::new(0),
            count: AtomicU32::new(0),
        }
    }

    /// Whether the line may be logged now. (Racing callers may log a line
    /// or two more than the burst: harmless.)
    pub(crate) fn allow(&self) -> bool {
        let now = self.since.elapsed().as_millis();
        if now - self.window.load(Ordering::Relaxed) >= Self::WINDOW_MS {
            self.window.store(now, Ordering::Relaxed);
            self.count.store(0, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed) < Self::BURST
    }
}
