#!/bin/busybox sh
# SPDX-License-Identifier: GPL-2.0-or-later
#
# PID 1 of the dm-ramback test guest (dm/test-dm.sh builds the initramfs
# and checks the result).  Disks: /dev/vda is the backing device (the
# host's back.img), /dev/vdb the read-only pattern source, /dev/vdc a
# scratch disk whose regions of $SECTORS the scratch-disk phases use, one
# each, so that they do not depend on the main chain or on each other.
# The host's /ramback/test.conf gives the write lists and the sha256 of
# every region and device image the host's model expects.
#
# It reports over the serial console as every test guest does
# (/guest/console.sh, from qemu-guest/guest/); RAMBACK-TIME is a phase's
# duration.  A kernel oops or warning panics the kernel
# (oops=panic panic_on_warn=1) and QEMU exits with no RESULT line, which
# the host counts as a failure.
#
# Why one file of over 700 lines: it is one boot's whole test run, phases
# in order over the same device chain (each scratch-disk phase on a region
# of its own), checked against one model of the host's; the helpers it
# shares with the other guests are in /guest/console.sh.

. /guest/console.sh
guest_start
export DM_DISABLE_UDEV=1
fail_details () {
  dmsetup status 2>&1 | sed 's/^/  status: /'
  dmesg | tail -30 | sed 's/^/  dmesg: /'
  sync
}
phase_start=0
phase () {
  if [ -n "${phase_name:-}" ]; then
    echo "RAMBACK-TIME: $phase_name $(echo "$(now) $phase_start" | awk '{printf "%.1f", $1 - $2}')"
  fi
  phase_name=$1
  phase_start=$(now)
  mark "$1"
}

. /ramback/test.conf

load_modules brd.ko                   # brd: the benchmark's
insmod /ramback/dm-ramback.ko || fail "insmod dm-ramback.ko"
dmsetup targets | grep -q '^ramback ' || fail "no ramback target registered"

RB=/dev/mapper/rb
BACK=/dev/vda
PAT=/dev/vdb

# Status fields after "<start> <len> ramback" (see rbk-target.c).
F_ERROR=1 F_CHUNKS=2 F_LOADED=3 F_DIRTY=4 F_INFLIGHT=5 F_MODE=6
F_POPULATE=7 F_DEMAND=8 F_STORED=9 F_WT=10 F_STORED_BYTES=11
F_LOADED_BYTES=12 F_UNSYNCED=13 F_WB_BPS=14 F_POP_BPS=15 F_SYNCS=16
F_LIMIT=17 F_THROTTLED=18 F_ZEROED_BYTES=19
st () { dmsetup status "$1" | cut -d' ' -f$(( $2 + 3 )); }

# Wait up to $4 seconds for field $2 of device $1 to equal $3.
wait_st () {
  local i=0
  while [ "$(st "$1" "$2")" != "$3" ]; do
    i=$((i + 1))
    [ $i -le $(( $4 * 10 )) ] ||
      fail "$1: status field $2 is '$(st "$1" "$2")', not '$3' after $4 s"
    usleep 100000
  done
}

# All I/O to the devices under test is O_DIRECT, so the page cache can
# neither hide nor reshape it: 512-byte writes reach the target as
# 512-byte bios.  busybox dd silently drops O_DIRECT when a write fails
# with EINVAL, and its buffer is page-aligned (mmap) only when bs is at
# least a page, so bs is 4096 and offsets and counts are in bytes.
DIO="bs=4096 iflag=skip_bytes,count_bytes"

# Apply a write list "dst:count:src ..." (sectors) from the pattern disk.
apply () {
  local dev=$1 w
  for w in $2; do
    set -- $(echo "$w" | tr : ' ')
    dd if=$PAT of="$dev" $DIO oflag=seek_bytes,direct conv=notrunc \
       skip=$(($3 * 512)) seek=$(($1 * 512)) count=$(($2 * 512)) \
       status=none || return 1
  done
}

sha_of () {   # dev first count  (sectors; count 0: to the end)
  if [ "$3" = 0 ]; then
    dd if="$1" bs=65536 iflag=direct status=none
  else
    dd if="$1" $DIO,direct skip=$(($2 * 512)) count=$(($3 * 512)) status=none
  fi | sha256sum | cut -d' ' -f1
}

# Check regions "first:count:sha256 ..." of a device.
check () {
  local dev=$1 what=$3 r
  for r in $2; do
    set -- $(echo "$r" | tr : ' ')
    [ "$(sha_of "$dev" "$1" "$2")" = "$3" ] ||
      fail "$what: sectors $1+$2 of $dev differ from the model"
  done
}

check_full () {   # dev sha what
  [ "$(sha_of "$1" 0 0)" = "$2" ] || fail "$3: $1 differs from the model"
}

table () { echo "0 $SECTORS ramback $BACK $*"; }

