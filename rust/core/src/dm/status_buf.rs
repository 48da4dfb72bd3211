// SPDX-License-Identifier: GPL-2.0
//! A bounded, allocation-free text writer for dm status and table output.
//!
//! DM core hands a target's `status` callback a buffer `result` of `maxlen`
//! bytes and later measures the text with `strlen()`. [`StatusBuf`] writes into
//! such a caller-provided `&mut [u8]`, always keeps the text NUL-terminated,
//! never writes past the end and reports text that did not fit as a
//! [`core::fmt::Error`] (the truncated prefix stays in the buffer, as with the
//! kernel's `DMEMIT`/`snprintf`; DM core then sees a full buffer and sets
//! `DM_BUFFER_FULL_FLAG`, so userspace retries with a larger one).
//!
//! The module also holds [`DevNum`], the `major:minor` pair printed by table
//! lines, and [`BytesDisplay`] for putting raw argument words into log text.

use core::fmt;

/// A `core::fmt::Write` sink over a fixed byte buffer that reserves one byte
/// for the terminating NUL.
#[derive(Debug)]
pub struct StatusBuf<'a> {
    buf: &'a mut [u8],
    len: usize,
    truncated: bool,
}

impl<'a> StatusBuf<'a> {
    /// Starts writing at the beginning of `buf`; the buffer immediately holds
    /// the empty string (if it has room for the NUL).
    pub fn new(buf: &'a mut [u8]) -> Self {
        if let Some(first) = buf.first_mut() {
            *first = 0;
        }
        Self {
            buf,
            len: 0,
            truncated: false,
        }
    }

    /// How many text bytes fit at most (the buffer length minus the NUL).
    pub fn capacity(&self) -> usize {
        self.buf.len().saturating_sub(1)
    }

    /// Number of text bytes written so far (excluding the NUL).
    pub fn len(&self) -> usize {
        self.len
    }

    /// True if nothing has been written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True once some text did not fit; later writes are refused.
    pub fn is_truncated(&self) -> bool {
        self.truncated
    }

    /// The text written so far (without the NUL).
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }

    /// Forgets everything written and clears the truncation state.
    pub fn clear(&mut self) {
        self.len = 0;
        self.truncated = false;
        if let Some(first) = self.buf.first_mut() {
            *first = 0;
        }
    }

    /// Appends raw bytes (which need not be UTF-8), with the same truncation
    /// rules as [`fmt::Write::write_str`].
    pub fn write_bytes(&mut self, bytes: &[u8]) -> fmt::Result {
        if self.truncated {
            return Err(fmt::Error);
        }
        let room = self.capacity().saturating_sub(self.len);
        let take = bytes.len().min(room);
        let end = self.len.checked_add(take).ok_or(fmt::Error)?;
        let src = bytes.get(..take).ok_or(fmt::Error)?;
        let dst = self.buf.get_mut(self.len..end).ok_or(fmt::Error)?;
        dst.copy_from_slice(src);
        self.len = end;
        if let Some(nul) = self.buf.get_mut(end) {
            *nul = 0;
        }
        if take < bytes.len() {
            self.truncated = true;
            return Err(fmt::Error);
        }
        Ok(())
    }
}

impl fmt::Write for StatusBuf<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.write_bytes(s.as_bytes())
    }
}

/// A block device number as printed by the kernel's `format_dev_t`
/// (`"%u:%u"`, major then minor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DevNum {
    /// Major number.
    pub major: u32,
    /// Minor number.
    pub minor: u32,
}

impl DevNum {
    /// Builds a device number from its parts.
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }
}

impl fmt::Display for DevNum {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.major, self.minor)
    }
}

/// Displays an argument word for log messages: valid UTF-8 as is, other bytes
/// as `\xNN` (the kernel prints the raw bytes with `%s`; Rust log text must be
/// UTF-8).
#[derive(Debug, Clone, Copy)]
pub struct BytesDisplay<'a>(pub &'a [u8]);

