// SPDX-License-Identifier: GPL-2.0
//! When a pool raises a dm event (`dm_table_event`), which is what wakes
//! `dmsetup wait` and LVM's dmeventd (autoextend of thin pools):
//!
//! * on every notified mode change (`ModeChange::notify`);
//! * once when free data blocks fall to the table's low-water mark, checked
//!   before each data allocation; re-armed when the pool resumes
//!   ([`DataLowWater`], dm-thin's `low_water_triggered`);
//! * when free metadata blocks fall to the metadata threshold
//!   (`min(1024, blocks / 4)`): edge-triggered, so it fires again after free
//!   space rose above the threshold and fell back ([`MetadataLowWater`],
//!   dm-space-map-metadata's threshold).

/// The data low-water mark of a pool.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct DataLowWater {
    triggered: bool,
}

impl DataLowWater {
    /// Checks `free` blocks against `low_water` blocks; true if the event
    /// must be sent now (log `reached low water mark for data device`).
    pub fn check(&mut self, free: u64, low_water: u64) -> bool {
        if free <= low_water && !self.triggered {
            self.triggered = true;
            return true;
        }
        false
    }

    /// The pool resumed: the mark may fire again.
    pub fn rearm(&mut self) {
        self.triggered = false;
    }
}

/// The metadata low-water threshold of a pool (edge-triggered).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MetadataLowWater {
    last_free: Option<u64>,
}

impl MetadataLowWater {
    /// Records `free` metadata blocks; true if this value crossed to or below
    /// `threshold` (log `reached low water mark for metadata device`).
    pub fn check(&mut self, free: u64, threshold: u64) -> bool {
        let was_below = self.last_free.is_some_and(|f| f <= threshold);
        self.last_free = Some(free);
        free <= threshold && !was_below
    }
}

/// Scenarios shared by the host tests and the module's KUnit suite.
#[cfg(any(test, feature = "selftest"))]
pub mod selftest {
    use super::{DataLowWater, MetadataLowWater};

    /// The data mark fires once until re-armed, at or below the mark only.
    pub fn data_low_water_once() -> bool {
        let mut w = DataLowWater::default();
        let mut ok = !w.check(11, 10);
        ok &= w.check(10, 10);
        ok &= !w.check(9, 10) && !w.check(0, 10);
        w.rearm();
        ok &= w.check(5, 10);
        // A mark of 0 fires only when nothing is free.
        let mut z = DataLowWater::default();
        ok && !z.check(1, 0) && z.check(0, 0)
    }

    /// The metadata threshold fires on each downward crossing.
    pub fn metadata_low_water_edges() -> bool {
        let mut w = MetadataLowWater::default();
        let mut ok = !w.check(2000, 1024);
        ok &= w.check(1024, 1024);
        ok &= !w.check(1000, 1024);
        ok &= !w.check(1500, 1024);
        ok &= w.check(900, 1024);
        // Starting below fires at once.
        let mut b = MetadataLowWater::default();
        ok && b.check(10, 1024) && !b.check(9, 1024)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn data_low_water_once() {
        assert!(super::selftest::data_low_water_once());
    }

    #[test]
    fn metadata_low_water_edges() {
        assert!(super::selftest::metadata_low_water_edges());
    }
}
