// SPDX-License-Identifier: GPL-2.0
//! `version`.

use serde::Serialize;

use crate::context::{open, print_json, Ctx};
use crate::dm::Transport;
use crate::explain::{exit, Result};
use crate::model::{dm_err, POOL_TARGETS, THIN_TARGETS};

/// `version`: rthinctl's own version even when device-mapper cannot be
/// opened, then the kernel's.
pub fn run(ctx: &Ctx) -> Result<i32> {
    if !ctx.json {
        println!("rthinctl {}", env!("CARGO_PKG_VERSION"));
    }
    let t = open()?;
    kernel_versions(ctx, &t)
}

/// The DM ioctl version and the thin targets' versions.
fn kernel_versions(ctx: &Ctx, t: &dyn Transport) -> Result<i32> {
    let (a, b, c) = t
        .driver_version()
        .map_err(|e| dm_err("reading the DM version", "", e))?;
    let targets = t
        .target_versions()
        .map_err(|e| dm_err("listing targets", "", e))?;
    let ours: Vec<&(String, u32, u32, u32)> = targets
        .iter()
        .filter(|x| POOL_TARGETS.contains(&x.0.as_str()) || THIN_TARGETS.contains(&x.0.as_str()))
        .collect();
    if ctx.json {
        #[derive(Serialize)]
        struct VersionJson<'a> {
            schema: &'static str,
            rthinctl: &'static str,
            dm_ioctl: String,
            targets: Vec<TargetJson<'a>>,
        }
        #[derive(Serialize)]
        struct TargetJson<'a> {
            name: &'a str,
            version: String,
        }
        return print_json(&VersionJson {
            schema: "rthinctl.version/1",
            rthinctl: env!("CARGO_PKG_VERSION"),
            dm_ioctl: format!("{a}.{b}.{c}"),
            targets: ours
                .iter()
                .map(|x| TargetJson {
                    name: &x.0,
                    version: format!("{}.{}.{}", x.1, x.2, x.3),
                })
                .collect(),
        })
        .map(|_| exit::OK);
    }
    // "rthinctl VERSION" is printed before device-mapper is opened.
    println!("device-mapper ioctl interface {a}.{b}.{c}");
    if ours.is_empty() {
        println!("no thin targets are loaded: modprobe dm-rthin (rthin-pool/rthin) or modprobe dm-thin-pool (thin-pool/thin)");
    }
    for x in ours {
        println!("target {} {}.{}.{}", x.0, x.1, x.2, x.3);
    }
    Ok(exit::OK)
}
