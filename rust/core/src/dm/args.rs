// SPDX-License-Identifier: GPL-2.0
//! Parsing of device-mapper table and message arguments.
//!
//! dm hands a target its table line already split into words. These helpers
//! turn words into numbers. [`parse_u64`]/[`parse_u32`] are strict (plain
//! unsigned decimal, no sign, no trailing garbage, no overflow);
//! [`parse_kstrtoull`] and [`parse_dm_arg_u32`] reproduce exactly what the
//! kernel's `kstrtoull()` and DM core's `dm_read_arg()` (`sscanf "%u%c"`)
//! accept, for the interface code that must match dm-thin word for word.

/// Why an argument could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgError {
    /// The word was empty.
    Empty,
    /// The word held something other than decimal digits.
    NotANumber,
    /// The number does not fit the destination type.
    Overflow,
    /// Fewer words were given than were needed.
    Missing,
}

/// Parses an unsigned decimal number, rejecting signs, spaces and overflow.
pub fn parse_u64(word: &[u8]) -> Result<u64, ArgError> {
    if word.is_empty() {
        return Err(ArgError::Empty);
    }
    let mut value: u64 = 0;
    for &c in word {
        if !c.is_ascii_digit() {
            return Err(ArgError::NotANumber);
        }
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(c - b'0')))
            .ok_or(ArgError::Overflow)?;
    }
    Ok(value)
}

/// Parses an unsigned decimal number that must fit in 32 bits.
pub fn parse_u32(word: &[u8]) -> Result<u32, ArgError> {
    u32::try_from(parse_u64(word)?).map_err(|_| ArgError::Overflow)
}

/// Parses a number with the kernel's `kstrtoull(word, 10, ..)` rules, which
/// dm-thin uses for block sizes, low water marks, device ids and transaction
/// ids: an optional leading `+`, at least one decimal digit, an optional single
/// trailing `\n`, nothing else; values above `u64::MAX` are rejected.
pub fn parse_kstrtoull(word: &[u8]) -> Result<u64, ArgError> {
    let digits = match word {
        [b'+', rest @ ..] => rest,
        _ => word,
    };
    let digits = match digits {
        [rest @ .., b'\n'] => rest,
        _ => digits,
    };
    if digits.is_empty() {
        return Err(if word.is_empty() {
            ArgError::Empty
        } else {
            ArgError::NotANumber
        });
    }
    parse_u64(digits)
}

/// True for the bytes the kernel's `isspace()` accepts (`\t`..`\r`, space and
/// Latin-1 NBSP 0xa0).
pub fn is_kernel_space(c: u8) -> bool {
    matches!(c, 9..=13 | b' ' | 0xa0)
}

/// Parses a word the way DM core's `dm_read_arg`/`dm_read_arg_group` do
/// (`sscanf(word, "%u%c", ..) == 1`): leading kernel white space is skipped,
/// then at least one digit and nothing after the digits. Like the kernel, a
/// value that does not fit 32 bits is silently truncated to its low 32 bits
/// (an overflowing 64-bit value saturates first), so callers must range-check.
pub fn parse_dm_arg_u32(word: &[u8]) -> Result<u32, ArgError> {
    let start = word
        .iter()
        .position(|&c| !is_kernel_space(c))
        .ok_or(if word.is_empty() {
            ArgError::Empty
        } else {
            ArgError::NotANumber
        })?;
    let digits = word.get(start..).unwrap_or(&[]);
    let mut value: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return Err(ArgError::NotANumber);
        }
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(c - b'0')))
            .unwrap_or(u64::MAX);
    }
    // Truncation to `unsigned int` is what the kernel's sscanf does.
    Ok(value as u32)
}

/// A cursor over the words of a table line or message, consumed front to back.
#[derive(Debug, Clone, Copy)]
pub struct ArgCursor<'a, W: AsRef<[u8]>> {
    words: &'a [W],
}

impl<'a, W: AsRef<[u8]>> ArgCursor<'a, W> {
    /// Starts a cursor at the first word.
    pub fn new(words: &'a [W]) -> Self {
        Self { words }
    }

    /// How many words are left.
    pub fn remaining(&self) -> usize {
        self.words.len()
    }

