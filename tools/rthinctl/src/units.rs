// SPDX-License-Identifier: GPL-2.0
//! LVM-like size units and percentage rounding.
//!
//! `--units` takes one letter, as `lvs` does: `h` human-readable, `b` bytes,
//! `s` 512-byte sectors, `k m g t p e` powers of 1024. An upper-case letter
//! uses powers of 1000 instead (`H K M G T P E`). `r`/`R` is human-readable
//! with a `<` prefix when the shown value is rounded up, i.e. larger than the
//! real one (LVM's `--units r`); it
//! is never the default because that prefix breaks naive parsers.

use std::fmt;
use std::str::FromStr;

/// A `--units` choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Units {
    kind: Kind,
    si: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Human {
        mark_rounding: bool,
    },
    Bytes,
    Sectors,
    /// Power of the base (1 = k, 2 = m, ...).
    Power(u32),
}

const SUFFIXES: [char; 7] = ['b', 'k', 'm', 'g', 't', 'p', 'e'];

impl FromStr for Units {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut chars = s.chars();
        let (Some(c), None) = (chars.next(), chars.next()) else {
            return Err(format!(
                "invalid unit {s:?}: use one of h b s k m g t p e r (upper case: powers of 1000)"
            ));
        };
        let si = c.is_ascii_uppercase();
        let kind = match c.to_ascii_lowercase() {
            'h' => Kind::Human {
                mark_rounding: false,
            },
            'r' => Kind::Human {
                mark_rounding: true,
            },
            'b' => Kind::Bytes,
            's' => Kind::Sectors,
            l => match SUFFIXES.iter().position(|&x| x == l) {
                Some(p) => Kind::Power(p as u32),
                None => {
                    return Err(format!(
                        "invalid unit {s:?}: use one of h b s k m g t p e r (upper case: powers of 1000)"
                    ))
                }
            },
        };
        Ok(Units { kind, si })
    }
}

impl Default for Units {
    fn default() -> Self {
        Units {
            kind: Kind::Human {
                mark_rounding: false,
            },
            si: false,
        }
    }
}

impl Units {
    /// Plain bytes (what `--raw` uses).
    pub const BYTES: Units = Units {
        kind: Kind::Bytes,
        si: false,
    };

    /// Formats `bytes`; with `suffix` false the unit letter is left out.
    pub fn format(self, bytes: u64, suffix: bool) -> String {
        let base: u64 = if self.si { 1000 } else { 1024 };
        let letter = |p: u32| {
            let c = SUFFIXES[p as usize];
            if self.si {
                c.to_ascii_uppercase()
            } else {
                c
            }
        };
        match self.kind {
            Kind::Bytes => {
                if suffix {
                    format!("{bytes}{}", if self.si { "B" } else { "b" })
                } else {
                    bytes.to_string()
                }
            }
            Kind::Sectors => {
                let s = bytes / 512;
                let rounded = !bytes.is_multiple_of(512);
                let v = if rounded {
                    format!("{:.2}", bytes as f64 / 512.0)
                } else {
                    s.to_string()
                };
                if suffix {
                    format!("{v}{}", if self.si { "S" } else { "s" })
                } else {
                    v
                }
            }
            Kind::Power(p) => {
                let v = two_decimals(bytes, base.pow(p));
                if suffix {
                    format!("{v}{}", letter(p))
                } else {
                    v
                }
            }
            Kind::Human { mark_rounding } => {
                let mut p = 0u32;
                while p + 1 < SUFFIXES.len() as u32 && bytes >= base.pow(p + 1) {
                    p += 1;
                }
                if p == 0 {
                    return if suffix {
                        format!("{bytes}{}", letter(0).to_ascii_uppercase())
                    } else {
                        bytes.to_string()
                    };
                }
                let div = base.pow(p);
                let v = two_decimals(bytes, div);
                // Exact when bytes is a multiple of div/100 (with rounding).
                let exact = u128::from(bytes) * 100 % u128::from(div) == 0;
                let mark = if mark_rounding && !exact { "<" } else { "" };
                let v = if mark_rounding && !exact {
                    two_decimals_ceil(bytes, div)
                } else {
                    v
                };
                if suffix {
                    format!("{mark}{v}{}", letter(p))
                } else {
                    format!("{mark}{v}")
                }
            }
        }
    }
}

/// `value / div` with two decimals, rounded half up, integer arithmetic.
fn two_decimals(value: u64, div: u64) -> String {
    let hundredths = (u128::from(value) * 100 + u128::from(div) / 2) / u128::from(div);
    format!("{}.{:02}", hundredths / 100, hundredths % 100)
}

fn two_decimals_ceil(value: u64, div: u64) -> String {
    let hundredths = (u128::from(value) * 100).div_ceil(u128::from(div));
    format!("{}.{:02}", hundredths / 100, hundredths % 100)
}

/// LVM-style rounding to two decimals: a non-zero use never shows as 0.00 and
/// anything short of full never shows as 100.00.
pub fn round_percent(used: u64, total: u64) -> Option<f64> {
    if total == 0 {
        return None;
    }
    let hundredths = (u128::from(used) * 10_000 + u128::from(total) / 2) / u128::from(total);
    let h = if used > 0 && hundredths == 0 {
        1
    } else if used < total && hundredths >= 10_000 {
        9_999
    } else {
        hundredths
    };
    Some(h as f64 / 100.0)
}

/// A rounded percentage as text (`12.34`), `-` when unknown.
pub struct Pct(pub Option<f64>);

impl fmt::Display for Pct {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(p) => write!(f, "{p:.2}"),
            None => f.write_str("-"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(s: &str) -> Units {
        s.parse().unwrap()
    }

    #[test]
    fn human() {
        let h = Units::default();
        assert_eq!(h.format(0, true), "0B");
        assert_eq!(h.format(1023, true), "1023B");
        assert_eq!(h.format(1024, true), "1.00k");
        assert_eq!(h.format(256 << 20, true), "256.00m");
        assert_eq!(h.format(1536 << 20, true), "1.50g");
        assert_eq!(h.format(1536 << 20, false), "1.50");
        assert_eq!(u("H").format(1_500_000_000, true), "1.50G");
        assert_eq!(u("r").format((1 << 30) - 1, true), "<1024.00m");
        assert_eq!(u("r").format(1 << 30, true), "1.00g");
    }

    #[test]
    fn fixed() {
        assert_eq!(u("b").format(65536, true), "65536b");
        assert_eq!(u("b").format(65536, false), "65536");
        assert_eq!(u("s").format(65536, true), "128s");
        assert_eq!(u("k").format(65536, true), "64.00k");
        assert_eq!(u("K").format(65536, true), "65.54K");
        assert_eq!(u("m").format(1 << 20, false), "1.00");
        assert_eq!(u("e").format(u64::MAX, true), "16.00e");
        assert_eq!(Units::BYTES.format(7, false), "7");
        for bad in ["", "x", "kk", "q", "ü"] {
            assert!(bad.parse::<Units>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn percentages() {
        assert_eq!(round_percent(0, 100), Some(0.0));
        assert_eq!(round_percent(1, 1_000_000), Some(0.01));
        assert_eq!(round_percent(999_999, 1_000_000), Some(99.99));
        assert_eq!(round_percent(100, 100), Some(100.0));
        assert_eq!(round_percent(61, 512), Some(11.91));
        assert_eq!(round_percent(1, 0), None);
        assert_eq!(round_percent(u64::MAX, u64::MAX), Some(100.0));
        assert_eq!(Pct(round_percent(1, 3)).to_string(), "33.33");
        assert_eq!(Pct(None).to_string(), "-");
    }
}
