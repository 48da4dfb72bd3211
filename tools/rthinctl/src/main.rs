// SPDX-License-Identifier: GPL-2.0
//! rthinctl: the userspace tool for rthin pools (placeholder until issue 5).

fn main() {
    println!("rthinctl {}", env!("CARGO_PKG_VERSION"));
}
