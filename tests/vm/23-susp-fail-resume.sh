# SPDX-License-Identifier: GPL-2.0
# A pool in FAIL mode resumes after a reload with a table of another size.
# The metadata device (dm-flakey) fails reads and writes, a commit fails and
# so does its rollback: FAIL mode. Then the pool is reloaded with a bigger
# table (lvextend) and with a shorter one, and suspended and resumed each
# time, with a write to its thin issued while it is suspended. dm-thin's
# pool_preresume turns any error into success in FAIL mode so that the
# resume can flush the deferred bios (they fail); a resume that failed
# would leave the pool suspended and the write waiting. (dm-thin refuses
# the new table in FAIL mode, "Error registering metadata threshold", and
# resumes its old one; rthin takes it.) On the C dm-thin and rthin.
. /rthin/tests/lib.sh

modprobe dm-flakey || fail "modprobe dm-flakey"
DATA=/dev/ram1
SIZE=$(sectors $DATA)
MSIZE=$(sectors /dev/ram0)
META=/dev/mapper/fmeta

# suspended POOL: dmsetup info says the device is suspended.
suspended() { dmsetup info "$1" | grep -q '^State: *SUSPENDED'; }

fail_resume() {
	wipe /dev/ram0
	run dmsetup create fmeta --table "0 $MSIZE flakey /dev/ram0 0 1 0"
	openpool pool $META $DATA $((SIZE / 2))
	run dmsetup message pool 0 "create_thin 1"
	mkthin thin pool 1 131072
	run dd if=/dev/urandom of=/tmp/fr.a bs=64k count=4 2>/dev/null
	run dd if=/tmp/fr.a of=/dev/mapper/thin bs=64k oflag=direct 2>/dev/null
	run dmsetup status pool >/dev/null # commits
	swap_table fmeta "0 $MSIZE flakey /dev/ram0 0 0 1 2 error_reads error_writes"
	dd if=/tmp/fr.a of=/dev/mapper/thin bs=64k seek=10 count=1 oflag=direct 2>/dev/null
	dmsetup status pool >/dev/null
	s=$(dmsetup status pool)
	[ "$s" = "0 $((SIZE / 2)) $POOL_T Fail" ] || fail "not in FAIL mode: $s"
	echo "ok: FAIL mode: $s"
	for len in $SIZE $((SIZE / 4)); do
		if dmsetup reload pool --table "$(pool_table $META $DATA $len)" 2>/tmp/fr.l; then
			echo "the $len-sector table is loaded"
		else
			echo "the $len-sector table is refused: $(cat /tmp/fr.l)"
		fi
		run dmsetup suspend pool
		dd if=/tmp/fr.a of=/dev/mapper/thin bs=64k seek=20 count=1 oflag=direct 2>/tmp/fr.w &
		writer=$!
		if ! timeout 30 dmsetup resume pool >/tmp/fr.r 2>&1; then
			fail "resume after loading a $len-sector table in FAIL mode failed: $(cat /tmp/fr.r)"
		fi
		suspended pool && fail "the pool is still suspended after the resume ($len-sector table)"
		wait_for 30 exited $writer || fail "the write issued while suspended still waits 30 s after the resume"
		wait $writer && fail "a write succeeded in FAIL mode"
		echo "ok: resumed ($len-sector table); the write failed: $(tail -1 /tmp/fr.w)"
		s=$(dmsetup status pool)
		case $s in *" $POOL_T Fail") ;; *) fail "status after the resume: $s" ;; esac
	done
}

for_each_impl fail_resume
impl_verdict
