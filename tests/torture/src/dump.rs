// SPDX-License-Identifier: GPL-2.0
//! `thin_dump` of a pool's metadata in a form that does not depend on
//! where blocks were allocated: each device's attributes, and the groups of
//! (device, virtual block) that map the same data block. Two pools with
//! the same groups hold the same devices, the same mappings and the same
//! sharing, whatever physical blocks they chose.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::dm::{sh, Res};

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Norm {
    /// The superblock's attributes (transaction, time, block size, size).
    pub superblock: String,
    /// Per device id: its mapped block count, and its other attributes.
    pub devices: BTreeMap<u32, (u64, String)>,
    /// Who maps each data block, sorted.
    pub groups: BTreeSet<Vec<(u32, u64)>>,
}

fn str_attr<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    let at = line.find(&format!(" {name}=\""))? + name.len() + 3;
    let rest = &line[at..];
    Some(&rest[..rest.find('"')?])
}

fn attr(line: &str, name: &str) -> Option<u64> {
    str_attr(line, name)?.parse().ok()
}

fn attrs(line: &str, names: &[&str]) -> String {
    names
        .iter()
        .map(|n| {
            format!(
                "{n}={}",
                attr(line, n).map_or("?".into(), |v| v.to_string())
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Mappings: (virtual block, data block, length).
type Runs = Vec<(u64, u64, u64)>;

/// Parses thin_dump's XML. Subtrees shared between devices may be written
/// once, as `<def name="N">` before the devices, and stand in a device as
/// `<ref name="N"/>`.
pub fn parse(xml: &str) -> Res<Norm> {
    let mut n = Norm::default();
    let mut by_block: HashMap<u64, Vec<(u32, u64)>> = HashMap::new();
    let mut dev: Option<u32> = None;
    let mut defs: HashMap<String, Runs> = HashMap::new();
    let mut def: Option<(String, Runs)> = None;
    for line in xml.lines().map(str::trim) {
        let bad = || format!("thin_dump line not understood: {line}");
        let mut runs: Runs = Vec::new();
        if line.starts_with("<def ") {
            def = Some((
                str_attr(line, "name").ok_or_else(bad)?.to_string(),
                Vec::new(),
            ));
            continue;
        } else if line.starts_with("</def") {
            if let Some((name, r)) = def.take() {
                defs.insert(name, r);
            }
            continue;
        } else if line.starts_with("<ref ") {
            let name = str_attr(line, "name").ok_or_else(bad)?;
            runs = defs
                .get(name)
                .ok_or(format!("thin_dump refers to an undefined subtree: {line}"))?
                .clone();
        } else if line.starts_with("<range_mapping") {
            let o = attr(line, "origin_begin").ok_or_else(bad)?;
            let b = attr(line, "data_begin").ok_or_else(bad)?;
            let len = attr(line, "length").ok_or_else(bad)?;
            runs.push((o, b, len));
        } else if line.starts_with("<single_mapping") {
            let o = attr(line, "origin_block").ok_or_else(bad)?;
            let b = attr(line, "data_block").ok_or_else(bad)?;
            runs.push((o, b, 1));
        }
        if !runs.is_empty() {
            if let Some((_, r)) = def.as_mut() {
                r.extend(runs);
            } else {
                let d = dev.ok_or_else(bad)?;
                for (o, b, len) in runs {
                    for i in 0..len {
                        by_block.entry(b + i).or_default().push((d, o + i));
                    }
                }
            }
            continue;
        }
        if line.starts_with("<superblock") {
            n.superblock = attrs(
                line,
                &["transaction", "time", "data_block_size", "nr_data_blocks"],
            );
        } else if line.starts_with("<device") {
            let id = attr(line, "dev_id").ok_or_else(bad)? as u32;
            let mapped = attr(line, "mapped_blocks").ok_or_else(bad)?;
            let rest = attrs(line, &["transaction", "creation_time", "snap_time"]);
            n.devices.insert(id, (mapped, rest));
            dev = Some(id);
        } else if line.starts_with("</device") {
            dev = None;
        }
    }
    n.groups = by_block
        .into_values()
        .map(|mut g| {
            g.sort_unstable();
            g
        })
        .collect();
    Ok(n)
}

/// thin_dump of an inactive metadata device.
pub fn dump(meta: &str) -> Res<Norm> {
    parse(&sh(&["thin_dump", meta])?)
}

/// How `a` (named `an`) and `b` differ, at most a few lines; empty if
/// they do not. With `attributes` false only the device ids, mapped counts
/// and groups are compared (what the model knows).
pub fn differences(an: &str, a: &Norm, bn: &str, b: &Norm, attributes: bool) -> Vec<String> {
    let mut d = Vec::new();
    if attributes && a.superblock != b.superblock {
        d.push(format!(
            "superblock: {an} {}, {bn} {}",
            a.superblock, b.superblock
        ));
    }
    let ids: BTreeSet<&u32> = a.devices.keys().chain(b.devices.keys()).collect();
    for id in ids {
        match (a.devices.get(id), b.devices.get(id)) {
            (Some(x), Some(y)) if x.0 != y.0 || (attributes && x.1 != y.1) => d.push(format!(
                "device {id}: {an} mapped_blocks={} {}, {bn} mapped_blocks={} {}",
                x.0, x.1, y.0, y.1
            )),
            (Some(_), None) => d.push(format!("device {id}: only in {an}")),
            (None, Some(_)) => d.push(format!("device {id}: only in {bn}")),
            _ => {}
        }
    }
    let show = |g: &Vec<(u32, u64)>| {
        g.iter()
            .map(|(dev, vb)| format!("{dev}:{vb}"))
            .collect::<Vec<_>>()
            .join(",")
    };
    let only_a: Vec<String> = a.groups.difference(&b.groups).take(4).map(show).collect();
    let only_b: Vec<String> = b.groups.difference(&a.groups).take(4).map(show).collect();
    if !only_a.is_empty() || !only_b.is_empty() {
        d.push(format!(
            "data blocks mapped by (device:vblock,...): only in {an}: [{}]; only in {bn}: [{}]",
            only_a.join(" "),
            only_b.join(" ")
        ));
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    const XML: &str = r#"<superblock uuid="" time="1" transaction="2" version="2" data_block_size="128" nr_data_blocks="128">
  <device dev_id="0" mapped_blocks="3" transaction="0" creation_time="0" snap_time="1">
    <range_mapping origin_begin="0" data_begin="5" length="2" time="0"/>
    <single_mapping origin_block="9" data_block="1" time="1"/>
  </device>
  <device dev_id="1" mapped_blocks="1" transaction="0" creation_time="1" snap_time="1">
    <single_mapping origin_block="0" data_block="5" time="0"/>
  </device>
</superblock>"#;

    #[test]
    fn shared_definitions_are_expanded() {
        let xml = r#"<superblock uuid="" time="1" transaction="2" version="2" data_block_size="128" nr_data_blocks="128">
  <def name="7">
    <range_mapping origin_begin="0" data_begin="5" length="2" time="0"/>
  </def>
  <device dev_id="0" mapped_blocks="2" transaction="0" creation_time="0" snap_time="1">
    <ref name="7"/>
  </device>
  <device dev_id="1" mapped_blocks="3" transaction="0" creation_time="1" snap_time="1">
    <ref name="7"/>
    <single_mapping origin_block="9" data_block="1" time="1"/>
  </device>
</superblock>"#;
        let n = parse(xml).expect("parsed");
        assert!(n.groups.contains(&vec![(0, 0), (1, 0)]));
        assert!(n.groups.contains(&vec![(0, 1), (1, 1)]));
        assert!(n.groups.contains(&vec![(1, 9)]));
        assert_eq!(n.groups.len(), 3);
        assert!(parse(&xml.replace("<ref name=\"7\"/>", "<ref name=\"8\"/>")).is_err());
    }

    #[test]
    fn sharing_does_not_depend_on_block_numbers() {
        let a = parse(XML).expect("parsed");
        assert_eq!(a.devices.len(), 2);
        assert!(a.groups.contains(&vec![(0, 0), (1, 0)]));
        let moved = XML
            .replace("data_begin=\"5\"", "data_begin=\"20\"")
            .replace("data_block=\"5\"", "data_block=\"20\"");
        let b = parse(&moved).expect("parsed");
        assert!(differences("a", &a, "b", &b, true).is_empty());
        let unshared = XML.replace("data_block=\"5\"", "data_block=\"30\"");
        let c = parse(&unshared).expect("parsed");
        assert_eq!(differences("a", &a, "c", &c, true).len(), 1);
    }
}
