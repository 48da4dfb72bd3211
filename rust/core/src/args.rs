// SPDX-License-Identifier: GPL-2.0
//! Parsing of device-mapper table and message arguments.
//!
//! dm hands a target its table line already split into words. These helpers
//! turn words into numbers with the same acceptance rules as the kernel's
//! `kstrto*`/`sscanf` usage in dm-thin: plain unsigned decimal, no sign, no
//! trailing garbage, no overflow.

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
}