# ---- helpers of the scratch-disk phases -----------------------------------
# Wait up to $1 seconds for a command to succeed (a state, never a time).
wait_until () {
  local t=$1 i=0
  shift
  until "$@"; do
    i=$((i + 1))
    [ $i -le $((t * 10)) ] || return 1
    usleep 100000
  done
}
# Kernel log lines matching $1; has the count grown past $2?
log_count () { dmesg | grep -c "$1"; }
log_grew () { [ "$(log_count "$1")" -gt "$2" ]; }
is_suspended () { dmsetup info "$1" 2>/dev/null | grep -q 'State: *SUSPENDED'; }
# Has process $1 (a child) exited?  A zombie counts: it is not reaped yet.
has_exited () {
  [ ! -e "/proc/$1/stat" ] || [ "$(cut -d' ' -f3 "/proc/$1/stat")" = Z ]
}
# A dm-linear table over scratch region $1.
scratch () { echo "0 $SECTORS linear /dev/vdc $(($1 * SECTORS))"; }
# Switch dm device $1 to the error target, or back to scratch region $2.
backing_dies () {
  dmsetup suspend "$1" && dmsetup reload "$1" --table "0 $SECTORS error" &&
    dmsetup resume "$1"
}
backing_returns () {
  dmsetup suspend "$1" && dmsetup reload "$1" --table "$(scratch "$2")" &&
    dmsetup resume "$1"
}
# Run "dmsetup $1 rb" while write back fails, wait until it is stuck in its
# drain, SIGKILL it and wait (bounded) for it to end.
STUCK_MSG='cannot be written back'
kill_stuck () {
  local n pid
  n=$(log_count "$STUCK_MSG")
  dmsetup "$1" rb &
  pid=$!
  wait_until 60 log_grew "$STUCK_MSG" "$n" ||
    fail "$1: no write back failure reported within 60 s"
  [ "$1" = remove ] || is_suspended rb || fail "$1: rb is not suspended while it drains"
  kill -9 $pid
  wait_until 60 has_exited $pid ||
    fail "dmsetup $1 still runs 60 s after SIGKILL (uninterruptible wait)"
  wait $pid 2>/dev/null
  echo "dmsetup $1 ended by SIGKILL; status: $(dmsetup status rb 2>&1)"
}

# ---- suspend waits for the populator's read in flight ---------------------
# Reads of scratch region 0 take 3 s (dm-delay), so populate's first run
# is still held there when suspend starts.  When suspend returns nothing
# may be in flight: dm-delay's status counts the reads it holds.
populate_suspend () {
  phase populate-suspend
  dmsetup create slowc --table "0 $SECTORS delay /dev/vdc 0 3000" ||
    fail "create slowc"
  dmsetup create rb --table "0 $SECTORS ramback /dev/mapper/slowc" ||
    fail "create rb (populate-suspend)"
  wait_until 60 eval '[ "$(dmsetup status slowc | cut -d" " -f4)" -gt 0 ]' ||
    fail "populate read nothing within 60 s"
  dmsetup suspend rb || fail "suspend while populating"
  held=$(dmsetup status slowc | cut -d' ' -f4)
  [ "$held" = 0 ] || fail "suspend returned with $held populate read(s) in flight"
  loaded=$(st rb $F_LOADED)
  dmsetup resume rb || fail "resume (populate-suspend)"
  echo "suspended with $loaded chunks loaded, no read in flight"
  dmsetup remove rb || fail "remove (populate-suspend)"
  dmsetup remove slowc || fail "remove slowc"
}

# ---- the backing device dies with dirty data in RAM -----------------------
# Suspend retries write back until the backing device works; SIGKILL ends
# the wait.  The device is left suspended, the data stays in RAM; resume
# makes it usable, and once the backing device is back a remove writes
# everything back.
# dies_with_dirty ID W1 W2 OP: writes W1 reach bk (flushed), bk dies,
# writes W2 stay in RAM only, and OP (suspend or remove) is killed while
# it waits for bk.  ID names the writes in the messages (S1, S2...).
dies_with_dirty () {
  apply $RB "$2" || fail "writes ${1}1"
  dmsetup message rb 0 flush || fail "flush before the backing device dies"
  backing_dies bk || fail "switch bk to the error target"
  apply $RB "$3" || fail "writes ${1}2 (RAM only)"
  kill_stuck "$4"
}

stuck_suspend () {
  phase stuck-suspend
  dmsetup create bk --table "$(scratch 1)" || fail "create bk (region 1)"
  dmsetup create rb --table "0 $SECTORS ramback /dev/mapper/bk" ||
    fail "create rb (stuck-suspend)"
  wait_st rb $F_POPULATE populated 300
  dies_with_dirty S "$WR_S1" "$WR_S2" suspend
  is_suspended rb || fail "rb is not suspended after the interrupted suspend"
  [ "$(st rb $F_ERROR)" = -5 ] || fail "error is '$(st rb $F_ERROR)', not -5 (EIO)"
  [ "$(st rb $F_DIRTY)" -gt 0 ] || fail "the interrupted suspend dropped the dirty data"
  dmsetup resume rb || fail "resume after the interrupted suspend"
  check $RB "$REG_S12" "RAM after the interrupted suspend"
  apply $RB "$WR_S3" || fail "writes S3 (after the interrupted suspend)"
  check $RB "$REG_S3" "writes after the interrupted suspend"
  backing_returns bk 1 || fail "restore bk"
  dmsetup remove rb || fail "remove after the backing device returned"
  check_full /dev/mapper/bk "$FULL_S" "backing device after the interrupted suspend"
  dmsetup remove bk || fail "remove bk"
}

