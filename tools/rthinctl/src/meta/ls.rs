// SPDX-License-Identifier: GPL-2.0
//! `meta ls`: the thin devices in the metadata with thin_ls's figures.

use rthin_core::core_error::CoreResult;
use rthin_core::metadata::thin_metadata::{DeviceDetails, Mapping, ThinMetadata};
use serde::Serialize;

use super::store::{core_sentence, open_md_with, FileStore, OpenMode};
use crate::explain::{exit, Error, Result};

#[derive(Serialize)]
struct DeviceJson {
    dev_id: u64,
    mapped_blocks: u64,
    mapped_bytes: u64,
    exclusive_blocks: u64,
    exclusive_bytes: u64,
    shared_blocks: u64,
    shared_bytes: u64,
    highest_mapped_block: Option<u64>,
    transaction_id: u64,
    creation_time: u32,
    snapshotted_time: u32,
}

/// The devices in the metadata, with their details (`meta ls` and
/// `meta dump` walk them).
pub fn devices(md: &ThinMetadata<FileStore>) -> CoreResult<Vec<(u64, DeviceDetails)>> {
    let mut v = Vec::new();
    md.for_each_device(&mut |d, det| {
        v.push((d, det));
        Ok(())
    })?;
    Ok(v)
}

/// thin_ls's figures of one device: mapped blocks, those mapped by no
/// other device (exclusive), the rest (shared), the highest mapped block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub mapped: u64,
    pub exclusive: u64,
    pub shared: u64,
    pub highest: Option<u64>,
}

/// Which data blocks are mapped once and which more than once: two bits
/// per data block (all thin_ls's exclusive and shared figures need),
/// where a map from block to count cost some 40 bytes per mapped block.
/// The bitsets grow to the highest block mapped; blocks past the data
/// device (damage; thin_check reports it) are counted in a map.
struct Sharing {
    nr_data_blocks: u64,
    once: Vec<u64>,
    twice: Vec<u64>,
    beyond: std::collections::HashMap<u64, u32>,
}

impl Sharing {
    fn new(nr_data_blocks: u64) -> Self {
        Self {
            nr_data_blocks,
            once: Vec::new(),
            twice: Vec::new(),
            beyond: Default::default(),
        }
    }

    fn add(&mut self, b: u64) {
        if b >= self.nr_data_blocks {
            *self.beyond.entry(b).or_default() += 1;
            return;
        }
        let (w, bit) = ((b / 64) as usize, 1u64 << (b % 64));
        if w >= self.once.len() {
            self.once.resize(w + 1, 0);
            self.twice.resize(w + 1, 0);
        }
        if self.once[w] & bit != 0 {
            self.twice[w] |= bit;
        }
        self.once[w] |= bit;
    }

    fn shared(&self, b: u64) -> bool {
        if b >= self.nr_data_blocks {
            return self.beyond.get(&b).is_some_and(|&n| n > 1);
        }
        let (w, bit) = ((b / 64) as usize, 1u64 << (b % 64));
        self.twice.get(w).is_some_and(|x| x & bit != 0)
    }
}

/// Counts, over every device, which data blocks are mapped more than once,
/// then each device's exclusive and shared blocks (as thin_ls does). The
/// trees are walked once: the data blocks each device maps are kept (8
/// bytes a mapping, about a third of what thin_ls 1.x holds) for the
/// second count, which a second walk made twice as slow.
pub fn usage(
    md: &ThinMetadata<FileStore>,
    devs: &[(u64, DeviceDetails)],
) -> CoreResult<Vec<Usage>> {
    let mut refs = Sharing::new(md.committed_superblock().data_sm.nr_blocks);
    let mut mapped: Vec<u64> = Vec::new();
    // Per device: (its range in `mapped`, its highest mapped block).
    let mut spans = Vec::with_capacity(devs.len());
    for (d, _) in devs {
        let start = mapped.len();
        let mut highest = None;
        md.for_each_mapping(*d, &mut |v, m: Mapping| {
            refs.add(m.data_block);
            mapped.push(m.data_block);
            highest = Some(v);
            Ok(())
        })?;
        spans.push((start..mapped.len(), highest));
    }
    Ok(spans
        .into_iter()
        .map(|(range, highest)| {
            let blocks = &mapped[range];
            let shared = blocks.iter().filter(|&&b| refs.shared(b)).count() as u64;
            Usage {
                mapped: blocks.len() as u64,
                exclusive: blocks.len() as u64 - shared,
                shared,
                highest,
            }
        })
        .collect())
}

