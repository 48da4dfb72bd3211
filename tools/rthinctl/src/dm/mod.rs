// SPDX-License-Identifier: GPL-2.0
//! The device-mapper transport: a small trait over the ioctls rthinctl uses,
//! implemented with the `devicemapper` crate's low-level `DM` API (the crate
//! thin-provisioning-tools uses too). Nothing else in rthinctl touches the
//! crate, so another backend (e.g. a hand-written `nix` one) can replace it.
//!
//! Only the raw ioctls are used: the crate's `ThinPoolDev`/`ThinDev` objects
//! and its status parsers are not (they own device lifecycles and reject
//! `ignore_discard`).

use std::os::fd::AsFd;
use std::time::Duration;

use devicemapper::{errors, DevId, DmError, DmFlags, DmName, DmOptions, DM};
use nix::poll::{PollFd, PollFlags, PollTimeout};

use crate::status::DevT;

/// A failed device-mapper operation. `errno` is set when the kernel
/// answered with one (the usual case).
#[derive(Debug, Clone)]
pub struct DmErr {
    /// The kernel's errno, if the failure came from an ioctl.
    pub errno: Option<i32>,
    /// The transport's description.
    pub text: String,
}

impl std::fmt::Display for DmErr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl From<DmError> for DmErr {
    fn from(e: DmError) -> Self {
        let errno = match &e {
            DmError::Core(errors::Error::Ioctl(_, _, _, err)) => Some(**err as i32),
            _ => None,
        };
        DmErr {
            errno,
            text: e.to_string(),
        }
    }
}

/// What the kernel says about a device besides its table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevInfo {
    /// Device number.
    pub dev: DevT,
    /// Open count.
    pub open_count: i32,
    /// Event counter.
    pub event_nr: u32,
    /// The device is suspended.
    pub suspended: bool,
    /// The device has a live table.
    pub active: bool,
    /// Which volume manager owns the device, from its dm UUID.
    pub owner: Owner,
}

/// The volume manager that owns a device-mapper device, from the prefix of
/// its dm UUID (`LVM-...`, `stratis-...`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Owner {
    /// No known owner (dmsetup, rthinctl, scripts).
    #[default]
    None,
    /// LVM2.
    Lvm,
    /// Stratis.
    Stratis,
}

impl Owner {
    /// The owner named by a dm UUID.
    pub fn from_uuid(uuid: &str) -> Self {
        if uuid.starts_with("LVM-") {
            Owner::Lvm
        } else if uuid.starts_with("stratis-") {
            Owner::Stratis
        } else {
            Owner::None
        }
    }
}

/// Splits an LVM dm name (`vg-lv` or `vg-lv-layer`, a `-` inside a name
/// doubled) into VG, LV and layer, as libdm's `dm_split_lvm_name` does.
pub fn lvm_split(name: &str) -> Option<(String, String, String)> {
    let mut parts = vec![String::new()];
    let mut it = name.chars().peekable();
    while let Some(c) = it.next() {
        if c == '-' {
            if it.peek() == Some(&'-') {
                it.next();
                parts.last_mut()?.push('-');
            } else {
                parts.push(String::new());
            }
        } else {
            parts.last_mut()?.push(c);
        }
    }
    match parts.len() {
        2 => Some((parts[0].clone(), parts[1].clone(), String::new())),
        3 => Some((parts[0].clone(), parts[1].clone(), parts[2].clone())),
        _ => None,
    }
}

/// `VG/LV` of a device LVM owns (a layer such as a pool's `-tpool` belongs
/// to its LV), from its dm name.
pub fn lv_name(name: &str, owner: Owner) -> Option<String> {
    if owner != Owner::Lvm {
        return None;
    }
    lvm_split(name).map(|(vg, lv, _)| format!("{vg}/{lv}"))
}

/// One target of a table: start, length (sectors), type, parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// First sector.
    pub start: u64,
    /// Length in sectors.
    pub length: u64,
    /// Target type name.
    pub ttype: String,
    /// Table parameters or status text.
    pub params: String,
}

/// The ioctls rthinctl needs.
pub trait Transport {
    /// DM_VERSION: the ioctl interface version.
    fn driver_version(&self) -> Result<(u32, u32, u32), DmErr>;
    /// DM_LIST_VERSIONS: registered target types and versions.
    fn target_versions(&self) -> Result<Vec<(String, u32, u32, u32)>, DmErr>;
    /// DM_LIST_DEVICES: names and device numbers.
    fn list(&self) -> Result<Vec<(String, DevT)>, DmErr>;
    /// DM_TABLE_STATUS with DM_STATUS_TABLE: the live table.
    fn table(&self, name: &str) -> Result<(DevInfo, Vec<Target>), DmErr>;
    /// DM_TABLE_STATUS: the INFO status. `noflush` sets DM_NOFLUSH, so a pool
    /// does not commit its metadata to answer.
    fn status(&self, name: &str, noflush: bool) -> Result<(DevInfo, Vec<Target>), DmErr>;
    /// DM_TABLE_DEPS: devices the table uses.
    fn deps(&self, name: &str) -> Result<Vec<DevT>, DmErr>;
    /// DM_TARGET_MSG to sector 0; returns the target's output, if any.
    fn message(&self, name: &str, msg: &str) -> Result<Option<String>, DmErr>;
    /// DM_DEV_SUSPEND with DM_SUSPEND (a flushing suspend).
    fn suspend(&self, name: &str) -> Result<(), DmErr>;
    /// DM_DEV_SUSPEND without DM_SUSPEND (resume).
    fn resume(&self, name: &str) -> Result<(), DmErr>;
    /// DM_DEV_ARM_POLL, then waits until any DM event or `timeout`.
    /// Returns true if an event arrived.
    fn wait_event(&self, timeout: Duration) -> Result<bool, DmErr>;
}

