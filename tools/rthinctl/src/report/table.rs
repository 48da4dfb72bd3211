// SPDX-License-Identifier: GPL-2.0
//! Aligned tables and `--raw`: the output options and the table writer.

use crate::units::Units;
use crate::view::{Col, View};

/// Output options shared by every command.
#[derive(Debug, Clone)]
pub struct Style {
    /// Size units.
    pub units: Units,
    /// Print unit suffixes.
    pub suffix: bool,
    /// Print the heading line.
    pub headings: bool,
    /// Column separator; `None` aligns columns with spaces.
    pub separator: Option<String>,
    /// `-o`, `--sort`, `-S` (tables of `ls` and `status`).
    pub view: View,
}

impl Style {
    /// `--raw`: bytes, no suffix, no headings, `:` separated.
    pub fn raw() -> Self {
        Self {
            units: Units::BYTES,
            suffix: false,
            headings: false,
            separator: Some(":".into()),
            view: View::default(),
        }
    }

    pub fn size(&self, bytes: Option<u64>) -> String {
        match bytes {
            Some(b) => self.units.format(b, self.suffix),
            None => "-".into(),
        }
    }
}

/// A simple text table.
pub struct Table {
    cols: Vec<Col>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// Columns: (heading, right-aligned).
    pub fn new(cols: &[(&'static str, bool)]) -> Self {
        Self {
            cols: cols
                .iter()
                .map(|&(head, right)| Col {
                    head,
                    right,
                    names: &[],
                })
                .collect(),
            rows: Vec::new(),
        }
    }

    /// Columns with their field names (`-o`, `--sort`, `-S`).
    pub fn with_fields(cols: &[Col]) -> Self {
        Self {
            cols: cols.to_vec(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    /// Renders with `style`.
    pub fn render(&self, style: &Style) -> String {
        self.render_aligned(style, &mut Vec::new())
    }

    /// Renders with `style`, each column at least as wide as in `widths`,
    /// which grows to this table's widths: a stream of tables (`watch` prints
    /// one per sample, the headings only with the first) stays aligned.
    pub fn render_aligned(&self, style: &Style, widths: &mut Vec<usize>) -> String {
        let mut out = String::new();
        let (shown, rows) = style.view.apply(&self.cols, self.rows.clone());
        let pick = |r: &[String]| -> Vec<String> {
            shown
                .iter()
                .map(|&i| r.get(i).cloned().unwrap_or_default())
                .collect()
        };
        let right: Vec<bool> = shown
            .iter()
            .map(|&i| self.cols.get(i).is_some_and(|c| c.right))
            .collect();
        let mut all: Vec<Vec<String>> = Vec::new();
        if style.headings {
            let head: Vec<String> = self.cols.iter().map(|c| c.head.to_string()).collect();
            all.push(pick(&head));
        }
        all.extend(rows.iter().map(|r| pick(r)));
        if let Some(sep) = &style.separator {
            for r in all {
                out.push_str(&r.join(sep));
                out.push('\n');
            }
            return out;
        }
        let n = shown.len();
        widths.resize(n, 0);
        let w = widths;
        for r in &all {
            for (i, c) in r.iter().enumerate().take(n) {
                w[i] = w[i].max(c.chars().count());
            }
        }
        for r in all {
            let mut line = String::new();
            for (i, c) in r.iter().enumerate().take(n) {
                let pad = w[i].saturating_sub(c.chars().count());
                if i > 0 {
                    line.push_str("  ");
                }
                if right[i] {
                    line.push_str(&" ".repeat(pad));
                    line.push_str(c);
                } else {
                    line.push_str(c);
                    if i + 1 < n {
                        line.push_str(&" ".repeat(pad));
                    }
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_stream_stays_aligned() {
        let mut style = Style {
            units: Units::default(),
            suffix: true,
            headings: true,
            separator: None,
            view: View::default(),
        };
        let table = |name: &str, n: &str| {
            let mut t = Table::new(&[("POOL", false), ("USED", true), ("MODE", false)]);
            t.push(vec![name.into(), n.into(), "rw".into()]);
            t
        };
        let mut widths = Vec::new();
        let first = table("p", "1").render_aligned(&style, &mut widths);
        style.headings = false;
        let second = table("pool0", "12345").render_aligned(&style, &mut widths);
        let third = table("p", "1").render_aligned(&style, &mut widths);
        assert_eq!(first, "POOL  USED  MODE\np        1  rw\n");
        assert_eq!(second, "pool0  12345  rw\n");
        // Never narrower than what came before.
        assert_eq!(third, "p          1  rw\n");
    }
}
