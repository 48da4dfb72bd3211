// SPDX-License-Identifier: GPL-2.0
//! Shrinking a failing sequence: drop chunks of operations, then single
//! ones, keeping each drop after which the sequence still fails, until
//! nothing more can go or the time is up. The executor skips operations
//! that no longer apply (a write to a thin whose creation was dropped), so
//! every subset runs.

use std::time::Instant;

use crate::ops::Op;

/// The smallest failing subset of `ops` found before `deadline`;
/// `fails` runs a candidate.
pub fn shrink(
    ops: &[(usize, Op)],
    deadline: Instant,
    mut fails: impl FnMut(&[(usize, Op)]) -> bool,
) -> Vec<(usize, Op)> {
    let mut cur = ops.to_vec();
    let mut chunk = (cur.len() / 2).max(1);
    loop {
        let mut at = 0;
        while at < cur.len() {
            if Instant::now() >= deadline {
                return cur;
            }
            let end = (at + chunk).min(cur.len());
            let mut cand = cur[..at].to_vec();
            cand.extend_from_slice(&cur[end..]);
            if !cand.is_empty() && fails(&cand) {
                cur = cand;
            } else {
                at = end;
            }
        }
        if chunk == 1 {
            return cur;
        }
        chunk = (chunk / 2).max(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn finds_the_two_ops_that_fail_together() {
        let ops: Vec<(usize, Op)> = (0..40).map(|i| (i, Op::SetTransactionId)).collect();
        let deadline = Instant::now() + Duration::from_secs(10);
        let got = shrink(&ops, deadline, |c| {
            c.iter().any(|(i, _)| *i == 7) && c.iter().any(|(i, _)| *i == 31)
        });
        let idx: Vec<usize> = got.iter().map(|(i, _)| *i).collect();
        assert_eq!(idx, vec![7, 31]);
    }
}
