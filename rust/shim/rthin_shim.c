// SPDX-License-Identifier: GPL-2.0
/*
 * Out-of-line wrappers for static inlines and macros used by the Rust side of
 * dm-rthin. Keep this file free of logic.
 */
#include "rthin_shim.h"

#include <linux/moduleparam.h>

/*
 * dm-thin's no_space_timeout, writable at run time like dm-thin's (the Rust
 * module! macro only makes load-time parameters): seconds a pool out of data
 * space queues bios before erroring them; 0 queues forever.
 */
static unsigned int no_space_timeout_secs = 60;
module_param_named(no_space_timeout, no_space_timeout_secs, uint, 0644);
MODULE_PARM_DESC(no_space_timeout,
		 "Out of data space: seconds to queue bios before erroring them (0: queue forever)");

unsigned int rthin_no_space_timeout(void)
{
	return READ_ONCE(no_space_timeout_secs);
}

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

sector_t rthin_bdev_nr_sectors(struct block_device *bdev)
{
	return bdev_nr_sectors(bdev);
}

u8 rthin_bdev_partno(struct block_device *bdev)
{
	return bdev_partno(bdev);
}

void rthin_init_work(struct work_struct *work, work_func_t func)
{
	INIT_WORK(work, func);
}

void rthin_init_delayed_work(struct delayed_work *work, work_func_t func)
{
	INIT_DELAYED_WORK(work, func);
}

/*
 * WQ_MEM_RECLAIM: the deferred bio path must make progress under reclaim.
 * WQ_PERCPU: each CPU's deferred list is drained on that CPU.
 */
struct workqueue_struct *rthin_alloc_io_workqueue(const char *name)
{
	return alloc_workqueue("%s", WQ_MEM_RECLAIM | WQ_PERCPU, 0, name);
}

unsigned int rthin_memalloc_noio_save(void)
{
	return memalloc_noio_save();
}

void rthin_memalloc_noio_restore(unsigned int flags)
{
	memalloc_noio_restore(flags);
}

/*
 * The pool's in-flight I/O tracker (rust/glue/inflight.rs): SRCU-fast with
 * up/down readers, so a bio's read side opens in the map call and closes in
 * its end_io (another context, possibly an interrupt) without a memory
 * barrier on either side. init is a macro under lockdep.
 */
int rthin_srcu_init(struct srcu_struct *ssp)
{
	return init_srcu_struct_fast_updown(ssp);
}

struct srcu_ctr __percpu *rthin_srcu_down_read(struct srcu_struct *ssp)
{
	return srcu_down_read_fast(ssp);
}

void rthin_srcu_up_read(struct srcu_struct *ssp, struct srcu_ctr __percpu *scp)
{
	srcu_up_read_fast(ssp, scp);
}

void rthin_cond_resched(void)
{
	cond_resched();
}
