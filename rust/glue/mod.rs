// SPDX-License-Identifier: GPL-2.0
//! Kernel glue: the only place where rthin touches C. Every `unsafe` block of
//! the module lives in these files, each with a `// SAFETY:` comment; the
//! targets above them see only safe types.

pub(crate) mod bindings;
pub(crate) mod bio;
pub(crate) mod bufio;
pub(crate) mod deferred;
pub(crate) mod device;
pub(crate) mod dm;
pub(crate) mod global_list;
pub(crate) mod hooked;
pub(crate) mod inflight;
pub(crate) mod kcopyd;
pub(crate) mod open_block;
pub(crate) mod params;
pub(crate) mod queue;
pub(crate) mod rcu_box;
pub(crate) mod sched;
pub(crate) mod target_type;
pub(crate) mod ticker;