# Remove cannot fail once it has begun (dm destroys the device whatever a
# target does), so an interrupted remove leaves the dirty data in RAM,
# held by the module, and writes it back when the backing device works.
ORPHAN_MSG='left in RAM by remove are written back'
stuck_remove () {
  phase stuck-remove
  dmsetup create bk --table "$(scratch 2)" || fail "create bk (region 2)"
  dmsetup create rb --table "0 $SECTORS ramback /dev/mapper/bk 8 1 nopopulate" ||
    fail "create rb (stuck-remove)"
  dies_with_dirty T "$WR_T1" "$WR_T2" remove
  dmsetup info rb >/dev/null 2>&1 && fail "rb still exists after its remove"
  if rmmod dm_ramback 2>/dev/null; then
    fail "dm_ramback unloaded while it holds data not written back"
  fi
  if dmsetup remove bk 2>/dev/null; then
    fail "bk was removed while data for it is still in RAM"
  fi
  if dmsetup create rb --table "0 $SECTORS ramback /dev/mapper/bk" 2>/dev/null; then
    fail "a new table took bk while data for it is still in RAM"
  fi
  n=$(log_count "$ORPHAN_MSG")
  backing_returns bk 2 || fail "restore bk"
  wait_until 60 log_grew "$ORPHAN_MSG" "$n" ||
    fail "the data left by the interrupted remove was not written back within 60 s"
  check_full /dev/mapper/bk "$FULL_T" "backing device after the interrupted remove"
  dmsetup remove bk || fail "remove bk"
}

