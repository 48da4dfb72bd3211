// SPDX-License-Identifier: GPL-2.0
//! Suspend and resume of the pool (dm-thin's `pool_presuspend`,
//! `pool_postsuspend`, `pool_preresume` and `pool_resume`), and what they
//! guarantee: from postsuspend's commit to resume the pool writes nothing
//! to its metadata device (but for messages, which dm-thin also serves
//! while suspended), its waker commits nothing, its no-space timer is
//! stopped, and its thins' deferred bios that need the metadata wait until
//! resume (`Documentation/io-path.md`, "Suspend").

use kernel::{prelude::*, sync::Arc};

use super::{
    no_space_timeout_secs, usable_metadata_blocks, warn_if_metadata_device_too_big, PoolObj,
    PoolState, Space,
};
use crate::{
    dm::pool_mode::{BindRequest, PoolMode},
    dm::pool_table::PoolFeatures,
    glue::{device::BdevHandle, dm::EventSink},
};

/// What a pool table brings to the pool object when it resumes it
/// (dm-thin's `bind_control_target` and the table's sizes).
pub(crate) struct Binding {
    /// The table's id (see `registry`).
    pub(crate) table_id: u64,
    /// The table asks for read-only mode.
    pub(crate) read_only: bool,
    /// The table's `error_if_no_space`.
    pub(crate) error_if_no_space: bool,
    /// The table's data low-water mark, in blocks.
    pub(crate) low_water_blocks: u64,
    /// The table's live features.
    pub(crate) features: PoolFeatures,
    /// The table, for dm events.
    pub(crate) event_table: Option<Arc<EventSink>>,
    /// The data blocks the table's length holds.
    pub(crate) nr_data_blocks: u64,
    /// The table's metadata device, for the too-big warning when it grew.
    pub(crate) metadata_dev: Option<BdevHandle>,
}

impl PoolState {
    /// dm-thin's `pool_preresume`: binds the table, then grows the data and
    /// metadata space to the table's and the device's sizes, committing if
    /// either grew.
    ///
    /// In FAIL mode every error is success, as in dm-thin: the resume must
    /// go on so that the thins' bios waiting for it fail instead of waiting
    /// for a resume that could never succeed (a metadata device that died,
    /// then `lvextend` or any reload with another size).
    pub(crate) fn preresume(&mut self, table: Binding) -> Result {
        let bound = self.bind_and_grow(table);
        if bound.is_err() && self.mode() == PoolMode::Fail {
            return Ok(());
        }
        bound
    }

    fn bind_and_grow(&mut self, table: Binding) -> Result {
        let request = if self.bound_table == table.table_id {
            BindRequest::SameTable
        } else {
            BindRequest::NewTable {
                read_only: table.read_only,
            }
        };
        self.bound_table = table.table_id;
        self.event_table = table.event_table;
        self.low_water_blocks = table.low_water_blocks;
        self.features = table.features;
        let needs_check = self.md.needs_check();
        // Out of data space, this arms the no-space timer again with the
        // whole timeout (postsuspend stopped it), as dm-thin's set_pool_mode.
        let change = self.mode.bind(
            request,
            table.error_if_no_space,
            needs_check,
            no_space_timeout_secs(),
        );
        self.report(&change);
        let grew_data = self.maybe_grow(Space::Data, table.nr_data_blocks)?;
        if grew_data {
            self.grow_cache();
        }
        let metadata_blocks = usable_metadata_blocks(self.md.store_mut().refresh_size());
        let grew_metadata = self.maybe_grow(Space::Metadata, metadata_blocks)?;
        if let (true, Some(dev)) = (grew_metadata, table.metadata_dev.as_ref()) {
            warn_if_metadata_device_too_big(dev);
        }
        if grew_data || grew_metadata {
            let _ = self.commit();
        }
        Ok(())
    }

    /// dm-thin's `pool_resume`: the workers may change the metadata again;
    /// the bios held for data space try again (the pool may have grown;
    /// those that still find none are held again), and so do the bios that
    /// waited for the resume.
    pub(crate) fn resume(&mut self) {
        self.suspended = false;
        self.quiesced = false;
        self.data_low_water.rearm();
        for t in self.thins.iter() {
            t.requeue_held();
            t.requeue_waiters();
        }
    }

    /// From postsuspend's commit to resume: no worker changes the metadata
    /// or commits (they hold their bios on their thin's waiters, under the
    /// pool lock, until [`Self::resume`]).
    pub(crate) fn quiesced(&self) -> bool {
        self.quiesced
    }
}

impl PoolObj {
    /// dm-thin's `pool_postsuspend`: stops the no-space timer (it starts
    /// again, with the whole timeout, when a table binds out of data space)
    /// and makes the last commit before resume. Under the same hold of the
    /// pool lock, the pool stops changing its metadata until resume, so that
    /// this commit is what the metadata device holds while the pool is
    /// suspended (a copy or `thin_dump` of it is consistent), as dm-thin,
    /// which cancels its waker and suspends its active thins.
    pub(crate) fn postsuspend(&self) {
        let mut st = self.lock_settled();
        let _ = st.commit();
        // After the commit, which may have changed the mode.
        st.no_space_deadline = None;
        st.quiesced = true;
    }
}
