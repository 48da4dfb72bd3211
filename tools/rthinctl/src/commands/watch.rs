// SPDX-License-Identifier: GPL-2.0
//! `watch`: periodic no-flush status of pools with fill rate and time to
//! full. Between samples it waits on the device-mapper event poll
//! (DM_DEV_ARM_POLL + poll on /dev/mapper/control), so a low-water or mode
//! change event prints a sample at once. The poll wakes for an event of any
//! device, and dm raises one when it swaps in a new table too, before the
//! pool's preresume has run (and changed its mode): watch samples early only
//! once the event counter of a pool it watches has moved, and marks the
//! pools whose own counter moved since the last sample.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::cli::WatchArgs;
use crate::context::Ctx;
use crate::dm::Transport;
use crate::explain::{exit, Error, Result};
use crate::model::{resolve, scan_all, Pool};
use crate::report::{self, META_BLOCK_BYTES};
use crate::status::PoolStatus;
use crate::units::Pct;

/// JSON schema of one `watch --json` line.
pub const WATCH_SCHEMA: &str = "rthinctl.watch/1";

/// Fill-rate estimator over a time window.
#[derive(Debug, Default)]
pub struct Rate {
    samples: VecDeque<(f64, u64)>,
}

impl Rate {
    /// Records `used` at time `t` (seconds) and returns (blocks per second,
    /// seconds until `total` at that rate). The rate is measured from the
    /// oldest sample in the window; the time is `None` unless the pool fills.
    pub fn add(
        &mut self,
        t: f64,
        used: u64,
        total: u64,
        window: f64,
    ) -> (Option<f64>, Option<f64>) {
        self.samples.push_back((t, used));
        while self.samples.len() > 2 && self.samples.front().is_some_and(|s| t - s.0 > window) {
            self.samples.pop_front();
        }
        let (t0, u0) = match self.samples.front() {
            Some(x) if self.samples.len() >= 2 => *x,
            _ => return (None, None),
        };
        let dt = t - t0;
        if dt <= 0.0 {
            return (None, None);
        }
        let rate = (used as f64 - u0 as f64) / dt;
        let ttf = if rate > 0.0 {
            Some(total.saturating_sub(used) as f64 / rate)
        } else {
            None
        };
        (Some(rate), ttf)
    }
}

