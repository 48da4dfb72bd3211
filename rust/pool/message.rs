// SPDX-License-Identifier: GPL-2.0
//! The pool's messages (`dmsetup message`): steps 2-4 of `dm_message`'s
//! flow, under the pool lock.

use kernel::prelude::*;

use super::{PoolState, Show};
use crate::{core_error::CoreError, dm::message::PoolMessage};

impl PoolState {
    /// Runs one parsed message (steps 2-4 of `dm_message`'s glue flow).
    pub(crate) fn run_message(&mut self, msg: &PoolMessage<'_>) -> Result<(), i32> {
        // What the transaction holds goes to disk first (dm-thin does this
        // only for `reserve_metadata_snap`), so that a message that fails
        // part-way can be rolled back alone (`roll_back_message`). Changes
        // are made under the pool lock, held here: the commit covers every
        // change before the message.
        if self.md.is_dirty() {
            self.commit()?;
        }
        let result = match *msg {
            PoolMessage::CreateThin { dev_id, .. } => self.md.create_thin(dev_id.into()),
            PoolMessage::CreateSnap {
                dev_id, origin_id, ..
            } => {
                let r = self.md.create_snap(dev_id.into(), origin_id.into());
                if r.is_ok() {
                    self.note_snapshot_of(origin_id);
                }
                r
            }
            PoolMessage::Delete { dev_id, .. } => {
                if self.thins.iter().any(|t| t.dev_id() == dev_id) {
                    Err(CoreError::Busy)
                } else {
                    let r = self.md.delete(dev_id.into());
                    // No target of the device is left to read the cache,
                    // and a later one starts after this.
                    if r.is_ok() {
                        self.cache.forget_dev(dev_id);
                    }
                    r
                }
            }
            PoolMessage::SetTransactionId { current, new, .. } => {
                let r = self.md.set_transaction_id(current, new);
                if r == Err(CoreError::Invalid) {
                    pr_err!("mismatched transaction id\n");
                }
                r
            }
            PoolMessage::ReserveMetadataSnap => {
                let r = self.md.reserve_metadata_snap().map(|_| ());
                if r == Err(CoreError::Busy) {
                    pr_warn!(
                        "Pool metadata snapshot already exists: release this before taking another.\n"
                    );
                }
                r
            }
            PoolMessage::ReleaseMetadataSnap => {
                let r = self.md.release_metadata_snap();
                if r == Err(CoreError::Invalid) {
                    pr_warn!("No pool metadata snapshot found: nothing to release.\n");
                }
                r
            }
        };
        match result {
            Ok(()) => {
                self.flags.change();
                // The origin's details changed: its next flush commits.
                if let PoolMessage::CreateSnap { origin_id, .. } = *msg {
                    self.note_change_of(origin_id, self.flags.changes());
                }
                self.check_metadata_low_water();
                // dm-thin ignores the commit's result here.
                let _ = self.commit();
                Ok(())
            }
            Err(e) => {
                pr_warn!("{}\n", Show(|f| msg.write_failure_log(f)));
                // A refusal before any change (an existing or missing
                // device, a held snapshot, create_snap at the largest time)
                // leaves the metadata as the commit above left it; a
                // message that failed part-way is undone.
                if self.md.is_dirty() {
                    self.roll_back_message(msg.name(), e);
                }
                Err(e.errno())
            }
        }
    }
}
