// SPDX-License-Identifier: GPL-2.0
//! Thin-provisioning metadata on top of persistent data, as
//! `dm-thin-metadata.c`: the superblock, the device details and mapping
//! trees, lookups in the last commit's tree for readers without the
//! metadata's owner, the mapping cache the map path reads, and (host only) a
//! checker.

// Host-only (it needs std): not built in the kernel.
#[cfg(feature = "checker")]
pub mod checker;
pub mod committed;
pub mod mapping_cache;
pub mod superblock;
pub mod thin_metadata;