    /// Takes the next word.
    pub fn next_word(&mut self) -> Result<&'a [u8], ArgError> {
        let (first, rest) = self.words.split_first().ok_or(ArgError::Missing)?;
        self.words = rest;
        Ok(first.as_ref())
    }

    /// Takes the next word as a `u64`.
    pub fn next_u64(&mut self) -> Result<u64, ArgError> {
        parse_u64(self.next_word()?)
    }

    /// Takes the next word as a `u32`.
    pub fn next_u32(&mut self) -> Result<u32, ArgError> {
        parse_u32(self.next_word()?)
    }
}

/// Scenarios shared by the host tests and the module's KUnit suite.
#[cfg(any(test, feature = "selftest"))]
pub mod selftest {
    use super::*;

    /// Decimal parsing accepts what dm-thin accepts and nothing else.
    pub fn parse_numbers() -> bool {
        parse_u64(b"0") == Ok(0)
            && parse_u64(b"18446744073709551615") == Ok(u64::MAX)
            && parse_u64(b"18446744073709551616") == Err(ArgError::Overflow)
            && parse_u64(b"") == Err(ArgError::Empty)
            && parse_u64(b"-1") == Err(ArgError::NotANumber)
            && parse_u64(b"+1") == Err(ArgError::NotANumber)
            && parse_u64(b"12a") == Err(ArgError::NotANumber)
            && parse_u64(b" 1") == Err(ArgError::NotANumber)
            && parse_u32(b"4294967295") == Ok(u32::MAX)
            && parse_u32(b"4294967296") == Err(ArgError::Overflow)
    }

    /// A cursor hands out words in order and reports exhaustion.
    pub fn cursor_walks_words() -> bool {
        let words: [&[u8]; 3] = [b"128", b"skip_block_zeroing", b"7"];
        let mut c = ArgCursor::new(&words);
        c.remaining() == 3
            && c.next_u64() == Ok(128)
            && c.next_word() == Ok(&b"skip_block_zeroing"[..])
            && c.next_u32() == Ok(7)
            && c.remaining() == 0
            && c.next_word() == Err(ArgError::Missing)
    }

    /// `kstrtoull` rules: optional `+`, one optional trailing newline.
    pub fn kstrtoull_rules() -> bool {
        parse_kstrtoull(b"+5") == Ok(5)
            && parse_kstrtoull(b"5\n") == Ok(5)
            && parse_kstrtoull(b"+007\n") == Ok(7)
            && parse_kstrtoull(b"18446744073709551615") == Ok(u64::MAX)
            && parse_kstrtoull(b"18446744073709551616") == Err(ArgError::Overflow)
            && parse_kstrtoull(b"") == Err(ArgError::Empty)
            && parse_kstrtoull(b"+") == Err(ArgError::NotANumber)
            && parse_kstrtoull(b"\n") == Err(ArgError::NotANumber)
            && parse_kstrtoull(b"++5").is_err()
            && parse_kstrtoull(b"-1").is_err()
            && parse_kstrtoull(b"5\n\n").is_err()
            && parse_kstrtoull(b"0x10").is_err()
            && parse_kstrtoull(b" 5").is_err()
            && parse_kstrtoull(b"1k").is_err()
    }

    /// `sscanf("%u%c")` rules used for dm feature-group counts.
    pub fn dm_arg_rules() -> bool {
        parse_dm_arg_u32(b"4") == Ok(4)
            && parse_dm_arg_u32(b" \t4") == Ok(4)
            && parse_dm_arg_u32(b"4 ").is_err()
            && parse_dm_arg_u32(b"4\n").is_err()
            && parse_dm_arg_u32(b"+4").is_err()
            && parse_dm_arg_u32(b"-4").is_err()
            && parse_dm_arg_u32(b"").is_err()
            && parse_dm_arg_u32(b"  ").is_err()
            && parse_dm_arg_u32(b"4294967296") == Ok(0)
            && parse_dm_arg_u32(b"4294967297") == Ok(1)
            && parse_dm_arg_u32(b"99999999999999999999999") == Ok(u32::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::selftest;

    #[test]
    fn parse_numbers() {
        assert!(selftest::parse_numbers());
    }

    #[test]
    fn cursor_walks_words() {
        assert!(selftest::cursor_walks_words());
    }

    #[test]
    fn kstrtoull_rules() {
        assert!(selftest::kstrtoull_rules());
    }

    #[test]
    fn dm_arg_rules() {
        assert!(selftest::dm_arg_rules());
    }
}