impl fmt::Display for BytesDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for chunk in self.0.utf8_chunks() {
            f.write_str(chunk.valid())?;
            for b in chunk.invalid() {
                write!(f, "\\x{:02x}", b)?;
            }
        }
        Ok(())
    }
}

/// Scenarios shared by the host tests and the module's KUnit suite.
#[cfg(any(test, feature = "selftest"))]
pub mod selftest {
    use super::*;
    use core::fmt::Write;

    /// Text that fits is written verbatim and NUL-terminated.
    pub fn fits_and_terminates() -> bool {
        let mut raw = [0xffu8; 8];
        let mut w = StatusBuf::new(&mut raw);
        let ok = write!(w, "{} {}", 12u64, 34u8).is_ok()
            && w.as_bytes() == b"12 34"
            && w.len() == 5
            && !w.is_truncated();
        ok && raw[5] == 0
    }

    /// Text that does not fit is cut at `len - 1` bytes, reported as an error,
    /// and later writes are refused.
    pub fn truncation_is_reported() -> bool {
        let mut raw = [0xffu8; 6];
        let mut w = StatusBuf::new(&mut raw);
        let first = w.write_str("abcdefgh").is_err();
        let state = w.is_truncated() && w.as_bytes() == b"abcde";
        let later = w.write_str("").is_err();
        first && state && later && raw[5] == 0
    }

    /// An exact fit (text of `len - 1` bytes) is not an error.
    pub fn exact_fit() -> bool {
        let mut raw = [0xffu8; 4];
        let mut w = StatusBuf::new(&mut raw);
        let ok = w.write_str("abc").is_ok() && !w.is_truncated();
        let more = w.write_str("d").is_err();
        ok && more && raw == *b"abc\0"
    }

    /// Zero- and one-byte buffers never panic.
    pub fn tiny_buffers() -> bool {
        let mut none: [u8; 0] = [];
        let mut w0 = StatusBuf::new(&mut none);
        let a = w0.write_str("").is_ok() && w0.write_str("x").is_err();
        let mut one = [0xffu8; 1];
        let mut w1 = StatusBuf::new(&mut one);
        let b = w1.write_str("x").is_err() && w1.as_bytes().is_empty();
        a && b && one[0] == 0
    }

    /// Device numbers and raw words display like the kernel prints them.
    pub fn displays() -> bool {
        let mut raw = [0u8; 32];
        let mut w = StatusBuf::new(&mut raw);
        write!(w, "{} {}", DevNum::new(253, 1), BytesDisplay(b"a\xffb")).is_ok()
            && w.as_bytes() == b"253:1 a\\xffb"
    }
}

#[cfg(test)]
mod tests {
    use super::selftest;
    use super::StatusBuf;
    use core::fmt::Write;

    #[test]
    fn scenarios() {
        assert!(selftest::fits_and_terminates());
        assert!(selftest::truncation_is_reported());
        assert!(selftest::exact_fit());
        assert!(selftest::tiny_buffers());
        assert!(selftest::displays());
    }

    #[test]
    fn every_prefix_length_truncates_cleanly() {
        let text = "0 12/512 0/16384 - rw discard_passdown queue_if_no_space - 128 ";
        for n in 0..=text.len() + 2 {
            let mut raw = std::vec![0xaau8; n];
            let mut w = StatusBuf::new(&mut raw);
            let r = w.write_str(text);
            let keep = n.saturating_sub(1).min(text.len());
            assert_eq!(w.as_bytes(), &text.as_bytes()[..keep]);
            assert_eq!(r.is_ok(), text.len() < n, "n={n}");
            if n > 0 {
                assert_eq!(raw[keep], 0);
            }
        }
    }

    #[test]
    fn clear_resets() {
        let mut raw = [0u8; 4];
        let mut w = StatusBuf::new(&mut raw);
        assert!(w.write_str("toolong").is_err());
        w.clear();
        assert!(w.is_empty() && !w.is_truncated());
        assert!(w.write_str("ok").is_ok());
        assert_eq!(w.as_bytes(), b"ok");
    }
}
