// SPDX-License-Identifier: GPL-2.0
//! A statistics counter bumped on the map path: one cache line per CPU, so
//! CPUs that remap bios at the same time never bounce a shared line; the
//! value is the sum, read rarely (debugfs).

use core::sync::atomic::{AtomicU64, Ordering};
use kernel::{cpu, prelude::*};

/// One CPU's share, alone on its cache line.
#[repr(align(64))]
struct Share(AtomicU64);

/// A counter spread over the CPUs.
pub(crate) struct CpuCounter {
    shares: KVec<Share>,
}

impl CpuCounter {
    /// A zero counter with one share per possible CPU id.
    pub(crate) fn new() -> Result<Self> {
        let n = (cpu::nr_cpu_ids() as usize).max(1);
        let mut shares = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            // Cannot fail: the capacity covers every share.
            let _ = shares.push_within_capacity(Share(AtomicU64::new(0)));
        }
        Ok(Self { shares })
    }

    /// Adds one on the current CPU's share (a task that moved meanwhile
    /// bumps another CPU's share: still atomic, just not local).
    pub(crate) fn inc(&self) {
        let here = cpu::CpuId::current().as_u32() as usize;
        if let Some(s) = self
            .shares
            .get(here.checked_rem(self.shares.len()).unwrap_or(0))
        {
            s.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The total.
    pub(crate) fn sum(&self) -> u64 {
        self.shares
            .iter()
            .fold(0u64, |a, s| a.wrapping_add(s.0.load(Ordering::Relaxed)))
    }
}
