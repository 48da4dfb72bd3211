// SPDX-License-Identifier: GPL-2.0
//! The two device-mapper targets: their table lines, status lines and
//! messages, and the callbacks dm calls. They hold no state of their own
//! beyond one table's: the pool object (`crate::pool`) and the thin I/O
//! path (`crate::io`) do the work.

use kernel::prelude::*;

use crate::{dm::errno::ENOMEM, glue::dm::CtrError};

pub(crate) mod pool;
pub(crate) mod thin;

/// The table words as byte slices, the form the core's parsers take.
pub(crate) fn to_bytes<'a>(words: &[&'a CStr]) -> Result<KVec<&'a [u8]>, CtrError> {
    let mut bytes = KVec::with_capacity(words.len(), GFP_KERNEL)
        .map_err(|_| CtrError::new(ENOMEM, c"Cannot allocate memory"))?;
    for word in words {
        // Cannot fail: the capacity covers every word.
        let _ = bytes.push_within_capacity(word.to_bytes());
    }
    Ok(bytes)
}
