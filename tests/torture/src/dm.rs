// SPDX-License-Identifier: GPL-2.0
//! The device stack of one run, driven with dmsetup: RAM disk 0 holds the
//! metadata (dm-linear `tt-meta`, grown by reloading it), RAM disk 1 the
//! data (`tt-data`: dm-linear, or dm-delay over the same range), the pool
//! `tt-pool` over them and the thins `tt-t<id>`.

use crate::model::BLOCK_SECTORS;

pub type Res<T> = Result<T, String>;

const META_DISK: &str = "/dev/ram0";
const DATA_DISK: &str = "/dev/ram1";
/// The RAM disks are 256 MiB: the most either device can grow to.
pub const DISK_SECTORS: u64 = 256 * 2048;
pub const POOL: &str = "tt-pool";
const META: &str = "tt-meta";
const DATA: &str = "tt-data";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Impl {
    C,
    Rthin,
}

impl Impl {
    pub fn name(self) -> &'static str {
        match self {
            Impl::C => "dm-thin",
            Impl::Rthin => "rthin",
        }
    }
    fn pool_target(self) -> &'static str {
        match self {
            Impl::C => "thin-pool",
            Impl::Rthin => "rthin-pool",
        }
    }
    fn thin_target(self) -> &'static str {
        match self {
            Impl::C => "thin",
            Impl::Rthin => "rthin",
        }
    }
}

pub use crate::command::sh;

pub fn thin_name(dev: u32) -> String {
    format!("tt-t{dev}")
}
pub fn thin_path(dev: u32) -> String {
    format!("/dev/mapper/{}", thin_name(dev))
}
pub fn meta_path() -> String {
    format!("/dev/mapper/{META}")
}
pub fn meta_disk() -> &'static str {
    META_DISK
}

/// The pool's status line.
#[derive(Debug)]
pub struct PoolStatus {
    pub txid: u64,
    pub meta_total: u64,
    pub used: u64,
    pub total: u64,
    pub held: bool,
    pub mode: String,
}

/// The stack's current shape: what every table line is built from.
pub struct Stack {
    pub imp: Impl,
    pub meta_sectors: u64,
    pub data_blocks: u64,
    pub delay_ms: u32,
    pub error_if_no_space: bool,
}

impl Stack {
    pub fn new(imp: Impl) -> Stack {
        Stack {
            imp,
            meta_sectors: 4096,
            data_blocks: 128,
            delay_ms: 0,
            error_if_no_space: false,
        }
    }
    fn meta_table(&self) -> String {
        format!("0 {} linear {META_DISK} 0", self.meta_sectors)
    }
    fn data_sectors(&self) -> u64 {
        self.data_blocks * BLOCK_SECTORS
    }
    fn data_table(&self) -> String {
        match self.delay_ms {
            0 => format!("0 {} linear {DATA_DISK} 0", self.data_sectors()),
            ms => format!("0 {} delay {DATA_DISK} 0 {ms}", self.data_sectors()),
        }
    }
    pub fn pool_table(&self) -> String {
        format!(
            "0 {} {} {} /dev/mapper/{DATA} {BLOCK_SECTORS} 0{}",
            self.data_sectors(),
            self.imp.pool_target(),
            meta_path(),
            if self.error_if_no_space {
                " 1 error_if_no_space"
            } else {
                ""
            }
        )
    }
    pub fn thin_table(&self, dev: u32, sectors: u64) -> String {
        format!(
            "0 {sectors} {} /dev/mapper/{POOL} {dev}",
            self.imp.thin_target()
        )
    }
    pub fn error_table(sectors: u64) -> String {
        format!("0 {sectors} error")
    }

