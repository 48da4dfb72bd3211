#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
# thin_dump XML of the metadata scale-table.sh restores and measures, to
# stdout. The data blocks of consecutive mappings are scattered (an odd
# multiplier modulo the data device), so the trees hold what a long-used
# pool holds and runs do not shrink the dump.
#
#   scale-xml.py 4.5m   9 devices, 4.5M single mappings: 3 origins of
#                       500k each and 6 snapshots sharing the first half of
#                       an origin's blocks (3M data blocks in use)
#   scale-xml.py 16g    for a 16 GiB metadata device: 100M data blocks,
#                       4 devices of 4M mappings each, written as runs of 8
#                       (16M mappings, half of them shared by two devices)
import sys


def emit(nr_data, devs, run, scatter):
    w = sys.stdout.write
    w(f'<superblock uuid="" time="1" transaction="1" version="2" '
      f'data_block_size="128" nr_data_blocks="{nr_data}">\n')
    for d, maps in devs:
        n = sum(1 for _ in maps()) * run
        w(f'  <device dev_id="{d}" mapped_blocks="{n}" transaction="0" '
          f'creation_time="0" snap_time="{1 if d > 3 else 0}">\n')
        for v, a in maps():
            b = scatter(a)
            if run == 1:
                w(f'    <single_mapping origin_block="{v}" data_block="{b}" time="0"/>\n')
            else:
                w(f'    <range_mapping origin_begin="{v * run}" data_begin="{b * run}" '
                  f'length="{run}" time="0"/>\n')
        w('  </device>\n')
    w('</superblock>\n')


def shape(n, origins, snaps, base):
    """origins devices 1.. of n (virtual, alloc) pairs each, then snaps
    devices sharing the first half of origin (d - 1) % origins + 1."""
    devs = []
    for d in range(1, origins + 1):
        devs.append((d, lambda d=d: ((v, (d - 1) * n + v) for v in range(n))))
    own = origins * n
    for i in range(snaps):
        d, o = origins + 1 + i, i % origins
        first = own + i * (n // 2)

        def maps(o=o, first=first):
            for v in range(n):
                yield v, (o * n + v if v < n // 2 else first + v - n // 2)
        devs.append((d, maps))
    return devs


kind = sys.argv[1] if len(sys.argv) > 1 else ''
if kind == '4.5m':
    nr = 1 << 22
    emit(nr, shape(500_000, 3, 6, 0), 1, lambda a: a * 40503 % nr)
elif kind == '16g':
    nr = 100_000_000
    runs = nr // 8
    emit(nr, shape(500_000, 2, 2, 0), 8, lambda a: a * 7919 % runs)
else:
    sys.exit('usage: scale-xml.py 4.5m|16g')
