// SPDX-License-Identifier: GPL-2.0
//! Persistent data, as dm's `persistent-data` library: a block store,
//! block checksums and encodings, B-trees, space maps and the transaction
//! manager that shadows blocks between commits.

pub mod block_store;
pub mod btree;
pub mod checksum;
pub mod codec;
pub mod space_map;
pub mod tm;