/// `1h02m`, `45s`, `3d04h`.
pub fn fmt_duration(secs: Option<f64>) -> String {
    let Some(s) = secs else { return "-".into() };
    if !s.is_finite() || s < 0.0 {
        return "-".into();
    }
    let s = s as u64;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

#[derive(Serialize)]
struct JSample {
    schema: &'static str,
    time_unix: u64,
    event: bool,
    pool: report::JPool,
    data_rate_bytes_per_sec: Option<f64>,
    data_seconds_to_full: Option<f64>,
    metadata_rate_bytes_per_sec: Option<f64>,
    metadata_seconds_to_full: Option<f64>,
}

/// Runs the watch loop.
pub fn run(ctx: &Ctx, t: &dyn Transport, a: &WatchArgs) -> Result<i32> {
    if !(a.interval.is_finite() && a.interval > 0.0) {
        return Err(Error::usage(
            "--interval must be a positive number of seconds",
        ));
    }
    let interval = Duration::from_secs_f64(a.interval.min(86_400.0));
    let start = Instant::now();
    let mut rates: HashMap<String, (Rate, Rate)> = HashMap::new();
    let mut n = 0u64;
    // Each pool's dm event counter at the last sample.
    let mut events: HashMap<String, u32> = HashMap::new();
    let mut header_done = false;
    // Column widths so far: every sample's rows line up with the first's.
    let mut widths = Vec::new();
    loop {
        let scan = scan_all(t)?;
        let pools: Vec<&Pool> = if a.pools.is_empty() {
            scan.pools.iter().collect()
        } else {
            let list: Vec<_> = scan
                .pools
                .iter()
                .map(|p| (p.name.clone(), p.info.dev))
                .collect();
            let mut v = Vec::new();
            for arg in &a.pools {
                let name = resolve(arg, &list).map_err(|_| {
                    Error::new(exit::NOT_FOUND, format!("{arg} is not an active thin pool"))
                })?;
                v.extend(scan.pools.iter().filter(|p| p.name == name));
            }
            v
        };
        let now = start.elapsed().as_secs_f64();
        let unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let local = chrono::Local::now().format("%H:%M:%S").to_string();
        let mut table = report::Table::new(&[
            ("TIME", false),
            ("POOL", false),
            ("MODE", false),
            ("DATA%", true),
            ("DATA/s", true),
            ("DFULL", true),
            ("META%", true),
            ("META/s", true),
            ("MFULL", true),
            ("EVENT", false),
        ]);
        for p in &pools {
            let event = events
                .insert(p.name.clone(), p.info.event_nr)
                .is_some_and(|before| before != p.info.event_nr);
            let (dr, mr) = rates.entry(p.name.clone()).or_default();
            let bb = p.block_bytes();
            let (d, m) = match &p.status {
                Ok(PoolStatus::Working(u)) => (
                    dr.add(now, u.data_used, u.data_total, a.window),
                    mr.add(now, u.meta_used, u.meta_total, a.window),
                ),
                _ => ((None, None), (None, None)),
            };
            let drate = d.0.and_then(|r| bb.map(|b| r * b as f64));
            let mrate = m.0.map(|r| r * META_BLOCK_BYTES as f64);
            let j = report::pool_json(p, &[]);
            if ctx.json {
                let s = serde_json::to_string(&JSample {
                    schema: WATCH_SCHEMA,
                    time_unix: unix,
                    event,
                    data_rate_bytes_per_sec: drate,
                    data_seconds_to_full: d.1,
                    metadata_rate_bytes_per_sec: mrate,
                    metadata_seconds_to_full: m.1,
                    pool: j,
                })
                .map_err(|e| Error::new(exit::OTHER, format!("JSON encoding failed: {e}")))?;
                println!("{s}");
            } else {
                let rate = |r: Option<f64>| match r {
                    Some(r) if r >= 0.0 => ctx.style.units.format(r as u64, ctx.style.suffix),
                    Some(r) => {
                        format!("-{}", ctx.style.units.format((-r) as u64, ctx.style.suffix))
                    }
                    None => "-".into(),
                };
                table.push(vec![
                    local.clone(),
                    p.name.clone(),
                    report::pool_state(p),
                    Pct(j.data.as_ref().and_then(|x| x.used_percent)).to_string(),
                    rate(drate),
                    fmt_duration(d.1),
                    Pct(j.metadata.as_ref().and_then(|x| x.used_percent)).to_string(),
                    rate(mrate),
                    fmt_duration(m.1),
                    if event { "yes".into() } else { "-".into() },
                ]);
            }
        }
        if !ctx.json {
            let mut style = ctx.style.clone();
            style.headings = style.headings && !header_done;
            header_done = true;
            if pools.is_empty() {
                println!("no thin pools are active");
            } else {
                print!("{}", table.render_aligned(&style, &mut widths));
            }
        }
        n += 1;
        if a.count.is_some_and(|c| n >= c) {
            return Ok(exit::OK);
        }
        wait_for_sample(t, interval, &events);
    }
}

/// Waits for `interval`, or less if the event counter of a pool in `events`
/// (each pool's counter at the last sample) moves.
fn wait_for_sample(t: &dyn Transport, interval: Duration, events: &HashMap<String, u32>) {
    let deadline = Instant::now() + interval;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        match t.wait_event(left) {
            Ok(true) if pool_event(t, events) => return,
            Ok(_) => {}
            Err(_) => std::thread::sleep(left),
        }
    }
}

