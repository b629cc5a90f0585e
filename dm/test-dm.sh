#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Test the dm-ramback target inside a QEMU guest (TCG; nothing is ever
# loaded into the host's kernel).  Builds the module (dm/build.sh) and
# the guest (dm/guest-build.sh), makes a backing image full of random
# data and a pattern image, and keeps a model: every write the guest
# makes is also applied to a copy of the backing image here, so each
# check in the guest (dm/guest-init.sh) compares against a sha256 the
# host computed.  After QEMU exits, the backing image itself must equal
# the final model.
#
# Phases (guest-init.sh): refused tables; demand loads and writes to
# unloaded chunks (nopopulate); populate under a full read and parallel
# writers; writethrough (data on the backing device at completion) and
# back; suspend drains; table reload with dirty data to another chunk
# size; remove with dirty data; remove while populating, repopulate; the
# backing device failing (dm error target) and recovering; races against
# a slow backing device (dm-delay): writes landing while their chunks are
# being written back, populate over dirty chunks, writethrough behind
# write back; then, on a scratch disk of their own, suspend while populate
# reads, discards with partial chunks (writeback and writethrough), and
# the backing device dying with dirty data in RAM (interrupted
# suspend, interrupted remove, moving the data onto another device);
# on a fourth disk, fio with crc32c verification behind dm-delay while
# the mode toggles and the target suspends, verified again after remove
# and re-create; ext4 and XFS (untar, checksums, fstrim, remove,
# re-create, fsck); rmmod.  Then the power cut: a second boot writes and
# fsyncs files on ext4 in writethrough mode until this script kills
# QEMU, and a third boot checks fsck and every file reported fsync'd.
#
# Exit: 0 pass, 1 fail, 77 skip (no qemu or no kernel headers).
# Environment: RAMBACK_DM_PASSES=N runs it all N times in a row, on new
#   random images each time (default 1),
#   RAMBACK_DM_PCUT_FILES (fsync'd files before the power cut, 20),
#   RAMBACK_DM_TIMEOUT (seconds for each boot, default 900),
#   RAMBACK_DM_KEEP=1 keeps the scratch directory, RAMBACK_DM_SMP (2),
#   RAMBACK_DM_MODULE=path/dm-ramback.ko tests that module instead of
#   building one, RAMBACK_DM_ONLY="populate_suspend stuck_suspend ..."
#   runs only those scratch-disk phases (guest-init.sh; "powercut" names
#   the power-cut boots), not the main chain, and then checks that
#   back.img is unchanged.

set -euo pipefail
export PATH=/usr/bin:/bin:/usr/sbin:/sbin:$PATH LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${RAMBACK_DM_CACHE:-/var/cache/ramback-guest/dm}
QEMU=${QEMU:-qemu-system-x86_64}
TIMEOUT=${RAMBACK_DM_TIMEOUT:-900}
SMP=${RAMBACK_DM_SMP:-2}
SECTORS=65536                   # 32 MiB device
PATTERN_SECTORS=8192            # 4 MiB of write data
SCRATCH_REGIONS=5               # scratch disk: a region of SECTORS per use
FS_SECTORS=131072               # fs disk: regions of 64 MiB (fio, ext4, xfs, power cut)
FS_REGIONS=4
PCUT_FILES=${RAMBACK_DM_PCUT_FILES:-20}
PASSES=${RAMBACK_DM_PASSES:-1}
ONLY=${RAMBACK_DM_ONLY:-}

skip () { echo "SKIP: $*" >&2; exit 77; }
die () { echo "FAIL: $*" >&2; exit 1; }
say () { echo "[$(date +%T)] $*"; }

command -v "$QEMU" >/dev/null || skip "$QEMU is not installed (package qemu-system-x86)"
for c in cpio gzip sha256sum dd timeout apt-cache; do
  command -v "$c" >/dev/null || skip "'$c' is not installed"
done

