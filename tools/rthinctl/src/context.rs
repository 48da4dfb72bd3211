// SPDX-License-Identifier: GPL-2.0
//! What every command is given: the output options, the opened
//! device-mapper control device and JSON printing.

use serde::Serialize;

use crate::dm::DmTransport;
use crate::explain::{exit, explain_ioctl, Error, Result};
use crate::report::Style;

/// Options every command sees.
pub struct Ctx {
    /// `--json`.
    pub json: bool,
    /// `--verbose`.
    pub verbose: bool,
    /// Table style.
    pub style: Style,
    /// `--force`: change a pool that LVM or Stratis owns.
    pub force: bool,
}

/// Opens the control device.
pub fn open() -> Result<DmTransport> {
    DmTransport::open().map_err(|e| match e.errno {
        Some(6) | Some(19) => Error::new(
            exit::OTHER,
            "device-mapper is not available in this kernel (opening /dev/mapper/control gave ENODEV): load it with modprobe dm-mod",
        ),
        _ => explain_ioctl("opening /dev/mapper/control", "", e.errno, &e.text),
    })
}

/// Prints `v` as pretty JSON on stdout.
pub fn print_json<T: Serialize>(v: &T) -> Result<()> {
    let s = serde_json::to_string_pretty(v)
        .map_err(|e| Error::new(exit::OTHER, format!("JSON encoding failed: {e}")))?;
    println!("{s}");
    Ok(())
}
