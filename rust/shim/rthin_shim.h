/* SPDX-License-Identifier: GPL-2.0 */
/*
 * C entry points for the parts of the kernel API that Rust cannot call
 * directly: static inline functions and macros. Each wrapper is one line; any
 * logic belongs in Rust. This header is read by the C compiler (rthin_shim.c)
 * and by the module-local bindgen run (rthin_bindgen.h).
 */
#ifndef RTHIN_SHIM_H
#define RTHIN_SHIM_H

#include <linux/bio.h>
#include <linux/blkdev.h>
#include <linux/device-mapper.h>
#include <linux/sched/mm.h>
#include <linux/srcu.h>
#include <linux/workqueue.h>

void rthin_bio_set_dev(struct bio *bio, struct block_device *bdev);
blk_mode_t rthin_dm_table_mode(struct dm_target *ti);
unsigned int rthin_bdev_max_discard_sectors(struct block_device *bdev);
sector_t rthin_bdev_nr_sectors(struct block_device *bdev);
u8 rthin_bdev_partno(struct block_device *bdev);
void rthin_init_work(struct work_struct *work, work_func_t func);
unsigned int rthin_no_space_timeout(void);
void rthin_init_delayed_work(struct delayed_work *work, work_func_t func);
struct workqueue_struct *rthin_alloc_io_workqueue(const char *name);
unsigned int rthin_memalloc_noio_save(void);
void rthin_memalloc_noio_restore(unsigned int flags);
int rthin_srcu_init(struct srcu_struct *ssp);
struct srcu_ctr __percpu *rthin_srcu_down_read(struct srcu_struct *ssp);
void rthin_srcu_up_read(struct srcu_struct *ssp, struct srcu_ctr __percpu *scp);
void rthin_cond_resched(void);

#endif
