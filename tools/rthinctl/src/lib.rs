// SPDX-License-Identifier: GPL-2.0
//! rthinctl's commands and the library under them.
//!
//! Layers, each importing only from those below it: [`commands`] (one
//! module and one `run` per command) over [`cli`] (the command line); under
//! them the library: [`pool_msg`] (finding a pool, the owner guard and the
//! pre-checks, sending a message), [`context`] (the options every command
//! sees), [`meta`] (the offline metadata),
//! [`report`] (rendering), [`model`] (scanning devices), [`dm`] (the ioctl
//! transport), [`view`], [`units`], [`status`] (parsing kernel lines) and
//! [`explain`] (errnos as sentences). See Documentation/rthinctl.md.

pub mod cli;
pub mod commands;

mod context;
mod dm;
mod explain;
mod meta;
mod model;
mod pool_msg;
mod report;
mod status;
mod units;
mod view;

pub use context::open;
pub use explain::{exit, Result};
pub use meta::CheckOptions;
