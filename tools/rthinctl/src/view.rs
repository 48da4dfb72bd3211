// SPDX-License-Identifier: GPL-2.0
//! `-o FIELDS`, `--sort` and `-S` of `ls` and `status`, as lvs has them:
//! which columns a table shows, in which order, and which rows.
//!
//! Fields are a table's column headings or their lvs names
//! (`lv_size`, `data_percent`, ...), case-insensitive. Sizes and numbers
//! compare as numbers (a size cell like `64.00m` is read back in bytes), so
//! `-S 'data_percent>80'` and `--sort -lv_size` work in any `--units`.

use crate::explain::{Error, Result};

/// A column: heading, right-aligned, and the lvs-style names that select it.
#[derive(Debug, Clone, Copy)]
pub struct Col {
    /// The heading.
    pub head: &'static str,
    /// Right-aligned (numbers and sizes).
    pub right: bool,
    /// Other names of the field (lower case).
    pub names: &'static [&'static str],
}

impl Col {
    /// A column.
    pub const fn new(head: &'static str, right: bool, names: &'static [&'static str]) -> Self {
        Col { head, right, names }
    }

    /// True if `field` names this column.
    pub fn is(&self, field: &str) -> bool {
        self.head.eq_ignore_ascii_case(field)
            || self.names.iter().any(|n| n.eq_ignore_ascii_case(field))
    }
}

/// A comparison of `-S`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// One condition of `-S FIELD OP VALUE`.
#[derive(Debug, Clone, PartialEq)]
pub struct Cond {
    field: String,
    op: Op,
    value: String,
}

/// What `-o`, `--sort` and `-S` asked for (empty: everything, as built).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct View {
    /// Columns to show, in this order.
    pub fields: Option<Vec<String>>,
    /// Sort keys: field and descending.
    pub sort: Vec<(String, bool)>,
    /// Conditions every shown row meets.
    pub select: Vec<Cond>,
}

impl View {
    /// From the command line: `-o a,b`, `--sort a,-b`, `-S 'a>1 && b=x'`.
    pub fn parse(fields: Option<&str>, sort: Option<&str>, select: Option<&str>) -> Result<Self> {
        let list = |s: &str| -> Vec<String> {
            s.split(',')
                .map(|f| f.trim().to_string())
                .filter(|f| !f.is_empty())
                .collect()
        };
        let mut v = View {
            fields: fields.map(list),
            ..Default::default()
        };
        if v.fields.as_ref().is_some_and(|f| f.is_empty()) {
            return Err(Error::usage("-o needs at least one field"));
        }
        for f in sort.map(list).unwrap_or_default() {
            match f.strip_prefix('-') {
                Some(name) => v.sort.push((name.to_string(), true)),
                None => v.sort.push((f.trim_start_matches('+').to_string(), false)),
            }
        }
        for c in select.map(|s| s.split("&&")).into_iter().flatten() {
            v.select.push(parse_cond(c.trim())?);
        }
        Ok(v)
    }

    /// Every field named anywhere, for checking against the columns.
    pub fn named(&self) -> impl Iterator<Item = &str> {
        let fields = self.fields.iter().flatten().map(String::as_str);
        let sort = self.sort.iter().map(|(f, _)| f.as_str());
        let select = self.select.iter().map(|c| c.field.as_str());
        fields.chain(sort).chain(select)
    }