    /// Discards both RAM disks (brd frees the pages: they read zeroes, so
    /// neither old metadata nor an earlier run's data is left; where brd
    /// cannot discard, the metadata's first MiB is zeroed, which makes a
    /// new pool, and old data stays unreadable through it: only mapped
    /// blocks are read, and a new block is zeroed or written whole), then
    /// creates the metadata, data and pool devices.
    pub fn create(&self) -> Res<()> {
        if sh(&["blkdiscard", META_DISK]).is_err() {
            sh(&[
                "dd",
                "if=/dev/zero",
                &format!("of={META_DISK}"),
                "bs=1M",
                "count=1",
                "oflag=direct",
            ])?;
        }
        // Optional for the same reason.
        let _ = sh(&["blkdiscard", DATA_DISK]);
        create(META, &self.meta_table())?;
        create(DATA, &self.data_table())?;
        create(POOL, &self.pool_table())
    }
    pub fn reload_data(&self) -> Res<()> {
        reload(DATA, &self.data_table())
    }
    pub fn reload_meta(&self) -> Res<()> {
        reload(META, &self.meta_table())
    }
    pub fn reload_pool(&self) -> Res<()> {
        reload(POOL, &self.pool_table())
    }
    pub fn message(&self, msg: &str) -> Res<()> {
        sh(&["dmsetup", "message", POOL, "0", msg]).map(drop)
    }
    pub fn pool_status(&self) -> Res<PoolStatus> {
        let line = sh(&["dmsetup", "status", POOL])?;
        parse_pool_status(&line).ok_or(format!("pool status '{}' not understood", line.trim()))
    }
    /// Removes the metadata and data devices (the pool and thins are gone).
    pub fn remove_lower(&self) -> Res<()> {
        remove(DATA)?;
        remove(META)
    }
    /// After a failure: every device of the stack resumed and removed,
    /// whatever state it is in; what cannot be removed is named.
    pub fn force_teardown(&self, thins: &[u32]) -> Vec<String> {
        let mut names: Vec<String> = thins.iter().map(|d| thin_name(*d)).collect();
        names.extend([POOL, DATA, META].map(String::from));
        let mut left = Vec::new();
        for n in names {
            let _ = sh(&["dmsetup", "resume", &n]);
            if sh(&["dmsetup", "info", &n]).is_ok() {
                if let Err(e) = sh(&["dmsetup", "remove", "--force", "--retry", &n]) {
                    left.push(e);
                }
            }
        }
        left
    }
}

/// "0 LEN target TXID META_USED/TOTAL DATA_USED/TOTAL HELD MODE ...".
fn parse_pool_status(line: &str) -> Option<PoolStatus> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let pair = |s: &str| -> Option<(u64, u64)> {
        let (a, b) = s.split_once('/')?;
        Some((a.parse().ok()?, b.parse().ok()?))
    };
    let (_, meta_total) = pair(f.get(4)?)?;
    let (used, total) = pair(f.get(5)?)?;
    Some(PoolStatus {
        txid: f.get(3)?.parse().ok()?,
        meta_total,
        used,
        total,
        held: *f.get(6)? != "-",
        mode: f.get(7)?.to_string(),
    })
}

/// Mapped sectors from a thin's status ("0 LEN thin MAPPED HIGHEST").
pub fn thin_mapped_sectors(dev: u32) -> Res<u64> {
    let line = sh(&["dmsetup", "status", &thin_name(dev)])?;
    line.split_whitespace()
        .nth(3)
        .and_then(|s| s.parse().ok())
        .ok_or(format!("thin status '{}' not understood", line.trim()))
}

pub fn create(name: &str, table: &str) -> Res<()> {
    sh(&["dmsetup", "create", name, "--table", table]).map(drop)
}
pub fn remove(name: &str) -> Res<()> {
    sh(&["dmsetup", "remove", name]).map(drop)
}
pub fn suspend(name: &str, noflush: bool) -> Res<()> {
    if noflush {
        sh(&["dmsetup", "suspend", "--noflush", name]).map(drop)
    } else {
        sh(&["dmsetup", "suspend", name]).map(drop)
    }
}
pub fn resume(name: &str) -> Res<()> {
    sh(&["dmsetup", "resume", name]).map(drop)
}
/// Loads `table` into `name` and makes it live, as LVM does.
pub fn reload(name: &str, table: &str) -> Res<()> {
    sh(&["dmsetup", "reload", name, "--table", table])?;
    suspend(name, false)?;
    resume(name)
}
pub fn table(name: &str) -> Res<String> {
    sh(&["dmsetup", "table", name]).map(|s| s.trim().to_string())
}

#[cfg(test)]
mod tests {
    #[test]
    fn pool_status_fields() {
        let s = super::parse_pool_status(
            "0 16384 thin-pool 3 12/512 40/128 - rw discard_passdown queue_if_no_space - 1024\n",
        );
        let s = s.expect("parsed");
        assert_eq!((s.txid, s.meta_total, s.used, s.total), (3, 512, 40, 128));
        assert!(!s.held);
        assert_eq!(s.mode, "rw");
        assert!(super::parse_pool_status("0 16384 error").is_none());
    }
}