/// True if the event counter of a pool sampled last time has moved since
/// (or the pool can no longer be read: the next sample says why).
fn pool_event(t: &dyn Transport, events: &HashMap<String, u32>) -> bool {
    events
        .iter()
        .any(|(name, &nr)| t.table(name).map_or(true, |(info, _)| info.event_nr != nr))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dm::{DevInfo, DmErr, Owner, Target};
    use crate::status::DevT;

    #[test]
    fn rate_and_time_to_full() {
        let mut r = Rate::default();
        assert_eq!(r.add(0.0, 100, 1000, 60.0), (None, None));
        let (rate, ttf) = r.add(10.0, 200, 1000, 60.0);
        assert_eq!(rate, Some(10.0));
        assert_eq!(ttf, Some(80.0));
        // Shrinking use: negative rate, never full.
        let (rate, ttf) = r.add(20.0, 100, 1000, 60.0);
        assert_eq!(rate, Some(0.0));
        assert_eq!(ttf, None);
        // Old samples leave the window.
        let mut r = Rate::default();
        r.add(0.0, 0, 1000, 5.0);
        r.add(10.0, 500, 1000, 5.0);
        let (rate, _) = r.add(11.0, 510, 1000, 5.0);
        assert_eq!(rate, Some(10.0));
        // Same timestamp twice: no division by zero.
        let mut r = Rate::default();
        r.add(1.0, 0, 10, 5.0);
        assert_eq!(r.add(1.0, 5, 10, 5.0), (None, None));
    }

    /// A transport whose every poll reports a DM event at once and whose
    /// one pool, `p`, has event counter `event_nr`.
    struct Events {
        event_nr: u32,
    }

    impl Transport for Events {
        fn driver_version(&self) -> std::result::Result<(u32, u32, u32), DmErr> {
            Err(no_such())
        }
        fn target_versions(&self) -> std::result::Result<Vec<(String, u32, u32, u32)>, DmErr> {
            Err(no_such())
        }
        fn list(&self) -> std::result::Result<Vec<(String, DevT)>, DmErr> {
            Err(no_such())
        }
        fn table(&self, name: &str) -> std::result::Result<(DevInfo, Vec<Target>), DmErr> {
            if name != "p" {
                return Err(no_such());
            }
            let info = DevInfo {
                dev: DevT {
                    major: 253,
                    minor: 0,
                },
                open_count: 0,
                event_nr: self.event_nr,
                suspended: false,
                active: true,
                owner: Owner::None,
            };
            Ok((info, Vec::new()))
        }
        fn status(
            &self,
            name: &str,
            _noflush: bool,
        ) -> std::result::Result<(DevInfo, Vec<Target>), DmErr> {
            self.table(name)
        }
        fn deps(&self, _name: &str) -> std::result::Result<Vec<DevT>, DmErr> {
            Err(no_such())
        }
        fn message(&self, _name: &str, _msg: &str) -> std::result::Result<Option<String>, DmErr> {
            Err(no_such())
        }
        fn suspend(&self, _name: &str) -> std::result::Result<(), DmErr> {
            Err(no_such())
        }
        fn resume(&self, _name: &str) -> std::result::Result<(), DmErr> {
            Err(no_such())
        }
        fn wait_event(&self, timeout: Duration) -> std::result::Result<bool, DmErr> {
            std::thread::sleep(timeout.min(Duration::from_millis(5)));
            Ok(true)
        }
    }

    fn no_such() -> DmErr {
        DmErr {
            errno: Some(6),
            text: "no such device".into(),
        }
    }

    #[test]
    fn samples_early_only_for_a_watched_pools_event() {
        let sampled = HashMap::from([("p".to_string(), 4)]);
        // Events of other devices (or a table swap before the pool's
        // preresume) while the pool's counter stays: the whole interval.
        let begin = Instant::now();
        wait_for_sample(
            &Events { event_nr: 4 },
            Duration::from_millis(300),
            &sampled,
        );
        assert!(begin.elapsed() >= Duration::from_millis(300));
        // The pool's own counter moved: at once.
        let begin = Instant::now();
        wait_for_sample(&Events { event_nr: 5 }, Duration::from_secs(30), &sampled);
        assert!(begin.elapsed() < Duration::from_secs(5));
        // The pool vanished: at once too (the sample reports it).
        let gone = HashMap::from([("q".to_string(), 0)]);
        let begin = Instant::now();
        wait_for_sample(&Events { event_nr: 4 }, Duration::from_secs(30), &gone);
        assert!(begin.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn durations() {
        assert_eq!(fmt_duration(None), "-");
        assert_eq!(fmt_duration(Some(f64::INFINITY)), "-");
        assert_eq!(fmt_duration(Some(42.0)), "42s");
        assert_eq!(fmt_duration(Some(3725.0)), "1h02m");
        assert_eq!(fmt_duration(Some(61.0)), "1m01s");
        assert_eq!(fmt_duration(Some(90_000.0)), "1d01h");
    }
}
