#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
# Writes the thin_dump XML of the metadata images that scripts/meta-images.sh
# restores with thin-provisioning-tools 0.9.0 and 1.x: several devices, a
# snapshot sharing part of its origin's blocks, an empty device, and data
# devices of 100000 blocks (the last bitmap partly valid) and of 32640 (two
# whole bitmaps).
import sys

def image(path, nr_data, devs, shares=()):
    out = [f'<superblock uuid="" time="3" transaction="9" version="2" '
           f'data_block_size="128" nr_data_blocks="{nr_data}">']
    alloc = 0
    blocks = {}
    for d, n in devs:
        maps = []
        for v in range(n):
            maps.append((v * 3 if d % 2 else v, alloc, d % 3))
            alloc += 1
        blocks[d] = maps
    for snap, origin, n in shares:
        # The snapshot maps the origin's first n blocks, then its own.
        own = blocks.get(snap, [])
        blocks[snap] = blocks[origin][:n] + [(v + 100000, b, t) for v, b, t in own]
    for d in sorted(blocks):
        maps = sorted(blocks[d])
        out.append(f'  <device dev_id="{d}" mapped_blocks="{len(maps)}" transaction="{d}" '
                   f'creation_time="0" snap_time="0">')
        for v, b, t in maps:
            out.append(f'    <single_mapping origin_block="{v}" data_block="{b}" time="{t}"/>')
        out.append('  </device>')
    out.append('</superblock>')
    with open(path, 'w') as f:
        f.write('\n'.join(out) + '\n')

d = sys.argv[1]
image(f'{d}/partial-bitmap.xml', 100000, [(1, 3000), (2, 500), (5, 0), (7, 40000), (8, 100)],
      shares=[(8, 1, 1000)])
image(f'{d}/whole-bitmaps.xml', 32640, [(1, 200), (3, 16320)])