    /// Refuses a field that none of `tables`' columns has.
    pub fn check(&self, tables: &[&[Col]]) -> Result<()> {
        for f in self.named() {
            if !tables.iter().any(|cols| cols.iter().any(|c| c.is(f))) {
                let known: Vec<String> = tables
                    .iter()
                    .flat_map(|cols| cols.iter())
                    .map(|c| match c.names.first() {
                        Some(n) => format!("{} ({n})", c.head),
                        None => c.head.to_string(),
                    })
                    .collect();
                return Err(Error::usage(format!(
                    "unknown field {f:?}; the fields are: {}",
                    known.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// Applies the view to rows of a table with columns `cols`: the rows
    /// kept, sorted, and the columns shown (indices into `cols`). A field
    /// this table does not have is left out, and a table that has none of
    /// the `-o` fields keeps all its columns (`status` prints two tables).
    pub fn apply(
        &self,
        cols: &[Col],
        mut rows: Vec<Vec<String>>,
    ) -> (Vec<usize>, Vec<Vec<String>>) {
        let index = |f: &str| cols.iter().position(|c| c.is(f));
        rows.retain(|r| {
            self.select.iter().all(|c| match index(&c.field) {
                Some(i) => r.get(i).is_some_and(|cell| c.holds(cell)),
                None => true,
            })
        });
        let keys: Vec<(usize, bool)> = self
            .sort
            .iter()
            .filter_map(|(f, desc)| index(f).map(|i| (i, *desc)))
            .collect();
        if !keys.is_empty() {
            rows.sort_by(|a, b| {
                for &(i, desc) in &keys {
                    let o = compare(a.get(i), b.get(i));
                    let o = if desc { o.reverse() } else { o };
                    if o.is_ne() {
                        return o;
                    }
                }
                std::cmp::Ordering::Equal
            });
        }
        let shown: Vec<usize> = match &self.fields {
            Some(f) => f.iter().filter_map(|f| index(f)).collect(),
            None => Vec::new(),
        };
        if shown.is_empty() {
            return ((0..cols.len()).collect(), rows);
        }
        (shown, rows)
    }
}

impl Cond {
    fn holds(&self, cell: &str) -> bool {
        use std::cmp::Ordering::*;
        let o = match (number(cell), number(&self.value)) {
            (Some(a), Some(b)) => a.partial_cmp(&b),
            _ => Some(cell.cmp(self.value.as_str())),
        };
        let Some(o) = o else { return false };
        match self.op {
            Op::Eq => o == Equal,
            Op::Ne => o != Equal,
            Op::Lt => o == Less,
            Op::Le => o != Greater,
            Op::Gt => o == Greater,
            Op::Ge => o != Less,
        }
    }
}

fn parse_cond(s: &str) -> Result<Cond> {
    // Two-character operators first.
    for (text, op) in [
        ("!=", Op::Ne),
        ("<=", Op::Le),
        (">=", Op::Ge),
        ("=", Op::Eq),
        ("<", Op::Lt),
        (">", Op::Gt),
    ] {
        if let Some((f, v)) = s.split_once(text) {
            let (f, v) = (f.trim(), v.trim().trim_matches(['"', '\'']));
            if f.is_empty() {
                break;
            }
            return Ok(Cond {
                field: f.to_string(),
                op,
                value: v.to_string(),
            });
        }
    }
    Err(Error::usage(format!(
        "-S {s:?}: expected FIELD OP VALUE with OP one of = != < <= > >= (conditions joined with &&)"
    )))
}

/// Orders two cells: as numbers if both are, else as text; a missing or
/// unknown (`-`) value sorts first.
fn compare(a: Option<&String>, b: Option<&String>) -> std::cmp::Ordering {
    let (a, b) = (a.map(String::as_str), b.map(String::as_str));
    match (a.and_then(number), b.and_then(number)) {
        (Some(x), Some(y)) => x.total_cmp(&y),
        (None, Some(_)) => std::cmp::Ordering::Less,
        (Some(_), None) => std::cmp::Ordering::Greater,
        (None, None) => a.cmp(&b),
    }
}

/// A cell's value as a number: plain numbers, and sizes with an lvs unit
/// suffix (`640.00k` = 655,360; upper case: powers of 1000; `B` bytes, `s`
/// sectors).
pub fn number(cell: &str) -> Option<f64> {
    let cell = cell.trim();
    let split = cell
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-' || c == '+'))
        .unwrap_or(cell.len());
    let (num, unit) = cell.split_at(split);
    let x: f64 = num.parse().ok()?;
    let scale = match unit {
        "" | "B" | "b" => 1.0,
        "s" | "S" => 512.0,
        _ => {
            let mut ch = unit.chars();
            let c = ch.next()?;
            if ch.next().is_some() {
                return None;
            }
            let power = "kmgtpe".find(c.to_ascii_lowercase())? as i32 + 1;
            let base: f64 = if c.is_ascii_uppercase() {
                1000.0
            } else {
                1024.0
            };
            base.powi(power)
        }
    };
    Some(x * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    const COLS: &[Col] = &[
        Col::new("NAME", false, &["name"]),
        Col::new("SIZE", true, &["lv_size"]),
        Col::new("USE%", true, &["data_percent"]),
    ];

    fn rows() -> Vec<Vec<String>> {
        [
            ["a", "1.00g", "90.00"],
            ["b", "640.00k", "10.50"],
            ["c", "-", "-"],
        ]
        .iter()
        .map(|r| r.iter().map(|c| c.to_string()).collect())
        .collect()
    }

    #[test]
    fn numbers_and_sizes() {
        assert_eq!(number("640.00k"), Some(655_360.0));
        assert_eq!(number("1.00G"), Some(1e9));
        assert_eq!(number("0B"), Some(0.0));
        assert_eq!(number("12.5"), Some(12.5));
        assert_eq!(number("-"), None);
        assert_eq!(number("rw"), None);
    }

    #[test]
    fn select_sort_and_fields() {
        let v = View::parse(
            Some("size,NAME"),
            Some("-lv_size"),
            Some("data_percent>=10"),
        )
        .unwrap();
        let (shown, r) = v.apply(COLS, rows());
        assert_eq!(shown, vec![1, 0]);
        let names: Vec<&str> = r.iter().map(|r| r[0].as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        let v = View::parse(None, Some("lv_size"), Some("name != b && name<z")).unwrap();
        let (_, r) = v.apply(COLS, rows());
        let names: Vec<&str> = r.iter().map(|r| r[0].as_str()).collect();
        assert_eq!(names, ["c", "a"]);
        assert!(v.check(&[COLS]).is_ok());
        let bad = View::parse(Some("nosuch"), None, None).unwrap();
        assert!(bad.check(&[COLS]).unwrap_err().text.contains("lv_size"));
        assert!(View::parse(None, None, Some("size")).is_err());
    }
}