T=$(mktemp -d "${TMPDIR:-/var/tmp}/ramback-dm.XXXXXX")
qemu_pid=
# QEMU runs under timeout(1): kill QEMU itself (its pidfile), not just
# timeout, which would leave it running.
kill_qemu () {
  [ ! -s "${qpidfile:-}" ] || kill -9 "$(cat "$qpidfile")" 2>/dev/null
  kill -9 "$qemu_pid" 2>/dev/null
  wait "$qemu_pid" 2>/dev/null
  qemu_pid=
}
cleanup () {
  local rc=$?
  set +e
  if [ -n "$qemu_pid" ]; then
    kill_qemu
  fi
  if [ $rc -ne 0 ] && [ -f "${serial:-}" ]; then
    echo "--- last lines of $serial ---" >&2
    tail -40 "$serial" | tr -d '\r' >&2
  fi
  if [ "${RAMBACK_DM_KEEP:-0}" = 1 ]; then echo "kept $T" >&2; else rm -rf "$T"; fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$SECONDS
say "guest: $CACHE"
"$here/guest-build.sh" || die "building the guest failed"
# shellcheck disable=SC1091
. "$CACHE/guest.env"
[ -f "/usr/src/linux-headers-$GUEST_KERNEL_VERSION/Makefile" ] ||
  skip "linux-headers-$GUEST_KERNEL_VERSION is not installed"
if [ -n "${RAMBACK_DM_MODULE:-}" ]; then
  ko=$RAMBACK_DM_MODULE          # a module built elsewhere (dm/build.sh)
  say "module: $ko"
else
  say "module: building against $GUEST_KERNEL_VERSION"
  ko=$(RAMBACK_DM_BUILD="$T/build" "$here/build.sh" -o "$T" "$GUEST_KERNEL_VERSION") ||
    die "building dm-ramback.ko failed"
fi
t_build=$((SECONDS - t0))

# ---- what does not change between passes -----------------------------------
# The tree the filesystem phases untar: this source tree's directories,
# as a plain tar on a read-only disk, with its manifest.
(cd "$here/.." && tar --format=gnu --owner=0 --group=0 --numeric-owner \
   --sort=name -cf "$T/tree.tar" lib dm docs plugin cli filter tests bench qemu-guest)
mkdir "$T/tree"
tar -xf "$T/tree.tar" -C "$T/tree"
(cd "$T/tree" && find . -type f | LC_ALL=C sort | xargs -d '\n' sha256sum) >"$T/tree.sha256"
rm -rf "$T/tree"
# fio's jobs (fio_verify): 31 MiB of the 64 MiB device, each job on its own
# range (overlapping jobs would overwrite each other's verify headers).
cat >"$T/verify.fio" <<'JOBS'
[global]
filename=/dev/mapper/rbf
direct=1
ioengine=libaio
iodepth=4
verify=crc32c
verify_fatal=1
randrepeat=1

[rand4k]
rw=randwrite
bs=4k
offset=0
size=8m

[seq64k]
rw=write
bs=64k
offset=8m
size=12m

[randmix]
rw=randwrite
bsrange=512-32k
offset=20m
size=8m

[seq1536]
rw=write
bs=1536
offset=28m
size=3m
JOBS

run_pass () {
# ---- images and the model ----------------------------------------------
head -c $((SECTORS * 512)) /dev/urandom >"$T/back.img"
head -c $((PATTERN_SECTORS * 512)) /dev/urandom >"$T/pattern.img"
head -c $((SCRATCH_REGIONS * SECTORS * 512)) /dev/urandom >"$T/scratch.img"
rm -f "$T/fs.img"
truncate -s $((FS_REGIONS * FS_SECTORS * 512)) "$T/fs.img"
cp "$T/back.img" "$T/model.img"
MODEL=$T/model.img              # the image apply_model and region_sha use
sha () { sha256sum "$@" | cut -d' ' -f1; }
region_sha () { dd if="$MODEL" bs=512 skip="$1" count="$2" status=none | sha; }
initial_sha=$(sha "$T/back.img")

# Write lists "dst:count:src" in sectors (chunks are 8 sectors unless the
# phase says otherwise): partial heads and tails, whole chunks, runs
# crossing loaded and unloaded chunks, the first and last sectors.
WR_A="803:3:0 1600:8:10 2405:20:30 100:16:60 65530:6:80 32768:2048:100 40001:1:2200"
WR_B1="8192:100:3000 8300:7:3100"
WR_B2="16384:256:3200 16390:3:3500"
WR_B3="50000:64:3600"
WR_B4="60000:9:3700 60100:300:3800"
WR_C0="20480:2048:0"            # dirty, so write back is busy there...
WR_C1="20483:2:4100 20500:3:4110 20600:8:4120"   # ...when these two write
WR_C2="20485:1:4170 20488:4:4130 20700:16:4140 21000:1:4160"  # through in parallel
WR_C="803:3:4180 12000:24:4200 12003:5:4300 0:8:4400 64000:1000:4500"
WR_D="12001:2:5600 30000:500:5700"
WR_E="7:9:6300 45000:77:6400"
WR_F="100:200:6500 20000:40:6800"
WR_G="5:5:6900 33000:300:7000 65535:1:7400"
WR_H1="1000:64:7500"
WR_H2="2000:100:7600 1010:4:7700"
WR_H3="3001:6:7800"   # one dd write: it fails, so dd stops there
WR_R1="40960:64:100 41100:10:200"    # dirty; write back takes 1 s...
WR_R2="40962:4:300 41101:3:400"      # ...and these land meanwhile
WR_R2B="2101:3:800 4203:2:810 6305:1:820 8407:9:830"  # EMPTY, as populate starts
WR_R3A="50000:16:500"                # dirty again, then writethrough:
WR_R3="50004:4:600 50010:2:700"      # waits behind that write back
WR_R4="30001:7:900 100:1:910"        # dirty, then remove while populating
READS_ORIG="100:64 20000:1024 5:3 65000:536"
# Scratch disk phases, one region each.  Region 0: populate_suspend (reads
# only), then zero_discard.
WR_S1="100:64:0 5000:9:200"          # region 1, stuck_suspend: on disk...
WR_S2="103:5:300 20000:300:400 65530:6:800"   # ...then in RAM only
WR_S3="7000:16:900"                  # written after the interrupted suspend
WR_T1="300:30:1000"                  # region 2, stuck_remove
WR_T2="301:2:1100 40000:96:1200"  # whole chunks: bk is dead by then
WR_U1="64:64:1400"                   # region 3, stuck_reload; moved to region 4
WR_U2="65:3:1500 30000:200:1600"

apply_model () {
  local w d n s
  for w in $1; do
    IFS=: read -r d n s <<<"$w"
    dd if="$T/pattern.img" of="$MODEL" bs=512 skip="$s" seek="$d" \
       count="$n" conv=notrunc status=none
  done
}
# The model of scratch region $1, as the host made it, becomes $MODEL.
scratch_model () {
  MODEL=$T/region$1.img
  dd if="$T/scratch.img" of="$MODEL" bs=512 skip=$(($1 * SECTORS)) \
     count=$SECTORS status=none
}
# Regions to check for a write list: each write, 8 sectors either side
# (so the neighbours of a partial write are checked too), or exact.
regions () {   # list [exact]
  local w d n s a b out=
  for w in $1; do
    IFS=: read -r d n s <<<"$w"
    if [ "${2:-}" = exact ]; then a=$d; b=$((d + n)); else
      a=$((d > 8 ? d - 8 : 0)); b=$((d + n + 8 < SECTORS ? d + n + 8 : SECTORS)); fi
    out="$out $a:$((b - a)):$(region_sha "$a" $((b - a)))"
  done
  echo "$out"
}
# Bios a write list makes: the guest's dd writes 4 KiB at a time.
bios () {
  local w d n s b=0
  for w in $1; do
    IFS=: read -r d n s <<<"$w"
    b=$((b + (n + 7) / 8))
  done
  echo $b
}
reads () {
  local r f n out=
  for r in $1; do
    IFS=: read -r f n <<<"$r"
    out="$out $f:$n:$(region_sha "$f" "$n")"
  done
  echo "$out"
}

{
  echo "SECTORS=$SECTORS FS_SECTORS=$FS_SECTORS"
  echo "ONLY='$ONLY'"
  for v in WR_A WR_B1 WR_B2 WR_B3 WR_B4 WR_C0 WR_C1 WR_C2 WR_C WR_D WR_E WR_F WR_G WR_H1 WR_H2 WR_H3 \
           WR_R1 WR_R2 WR_R2B WR_R3A WR_R3 WR_R4 WR_S1 WR_S2 WR_S3 WR_T1 WR_T2 WR_U1 WR_U2; do
    echo "$v='${!v}'"
  done
  echo "REG_ORIG='$(reads "$READS_ORIG")'"
  apply_model "$WR_A"
  echo "REG_A='$(regions "$WR_A")'"; echo "FULL_A=$(sha "$T/model.img")"
  B="$WR_B1 $WR_B2 $WR_B3 $WR_B4"
  apply_model "$B"
  echo "REG_B='$(regions "$B")'"; echo "FULL_B=$(sha "$T/model.img")"
  C="$WR_C1 $WR_C2 $WR_C"
  apply_model "$WR_C0 $C"
  echo "REG_C='$(regions "$C")'"; echo "REGX_C='$(regions "$C" exact)'"
  echo "NWR_C=$(bios "$C")"; echo "FULL_C=$(sha "$T/model.img")"
  apply_model "$WR_D"
  echo "REG_D='$(regions "$WR_D")'"; echo "FULL_D=$(sha "$T/model.img")"
  apply_model "$WR_E"
  echo "REG_E='$(regions "$WR_E")'"; echo "FULL_E=$(sha "$T/model.img")"
  apply_model "$WR_F"
  echo "FULL_F=$(sha "$T/model.img")"
  apply_model "$WR_G"
  echo "REG_G='$(regions "$WR_G")'"; echo "FULL_G=$(sha "$T/model.img")"
  # H3 fails in writethrough but stays in RAM and is written back later.
  apply_model "$WR_H1 $WR_H2 $WR_H3"
  echo "REG_H='$(regions "$WR_H2 $WR_H3")'"; echo "FULL_H=$(sha "$T/model.img")"
  apply_model "$WR_R1 $WR_R2 $WR_R2B"
  echo "FULL_R2=$(sha "$T/model.img")"
  apply_model "$WR_R3A $WR_R3"
  echo "REGX_R3='$(regions "$WR_R3" exact)'"; echo "FULL_R3=$(sha "$T/model.img")"
  apply_model "$WR_R4"
  echo "FULL_R4=$(sha "$T/model.img")"

  scratch_model 1
  apply_model "$WR_S1 $WR_S2"
  echo "REG_S12='$(regions "$WR_S1 $WR_S2")'"
  apply_model "$WR_S3"
  echo "REG_S3='$(regions "$WR_S3")'"; echo "FULL_S=$(sha "$MODEL")"
  scratch_model 2
  apply_model "$WR_T1 $WR_T2"
  echo "FULL_T=$(sha "$MODEL")"
  scratch_model 3               # region 4 must end up holding this
  apply_model "$WR_U1 $WR_U2"
  echo "FULL_U=$(sha "$MODEL")"
} >"$T/test.conf"
final_sha=$(sha "$T/model.img")
# Only scratch-disk phases: the main chain never ran, back.img is as made.
[ -z "$ONLY" ] || final_sha=$initial_sha

# ---- the initramfs: the cached base plus this run's files -------------------
mkdir -p "$T/extra/ramback" "$T/extra/guest"
cp "$here/guest-init.sh" "$T/extra/init"
cp "$here/../qemu-guest/guest/console.sh" "$T/extra/guest/"
chmod 755 "$T/extra/init"
cp "$ko" "$T/test.conf" "$T/tree.sha256" "$T/verify.fio" "$T/extra/ramback/"
(cd "$T/extra" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) |
  gzip >"$T/extra.cpio.gz"
cat "$CACHE/base.cpio.gz" "$CACHE/fio.cpio.gz" "$T/extra.cpio.gz" >"$T/initrd"

# ---- run the guest -------------------------------------------------------------
# boot NAME STEP [ramback.K=V]: start QEMU in the background on this pass's
# images; the serial log is $T/NAME.serial.
boot () {
  say "guest $1: booting $GUEST_KERNEL_VERSION under TCG (smp $SMP, timeout $TIMEOUT s)"
  rm -f "$T/$1.serial" "$T/$1.qpid"
  qpidfile=$T/$1.qpid
  timeout -k 10 "$TIMEOUT" "$QEMU" -accel tcg -m 1024 -smp "$SMP" \
    -nodefaults -display none -no-reboot -pidfile "$qpidfile" \
    -serial "file:$T/$1.serial" \
    -kernel "$CACHE/vmlinuz" -initrd "$T/initrd" \
    -append "console=ttyS0 rdinit=/init panic=-1 no_timer_check oops=panic panic_on_warn=1 loglevel=4 ramback.step=$2 ${3:-}" \
    -drive "file=$T/back.img,format=raw,if=virtio,cache=writeback" \
    -drive "file=$T/pattern.img,format=raw,if=virtio,readonly=on" \
    -drive "file=$T/scratch.img,format=raw,if=virtio,cache=writeback" \
    -drive "file=$T/fs.img,format=raw,if=virtio,cache=writeback" \
    -drive "file=$T/tree.tar,format=raw,if=virtio,readonly=on" &
  qemu_pid=$!
  serial=$T/$1.serial
}
# wait_guest NAME: QEMU exits; the guest must have said PASS.
wait_guest () {
  local rc=0 result
  wait "$qemu_pid" || rc=$?
  qemu_pid=
  tr -d '\r' <"$T/$1.serial" >"$T/$1.log"
  grep -a '^RAMBACK-TIME:' "$T/$1.log" | sed 's/^RAMBACK-TIME: /  phase /' || true
  result=$(grep -a '^RAMBACK-RESULT:' "$T/$1.log" | tail -1 || true)
  [ $rc -ne 124 ] && [ $rc -ne 137 ] || die "guest $1 did not finish in $TIMEOUT s"
  [ -n "$result" ] || die "guest $1 reported no result (kernel panic or crash? qemu exit $rc)"
  [ "$result" = "RAMBACK-RESULT: PASS" ] || die "guest $1: ${result#RAMBACK-RESULT: }"
  [ $rc -eq 0 ] || die "guest $1: qemu exited with status $rc"
}
fsynced () {
  { grep -ao 'RAMBACK-MARK: fsynced-[0-9]*' "$serial" 2>/dev/null || true; } |
    tail -1 | sed 's/.*-//'
}

t1=$SECONDS
boot main main
wait_guest main
t_guest=$((SECONDS - t1))
# The guest's last word on the backing device, checked from the host.
got=$(sha "$T/back.img")
[ "$got" = "$final_sha" ] || die "back.img after the guest (sha256 $got) differs from the model ($final_sha)"

# The power cut: QEMU is killed while the guest writes and fsyncs files in
# writethrough mode, once it has reported PCUT_FILES of them; a recovery
# boot then checks every one it reported.
t_cut=0
if [ -z "$ONLY" ] || [[ " $ONLY " = *" powercut "* ]]; then
  t1=$SECONDS
  boot powercut powercut
  n=
  for _ in $(seq 1 $((TIMEOUT * 5))); do
    n=$(fsynced)
    [ "${n:-0}" -lt $PCUT_FILES ] || break
    kill -0 "$qemu_pid" 2>/dev/null || break
    sleep 0.2
  done
  kill_qemu || true
  tr -d '\r' <"$serial" >"$T/powercut.log"
  grep -aq '^RAMBACK-RESULT: FAIL' "$T/powercut.log" &&
    die "guest powercut: $(grep -a '^RAMBACK-RESULT:' "$T/powercut.log")"
  n=$(fsynced)
  [ "${n:-0}" -ge $PCUT_FILES ] || die "guest powercut: only ${n:-0} fsync'd files before it stopped"
  say "power cut after $n fsync'd files"
  boot recover recover "ramback.fsynced=$n"
  wait_guest recover
  grep -a '^power cut:' "$T/recover.log" || true
  t_cut=$((SECONDS - t1))
fi
say "pass $pass: PASS: backing image equals the model; guest ${t_guest}s, power cut ${t_cut}s"
}

for pass in $(seq 1 "$PASSES"); do
  run_pass
done
say "PASS: $PASSES pass(es); build ${t_build}s, total $((SECONDS - t0))s"