# The backing device is lost: a table of the same length and chunk size
# on another device takes the RAM image over, and every loaded chunk is
# written there.  Region 3 dies; region 4 (other random data) takes over.
stuck_reload () {
  phase stuck-reload
  dmsetup create bk --table "$(scratch 3)" || fail "create bk (region 3)"
  dmsetup create bk2 --table "$(scratch 4)" || fail "create bk2 (region 4)"
  dmsetup create rb --table "0 $SECTORS ramback /dev/mapper/bk" ||
    fail "create rb (stuck-reload)"
  wait_st rb $F_POPULATE populated 300
  dies_with_dirty U "$WR_U1" "$WR_U2" suspend
  if dmsetup reload rb --table "0 $SECTORS ramback /dev/mapper/bk2 64" 2>/dev/null; then
    fail "a table with another chunk size was loaded over data it cannot take"
  fi
  if dmsetup reload rb --table "0 $((SECTORS - 64)) ramback /dev/mapper/bk2" 2>/dev/null; then
    fail "a shorter table was loaded over data it cannot take"
  fi
  dmsetup reload rb --table "0 $SECTORS ramback /dev/mapper/bk2" ||
    fail "reload onto another backing device"
  dmsetup resume rb || fail "resume onto another backing device"
  dmsetup message rb 0 flush || fail "flush to the new backing device"
  [ "$(st rb $F_ERROR)" = 0 ] || fail "the new table reports error $(st rb $F_ERROR)"
  check_full $RB "$FULL_U" "RAM after moving to another backing device"
  check_full /dev/mapper/bk2 "$FULL_U" "the new backing device"
  dmsetup remove rb || fail "remove (stuck-reload)"
  dmsetup remove bk || fail "remove bk"
  dmsetup remove bk2 || fail "remove bk2"
}
# ---- discards: lib's zero path ----------------------------------------------
# Region 0 (populate_suspend only read it), populate off: a discard whose
# first and last chunks are partial must load them before it zeroes part
# of them.  Z1 in writeback mode, Z2 in writethrough mode (on the backing
# device when it completes); around each, 8 KiB must be untouched, in RAM
# and, after a flush, on the backing device.  Sectors.
Z1=81 NZ1=2046 Z2=8193 NZ2=126
zsha () { head -c $(($1 * 512)) /dev/zero | sha256sum | cut -d' ' -f1; }
zero_discard () {
  local dev=/dev/mapper/bk0 around z1 z2 stored
  phase zero-discard
  dmsetup create bk0 --table "$(scratch 0)" || fail "create bk0 (region 0)"
  around="$((Z1 - 16)):16 $((Z1 + NZ1)):16 $((Z2 - 16)):16 $((Z2 + NZ2)):16"
  expect=
  for r in $around; do
    set -- $(echo "$r" | tr : ' ')
    expect="$expect $1:$2:$(sha_of $dev "$1" "$2")"
  done
  z1="$Z1:$NZ1:$(zsha $NZ1)" z2="$Z2:$NZ2:$(zsha $NZ2)"
  dmsetup create rb --table "0 $SECTORS ramback $dev 8 1 nopopulate" ||
    fail "create rb (zero-discard)"
  stored=$(st rb $F_ZEROED_BYTES)
  blkdiscard -o $((Z1 * 512)) -l $((NZ1 * 512)) $RB || fail "discard Z1"
  check $RB "$expect $z1" "after discard Z1"
  dmsetup message rb 0 writethrough || fail "writethrough message (zero-discard)"
  blkdiscard -o $((Z2 * 512)) -l $((NZ2 * 512)) $RB || fail "discard Z2"
  check $dev "$z2" "backing device right after the writethrough discard Z2"
  check $RB "$expect $z1 $z2" "after discard Z2"
  dmsetup message rb 0 flush || fail "flush (zero-discard)"
  [ "$(st rb $F_DIRTY)" = 0 ] || fail "dirty chunks after flush (zero-discard)"
  [ "$(st rb $F_ZEROED_BYTES)" -ge $((stored + NZ1 * 512)) ] ||
    fail "the discards were not written back: zeroed bytes $stored -> $(st rb $F_ZEROED_BYTES)"
  check $dev "$expect $z1 $z2" "backing device after the discards and flush"
  dmsetup remove rb || fail "remove (zero-discard)"
  dmsetup remove bk0 || fail "remove bk0"
}
# ---- the dirty limit: writers wait, never fail -----------------------------
# Region 0 again.  1 MiB in 4 KiB bios from one dd arrives far faster than
# write back capped at 1 MiB/s drains it, so with dirty_max 128 KiB
# writes must wait (counted), none may fail, and the data must arrive.
dirty_limit () {
  local dev=/dev/mapper/bk0 want
  phase dirty-limit
  dmsetup create bk0 --table "$(scratch 0)" || fail "create bk0 (dirty-limit)"
  dmsetup create rb --table "0 $SECTORS ramback $dev 8 4 dirty_max 131072 flush_rate 1048576" ||
    fail "create rb (dirty-limit)"
  wait_st rb $F_POPULATE populated 300
  [ "$(st rb $F_LIMIT)" = 131072 ] || fail "dirty limit is '$(st rb $F_LIMIT)', not 131072"
  want="20480:2048:$(sha_of $PAT 0 2048)"
  apply $RB "20480:2048:0" || fail "writes under the dirty limit failed"
  [ "$(st rb $F_THROTTLED)" -gt 0 ] || fail "1 MiB went past a 128 KiB dirty limit unthrottled"
  check $RB "$want" "after the throttled writes"
  dmsetup message rb 0 flush || fail "flush (dirty-limit)"
  check $dev "$want" "backing device after the throttled writes"
  dmsetup remove rb || fail "remove (dirty-limit)"
  dmsetup remove bk0 || fail "remove bk0 (dirty-limit)"
}
# ---- fio with verification ------------------------------------------------
# On region 0 of the fs disk behind dm-delay (reads 5 ms, writes 20 ms),
# populate capped so that it is still running when fio starts: four
# jobs of random and sequential writes, 512 B to 64 KiB (partial chunks
# too), each block with a crc32c header, verified by fio once written.
# Meanwhile the target goes writethrough, writeback, suspended, resumed,
# over and over.  Then it is removed (everything written back through
# dm-delay), created again on the same backing device, and fio verifies
# every block a second time (verify_only).
FSDEV=/dev/vdd TREE=/dev/vde
fs_region () { echo "0 $FS_SECTORS linear $FSDEV $(($1 * FS_SECTORS))"; }
toggler () {
  local n=0
  while [ ! -e /tmp/fio.done ]; do
    dmsetup message rbf 0 writethrough || fail "writethrough message (fio)"
    usleep 300000
    dmsetup message rbf 0 writeback || fail "writeback message (fio)"
    usleep 300000
    dmsetup suspend rbf || fail "suspend (fio)"
    dmsetup resume rbf || fail "resume (fio)"
    usleep 300000
    n=$((n + 1))
  done
  echo $n >/tmp/toggles
}
fio_verify () {
  local delayed="0 $FS_SECTORS delay $FSDEV 0 5 $FSDEV 0 20"
  phase fio-verify
  [ -x /bin/fio ] || fail "no fio in the guest (fio.cpio.gz not appended?)"
  dmsetup create fslow --table "$delayed" || fail "create fslow"
  dmsetup create rbf --table "0 $FS_SECTORS ramback /dev/mapper/fslow 8 2 populate_rate 4194304" ||
    fail "create rbf"
  rm -f /tmp/fio.done /tmp/toggles
  [ "$(st rbf $F_POPULATE)" = populating ] ||
    fail "populate is '$(st rbf $F_POPULATE)' as fio starts, not populating"
  toggler &
  tpid=$!
  fio /ramback/verify.fio --eta=never --output=/tmp/fio1.out || {
    grep -iE 'verify|crc|err=' /tmp/fio1.out | head -20
    fail "fio write+verify on dm-ramback failed"
  }
  : >/tmp/fio.done
  wait $tpid
  echo "fio: written and verified, $(cat /tmp/toggles) writethrough/writeback/suspend cycles, populate $(st rbf $F_POPULATE), dirty $(st rbf $F_DIRTY)"
  grep -E '^ +(WRITE|READ):' /tmp/fio1.out
  [ "$(st rbf $F_ERROR)" = 0 ] || fail "error $(st rbf $F_ERROR) after fio"
  dmsetup remove rbf || fail "remove rbf"
  dmsetup create rbf --table "0 $FS_SECTORS ramback /dev/mapper/fslow" ||
    fail "create rbf again"
  fio /ramback/verify.fio --verify_only --eta=never --output=/tmp/fio2.out || {
    grep -iE 'verify|crc|err=' /tmp/fio2.out | head -20
    fail "fio verify_only after remove and re-create failed"
  }
  echo "fio: verify_only after re-create: all blocks good"
  dmsetup remove rbf || fail "remove rbf (2)"
  dmsetup remove fslow || fail "remove fslow"
}

