// SPDX-License-Identifier: GPL-2.0
//! The view of the device-mapper devices rthinctl works on: pools and thins
//! with their tables and statuses, built with O(devices) ioctls (one
//! DM_LIST_DEVICES, then per device one table read and, for pools and thins
//! only, one no-flush status read).

use crate::dm::{DevInfo, DmErr, Transport};
use crate::explain::{exit, explain_ioctl, Error, Result};
use crate::status::{
    parse_pool_status, parse_pool_table, parse_thin_status, parse_thin_table, DevT, PoolStatus,
    PoolTableInfo, ThinStatus, ThinTableInfo,
};

/// Pool target names: rthin's and the C dm-thin's.
pub const POOL_TARGETS: [&str; 2] = ["rthin-pool", "thin-pool"];
/// Thin target names.
pub const THIN_TARGETS: [&str; 2] = ["rthin", "thin"];

/// An active pool.
#[derive(Debug, Clone)]
pub struct Pool {
    /// DM name.
    pub name: String,
    /// Kernel info (device number, event counter, suspended).
    pub info: DevInfo,
    /// Target type (`thin-pool` or `rthin-pool`).
    pub target: String,
    /// Pool length in sectors.
    pub length: u64,
    /// Table line, if it parsed.
    pub table: std::result::Result<PoolTableInfo, String>,
    /// INFO status, if it could be read and parsed.
    pub status: std::result::Result<PoolStatus, String>,
}

impl Pool {
    /// Data block size in bytes, if the table is known.
    pub fn block_bytes(&self) -> Option<u64> {
        self.table
            .as_ref()
            .ok()
            .map(|t| u64::from(t.block_size_sectors) * 512)
    }
}

/// An active thin device.
#[derive(Debug, Clone)]
pub struct Thin {
    /// DM name.
    pub name: String,
    /// Kernel info.
    pub info: DevInfo,
    /// Target type (`thin` or `rthin`).
    pub target: String,
    /// Size in sectors (sum of its targets).
    pub length: u64,
    /// The pool device, from the table (or, when the table says `Fail`,
    /// from DM_TABLE_DEPS).
    pub pool: Option<DevT>,
    /// Thin device id, from the table.
    pub dev_id: Option<u32>,
    /// External origin device.
    pub origin: Option<DevT>,
    /// INFO status.
    pub status: std::result::Result<ThinStatus, String>,
}

/// Everything found.
#[derive(Debug, Clone, Default)]
pub struct Scan {
    /// Pools, in name order.
    pub pools: Vec<Pool>,
    /// Thins, in name order.
    pub thins: Vec<Thin>,
    /// Other DM devices: (name, device number, first target type).
    pub others: Vec<(String, DevT, String)>,
}

/// An ioctl failure as a sentence.
pub fn dm_err(op: &str, dev: &str, e: DmErr) -> Error {
    explain_ioctl(op, dev, e.errno, &e.text)
}

