// SPDX-License-Identifier: GPL-2.0
//! A scripted device-mapper for the tests of the commands and the scan:
//! a pool with thins (one suspended, one failed), a linear device,
//! recorded calls and a message handler.

use std::cell::RefCell;
use std::time::Duration;

use super::{DevInfo, DmErr, Owner, Target as DmTarget, Transport};
use crate::status::DevT;

/// The message handler: the reply, or an errno.
type Reply = Box<dyn Fn(&str) -> std::result::Result<Option<String>, i32>>;
/// name, device, target, table, status, suspended.
type FakeDev = (String, DevT, &'static str, &'static str, &'static str, bool);

/// A scripted device-mapper: fixed devices, recorded calls, and a
/// message handler.
pub struct Fake {
    devs: Vec<FakeDev>,
    pub calls: RefCell<Vec<String>>,
    reply: Reply,
}

/// Device `253:minor`.
pub fn d(minor: u32) -> DevT {
    DevT { major: 253, minor }
}

impl Fake {
    pub fn new(reply: impl Fn(&str) -> std::result::Result<Option<String>, i32> + 'static) -> Self {
        Fake {
            devs: vec![
                (
                    "pool".into(),
                    d(0),
                    "thin-pool",
                    "1:1 1:2 128 0 0 ",
                    "3 10/100 2/1000 - rw discard_passdown queue_if_no_space - 25 ",
                    false,
                ),
                ("a".into(), d(1), "thin", "253:0 1", "128 127", false),
                ("b".into(), d(2), "thin", "253:0 1", "128 127", false),
                ("s".into(), d(3), "thin", "253:0 1", "128 127", true),
                ("other".into(), d(4), "thin", "253:0 2", "0 -", false),
                ("failed".into(), d(5), "thin", "Fail", "Fail", false),
                ("lin".into(), d(6), "linear", "1:3 0", "", false),
            ],
            calls: RefCell::new(Vec::new()),
            reply: Box::new(reply),
        }
    }
    fn find(
        &self,
        name: &str,
    ) -> std::result::Result<&(String, DevT, &'static str, &'static str, &'static str, bool), DmErr>
    {
        self.devs.iter().find(|x| x.0 == name).ok_or(DmErr {
            errno: Some(6),
            text: "ENXIO".into(),
        })
    }
    fn info(&self, x: &(String, DevT, &'static str, &'static str, &'static str, bool)) -> DevInfo {
        DevInfo {
            dev: x.1,
            open_count: 0,
            event_nr: 0,
            suspended: x.5,
            active: true,
            owner: if x.0.starts_with("vg-") {
                Owner::Lvm
            } else {
                Owner::None
            },
        }
    }
    fn log(&self, s: String) {
        self.calls.borrow_mut().push(s);
    }
}

impl Transport for Fake {
    fn driver_version(&self) -> std::result::Result<(u32, u32, u32), DmErr> {
        Ok((4, 48, 0))
    }
    fn target_versions(&self) -> std::result::Result<Vec<(String, u32, u32, u32)>, DmErr> {
        Ok(vec![("thin-pool".into(), 1, 24, 0)])
    }
    fn list(&self) -> std::result::Result<Vec<(String, DevT)>, DmErr> {
        self.log("list".into());
        Ok(self.devs.iter().map(|x| (x.0.clone(), x.1)).collect())
    }
    fn table(&self, name: &str) -> std::result::Result<(DevInfo, Vec<DmTarget>), DmErr> {
        let x = self.find(name)?;
        self.log(format!("table {name}"));
        Ok((
            self.info(x),
            vec![DmTarget {
                start: 0,
                length: 2048,
                ttype: x.2.into(),
                params: x.3.into(),
            }],
        ))
    }
    fn status(
        &self,
        name: &str,
        noflush: bool,
    ) -> std::result::Result<(DevInfo, Vec<DmTarget>), DmErr> {
        assert!(noflush, "status must not force a commit");
        let x = self.find(name)?;
        self.log(format!("status {name}"));
        Ok((
            self.info(x),
            vec![DmTarget {
                start: 0,
                length: 2048,
                ttype: x.2.into(),
                params: x.4.into(),
            }],
        ))
    }
    fn deps(&self, name: &str) -> std::result::Result<Vec<DevT>, DmErr> {
        self.log(format!("deps {name}"));
        Ok(vec![d(0)])
    }
    fn message(&self, name: &str, msg: &str) -> std::result::Result<Option<String>, DmErr> {
        self.log(format!("message {name} {msg}"));
        (self.reply)(msg).map_err(|e| DmErr {
            errno: Some(e),
            text: format!("errno {e}"),
        })
    }
    fn suspend(&self, name: &str) -> std::result::Result<(), DmErr> {
        self.log(format!("suspend {name}"));
        Ok(())
    }
    fn resume(&self, name: &str) -> std::result::Result<(), DmErr> {
        self.log(format!("resume {name}"));
        Ok(())
    }
    fn wait_event(&self, _timeout: Duration) -> std::result::Result<bool, DmErr> {
        Ok(false)
    }
}
