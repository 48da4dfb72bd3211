// SPDX-License-Identifier: GPL-2.0
//! `meta dump`: the metadata as thin_dump XML, streamed.

use std::io::Write;

use rthin_core::core_error::CoreError;
use rthin_core::metadata::thin_metadata::{Mapping, ThinMetadata};

use super::ls::devices;
use super::store::{core_sentence, open_md_with, FileStore, OpenMode};
use crate::explain::{exit, Result};

fn uuid_text(u: &[u8; 16]) -> String {
    if u.iter().all(|&b| b == 0) {
        String::new()
    } else {
        u.iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// A failure of the XML writer: the output (a closed pipe is reported by
/// the caller) or the metadata.
pub enum DumpError {
    Io(std::io::Error),
    Core(CoreError),
}

/// Writes thin_dump's XML for the metadata, a device at a time, to `out`
/// (nothing is built in memory). Runs of consecutive virtual and data
/// blocks with the same time become one `range_mapping`.
pub fn dump_xml(
    md: &ThinMetadata<FileStore>,
    out: &mut dyn Write,
) -> std::result::Result<(), DumpError> {
    let sb = md.committed_superblock();
    let io = DumpError::Io;
    write!(
        out,
        "<superblock uuid=\"{}\" time=\"{}\" transaction=\"{}\"",
        uuid_text(&sb.uuid),
        sb.time,
        sb.trans_id
    )
    .map_err(io)?;
    if sb.flags != 0 {
        write!(out, " flags=\"{}\"", sb.flags).map_err(io)?;
    }
    writeln!(
        out,
        " version=\"{}\" data_block_size=\"{}\" nr_data_blocks=\"{}\">",
        sb.version, sb.data_block_size, sb.data_sm.nr_blocks
    )
    .map_err(io)?;
    for (d, x) in devices(md).map_err(DumpError::Core)? {
        writeln!(
            out,
            "  <device dev_id=\"{d}\" mapped_blocks=\"{}\" transaction=\"{}\" creation_time=\"{}\" snap_time=\"{}\">",
            x.mapped_blocks, x.transaction_id, x.creation_time, x.snapshotted_time
        )
        .map_err(io)?;
        // (origin_begin, data_begin, length, time)
        let mut run: Option<(u64, u64, u64, u32)> = None;
        let mut werr: Option<std::io::Error> = None;
        let flush = |out: &mut dyn Write, r: (u64, u64, u64, u32)| {
            if r.2 == 1 {
                writeln!(
                    out,
                    "    <single_mapping origin_block=\"{}\" data_block=\"{}\" time=\"{}\"/>",
                    r.0, r.1, r.3
                )
            } else {
                writeln!(
                    out,
                    "    <range_mapping origin_begin=\"{}\" data_begin=\"{}\" length=\"{}\" time=\"{}\"/>",
                    r.0, r.1, r.2, r.3
                )
            }
        };
        let walked = md.for_each_mapping(d, &mut |v, m: Mapping| {
            match run {
                Some((o, db, len, t))
                    if t == m.time
                        && o.checked_add(len) == Some(v)
                        && db.checked_add(len) == Some(m.data_block) =>
                {
                    run = Some((o, db, len + 1, t));
                }
                Some(r) => {
                    if let Err(e) = flush(out, r) {
                        werr = Some(e);
                        // Stop the walk: the reader is gone.
                        return Err(CoreError::Io(-32));
                    }
                    run = Some((v, m.data_block, 1, m.time));
                }
                None => run = Some((v, m.data_block, 1, m.time)),
            }
            Ok(())
        });
        if let Some(e) = werr {
            return Err(DumpError::Io(e));
        }
        walked.map_err(DumpError::Core)?;
        if let Some(r) = run {
            flush(out, r).map_err(io)?;
        }
        writeln!(out, "  </device>").map_err(io)?;
    }
    writeln!(out, "</superblock>").map_err(io)?;
    Ok(())
}

/// `meta dump`: streamed to stdout.
pub fn dump(path: &str, mode: OpenMode) -> Result<i32> {
    let md = open_md_with(path, mode)?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let r = dump_xml(&md, &mut out).and_then(|_| out.flush().map_err(DumpError::Io));
    match r {
        Ok(()) => Ok(exit::OK),
        Err(DumpError::Io(e)) => Err(crate::explain::io_error(e)),
        Err(DumpError::Core(e)) => Err(core_sentence(path, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::check::check;
    use crate::meta::store::open_md;
    use crate::meta::test_image::image;

    #[test]
    fn dump_matches_what_was_written() {
        let (_tmp, path) = image();
        let md = open_md(&path).unwrap();
        let mut x = Vec::new();
        if dump_xml(&md, &mut x).is_err() {
            panic!("dump failed");
        }
        let x = String::from_utf8(x).unwrap();
        let want = "<superblock uuid=\"\" time=\"1\" transaction=\"7\" version=\"2\" data_block_size=\"128\" nr_data_blocks=\"1000\">
  <device dev_id=\"1\" mapped_blocks=\"6\" transaction=\"7\" creation_time=\"0\" snap_time=\"1\">
    <range_mapping origin_begin=\"0\" data_begin=\"0\" length=\"5\" time=\"0\"/>
    <single_mapping origin_block=\"9\" data_block=\"5\" time=\"0\"/>
  </device>
  <device dev_id=\"2\" mapped_blocks=\"6\" transaction=\"7\" creation_time=\"1\" snap_time=\"1\">
    <single_mapping origin_block=\"0\" data_block=\"6\" time=\"1\"/>
    <range_mapping origin_begin=\"1\" data_begin=\"1\" length=\"4\" time=\"0\"/>
    <single_mapping origin_block=\"9\" data_block=\"5\" time=\"0\"/>
  </device>
</superblock>
";
        assert_eq!(x, want);
        assert_eq!(check(&path, true, false), Ok(exit::OK));
    }
}
