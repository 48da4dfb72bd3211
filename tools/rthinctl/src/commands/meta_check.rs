// SPDX-License-Identifier: GPL-2.0
//! `meta check`: a metadata device or image, or a running pool's
//! metadata snapshot (`--live`).

use crate::context::{open, Ctx};
use crate::dm::Transport;
use crate::explain::{exit, Error, Msg, Result};
use crate::meta;
use crate::pool_msg::{find_pool, held_root, send, Target};
use crate::status::DevT;

/// The block device node of `dev`, from sysfs (`/sys/dev/block/M:N/uevent`).
fn dev_node(dev: DevT) -> Option<String> {
    let u = std::fs::read_to_string(format!("/sys/dev/block/{}:{}/uevent", dev.major, dev.minor))
        .ok()?;
    u.lines()
        .find_map(|l| l.strip_prefix("DEVNAME="))
        .map(|n| format!("/dev/{n}"))
}

/// `meta check --live POOL`: reserve a metadata snapshot (or use the one
/// the pool holds), check it through the running pool's metadata device
/// and release it again (also on failure), as `examine_held` describes.
fn check_live(
    ctx: &Ctx,
    t: &dyn Transport,
    pool: &str,
    quiet: bool,
    ignore_leaks: bool,
) -> Result<i32> {
    let tg = find_pool(t, pool)?;
    let mdev = tg
        .pool
        .table
        .as_ref()
        .ok()
        .and_then(|x| x.metadata_dev)
        .ok_or_else(|| {
            Error::new(
                exit::OTHER,
                format!("pool {}: its table names no metadata device", tg.name),
            )
        })?;
    let path = dev_node(mdev).ok_or_else(|| {
        Error::new(
            exit::NOT_FOUND,
            format!(
                "pool {}: no device node for its metadata device {}:{}",
                tg.name, mdev.major, mdev.minor
            ),
        )
    })?;
    let ours = held_root(&tg.pool).is_none();
    if ours {
        send(ctx, t, &tg, &Msg::ReserveMetadataSnap)?;
    }
    struct Release<'a> {
        ctx: &'a Ctx,
        t: &'a dyn Transport,
        tg: &'a Target,
        armed: bool,
    }
    impl Drop for Release<'_> {
        fn drop(&mut self) {
            if self.armed {
                if let Err(e) = send(self.ctx, self.t, self.tg, &Msg::ReleaseMetadataSnap) {
                    eprintln!(
                        "rthinctl: could not release the metadata snapshot of {}: {e}; run: dmsetup message {} 0 release_metadata_snap",
                        self.tg.name, self.tg.name
                    );
                }
            }
        }
    }
    let release = Release {
        ctx,
        t,
        tg: &tg,
        armed: ours,
    };
    let store = meta::FileStore::open(
        &path,
        meta::OpenMode {
            snap: false,
            shared: true,
        },
    )?;
    let r = meta::judge(&tg.name, &store, true, ignore_leaks);
    drop(store);
    drop(release);
    meta::report_check(&r, quiet, ctx.json)
}

/// `meta check PATH` or `meta check --live POOL`.
pub fn run(
    ctx: &Ctx,
    path: Option<&str>,
    live: Option<&str>,
    o: &meta::CheckOptions,
) -> Result<i32> {
    match (path, live) {
        (Some(path), _) => meta::check_with(path, o),
        (None, Some(pool)) => {
            let t = open()?;
            check_live(ctx, &t, pool, o.quiet, o.ignore_leaks)
        }
        (None, None) => Err(Error::usage("meta check needs PATH or --live POOL")),
    }
}
