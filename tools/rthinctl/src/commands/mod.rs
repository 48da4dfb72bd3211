// SPDX-License-Identifier: GPL-2.0
//! The commands, one module each with its `run`, over the library
//! modules (they never import from here).

pub mod check;
pub mod create;
pub mod delete;
pub mod generate_docs;
pub mod ls;
pub mod message;
pub mod meta_check;
pub mod meta_dump;
pub mod meta_ls;
pub mod metadata_snap;
pub mod prometheus;
pub mod snap;
pub mod status;
pub mod transaction_id;
pub mod version;
pub mod watch;

use crate::cli::IdArg;
use crate::context::Ctx;
use crate::dm::Transport;
use crate::explain::{exit, Error, Msg, Result};
use crate::meta::OpenMode;
use crate::pool_msg::{auto_ids, send, Target, AUTO_TRIES};

/// Sends `make(id)` for each candidate id until one is not EEXIST.
fn with_auto_id(
    ctx: &Ctx,
    t: &dyn Transport,
    tg: &Target,
    id: IdArg,
    make: &dyn Fn(u32) -> Msg,
) -> Result<u32> {
    match id {
        IdArg::Num(n) => {
            send(ctx, t, tg, &make(n))?;
            Ok(n)
        }
        IdArg::Auto => {
            for n in auto_ids(t, tg.pool.info.dev)? {
                match send(ctx, t, tg, &make(n)) {
                    Ok(_) => return Ok(n),
                    Err(e) if e.text.contains("already in use") => continue,
                    Err(e) => return Err(e),
                }
            }
            Err(Error::new(
                exit::REFUSED,
                format!("--id auto found no free id in {AUTO_TRIES} tries above the active ones in pool {}; give --id explicitly", tg.name),
            ))
        }
    }
}

/// How `meta dump` and `meta ls` open the metadata: the held snapshot
/// (`--metadata-snap`) is read beside a running pool, so the device is
/// then opened shared.
fn open_mode(metadata_snap: bool) -> OpenMode {
    OpenMode {
        snap: metadata_snap,
        shared: metadata_snap,
    }
}

#[cfg(test)]
mod tests;
