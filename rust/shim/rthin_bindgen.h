/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Input of the module-local bindgen run (see Kbuild), never compiled by C.
 * Declarations that kernel::bindings lacks: device-mapper, dm-bufio, dm-io,
 * dm-kcopyd, the shim's prototypes, and constants whose macros bindgen
 * cannot evaluate (the RTHIN_* const trick mirrors rust/bindings).
 */
#include <linux/device-mapper.h>
#include <linux/dm-bufio.h>
#include <linux/dm-io.h>
#include <linux/dm-kcopyd.h>
#include "rthin_shim.h"

const blk_status_t RTHIN_BLK_STS_IOERR = BLK_STS_IOERR;
const blk_status_t RTHIN_BLK_STS_NOSPC = BLK_STS_NOSPC;
const blk_status_t RTHIN_BLK_STS_DM_REQUEUE = BLK_STS_DM_REQUEUE;
const blk_opf_t RTHIN_REQ_PREFLUSH = REQ_PREFLUSH;
const blk_opf_t RTHIN_REQ_FUA = REQ_FUA;
const blk_opf_t RTHIN_REQ_OP_MASK = REQ_OP_MASK;
const gfp_t RTHIN_GFP_NOIO = GFP_NOIO;
const int RTHIN_WORK_CPU_UNBOUND = WORK_CPU_UNBOUND;
const blk_mode_t RTHIN_BLK_OPEN_READ = BLK_OPEN_READ;