/// Reads one device into the scan. Errors for a single device that vanished
/// between the list and the read (ENXIO) are skipped.
fn scan_one(t: &dyn Transport, name: &str, dev: DevT, scan: &mut Scan) -> Result<()> {
    let (info, targets) = match t.table(name) {
        Ok(x) => x,
        Err(e) if e.errno == Some(6) => return Ok(()),
        Err(e) => return Err(dm_err("reading the table", name, e)),
    };
    let Some(first) = targets.first() else {
        scan.others.push((name.to_string(), dev, String::new()));
        return Ok(());
    };
    let length: u64 = targets.iter().map(|x| x.length).sum();
    let is_pool = targets.len() == 1 && POOL_TARGETS.contains(&first.ttype.as_str());
    let is_thin = targets
        .iter()
        .all(|x| THIN_TARGETS.contains(&x.ttype.as_str()));
    if !is_pool && !is_thin {
        scan.others
            .push((name.to_string(), dev, first.ttype.clone()));
        return Ok(());
    }
    let status = match t.status(name, true) {
        Ok((_, st)) => st
            .first()
            .map(|s| s.params.clone())
            .ok_or_else(|| "no status".to_string()),
        Err(e) if e.errno == Some(6) => return Ok(()),
        Err(e) => Err(e.to_string()),
    };
    if is_pool {
        scan.pools.push(Pool {
            name: name.to_string(),
            info,
            target: first.ttype.clone(),
            length,
            table: parse_pool_table(&first.params).map_err(|e| e.to_string()),
            status: status.and_then(|s| parse_pool_status(&s).map_err(|e| e.to_string())),
        });
    } else {
        let (mut pool, mut dev_id, mut origin) = (None, None, None);
        match parse_thin_table(&first.params) {
            Ok(ThinTableInfo::Working {
                pool: p,
                dev_id: d,
                origin: o,
            }) => {
                pool = Some(p);
                dev_id = Some(d);
                origin = o;
            }
            // The table is hidden in FAIL mode: the first dependency is
            // still the pool (an external origin comes second).
            _ => {
                if let Ok(deps) = t.deps(name) {
                    pool = deps.first().copied();
                }
            }
        }
        scan.thins.push(Thin {
            name: name.to_string(),
            info,
            target: first.ttype.clone(),
            length,
            pool,
            dev_id,
            origin,
            status: status.and_then(|s| parse_thin_status(&s).map_err(|e| e.to_string())),
        });
    }
    Ok(())
}

/// Scans every DM device.
pub fn scan_all(t: &dyn Transport) -> Result<Scan> {
    let mut list = t.list().map_err(|e| dm_err("listing devices", "", e))?;
    list.sort();
    let mut scan = Scan::default();
    for (name, dev) in list {
        scan_one(t, &name, dev, &mut scan)?;
    }
    Ok(scan)
}

/// Resolves a user's device argument (DM name, /dev/mapper/NAME,
/// /dev/dm-N or MAJ:MIN) to a DM name, using `list`.
pub fn resolve(arg: &str, list: &[(String, DevT)]) -> Result<String> {
    let not_found = || {
        Error::new(
            exit::NOT_FOUND,
            format!("there is no device-mapper device {arg:?}; `rthinctl ls` lists pools and thins, `dmsetup ls` every device"),
        )
    };
    if let Some(n) = arg.strip_prefix("/dev/mapper/") {
        return list
            .iter()
            .find(|(x, _)| x == n)
            .map(|(x, _)| x.clone())
            .ok_or_else(not_found);
    }
    if let Some((n, _)) = list.iter().find(|(x, _)| x == arg) {
        return Ok(n.clone());
    }
    let dev = if let Some(d) = DevT::parse(arg) {
        Some(d)
    } else if arg.starts_with('/') {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        match std::fs::metadata(arg) {
            Ok(m) if m.file_type().is_block_device() => {
                let r = m.rdev();
                Some(DevT {
                    major: nix::sys::stat::major(r) as u32,
                    minor: nix::sys::stat::minor(r) as u32,
                })
            }
            Ok(_) => {
                return Err(Error::usage(format!("{arg} is not a block device")));
            }
            Err(_) => None,
        }
    } else {
        None
    };
    dev.and_then(|d| list.iter().find(|(_, x)| *x == d))
        .map(|(n, _)| n.clone())
        .ok_or_else(not_found)
}

/// Reads one named pool (no scan of the other devices). Fails with a clear
/// sentence if the device is not a thin pool.
pub fn read_pool(t: &dyn Transport, name: &str, dev: DevT) -> Result<Pool> {
    let mut scan = Scan::default();
    scan_one(t, name, dev, &mut scan)?;
    if let Some(p) = scan.pools.pop() {
        return Ok(p);
    }
    if let Some(th) = scan.thins.first() {
        return Err(Error::new(
            exit::NOT_FOUND,
            format!(
                "{name} is a {} (thin volume) device, not a thin pool; give the pool it lives in{}",
                th.target,
                th.pool
                    .map(|p| format!(" (device {p})"))
                    .unwrap_or_default()
            ),
        ));
    }
    match scan.others.first() {
        Some((_, _, ty)) if ty.is_empty() => Err(Error::new(
            exit::REFUSED,
            format!("device {name} has no live table (created but never resumed?); load and resume a thin-pool table first"),
        )),
        Some((_, _, ty)) => Err(Error::new(
            exit::NOT_FOUND,
            format!(
                "{name} is a {ty} device, not a thin pool (targets {} or {})",
                POOL_TARGETS[0], POOL_TARGETS[1]
            ),
        )),
        None => Err(Error::new(
            exit::NOT_FOUND,
            format!("device-mapper device {name:?} disappeared while it was being read"),
        )),
    }
}

