// SPDX-License-Identifier: GPL-2.0
//! A heap value that lock-free readers use under `rcu_read_lock` while its
//! one owner may replace it: the pool's mapping cache, which the map call
//! reads and which is swapped for a bigger one when the pool grows.
//!
//! The owner's handle, [`RcuBox`], replaces the value with `&mut self`, so
//! the owner's own borrows (taken without RCU) cannot outlive the value;
//! readers' handles, [`RcuReader`], borrow it only for as long as an RCU
//! read-side guard, and a replaced value is freed only after a grace period.
//!
//! Also the expedited grace-period wait ([`synchronize_rcu_expedited`]),
//! which the kernel crate does not wrap.

use core::{
    marker::PhantomData,
    sync::atomic::{AtomicPtr, Ordering},
};
use kernel::{
    bindings,
    prelude::*,
    sync::{rcu, Arc},
};

/// Waits for an RCU grace period the expedited way (the other CPUs are
/// interrupted instead of waited for), for waits inside a command a user
/// waits on, as dm's own table swap does (`dm_sync_table`). Sleeps.
pub(crate) fn synchronize_rcu_expedited() {
    // SAFETY: callable from any context that may sleep, as
    // `rcu::synchronize_rcu` (the kernel's callers of both are the same).
    unsafe { bindings::synchronize_rcu_expedited() };
}

/// What the handles share: the current value, from `KBox::into_raw`.
struct Current<T> {
    ptr: AtomicPtr<T>,
    /// Sends and shares like the value itself.
    _value: PhantomData<T>,
}

impl<T> Drop for Current<T> {
    fn drop(&mut self) {
        // SAFETY: `ptr` always holds a pointer from `KBox::into_raw` that
        // nothing else frees (a replaced one is swapped out first); with the
        // last handle gone, no reader can borrow it any more.
        drop(unsafe { KBox::from_raw(*self.ptr.get_mut()) });
    }
}

/// The owner's handle: reads without RCU and replaces the value.
pub(crate) struct RcuBox<T> {
    current: Arc<Current<T>>,
}

/// A reader's handle.
pub(crate) struct RcuReader<T> {
    current: Arc<Current<T>>,
}

impl<T: Send + Sync> RcuBox<T> {
    /// Publishes `value`.
    pub(crate) fn new(value: KBox<T>) -> Result<Self> {
        let current = Current {
            ptr: AtomicPtr::new(KBox::into_raw(value)),
            _value: PhantomData,
        };
        Ok(Self {
            current: Arc::new(current, GFP_KERNEL)?,
        })
    }

    /// A handle for readers.
    pub(crate) fn reader(&self) -> RcuReader<T> {
        RcuReader {
            current: self.current.clone(),
        }
    }

    /// The current value.
    pub(crate) fn get(&self) -> &T {
        let p = self.current.ptr.load(Ordering::Acquire);
        // SAFETY: `p` is the live value; only `replace`, which needs
        // `&mut self`, frees a value, so it outlives this borrow of `self`.
        unsafe { &*p }
    }

    /// Publishes `value` and frees the old one once no reader can still use
    /// it (after an RCU grace period: this sleeps).
    pub(crate) fn replace(&mut self, value: KBox<T>) {
        let old = self
            .current
            .ptr
            .swap(KBox::into_raw(value), Ordering::AcqRel);
        rcu::synchronize_rcu();
        // SAFETY: `old` came from `KBox::into_raw` and is no longer
        // published; readers borrow only within an RCU read side, and every
        // one that could have loaded `old` has ended. The owner's borrows
        // ended with `&mut self`.
        drop(unsafe { KBox::from_raw(old) });
    }
}

impl<T> RcuReader<T> {
    /// The current value, for as long as `guard` is held.
    pub(crate) fn get<'a>(&'a self, _guard: &'a rcu::Guard) -> &'a T {
        let p = self.current.ptr.load(Ordering::Acquire);
        // SAFETY: `p` is a value from `KBox::into_raw`, freed only after a
        // grace period that follows its replacement (`RcuBox::replace`) or
        // with the last handle; `guard` holds this reader's read side open
        // for the borrow's lifetime.
        unsafe { &*p }
    }
}