/// `meta ls`: the devices in the metadata, with thin_ls's columns.
pub fn ls(path: &str, mode: OpenMode, json: bool, style: &crate::report::Style) -> Result<i32> {
    let md = open_md_with(path, mode)?;
    let devs = devices(&md).map_err(|e| core_sentence(path, e))?;
    let us = usage(&md, &devs).map_err(|e| core_sentence(path, e))?;
    let bs = u64::from(md.data_block_size()) * 512;
    if json {
        #[derive(Serialize)]
        struct LsJson {
            schema: &'static str,
            metadata_snapshot: bool,
            transaction_id: u64,
            time: u32,
            data_block_size_bytes: u64,
            needs_check: bool,
            held_metadata_root: Option<u64>,
            devices: Vec<DeviceJson>,
        }
        let j = LsJson {
            schema: "rthinctl.meta-ls/1",
            metadata_snapshot: mode.snap,
            transaction_id: md.transaction_id(),
            time: md.time(),
            data_block_size_bytes: bs,
            needs_check: md.needs_check(),
            held_metadata_root: Some(md.held_root()).filter(|&h| h != 0),
            devices: devs
                .iter()
                .zip(&us)
                .map(|((d, x), u)| DeviceJson {
                    dev_id: *d,
                    mapped_blocks: x.mapped_blocks,
                    mapped_bytes: x.mapped_blocks.saturating_mul(bs),
                    exclusive_blocks: u.exclusive,
                    exclusive_bytes: u.exclusive.saturating_mul(bs),
                    shared_blocks: u.shared,
                    shared_bytes: u.shared.saturating_mul(bs),
                    highest_mapped_block: u.highest,
                    transaction_id: x.transaction_id,
                    creation_time: x.creation_time,
                    snapshotted_time: x.snapshotted_time,
                })
                .collect(),
        };
        let s = serde_json::to_string_pretty(&j)
            .map_err(|e| Error::new(exit::OTHER, format!("JSON encoding failed: {e}")))?;
        println!("{s}");
        return Ok(exit::OK);
    }
    let mut t = crate::report::Table::new(&[
        ("DEV", true),
        ("MAPPED", true),
        ("EXCLUSIVE", true),
        ("SHARED", true),
        ("MAPPED_BLOCKS", true),
        ("HIGHEST", true),
        ("TXN", true),
        ("CTIME", true),
        ("STIME", true),
    ]);
    let sz = |b: u64| style.units.format(b.saturating_mul(bs), style.suffix);
    for ((d, x), u) in devs.iter().zip(&us) {
        t.push(vec![
            d.to_string(),
            sz(x.mapped_blocks),
            sz(u.exclusive),
            sz(u.shared),
            x.mapped_blocks.to_string(),
            u.highest.map_or("-".into(), |h| h.to_string()),
            x.transaction_id.to_string(),
            x.creation_time.to_string(),
            x.snapshotted_time.to_string(),
        ]);
    }
    print!("{}", t.render(style));
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::store::open_md;
    use crate::meta::test_image::image;

    #[test]
    fn exclusive_and_shared_as_thin_ls() {
        // Thin 2 is a snapshot of thin 1 with its block 0 rewritten.
        let (_t, path) = image();
        let md = open_md(&path).unwrap();
        let u = usage(&md, &devices(&md).unwrap()).unwrap();
        let figs: Vec<(u64, u64, u64, Option<u64>)> = u
            .iter()
            .map(|u| (u.mapped, u.exclusive, u.shared, u.highest))
            .collect();
        assert_eq!(figs, [(6, 1, 5, Some(9)), (6, 1, 5, Some(9))]);
    }
}
