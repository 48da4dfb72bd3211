// SPDX-License-Identifier: GPL-2.0
//! Running the programs the tests drive (dmsetup, blkdiscard, the thin
//! tools), for the crash test and rthin-torture (which mounts this file with
//! #[path]).

use std::process::Command;

/// Runs a program and returns its standard output; its failure is an error
/// naming the command and its standard error.
pub fn sh(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "'{}' failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}
