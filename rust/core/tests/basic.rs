// SPDX-License-Identifier: GPL-2.0
//! Basic behaviour of the metadata core over the host stores.
mod common;

use common::{checker, mem_store, HostStore, MemMedia};
use rthin_core::core_error::CoreError;
use rthin_core::thin_metadata::ThinMetadata;

#[test]
fn format_open_empty() {
    let md = ThinMetadata::format(mem_store(1024), 128, 1000).unwrap();
    let st = md.into_store();
    let rep = checker::check(&st).unwrap();
    assert_eq!(rep.devices, 0);
    let md = ThinMetadata::open(st, Some(128)).unwrap();
    assert_eq!(md.data_usage().total, 1000);
    assert_eq!(md.data_usage().free, 1000);
    assert_eq!(md.transaction_id(), 0);
    let st = md.into_store();
    assert!(matches!(
        ThinMetadata::open(st, Some(256)),
        Err(CoreError::Invalid)
    ));
    assert!(matches!(
        ThinMetadata::open(mem_store(64), None),
        Err(CoreError::Unformatted)
    ));
}

#[test]
fn thin_and_snapshot() {
    let mut md = ThinMetadata::format(mem_store(2048), 128, 100_000).unwrap();
    md.create_thin(1).unwrap();
    assert_eq!(md.create_thin(1), Err(CoreError::Exists));
    for v in 0..2000u64 {
        let b = md.alloc_data_block().unwrap();
        md.insert_mapping(1, v * 3, b).unwrap();
    }
    md.commit().unwrap();
    checker::check(md.store()).unwrap();
    md.create_snap(2, 1).unwrap();
    assert_eq!(md.time(), 1);
    let l = md.lookup(1, 30).unwrap().unwrap();
    assert!(l.shared);
    assert_eq!(md.mapping_is_shared(1, 30).unwrap(), Some(true));
    // break sharing on the origin
    let b = md.alloc_data_block().unwrap();
    md.insert_mapping(1, 30, b).unwrap();
    assert_eq!(md.lookup(1, 30).unwrap().unwrap().mapping.data_block, b);
    assert!(!md.lookup(1, 30).unwrap().unwrap().shared);
    assert_ne!(md.lookup(2, 30).unwrap().unwrap().mapping.data_block, b);
    assert_eq!(md.device_details(2).unwrap().unwrap().mapped_blocks, 2000);
    assert_eq!(md.highest_mapped(2).unwrap(), Some(1999 * 3));
    // Callbacks may call back into the metadata (no guard is held).
    let mut seen = 0;
    md.for_each_mapping(2, &mut |v, m| {
        assert_eq!(md.lookup(2, v)?.unwrap().mapping, m);
        seen += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(seen, 2000);
    md.commit().unwrap();
    checker::check(md.store()).unwrap();
    md.delete(1).unwrap();
    md.commit().unwrap();
    checker::check(md.store()).unwrap();
    assert_eq!(md.mapping_is_shared(2, 30).unwrap(), Some(false));
    assert_eq!(md.remove_range(2, 0, 3000).unwrap(), 1000);
    md.commit().unwrap();
    let rep = checker::check(md.store()).unwrap();
    assert_eq!(rep.mappings, 1000);
    md.delete(2).unwrap();
    md.commit().unwrap();
    let rep = checker::check(md.store()).unwrap();
    assert_eq!(rep.data_allocated, 0);
    let st = md.into_store();
    let md = ThinMetadata::open(
        HostStore::new(MemMedia::from_image(&st.media.image())),
        None,
    )
    .unwrap();
    assert_eq!(md.data_usage().free, 100_000);
}
