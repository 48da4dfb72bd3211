# SPDX-License-Identifier: GPL-2.0
# A pool has two reclaim workqueues, one for its deferred lane and one for
# its completion lane: deferred work waits (a commit settling) for
# completion work, and under memory pressure a workqueue's single rescuer
# could run the waiting item while the completion it waits for never runs
# (the kernel's workqueue documentation asks for separate WQ_MEM_RECLAIM
# queues for work items that depend on each other). Each such queue has a
# rescuer thread (`kworker/R-<queue name>`): a new pool adds two.
. /rthin/tests/lib.sh

use_impl rthin
rescuers() { cat /proc/[0-9]*/comm 2>/dev/null | grep -c '^kworker/R-rthin'; }

before=$(rescuers)
wipe /dev/ram0
openpool wq-pool /dev/ram0 /dev/ram1 "$(sectors /dev/ram1)"
after=$(rescuers)
echo "rescuers of rthin workqueues: $before before the pool, $after with it"
[ $((after - before)) = 2 ] ||
	fail "the pool added $((after - before)) reclaim workqueues, want 2 (deferred and completion lanes)"
run dmsetup remove wq-pool
echo "ok: separate reclaim workqueues for the deferred and completion lanes"
