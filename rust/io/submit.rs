// SPDX-License-Identifier: GPL-2.0
//! How a worker hands a bio to the data device: the remap into its data
//! block, and for a durable bio (PREFLUSH/FUA, a flush) the commit that must
//! cover this thin's changes first.

use super::ThinIo;
use crate::{dm::pool_mode::IoError, glue::bio::OwnedBio};

impl ThinIo {
    /// Remaps `bio` into `data_block` on the pool device.
    pub(super) fn remap(&self, bio: &mut OwnedBio, data_block: u64) -> Result<(), IoError> {
        let sector = bio.view().sector();
        let to = self.geometry.remap(data_block, sector).ok_or(IoError::Io)?;
        bio.view().remap_bdev(&self.pool_bdev, to);
        Ok(())
    }

    /// For a `durable` bio (PREFLUSH/FUA, or a flush): makes sure every
    /// change of this device is in a commit on stable storage, committing if
    /// no commit covers it yet, and hands the bio back with the outcome: an
    /// error if the changes were lost to an aborted transaction or the
    /// commit failed. `None` if the pool is suspended (no commit then): the
    /// bio waits for the resume; or while a delete is done in pieces (the
    /// commit at its end covers the bio): the bio waits for that end.
    pub(super) fn commit_for(
        &self,
        bio: OwnedBio,
        durable: bool,
    ) -> Option<(OwnedBio, Result<(), IoError>)> {
        if !durable || self.changes_committed() {
            return Some((bio, Ok(())));
        }
        let mut st = match self.pool.lock_settled_or_deleting() {
            Ok(st) => st,
            Err(_st) => {
                // Pushed under the pool lock, which the delete's end takes.
                self.waiters.lock().push(bio);
                return None;
            }
        };
        // A commit that ended while we waited for the lock may cover it.
        if self.changes_committed() {
            return Some((bio, Ok(())));
        }
        if self.changes_lost() {
            return Some((bio, Err(IoError::Io)));
        }
        let bio = self.unless_quiesced(&st, bio)?;
        Some((bio, st.commit().map_err(|_| IoError::Io)))
    }

    /// Commits as `durable` asks, then remaps and submits the bio.
    pub(super) fn commit_and_submit(&self, bio: OwnedBio, durable: bool, data_block: u64) {
        let Some((mut bio, committed)) = self.commit_for(bio, durable) else {
            return;
        };
        match committed.and_then(|()| self.remap(&mut bio, data_block)) {
            Ok(()) => bio.submit(),
            Err(e) => bio.complete(Some(e)),
        }
    }
}
