# SPDX-License-Identifier: GPL-2.0
# The cost of reading many thin devices (Documentation/rthinctl.md, "Cost
# with many devices"): one LVM thin pool with MANY_N thin LVs (LVM-owned, so
# that lvs reports them), on the C dm-thin and then on rthin (dm_thin_names=1,
# the same metadata reopened), in one boot. For each of `rthinctl ls`,
# `rthinctl status`, `lvs`, a loop of `dmsetup status DEV` over every device
# (after one `dmsetup ls`) and one `dmsetup status` of all of them: the
# device-mapper ioctls it makes, counted by the LD_PRELOAD shim
# tests/vm/ioctl-count.c in a run of its own, and its time, best of MANY_RUNS
# runs with the five commands interleaved (and the first run's). Prints the
# tables as markdown between "## table" and "## end".
# The thin LVs are not made by N lvcreate calls (far too slow under TCG): the
# pool and one thin are, the other thin ids are created in the pool by
# create_thin messages, their LV sections are generated into the VG's
# metadata backup, which vgcfgrestore writes back, and one vgchange -ay
# activates them all.
# Checks: lvs, rthinctl ls and rthinctl status show every thin; the shim saw
# every process of the dmsetup loop; rthinctl ls and status make at most one
# list, one table ioctl per device, one status ioctl per pool and thin, and
# one more; with 3 or more timed runs, both take less time than lvs.
# In make check: 30 thins, one timed run (no time check: under emulation a
# single run of commands this short is noise). The documentation's table
# (1000 thins, best of 5, about 30 minutes): tools/rthinctl/many-devices.sh.
. /rthin/tests/lib.sh

N=${MANY_N:-30}
RUNS=${MANY_RUNS:-1}
SHIM=/rthin/ioctl-count.so
[ -f $SHIM ] || fail "no $SHIM in the VM image"
command -v lvm >/dev/null || fail "lvm2 is not in the VM image"
export LVM_SUPPRESS_FD_WARNINGS=1
PV=/dev/ram2
CONF='devices { obtain_device_list_from_udev=0 use_devicesfile=0 global_filter=["a|^/dev/ram2$|","r|.*|"] }
activation { udev_sync=0 udev_rules=0 monitoring=0 }
global { locking_dir="/run/lock/lvm" }'
CMDS="rthinctl_ls rthinctl_status lvs dmsetup_loop dmsetup_status"
RES=/tmp/many.res
: >$RES

now() { cut -d' ' -f1 /proc/uptime; }
since() { awk "BEGIN { printf \"%.2f\", $(now) - $1 }"; }
l() {
	local t0
	t0=$(now)
	lvm "$@" --config "$CONF" >/tmp/lvm.out 2>&1 || { cat /tmp/lvm.out; fail "lvm $* failed"; }
	echo "+ lvm $*: $(since "$t0")s"
}

# The measured commands (output thrown away by the callers).
c_rthinctl_ls() { rthinctl ls; }
c_rthinctl_status() { rthinctl status; }
c_lvs() { lvs --config "$CONF"; }
c_dmsetup_loop() {
	for d in $(dmsetup ls | cut -f1); do
		dmsetup status "$d" || return 1
	done
}
c_dmsetup_status() { dmsetup status; }

# count CMD: "DM_IOCTLS OTHER_IOCTLS PROCESSES BREAKDOWN" of c_CMD, from the
# lines the shim appends (one per process that made a DM ioctl; the
# pipeline's cut makes none).
count() {
	rm -f /tmp/ic
	(export LD_PRELOAD=$SHIM IOCTL_COUNT_FILE=/tmp/ic && "c_$1" >/dev/null 2>/tmp/count.err) ||
		fail "$1 failed under the ioctl counter: $(head -3 /tmp/count.err)"
	[ -s /tmp/ic ] || fail "$1: the ioctl counter wrote nothing"
	awk '{
		split($1, a, "="); split($2, b, "=")
		if (a[2] == 0) next
		dm += a[2]; other += b[2]; procs++
		for (i = 3; i <= NF; i++) { split($i, c, ":"); n[c[1]] += c[2] }
	}
	END {
		split("VERSION REMOVE_ALL LIST_DEVICES DEV_CREATE DEV_REMOVE DEV_RENAME DEV_SUSPEND DEV_STATUS DEV_WAIT TABLE_LOAD TABLE_CLEAR TABLE_DEPS TABLE_STATUS LIST_VERSIONS TARGET_MSG DEV_SET_GEOMETRY DEV_ARM_POLL GET_TARGET_VERSION", name, " ")
		s = ""
		for (k = 0; k < 32; k++) if (n[k]) s = s (s == "" ? "" : ", ") ((k + 1) in name ? name[k + 1] : k) " " n[k]
		printf "%d %d %d %s\n", dm, other, procs, s
	}' /tmp/ic
}