# ---- filesystems ---------------------------------------------------------------
# ext4 (region 1) or XFS (region 2) on dm-ramback: the host's tree untarred
# three times, checksums, one copy deleted and trimmed (fstrim: discards
# through lib's zero path), unmount and remove (written back), a new
# table on the same backing device, fsck clean, checksums equal.
tree_sums () {   # DIR: the tree's manifest against the files under DIR
  (cd "$1" && find . -type f -exec sha256sum {} +) | sort >/tmp/got
  sort /ramback/tree.sha256 >/tmp/want
  cmp -s /tmp/want /tmp/got || {
    diff /tmp/want /tmp/got | head -10
    fail "$fs: files under $1 differ from the tree ($(wc -l </tmp/got) of $(wc -l </tmp/want))"
  }
}
fs_fsck () {
  local rc=0
  case $fs in
    ext4) e2fsck -fn $RB >/tmp/fsck.log 2>&1 || rc=$? ;;
    xfs) xfs_repair -n $RB >/tmp/fsck.log 2>&1 || rc=$? ;;
  esac
  [ $rc = 0 ] || { tail -20 /tmp/fsck.log; fail "$fs: fsck exit $rc"; }
}
fs_phase () {   # FS REGION
  local d stored
  fs=$1
  phase "fs-$fs"
  dmsetup create fsb --table "$(fs_region "$2")" || fail "create fsb ($fs)"
  dmsetup create rb --table "0 $FS_SECTORS ramback /dev/mapper/fsb" ||
    fail "create rb ($fs)"
  case $fs in
    ext4) mkfs.ext4 -q -F -E nodiscard $RB || fail "mkfs.ext4" ;;
    # Below 300 MB mkfs.xfs wants to know it is a test (fstests' variables).
    xfs) TEST_DIR=/mnt TEST_DEV=$RB QA_CHECK_FS=1 mkfs.xfs -q -f -K $RB ||
           fail "mkfs.xfs" ;;
  esac
  mkdir -p /mnt/t
  mount -t "$fs" $RB /mnt/t || fail "mount $fs"
  for d in a b c; do
    mkdir /mnt/t/$d
    tar -xf $TREE -C /mnt/t/$d || fail "$fs: untar into $d"
  done
  sync
  for d in a b c; do tree_sums /mnt/t/$d; done
  rm -rf /mnt/t/a
  stored=$(st rb $F_STORED_BYTES)
  fstrim -v /mnt/t || fail "$fs: fstrim"
  umount /mnt/t || fail "umount $fs"
  dmsetup remove rb || fail "remove rb ($fs)"
  dmsetup create rb --table "0 $FS_SECTORS ramback /dev/mapper/fsb" ||
    fail "create rb again ($fs)"
  fs_fsck
  mount -t "$fs" -o ro $RB /mnt/t || fail "mount $fs after re-create"
  [ ! -e /mnt/t/a ] || fail "$fs: the deleted copy is back"
  for d in b c; do tree_sums /mnt/t/$d; done
  echo "$fs: $(wc -l </ramback/tree.sha256) files x2 equal after fstrim, remove, re-create; fsck clean"
  umount /mnt/t || fail "umount $fs (2)"
  dmsetup remove rb || fail "remove rb ($fs, 2)"
  dmsetup remove fsb || fail "remove fsb ($fs)"
}
fs_ext4 () { fs_phase ext4 1; }
fs_xfs () { fs_phase xfs 2; }

