// SPDX-License-Identifier: GPL-2.0
/*
 * Out-of-line wrappers for static inlines and macros used by the Rust side of
 * dm-rthin. Keep this file free of logic.
 */
#include "rthin_shim.h"

void rthin_bio_set_dev(struct bio *bio, struct block_device *bdev)
{
	bio_set_dev(bio, bdev);
}

blk_mode_t rthin_dm_table_mode(struct dm_target *ti)
{
	return dm_table_get_mode(ti->table);
}

unsigned int rthin_bdev_max_discard_sectors(struct block_device *bdev)
{
	return bdev_max_discard_sectors(bdev);
}