/// The pool `th` belongs to, if it is active.
pub fn pool_of<'a>(scan: &'a Scan, th: &Thin) -> Option<&'a Pool> {
    th.pool
        .and_then(|d| scan.pools.iter().find(|p| p.info.dev == d))
}

pub fn select<'a>(scan: &'a Scan, devs: &[String]) -> Result<(Vec<&'a Pool>, Vec<&'a Thin>)> {
    if devs.is_empty() {
        let orphans = scan
            .thins
            .iter()
            .filter(|t| pool_of(scan, t).is_none())
            .collect();
        return Ok((scan.pools.iter().collect(), orphans));
    }
    let mut list: Vec<(String, DevT)> = scan
        .pools
        .iter()
        .map(|p| (p.name.clone(), p.info.dev))
        .collect();
    list.extend(scan.thins.iter().map(|t| (t.name.clone(), t.info.dev)));
    list.extend(scan.others.iter().map(|o| (o.0.clone(), o.1)));
    let (mut pools, mut thins) = (Vec::new(), Vec::new());
    for d in devs {
        let name = resolve(d, &list)?;
        if let Some(p) = scan.pools.iter().find(|p| p.name == name) {
            pools.push(p);
        } else if let Some(t) = scan.thins.iter().find(|t| t.name == name) {
            thins.push(t);
        } else {
            let ty = scan
                .others
                .iter()
                .find(|o| o.0 == name)
                .map(|o| o.2.as_str())
                .unwrap_or("");
            return Err(Error::new(
                exit::NOT_FOUND,
                format!(
                    "{name} is a {} device, neither a thin pool nor a thin",
                    if ty.is_empty() { "table-less" } else { ty }
                ),
            ));
        }
    }
    Ok((pools, thins))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dm::fake::{d, Fake};

    #[test]
    fn resolve_names() {
        let list = vec![
            (
                "pool".to_string(),
                DevT {
                    major: 253,
                    minor: 0,
                },
            ),
            (
                "thin".to_string(),
                DevT {
                    major: 253,
                    minor: 1,
                },
            ),
        ];
        assert_eq!(resolve("pool", &list).unwrap(), "pool");
        assert_eq!(resolve("/dev/mapper/thin", &list).unwrap(), "thin");
        assert_eq!(resolve("253:1", &list).unwrap(), "thin");
        assert_eq!(resolve("nope", &list).unwrap_err().code, exit::NOT_FOUND);
        assert_eq!(resolve("253:9", &list).unwrap_err().code, exit::NOT_FOUND);
        assert_eq!(
            resolve("/dev/mapper/nope", &list).unwrap_err().code,
            exit::NOT_FOUND
        );
        assert_eq!(
            resolve("/nonexistent/x", &list).unwrap_err().code,
            exit::NOT_FOUND
        );
    }

    #[test]
    fn scan_finds_the_pool_of_a_failed_thin_and_costs_o_devices() {
        let f = Fake::new(|_| Ok(None));
        let scan = scan_all(&f).unwrap();
        assert_eq!(scan.pools.len(), 1);
        assert_eq!(scan.thins.len(), 5);
        let failed = scan.thins.iter().find(|t| t.name == "failed").unwrap();
        assert_eq!(failed.pool, Some(d(0)));
        assert_eq!(failed.dev_id, None);
        assert_eq!(scan.others.len(), 1);
        // One list, one table per device, one status per pool/thin, one deps
        // for the thin whose table reads Fail.
        assert_eq!(f.calls.borrow().len(), 1 + 7 + 6 + 1);
    }
}