# ---- power cut: the host kills QEMU ----------------------------------------------
# Region 3 in writethrough mode: ext4, the tree, then files of pattern
# data written with fsync, one "fsynced-N" mark after each, until the
# host kills QEMU.  After the cut, the recover step (another boot) runs
# fsck on a new table over the same region and wants the tree and every
# file the host saw reported fsync'd.
powercut () {
  local i=0
  phase powercut
  dmsetup create pcb --table "$(fs_region 3)" || fail "create pcb"
  dmsetup create rb --table "0 $FS_SECTORS ramback /dev/mapper/pcb 8 1 writethrough" ||
    fail "create rb (powercut)"
  mkfs.ext4 -q -F -E nodiscard $RB || fail "mkfs.ext4 (powercut)"
  mkdir -p /mnt/t
  mount -t ext4 $RB /mnt/t || fail "mount (powercut)"
  mkdir /mnt/t/tree /mnt/t/f
  tar -xf $TREE -C /mnt/t/tree || fail "untar (powercut)"
  sync
  mark synced
  while :; do
    i=$((i + 1))
    dd if=$PAT of=/mnt/t/f/$i bs=4096 skip=$((i % 1000)) count=4 conv=fsync        status=none || fail "fsync'd write $i"
    mark "fsynced-$i"
  done
}
recover () {
  local rc=0 i=1 n=${RB_FSYNCED:-0}
  phase recover
  dmsetup create pcb --table "$(fs_region 3)" || fail "create pcb (recover)"
  dmsetup create rb --table "0 $FS_SECTORS ramback /dev/mapper/pcb" ||
    fail "create rb (recover)"
  e2fsck -y -E journal_only $RB >/tmp/replay.log 2>&1 || rc=$?
  [ $rc -le 1 ] || { cat /tmp/replay.log; fail "journal replay: e2fsck exit $rc"; }
  fs=ext4
  fs_fsck
  mkdir -p /mnt/t
  mount -t ext4 -o ro $RB /mnt/t || fail "mount after the power cut"
  tree_sums /mnt/t/tree
  while [ $i -le "$n" ]; do
    [ "$(sha256sum </mnt/t/f/$i | cut -d' ' -f1)" = "$(sha_of $PAT $(( (i % 1000) * 8 )) 32)" ] ||
      fail "fsync'd file $i of $n is damaged or missing after the power cut"
    i=$((i + 1))
  done
  echo "power cut: fsck clean, the tree and all $n fsync'd files intact ($(ls /mnt/t/f | wc -l) files present)"
  umount /mnt/t || fail "umount (recover)"
  dmsetup remove rb || fail "remove rb (recover)"
  dmsetup remove pcb || fail "remove pcb (recover)"
}

SCRATCH_PHASES="populate_suspend zero_discard dirty_limit stuck_suspend stuck_remove stuck_reload fio_verify fs_ext4 fs_xfs"

# ---- the module unloads cleanly, the verdict --------------------------------
finish () {
  phase unload
  rmmod dm_ramback || fail "rmmod dm_ramback"
  if dmesg | grep -E 'BUG|WARNING|Oops|Call Trace|general protection|hung_task'; then
    fail "kernel complained (see dmesg above)"
  fi
  phase done
  pass
}

# The power-cut boots run one step each (ramback.step=, ramback.fsynced=).
for w in $(cat /proc/cmdline); do
  case $w in
    ramback.step=*) RB_STEP=${w#*=} ;;
    ramback.fsynced=*) RB_FSYNCED=${w#*=} ;;
  esac
done
case ${RB_STEP:-main} in
  powercut) powercut ;;
  recover) recover; finish ;;
esac

# ---- bad tables are refused -------------------------------------------
phase reject
for t in "3" "12" "65536" "8 1 bogus" "8 3 writethrough nopopulate x" "8 junk" \
         "8 1 flush_rate" "8 2 flush_rate fast" "8 2 populate_rate -1" \
         "8 2 ups_window 86401" "8 2 dirty_max 1M"; do
  if dmsetup create bad --table "$(table $t)" 2>/dev/null; then
    fail "table '$t' was accepted"
  fi
done
if dmsetup create bad --table "0 $((SECTORS + 8)) ramback $BACK" 2>/dev/null; then
  fail "a target larger than its backing device was accepted"
fi
dmsetup info bad >/dev/null 2>&1 && fail "a refused table left a device behind"

if [ -n "$ONLY" ]; then
  for p in $ONLY; do
    [ "$p" != powercut ] || continue    # the host's: boots of its own
    case " $SCRATCH_PHASES " in
      *" $p "*) "$p" ;;
      *) fail "RAMBACK_DM_ONLY: '$p' is not one of: $SCRATCH_PHASES" ;;
    esac
  done
  finish
fi

# ---- A: demand loads and writes to unloaded chunks -----------------------
phase demand
dmsetup create rb --table "$(table 8 1 nopopulate)" || fail "create rb"
[ "$(st rb $F_LOADED)" = 0 ] || fail "chunks loaded at create with nopopulate"
[ "$(st rb $F_POPULATE)" = off ] || fail "populate state is not off"
[ "$(st rb $F_CHUNKS)" = $((SECTORS / 8)) ] || fail "wrong chunk count"
check $RB "$REG_ORIG" "demand read"
loaded=$(st rb $F_LOADED)
[ "$loaded" -gt 0 ] && [ "$loaded" -lt $((SECTORS / 8)) ] ||
  fail "demand reads loaded $loaded chunks"