/// The `devicemapper`-crate transport.
pub struct DmTransport {
    dm: DM,
}

fn name_id(name: &str) -> Result<DevId<'_>, DmErr> {
    DmName::new(name).map(DevId::Name).map_err(|e| DmErr {
        errno: None,
        text: format!("invalid device-mapper name {name:?}: {e}"),
    })
}

fn info_of(i: &devicemapper::DeviceInfo) -> DevInfo {
    let flags = i.flags();
    let d = i.device();
    DevInfo {
        dev: DevT {
            major: d.major,
            minor: d.minor,
        },
        open_count: i.open_count(),
        event_nr: i.event_nr(),
        suspended: flags.contains(DmFlags::DM_SUSPEND),
        active: flags.contains(DmFlags::DM_ACTIVE_PRESENT),
        owner: i
            .uuid()
            .map(|u| Owner::from_uuid(&u.to_string()))
            .unwrap_or_default(),
    }
}

fn targets_of(v: Vec<(u64, u64, String, String)>) -> Vec<Target> {
    v.into_iter()
        .map(|(start, length, ttype, params)| Target {
            start,
            length,
            ttype,
            params,
        })
        .collect()
}

/// The device-mapper control node.
const CONTROL: &str = "/dev/mapper/control";

impl DmTransport {
    /// Opens /dev/mapper/control.
    pub fn open() -> Result<Self, DmErr> {
        DM::new().map(|dm| Self { dm }).map_err(|e| {
            // The crate reports a failed open as text only: open the
            // control node again to learn the errno.
            let errno = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(CONTROL)
                .err()
                .and_then(|io| io.raw_os_error());
            DmErr {
                errno,
                text: e.to_string(),
            }
        })
    }
}

impl Transport for DmTransport {
    fn driver_version(&self) -> Result<(u32, u32, u32), DmErr> {
        Ok(self.dm.version()?)
    }

    fn target_versions(&self) -> Result<Vec<(String, u32, u32, u32)>, DmErr> {
        Ok(self.dm.list_versions()?)
    }

    fn list(&self) -> Result<Vec<(String, DevT)>, DmErr> {
        Ok(self
            .dm
            .list_devices()?
            .into_iter()
            .map(|(n, d, _)| {
                (
                    n.to_string(),
                    DevT {
                        major: d.major,
                        minor: d.minor,
                    },
                )
            })
            .collect())
    }

    fn table(&self, name: &str) -> Result<(DevInfo, Vec<Target>), DmErr> {
        let (i, t) = self.dm.table_status(
            &name_id(name)?,
            DmOptions::default().set_flags(DmFlags::DM_STATUS_TABLE),
        )?;
        Ok((info_of(&i), targets_of(t)))
    }

    fn status(&self, name: &str, noflush: bool) -> Result<(DevInfo, Vec<Target>), DmErr> {
        let flags = if noflush {
            DmFlags::DM_NOFLUSH
        } else {
            DmFlags::empty()
        };
        let (i, t) = self
            .dm
            .table_status(&name_id(name)?, DmOptions::default().set_flags(flags))?;
        Ok((info_of(&i), targets_of(t)))
    }

    fn deps(&self, name: &str) -> Result<Vec<DevT>, DmErr> {
        Ok(self
            .dm
            .table_deps(&name_id(name)?, DmOptions::default())?
            .into_iter()
            .map(|d| DevT {
                major: d.major,
                minor: d.minor,
            })
            .collect())
    }

    fn message(&self, name: &str, msg: &str) -> Result<Option<String>, DmErr> {
        Ok(self.dm.target_msg(&name_id(name)?, None, msg)?.1)
    }

    fn suspend(&self, name: &str) -> Result<(), DmErr> {
        self.dm.device_suspend(
            &name_id(name)?,
            DmOptions::default().set_flags(DmFlags::DM_SUSPEND),
        )?;
        Ok(())
    }

    fn resume(&self, name: &str) -> Result<(), DmErr> {
        self.dm
            .device_suspend(&name_id(name)?, DmOptions::default())?;
        Ok(())
    }

    fn wait_event(&self, timeout: Duration) -> Result<bool, DmErr> {
        self.dm.arm_poll()?;
        let ms = u16::try_from(timeout.as_millis()).unwrap_or(u16::MAX);
        let mut fds = [PollFd::new(self.dm.file().as_fd(), PollFlags::POLLIN)];
        match nix::poll::poll(&mut fds, PollTimeout::from(ms)) {
            Ok(n) => Ok(n > 0),
            Err(nix::errno::Errno::EINTR) => Ok(false),
            Err(e) => Err(DmErr {
                errno: Some(e as i32),
                text: format!("poll on /dev/mapper/control: {e}"),
            }),
        }
    }
}

#[cfg(test)]
pub mod fake;

#[cfg(test)]
mod tests {
    use super::{lv_name, Owner};

    #[test]
    fn lv_names() {
        assert_eq!(
            lv_name("vg-pool-tpool", Owner::Lvm).as_deref(),
            Some("vg/pool")
        );
        assert_eq!(
            lv_name("my--vg-lv--1", Owner::Lvm).as_deref(),
            Some("my-vg/lv-1")
        );
        assert_eq!(lv_name("vg-pool", Owner::None), None);
    }
}
