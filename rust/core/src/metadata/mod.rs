// SPDX-License-Identifier: GPL-2.0
//! Thin-provisioning metadata on top of persistent data, as
//! `dm-thin-metadata.c`: the superblock, the device details and mapping
//! trees, the mapping cache the map path reads, and (host only) a checker.

// Host-only (it needs std): not built in the kernel.
#[cfg(feature = "checker")]
pub mod checker;
pub mod mapping_cache;
pub mod superblock;
pub mod thin_metadata;