[ "$(st rb $F_DEMAND)" = "$loaded" ] || fail "demand loaded count"
apply $RB "$WR_A" || fail "writes A"
check $RB "$REG_A" "after writes A"
[ "$(st rb $F_LOADED)" -lt $((SECTORS / 8)) ] || fail "everything got loaded"
dmsetup message rb 0 flush || fail "flush message after A"
[ "$(st rb $F_DIRTY)" = 0 ] || fail "dirty chunks after flush"
check_full $BACK "$FULL_A" "backing device after A and flush"

# ---- B: populate with reads and parallel writes under way ----------------
phase populate
dmsetup message rb 0 populate || fail "populate message"
check_full $RB "$FULL_A" "full read during populate"
echo "populate state after the full read: $(st rb $F_POPULATE), loaded $(st rb $F_LOADED)"
pids=
for l in "$WR_B1" "$WR_B2" "$WR_B3" "$WR_B4"; do
  apply $RB "$l" &
  pids="$pids $!"
done
for p in $pids; do wait $p || fail "a parallel writer failed"; done
wait_st rb $F_POPULATE populated 300
[ "$(st rb $F_LOADED)" = $((SECTORS / 8)) ] || fail "populated but not all loaded"
check $RB "$REG_B" "after writes B"
check_full $RB "$FULL_B" "full read after populate"

# ---- C: writethrough ---------------------------------------------------
# C0 leaves 1 MiB dirty; C1 and C2 then write through into the same
# chunks, in parallel with each other and with its write back (disjoint
# sectors, so the model does not depend on their order).
phase writethrough
apply $RB "$WR_C0" || fail "writes C0"
dmsetup message rb 0 writethrough || fail "writethrough message"
[ "$(st rb $F_MODE)" = writethrough ] || fail "mode is not writethrough"
dmsetup table rb | grep -q ' 1 writethrough$' || fail "table does not show writethrough: $(dmsetup table rb)"
wt0=$(st rb $F_WT)
apply $RB "$WR_C1" & p1=$!
apply $RB "$WR_C2" & p2=$!
wait $p1 || fail "writes C1"
wait $p2 || fail "writes C2"
apply $RB "$WR_C" || fail "writes C"
[ "$(st rb $F_WT)" -ge $((wt0 + NWR_C)) ] || fail "writes C were not written through"
# Written through: on the backing device now, whatever is still dirty.
check $BACK "$REGX_C" "backing device right after writethrough writes"
check $RB "$REG_C" "after writes C"
dmsetup message rb 0 flush || fail "flush message after C"
[ "$(st rb $F_DIRTY)" = 0 ] || fail "dirty chunks after flush in writethrough"
[ "$(st rb $F_UNSYNCED)" = 0 ] || fail "unsynced bytes after flush: $(st rb $F_UNSYNCED)"
[ "$(st rb $F_SYNCS)" -gt 0 ] || fail "no good flush of the backing device counted"
[ "$(st rb $F_STORED_BYTES)" -ge $(( $(st rb $F_STORED) * 4096 )) ] ||
  fail "stored bytes $(st rb $F_STORED_BYTES) below stored chunks $(st rb $F_STORED)"
check_full $BACK "$FULL_C" "backing device after C and flush"
dmsetup message rb 0 writeback || fail "writeback message"
[ "$(st rb $F_MODE)" = writeback ] || fail "mode is not writeback"
apply $RB "$WR_D" || fail "writes D"
check $RB "$REG_D" "after writes D"

# ---- suspend drains -------------------------------------------------------
phase suspend
dmsetup suspend rb || fail "suspend"
[ "$(st rb $F_DIRTY)" = 0 ] || fail "dirty chunks while suspended"
[ "$(st rb $F_INFLIGHT)" = 0 ] || fail "write back in flight while suspended"
check_full $BACK "$FULL_D" "backing device while suspended"
dmsetup resume rb || fail "resume"

# ---- E: table reload with dirty data, to 32 KiB chunks, rate caps ---------
# (capped well above what the guest moves: the caps must hold their
# settings across the reload and the remove's drain must still end).
phase reload
apply $RB "$WR_E" || fail "writes E"
dmsetup reload rb --table "$(table 64 4 flush_rate 8388608 populate_rate 67108864)" || fail "reload"
dmsetup resume rb || fail "resume after reload"
[ "$(st rb $F_CHUNKS)" = $((SECTORS / 64)) ] || fail "reloaded table has the wrong chunk count"
dmsetup table rb | grep -q ' 64 4 flush_rate 8388608 populate_rate 67108864$' ||
  fail "table does not show the rate caps: $(dmsetup table rb)"
check $RB "$REG_E" "after reload"
check_full $RB "$FULL_E" "full read after reload"

# ---- F: remove with dirty data --------------------------------------------
phase remove
apply $RB "$WR_F" || fail "writes F"
dmsetup remove rb || fail "remove"
check_full $BACK "$FULL_F" "backing device after remove"

