// SPDX-License-Identifier: GPL-2.0
//! `metadata-snap reserve|release|show`.

use crate::context::Ctx;
use crate::dm::Transport;
use crate::explain::{exit, Error, Msg, Result};
use crate::model::read_pool;
use crate::pool_msg::{done, find_pool, held_root, precheck, send, JResult};
use crate::report;
use crate::status::PoolStatus;

/// Metadata snapshot operations.
pub enum SnapOp {
    /// reserve_metadata_snap.
    Reserve,
    /// release_metadata_snap.
    Release,
    /// Show the held root.
    Show,
}

/// `metadata-snap`.
pub fn run(ctx: &Ctx, t: &dyn Transport, pool: &str, op: SnapOp) -> Result<i32> {
    let tg = find_pool(t, pool)?;
    let msg = match op {
        SnapOp::Show => {
            let readable = matches!(tg.pool.status, Ok(PoolStatus::Working(_)));
            let h = held_root(&tg.pool);
            let mut j = JResult::new(&tg.name, &Msg::Raw(String::new()));
            j.message = String::new();
            j.held_metadata_root = h;
            if !readable {
                return Err(Error::new(
                    exit::REFUSED,
                    format!(
                        "pool {}'s status does not show its held root ({})",
                        tg.name,
                        report::pool_state(&tg.pool)
                    ),
                ));
            }
            return done(
                ctx,
                &j,
                match h {
                    Some(b) => format!("pool {} holds a metadata snapshot at block {b}", tg.name),
                    None => format!("pool {} holds no metadata snapshot", tg.name),
                },
            );
        }
        SnapOp::Reserve => Msg::ReserveMetadataSnap,
        SnapOp::Release => Msg::ReleaseMetadataSnap,
    };
    precheck(&tg, &msg, None)?;
    send(ctx, t, &tg, &msg)?;
    let after = read_pool(t, &tg.name, tg.pool.info.dev).ok();
    let h = after.as_ref().and_then(held_root);
    let mut j = JResult::new(&tg.name, &msg);
    j.held_metadata_root = h;
    let text = match (&msg, h) {
        (Msg::ReserveMetadataSnap, Some(b)) => format!("pool {} now holds a metadata snapshot at block {b}; read it with thin_dump --metadata-snap, release it when done", tg.name),
        (Msg::ReserveMetadataSnap, None) => format!("pool {} reserved a metadata snapshot", tg.name),
        _ => format!("pool {} released its metadata snapshot", tg.name),
    };
    done(ctx, &j, text)
}
