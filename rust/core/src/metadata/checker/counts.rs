// SPDX-License-Identifier: GPL-2.0
//! Reference counts of every block of a device, one byte per block: a
//! pool's data device has up to hundreds of millions of blocks, and a
//! hash map entry per referenced block (some 40 bytes, and a cache miss
//! per look-up) made the checker ten times slower than thin_check and
//! twice its memory. Counts from 255 up live in a map (few blocks are
//! shared that often), blocks past the device's end in another (damage,
//! listed by the checker).

use std::collections::{BTreeMap, HashMap};
use std::vec::Vec;

/// The byte value meaning "the count is in `high`".
const HIGH: u8 = u8::MAX;

pub(super) struct Counts {
    low: Vec<u8>,
    high: HashMap<u64, u32>,
    /// Blocks at or past `low.len()`, by block.
    pub(super) beyond: BTreeMap<u64, u32>,
    /// Blocks with a count above zero (within the device).
    nonzero: u64,
}

impl Counts {
    /// Counts for blocks `0..nr`, all zero; None when a byte per block
    /// cannot be had (a superblock can claim any size).
    pub(super) fn new(nr: u64) -> Option<Self> {
        let mut low = Vec::new();
        let nr = usize::try_from(nr).ok()?;
        low.try_reserve_exact(nr).ok()?;
        low.resize(nr, 0);
        Some(Counts {
            low,
            high: HashMap::new(),
            beyond: BTreeMap::new(),
            nonzero: 0,
        })
    }

    pub(super) fn get(&self, b: u64) -> u32 {
        match self.low.get(b as usize) {
            Some(&HIGH) => self.high.get(&b).copied().unwrap_or(0),
            Some(&c) => u32::from(c),
            None => self.beyond.get(&b).copied().unwrap_or(0),
        }
    }

    pub(super) fn set(&mut self, b: u64, c: u32) {
        let Some(slot) = self.low.get_mut(b as usize) else {
            self.beyond.insert(b, c);
            return;
        };
        match (*slot, c) {
            (0, 1..) => self.nonzero += 1,
            (1.., 0) => self.nonzero -= 1,
            _ => {}
        }
        if c >= u32::from(HIGH) {
            *slot = HIGH;
            self.high.insert(b, c);
        } else {
            if *slot == HIGH {
                self.high.remove(&b);
            }
            *slot = c as u8;
        }
    }

    pub(super) fn inc(&mut self, b: u64) {
        match self.low.get_mut(b as usize) {
            // The common case without a second look-up.
            Some(slot) if *slot < HIGH - 1 => {
                if *slot == 0 {
                    self.nonzero += 1;
                }
                *slot += 1;
            }
            _ => self.set(b, self.get(b).saturating_add(1)),
        }
    }

    /// The blocks within both devices whose counts may differ (their bytes
    /// differ, or both are in `high`), in order: a comparison of whole
    /// devices looks at these only.
    pub(super) fn differ<'a>(&'a self, other: &'a Counts) -> impl Iterator<Item = u64> + 'a {
        self.low
            .iter()
            .zip(other.low.iter())
            .enumerate()
            .filter(|(_, (a, b))| a != b || **a == HIGH)
            .map(|(b, _)| b as u64)
    }

    /// Blocks within the device with a count above zero.
    pub(super) fn nonzero(&self) -> u64 {
        self.nonzero
    }

    /// The highest block within the device with a count above zero.
    pub(super) fn highest(&self) -> Option<u64> {
        self.low.iter().rposition(|&c| c != 0).map(|b| b as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::Counts;

    #[test]
    fn counts_past_a_byte_and_past_the_end() {
        let mut c = Counts::new(10).unwrap();
        for _ in 0..300 {
            c.inc(3);
        }
        c.inc(9);
        c.inc(12);
        assert_eq!((c.get(3), c.get(9), c.get(12), c.get(0)), (300, 1, 1, 0));
        assert_eq!((c.nonzero(), c.highest()), (2, Some(9)));
        c.set(3, 2);
        c.set(9, 0);
        assert_eq!((c.get(3), c.nonzero(), c.highest()), (2, 1, Some(3)));
        assert!(c.high.is_empty());
        assert_eq!(c.beyond.keys().copied().collect::<std::vec::Vec<_>>(), [12]);
    }
}
