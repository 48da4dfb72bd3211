// SPDX-License-Identifier: GPL-2.0
//! The per-bio questions a worker asks the mode (interface.md, "Pool modes"): the decisions
//! for a bio given its lookup, for a discard, and for a provision or a
//! discard that finished its I/O, with the types they are made of.

use super::{PoolMode, PoolModeState};

/// Completion error for a bio, as a `blk_status_t` class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoError {
    /// `BLK_STS_IOERR` (EIO).
    Io,
    /// `BLK_STS_NOSPC` (ENOSPC).
    NoSpace,
}

impl IoError {
    /// The errno value (positive) behind this status.
    pub fn errno(self) -> i32 {
        match self {
            IoError::Io => crate::dm::errno::EIO,
            IoError::NoSpace => crate::dm::errno::ENOSPC,
        }
    }
}

/// What the metadata lookup found for the bio's virtual block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup {
    /// No mapping for the block.
    Unmapped,
    /// Mapped; `shared` per the snapshot time-stamp rule.
    Mapped {
        /// The data block is shared with another device (needs CoW to write).
        shared: bool,
    },
}

/// The kind of a (non-discard) bio handled by the worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BioDir {
    /// A read.
    Read,
    /// A write carrying data.
    Write,
    /// A write without data (an empty flush).
    EmptyWrite,
}

/// How deferred work reached the worker; only matters in FAIL mode, where a
/// bare bio gets EIO but a bio prison cell gets [`PoolModeState::pool_io_error`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkItem {
    /// A deferred bio (flushes, discards).
    Bio,
    /// A cell holding bios for one virtual block (ordinary data bios).
    Cell,
}

/// The worker's decision for a bio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BioAction {
    /// Remap to the mapped data block (an unmapped empty write is just
    /// forwarded: empty flushes never provision).
    Remap,
    /// Unmapped read: zero-fill, or read the external origin if any.
    ReadHole,
    /// Allocate a data block (zero or copy from the origin, then write).
    Provision,
    /// Copy-on-write of a shared block.
    BreakSharing,
    /// Park on the thin's retry-on-resume list (out of data space, queueing).
    Queue,
    /// Complete the bio with this error.
    Error(IoError),
}

/// The worker's decision for a discard bio.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiscardAction {
    /// Unmap the whole blocks in range (and pass down if enabled).
    Process,
    /// Complete successfully without doing anything.
    Ignore,
    /// Complete with this error.
    Error(IoError),
}

/// What to do with a provisioning/CoW whose copy or zeroing has completed
/// (`process_prepared_mapping`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreparedMappingAction {
    /// Insert the new mapping and issue the held bios.
    Insert,
    /// Do not insert; give the new block back and error the held bios.
    Release(IoError),
    /// Do not insert and leave the block alone (the metadata rolled back
    /// since it was allocated, which freed it already); error the held bios.
    Forget(IoError),
}

impl PoolModeState {
    /// Resolution of a bio that needs a metadata change the mode does not
    /// allow (`should_error_unserviceable_bio`): out of data space → queue,
    /// or ENOSPC if the live policy is error; every other mode → EIO.
    pub fn unserviceable(&self) -> BioAction {
        match self.mode {
            PoolMode::OutOfDataSpace if !self.error_if_no_space => BioAction::Queue,
            PoolMode::OutOfDataSpace => BioAction::Error(IoError::NoSpace),
            _ => BioAction::Error(IoError::Io),
        }
    }

    /// The worker's decision for a non-discard bio given the lookup result.
    /// In WRITE mode normal processing; in OODS/OOMS/RO the read-only path
    /// (an empty write to an unmapped block is unserviceable there, as in
    /// dm-thin: compatibility.md, "Empty flush to an unmapped block"); in
    /// FAIL an error.
    pub fn decide_bio(&self, item: WorkItem, dir: BioDir, lookup: Lookup) -> BioAction {
        match self.mode {
            PoolMode::Fail => BioAction::Error(self.fail_error(item)),
            PoolMode::Write => match (dir, lookup) {
                (BioDir::Read, Lookup::Unmapped) => BioAction::ReadHole,
                (BioDir::Write, Lookup::Unmapped) => BioAction::Provision,
                (BioDir::Write, Lookup::Mapped { shared: true }) => BioAction::BreakSharing,
                _ => BioAction::Remap,
            },
            _ => match (dir, lookup) {
                (BioDir::Read, Lookup::Unmapped) => BioAction::ReadHole,
                (_, Lookup::Unmapped) | (BioDir::Write, Lookup::Mapped { shared: true }) => {
                    self.unserviceable()
                }
                _ => BioAction::Remap,
            },
        }
    }

    /// The worker's decision for a discard: processed in WRITE and OODS,
    /// completed as a no-op in OOMS/RO, errored in FAIL.
    pub fn decide_discard(&self, item: WorkItem) -> DiscardAction {
        match self.mode {
            PoolMode::Write | PoolMode::OutOfDataSpace => DiscardAction::Process,
            PoolMode::OutOfMetadataSpace | PoolMode::ReadOnly => DiscardAction::Ignore,
            PoolMode::Fail => DiscardAction::Error(self.fail_error(item)),
        }
    }

    /// A prepared discard (unmap done, passdown pending) in the current mode:
    /// processed in WRITE/OODS, completed OK in OOMS/RO, EIO in FAIL.
    pub fn decide_prepared_discard(&self) -> DiscardAction {
        match self.mode {
            PoolMode::Write | PoolMode::OutOfDataSpace => DiscardAction::Process,
            PoolMode::OutOfMetadataSpace | PoolMode::ReadOnly => DiscardAction::Ignore,
            PoolMode::Fail => DiscardAction::Error(IoError::Io),
        }
    }

    /// A provisioning/CoW finished copying or zeroing (or failed to):
    /// `rolled_back` if the metadata rolled back since its block was
    /// allocated (the block is free already: leave it), else if not
    /// `filled` (the block got no data) give the block back, else insert it
    /// in WRITE and OODS; otherwise error its bios with
    /// [`PoolModeState::pool_io_error`].
    pub fn decide_prepared_mapping(
        &self,
        filled: bool,
        rolled_back: bool,
    ) -> PreparedMappingAction {
        // The rollback first: it freed the block whatever the fill did.
        if rolled_back {
            return PreparedMappingAction::Forget(self.pool_io_error());
        }
        if !filled {
            return PreparedMappingAction::Release(IoError::Io);
        }
        match self.mode {
            PoolMode::Write | PoolMode::OutOfDataSpace => PreparedMappingAction::Insert,
            _ => PreparedMappingAction::Release(self.pool_io_error()),
        }
    }

    fn fail_error(&self, item: WorkItem) -> IoError {
        match item {
            WorkItem::Bio => IoError::Io,
            WorkItem::Cell => self.pool_io_error(),
        }
    }
}