# elapsed CMD: the seconds c_CMD took (10 ms resolution).
elapsed() {
	local t0
	t0=$(now)
	"c_$1" >/dev/null 2>/tmp/elapsed.err || { echo "$1 failed: $(head -3 /tmp/elapsed.err)" >&2; return 1; }
	since "$t0"
}

# best IMPL CMD: the shortest time of CMD on IMPL so far.
best() {
	awk -v i="$1" -v c="$2" '$1 == i && $2 == c && $3 == "time" && (b == "" || $4 < b) { b = $4 } END { print b }' $RES
}

# make_vg: the VG with its pool and N thin LVs, active.
make_vg() {
	wipe $PV
	l pvcreate -y --metadatasize 16m $PV
	l vgcreate -y vg $PV
	l lvcreate -y --type thin-pool -L 64M --poolmetadatasize 8M -n pool vg
	l lvcreate -y -V 4M --thin -n t1 vg/pool
	l vgcfgbackup -f /tmp/vg.cfg vg
	[ "$(dmsetup status vg-pool-tpool | cut -d' ' -f4)" = 1 ] ||
		fail "the pool's transaction id is not 1: $(dmsetup status vg-pool-tpool)"
	local t0 i=2
	t0=$(now)
	while [ $i -le "$N" ]; do
		dmsetup message vg-pool-tpool 0 "create_thin $i" || fail "create_thin $i"
		i=$((i + 1))
	done
	echo "+ $((N - 1)) create_thin messages: $(since "$t0")s"
	l vgchange -an vg
	# Copies of t1's LV section for t2..tN: the name, the device id, and
	# the LV id with its last six characters replaced by the number.
	awk -v n="$N" '
	function copy(k,   j, s) {
		for (j = 1; j <= cnt; j++) {
			s = sec[j]
			if (j == 1) sub(/t1 \{/, "t" k " {", s)
			else if (s ~ /^[\t ]*id = "/) s = substr(s, 1, length(s) - 7) sprintf("%06d\"", k)
			else if (s ~ /^[\t ]*device_id = 1$/) sub(/= 1$/, "= " k, s)
			print s
		}
	}
	{ print }
	!insec && /^[\t ]*t1 \{$/ { insec = 1; depth = 0; cnt = 0 }
	insec {
		sec[++cnt] = $0
		depth += gsub(/\{/, "{") - gsub(/\}/, "}")
		if (depth == 0) { insec = 0; done = 1; for (k = 2; k <= n; k++) copy(k) }
	}
	END { if (!done) exit 1 }' /tmp/vg.cfg >/tmp/vg-many.cfg || fail "no t1 section in the VG backup"
	[ "$(grep -c 'device_id = ' /tmp/vg-many.cfg)" = "$N" ] || fail "the generated metadata has $(grep -c 'device_id = ' /tmp/vg-many.cfg) thins, want $N"
	l vgcfgrestore -y --force -f /tmp/vg-many.cfg vg
}

# measure IMPL: counts, checks and times on the active VG; results to $RES.
measure() {
	local impl=$1 d n cmd r t v
	d=$(dmsetup ls | wc -l)
	n=$(lvs --config "$CONF" --noheadings -o lv_name -S 'segtype=thin' vg | wc -l)
	[ "$n" = "$N" ] || fail "[$impl] lvs shows $n thin LVs, want $N"
	n=$(rthinctl --raw ls -S type=thin | wc -l)
	[ "$n" = "$N" ] || fail "[$impl] rthinctl ls shows $n thins, want $N"
	rthinctl --raw status >/tmp/status.out || fail "[$impl] rthinctl status failed"
	head -3 /tmp/status.out
	n=$(grep -cE '^(vg[/-])?t[0-9]+:' /tmp/status.out)
	[ "$n" = "$N" ] || fail "[$impl] rthinctl status shows $n thins, want $N"
	echo "[$impl] $d devices, $N thins; pool: $(dmsetup table vg-pool-tpool | cut -d' ' -f3)"
	for cmd in $CMDS; do
		v=$(count "$cmd")
		set -- $v
		[ $# -ge 4 ] || fail "[$impl] no ioctl count for $cmd"
		echo "[$impl] $cmd: $1 DM ioctls ($2 other) in $3 processes: $(echo "$v" | cut -d' ' -f4-)"
		echo "$impl $cmd ioctls $1 $2 $3" >>$RES
		echo "$impl $cmd breakdown $(echo "$v" | cut -d' ' -f4-)" >>$RES
	done
	ioctls() { awk -v i="$impl" -v c="$1" -v f="$2" '$1 == i && $2 == c && $3 == "ioctls" { print $f }' $RES; }
	for cmd in rthinctl_ls rthinctl_status; do
		v=$(ioctls $cmd 4)
		[ "$v" -le $((1 + d + N + 1 + 1)) ] ||
			fail "[$impl] $cmd made $v DM ioctls for $d devices ($N thins, 1 pool), more than 1 + $d + $((N + 1)) + 1"
	done
	[ "$(ioctls dmsetup_loop 6)" = $((d + 1)) ] ||
		fail "[$impl] the ioctl counter saw $(ioctls dmsetup_loop 6) processes of the dmsetup loop, want $((d + 1))"
	r=1
	while [ $r -le "$RUNS" ]; do
		for cmd in $CMDS; do
			t=$(elapsed "$cmd") || fail "[$impl] $cmd failed"
			echo "$impl $cmd time $t" >>$RES
		done
		r=$((r + 1))
	done
	echo "[$impl] times: $(awk -v i="$impl" '$1 == i && $3 == "time" { printf "%s %s, ", $2, $4 }' $RES)"
	if [ "$RUNS" -ge 3 ]; then
		for cmd in rthinctl_ls rthinctl_status; do
			awk "BEGIN { exit !($(best "$impl" $cmd) < $(best "$impl" lvs)) }" ||
				fail "[$impl] $cmd ($(best "$impl" $cmd)s) is not faster than lvs ($(best "$impl" lvs)s)"
		done
	fi
	echo "$impl devices $d" >>$RES
}

# The C dm-thin.
modprobe dm-thin-pool || fail "modprobe dm-thin-pool"
t0=$(now)
make_vg
l vgchange -ay vg
echo "+ setup of $N thin LVs on the C dm-thin: $(since "$t0")s"
measure c
l vgchange -an vg

# rthin as thin-pool/thin, on the same metadata.
dmsetup remove_all --force
run rmmod dm_thin_pool
run rmmod dm_rthin
run insmod /rthin/dm-rthin.ko dm_thin_names=1
l vgchange -ay vg
measure rthin
l vgchange -an vg

echo "## table"
awk -v n="$N" -v runs="$RUNS" '
	$3 == "ioctls" { io[$1, $2] = $4; procs[$2] = $6 }
	$3 == "time" { if (!(($1, $2) in best) || $4 < best[$1, $2]) best[$1, $2] = $4; if (!(($1, $2) in first)) first[$1, $2] = $4 }
	$2 == "devices" { dev[$1] = $3 }
	$3 == "breakdown" { s = $4; for (i = 5; i <= NF; i++) s = s " " $i; bd[$1, $2] = s }
	END {
		split("rthinctl_ls rthinctl_status lvs dmsetup_loop dmsetup_status", cmds, " ")
		label["rthinctl_ls"] = "`rthinctl ls`"; label["rthinctl_status"] = "`rthinctl status`"
		label["lvs"] = "`lvs`"; label["dmsetup_loop"] = "`dmsetup ls`, then `dmsetup status DEV` per device"
		label["dmsetup_status"] = "`dmsetup status` (one call)"
		printf "%d thin LVs, %d dm devices (C dm-thin), %d (rthin); time: best of %d (first run)\n\n", n, dev["c"], dev["rthin"], runs
		print "| command | processes | DM ioctls, C dm-thin | per device | time (s), C dm-thin | DM ioctls, rthin | per device | time (s), rthin |"
		print "|---|---|---|---|---|---|---|---|"
		for (k = 1; k <= 5; k++) {
			c = cmds[k]
			printf "| %s | %d | %d | %.2f | %.2f (%.2f) | %d | %.2f | %.2f (%.2f) |\n", label[c], procs[c],
				io["c", c], io["c", c] / dev["c"], best["c", c], first["c", c],
				io["rthin", c], io["rthin", c] / dev["rthin"], best["rthin", c], first["rthin", c]
		}
		print ""
		print "| command | DM ioctls by type, C dm-thin | DM ioctls by type, rthin |"
		print "|---|---|---|"
		for (k = 1; k <= 5; k++) { c = cmds[k]; printf "| %s | %s | %s |\n", label[c], bd["c", c], bd["rthin", c] }
	}' $RES
echo "## end"

# The normal module again.
dmsetup remove_all --force
wipe $PV
run rmmod dm_rthin
run insmod /rthin/dm-rthin.ko
dmsetup targets | grep -q '^rthin-pool ' || fail "rthin-pool not registered after the restore"