# ---- G: remove while populating, then repopulate ---------------------------
phase remove-populating
dmsetup create rb --table "$(table)" || fail "create rb (G)"
apply $RB "$WR_G" || fail "writes G"
echo "remove while $(st rb $F_POPULATE), loaded $(st rb $F_LOADED) of $(st rb $F_CHUNKS)"
dmsetup remove rb || fail "remove while populating"
check_full $BACK "$FULL_G" "backing device after remove while populating"
dmsetup create rb --table "$(table 16)" || fail "create rb again"
check_full $RB "$FULL_G" "repopulated device"
check $RB "$REG_G" "repopulated regions"
dmsetup remove rb || fail "remove (G)"

# ---- H: the backing device fails, then recovers ----------------------------
phase backing-errors
dmsetup create back --table "0 $SECTORS linear $BACK 0" || fail "create linear"
dmsetup create rb --table "0 $SECTORS ramback /dev/mapper/back" || fail "create rb (H)"
wait_st rb $F_POPULATE populated 300
apply $RB "$WR_H1" || fail "writes H1"
dmsetup message rb 0 flush || fail "flush before the failure"
dmsetup suspend back && dmsetup reload back --table "0 $SECTORS error" &&
  dmsetup resume back || fail "switch the backing device to error"
apply $RB "$WR_H2" || fail "writes H2 (writeback: RAM only)"
if dmsetup message rb 0 flush 2>/dev/null; then
  fail "flush succeeded on a failing backing device"
fi
[ "$(st rb $F_ERROR)" = -5 ] || fail "error is '$(st rb $F_ERROR)', not -5 (EIO)"
[ "$(st rb $F_DIRTY)" -gt 0 ] || fail "failed write back lost the dirty state"
dmsetup message rb 0 writethrough || fail "writethrough message (H)"
if apply $RB "$WR_H3" 2>/dev/null; then
  fail "writethrough write succeeded on a failing backing device"
fi
check $RB "$REG_H" "RAM keeps failed writes"
dmsetup suspend back && dmsetup reload back --table "0 $SECTORS linear $BACK 0" &&
  dmsetup resume back || fail "restore the backing device"
dmsetup message rb 0 flush || fail "flush after the backing device recovered"
[ "$(st rb $F_DIRTY)" = 0 ] || fail "dirty chunks after recovery"
check_full /dev/mapper/back "$FULL_H" "backing device after recovery"
dmsetup remove rb || fail "remove (H)"
dmsetup remove back || fail "remove linear"

# ---- R: races, with write back held in flight by a slow backing device -----
# Writes to the backing device take a second, reads 200 ms (dm-delay).
#  - R2 lands on chunks whose write back (of R1) is in flight: the flusher
#    moved them to CLEAN before capturing, so R2 re-dirties them and is
#    stored too (capture-then-clean would lose R2);
#  - populate runs over chunks that are dirty and not yet stored: it must
#    load only EMPTY chunks, or it would put stale data over R1 and R2;
#  - R2B writes into chunks still EMPTY just as populate starts (reads
#    take 200 ms, so its runs are in flight): a run must not land on a
#    write that got there first (the populate race);
#  - R3 writes through into chunks whose write back (of R3A) is in
#    flight: it waits behind it and is on the backing device when done;
#  - R4 is still dirty, and populate far from done, when the device is
#    removed: remove writes it back first.
phase races
dmsetup create slow --table "0 $SECTORS delay $BACK 0 200 $BACK 0 1000" ||
  fail "create delay"
dmsetup create rb --table "0 $SECTORS ramback /dev/mapper/slow 8 1 nopopulate" ||
  fail "create rb (R)"
apply $RB "$WR_R1" || fail "writes R1"
usleep 300000
echo "in flight before R2: $(st rb $F_INFLIGHT) chunks"
apply $RB "$WR_R2" || fail "writes R2"
dmsetup message rb 0 populate || fail "populate message (R)"
apply $RB "$WR_R2B" || fail "writes R2B"
echo "populate after R2B: $(st rb $F_POPULATE), loaded $(st rb $F_LOADED)"
wait_st rb $F_POPULATE populated 300
check_full $RB "$FULL_R2" "RAM after populating over dirty chunks"
apply $RB "$WR_R3A" || fail "writes R3A"
usleep 300000
echo "in flight before R3: $(st rb $F_INFLIGHT) chunks"
dmsetup message rb 0 writethrough || fail "writethrough message (R)"
apply $RB "$WR_R3" || fail "writes R3"
check $BACK "$REGX_R3" "written through behind write back"
dmsetup message rb 0 flush || fail "flush (R)"
check_full $BACK "$FULL_R3" "backing device after the races"
dmsetup remove rb || fail "remove (R)"
# Remove with dirty data while populate (200 ms a run) is under way.
dmsetup create rb --table "0 $SECTORS ramback /dev/mapper/slow" ||
  fail "create rb (R4)"
apply $RB "$WR_R4" || fail "writes R4"
echo "remove while $(st rb $F_POPULATE), loaded $(st rb $F_LOADED) of $(st rb $F_CHUNKS), dirty $(st rb $F_DIRTY)"
dmsetup remove rb || fail "remove while populating (R4)"
check_full $BACK "$FULL_R4" "backing device after remove while populating"
dmsetup remove slow || fail "remove delay"

for p in $SCRATCH_PHASES; do "$p"; done
finish
