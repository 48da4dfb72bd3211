// SPDX-License-Identifier: GPL-2.0
//! `meta ls`: the thin devices in the metadata, with thin_ls's figures.

use super::open_mode;
use crate::context::Ctx;
use crate::explain::Result;
use crate::meta;

/// `meta ls PATH [--metadata-snap]`.
pub fn run(ctx: &Ctx, path: &str, metadata_snap: bool) -> Result<i32> {
    meta::ls(path, open_mode(metadata_snap), ctx.json, &ctx.style)
}
