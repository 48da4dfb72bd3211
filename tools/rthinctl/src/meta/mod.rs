// SPDX-License-Identifier: GPL-2.0
//! Offline metadata: `meta ls|dump|check` on an inactive metadata device or
//! an image file, read through the same core crate the kernel module uses
//! (`rthin_core::metadata::thin_metadata::ThinMetadata` over a read-only block store).
//!
//! A block device is opened exclusively (`O_EXCL`) and with `O_DIRECT`, so
//! the metadata device of an active pool is refused (the kernel changes it
//! underneath; the same rule as for thin_check and thin_dump), unless the
//! reader goes through a held metadata snapshot (`-m`), whose blocks do not
//! change while it is held. `meta check --live POOL` does that for a
//! running pool: reserve a snapshot, check it, release it.

mod check;
mod dump;
mod ls;
mod store;

pub use check::{check_with, judge, report_check, CheckOptions};
pub use dump::dump;
pub use ls::ls;
pub use store::{FileStore, OpenMode};

#[cfg(test)]
#[path = "../../tests/common/image.rs"]
#[allow(dead_code)]
mod test_image;
