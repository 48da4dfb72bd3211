// SPDX-License-Identifier: GPL-2.0
//! `meta dump`: the metadata as thin_dump XML.

use super::open_mode;
use crate::explain::Result;
use crate::meta;

/// `meta dump PATH [--metadata-snap]`.
pub fn run(path: &str, metadata_snap: bool) -> Result<i32> {
    meta::dump(path, open_mode(metadata_snap))
}
