# SPDX-License-Identifier: GPL-2.0-or-later
# shellcheck shell=bash disable=SC2054  # QEMU options are comma lists
# Host-side helpers for the QEMU guest scenarios and bench/bench-guest.sh.
# Source it from bash:  . "$srcdir/guest-lib.sh"
#
#   g_nbdkit NAME ARGS...     nbdkit on the Unix socket $T/NAME.sock (the
#                             only thing a guest can reach); sets NAME_pid
#   g_ramback NAME ARGS...    the same with the ramback plugin and
#                             control=$T/NAME.ctl; sets NAME_ctl too
#   g_stop NAME               SIGTERM; fails unless nbdkit exits 0 in time
#   g_boot NAME SOCK STEP [ramback.K=V...]
#                             start a guest on nbdkit socket SOCK running
#                             guest step STEP; serial log $T/NAME.serial
#   _g_machine NAME; g_qemu NAME "${_g_argv[@]}" MORE...
#                             the same machine booting something else
#                             (boot-scenario.sh: a Debian root disk)
#   g_wait_mark NAME MARK [TIMEOUT]   wait for "RAMBACK-MARK: MARK"
#   g_wait_guest NAME [TIMEOUT]       wait for the guest to power off;
#                                     fails unless it reported PASS
#   g_time NAME KEY           a RAMBACK-TIME value from the serial log
#   ctl SOCK REQUEST          one control-socket request (tests/harness.sh)
#   status_field SOCK NAME    one field of "status json"
#
# Every process started here is killed (SIGKILL) at exit whatever
# happens, and $T is removed unless RAMBACK_GUEST_KEEP=1.

set -euo pipefail
export PATH="/usr/bin:/bin:/usr/sbin:/sbin:$PATH" LC_ALL=C

guest_srcdir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${top_builddir:=$(pwd)/..}"
PLUGIN=${RAMBACK_PLUGIN:-$top_builddir/plugin/.libs/nbdkit-ramback-plugin.so}
CACHE=${RAMBACK_GUEST_CACHE:-/var/cache/ramback-guest}
QEMU=${QEMU:-qemu-system-x86_64}
NBDKIT=${NBDKIT:-nbdkit}
GUEST_MEM=${RAMBACK_GUEST_MEM:-1G}
GUEST_SMP=${RAMBACK_GUEST_SMP:-1}
# Bounds for one guest boot.  TCG is slow; these are generous so a loaded
# CI machine does not fail, yet a hung guest cannot hang the run.
BOOT_TIMEOUT=${RAMBACK_GUEST_TIMEOUT:-600}

# serve_bg, ctl, status_field
. "$guest_srcdir/../tests/harness.sh"

T=$(mktemp -d "${TMPDIR:-/var/tmp}/ramback-guest.XXXXXX")
_g_pids=()
_g_cleanup () {
  local rc=$? p
  set +e
  for p in "${_g_pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  for p in "${_g_pids[@]}"; do wait "$p" 2>/dev/null; done
  if [ $rc -ne 0 ]; then
    echo "--- logs in $T (last lines) ---" >&2
    for f in "$T"/*.serial "$T"/*.log; do
      [ -f "$f" ] || continue
      echo "=== $f" >&2; tail -25 "$f" >&2
    done
  fi
  if [ "${RAMBACK_GUEST_KEEP:-0}" = 1 ]; then
    echo "kept $T" >&2
  else
    rm -rf "$T"
  fi
  exit $rc
}
trap _g_cleanup EXIT
trap 'exit 130' INT TERM

die () { echo "FAIL: $*" >&2; exit 1; }
say () { echo "[$(date +%T)] $*"; }

need () {
  local c
  for c in "$@"; do
    command -v "$c" >/dev/null 2>&1 ||
      die "'$c' is not installed (packages: qemu-system-x86 nbdkit socat e2fsprogs cpio python3)"
  done
}
need "$QEMU" "$NBDKIT" cpio gzip python3 e2fsck debugfs sha256sum

# ---- the guest image ----------------------------------------------------
"$guest_srcdir/guest-build.sh" ${RAMBACK_GUEST_VERBOSE:+-v} ||
  die "building the guest failed"
. "$CACHE/guest.env"

# The repository's init and guest scripts, and the manifests, go into a
# second cpio appended to the cached base (the kernel unpacks both), so
# editing a guest script never rebuilds the base.
_g_initrd=$T/initrd.img
(
  ov=$T/overlay
  mkdir -p "$ov/guest" "$ov/src"
  cp "$guest_srcdir/guest/init" "$ov/init"
  cp "$guest_srcdir/guest/console.sh" "$guest_srcdir/guest/lib.sh" \
     "$guest_srcdir/guest/steps.sh" "$ov/guest/"
  for p in a b quick; do cp "$CACHE/src-$p.sha256" "$ov/src/$p.sha256"; done
  chmod 755 "$ov/init"
  cd "$ov" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0 | gzip -1
) >"$T/overlay.cpio.gz"
cat "$CACHE/base.cpio.gz" "$T/overlay.cpio.gz" >"$_g_initrd"

# ---- accelerator ----------------------------------------------------------
# KVM only if it really works: /dev/kvm usable AND a probe boot with it
# completes (on some nested hosts KVM opens fine and then hangs or
# aborts).  The verdict is cached for this host boot and this QEMU.
# _g_machine NAME: set _g_argv to the machine every guest runs on, its
# first serial port (the results) in $T/NAME.serial, never rebooting.
_g_machine () {
  local name=$1 accel=${_g_accel:-tcg} cpu=max
  [ "$accel" = kvm ] && cpu=host
  _g_argv=("$QEMU" -nodefaults -display none -no-user-config
           -accel "$accel" -cpu "$cpu" -smp "$GUEST_SMP" -m "$GUEST_MEM"
           -no-reboot
           -serial "file:$T/$name.serial"
           -pidfile "$T/$name.qpid")
}

_g_qemu_args () {   # NAME SOCK STEP EXTRA...: print nothing, set _g_argv
  local name=$1 sock=$2 step=$3; shift 3
  local p
  _g_machine "$name"
  _g_argv+=(-kernel "$CACHE/vmlinuz" -initrd "$_g_initrd")
  if [ -n "$sock" ]; then
    # restrict=on: the guest reaches nothing but this one guestfwd.  The
    # cmd: form runs one relay per guest connection (nbd-client -C 4).
    _g_argv+=(-netdev "user,id=n0,restrict=on,guestfwd=tcp:10.0.2.100:10809-cmd:$guest_srcdir/nbd-relay.py $sock"
              -device virtio-net-pci,netdev=n0,romfile=)
  else
    _g_argv+=(-netdev user,id=n0,restrict=on -device virtio-net-pci,netdev=n0,romfile=)
  fi
  # The source parts, read only, in the order given by ramback.parts.
  local parts=a,b
  for p in "$@"; do
    case $p in ramback.parts=*) parts=${p#ramback.parts=} ;; esac
  done
  for p in ${parts//,/ }; do
    _g_argv+=(-drive "file=$CACHE/src-$p.tar,if=virtio,format=raw,readonly=on")
  done
  # no_timer_check: under TCG on a busy host the kernel's check of the
  # IO-APIC timer at boot can miss its ticks and panic ("IO-APIC +
  # timer doesn't work!"), a failure of the host's load, not ours.
  _g_argv+=(-append "console=ttyS0 panic=-1 no_timer_check quiet ramback.step=$step ramback.parts=$parts $*")
}

_g_probe_kvm () {
  [ -r /dev/kvm ] && [ -w /dev/kvm ] || return 1
  _g_accel=kvm _g_qemu_args kvmprobe "" probe
  rm -f "$T/kvmprobe.serial"
  # A subshell, so bash's "Aborted" notice for a crashing QEMU stays quiet.
  ( timeout -s KILL 30 "${_g_argv[@]}" >"$T/kvmprobe.log" 2>&1 ) 2>/dev/null || return 1
  grep -q '^RAMBACK-RESULT: PASS' "$T/kvmprobe.serial"
}
case ${RAMBACK_GUEST_ACCEL:-auto} in
  kvm|tcg) _g_accel=$RAMBACK_GUEST_ACCEL ;;
  auto)
    _key="$(cat /proc/sys/kernel/random/boot_id) $("$QEMU" --version | head -1)"
    if [ -f "$CACHE/accel" ] && [ "$(sed -n 1p "$CACHE/accel")" = "$_key" ]; then
      _g_accel=$(sed -n 2p "$CACHE/accel")
    else
      if _g_probe_kvm; then _g_accel=kvm; else _g_accel=tcg; fi
      printf '%s\n%s\n' "$_key" "$_g_accel" >"$CACHE/accel.tmp.$$" &&
        mv -f "$CACHE/accel.tmp.$$" "$CACHE/accel"
    fi ;;
  *) die "RAMBACK_GUEST_ACCEL must be kvm, tcg or auto" ;;
esac
export GUEST_ACCEL=$_g_accel

# ---- nbdkit ----------------------------------------------------------------
g_nbdkit () {
  local name=$1; shift
  local sock=$T/$name.sock
  : >"$T/$name.log"
  if ! SERVE_TIMEOUT=30 serve_bg "$sock" "" "$T/$name.log" \
       "$NBDKIT" -f -U "$sock" --exit-with-parent "$@"; then
    _g_pids+=("$SERVE_JOB")
    die "nbdkit $name did not start"
  fi
  _g_pids+=("$SERVE_JOB")
  eval "${name}_pid=$SERVE_PID ${name}_sock=\$sock"
}

g_ramback () {
  local name=$1; shift
  [ -f "$PLUGIN" ] || die "ramback plugin not built: $PLUGIN"
  rm -f "$T/$name.ctl"
  g_nbdkit "$name" "$PLUGIN" control="$T/$name.ctl" "$@"
  eval "${name}_ctl=\$T/\$name.ctl"
}

# g_stop NAME: the clean stop; nbdkit drains everything before it exits.
g_stop () {
  local name=$1 pid rc=0 i limit=$(( ${RAMBACK_STOP_TIMEOUT:-300} * 10 ))
  pid=$(eval echo "\$${name}_pid")
  kill -TERM "$pid"
  # bash reaps its children as they exit, so kill -0 fails once nbdkit
  # is gone and wait then returns its saved exit status.
  for (( i = 0; i < limit; i++ )); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid"
    die "nbdkit $name still running ${RAMBACK_STOP_TIMEOUT:-300} s after SIGTERM"
  fi
  wait "$pid" || rc=$?
  [ $rc -eq 0 ] || { tail -20 "$T/$name.log" >&2; die "nbdkit $name exited $rc after SIGTERM"; }
}

g_kill9 () {   # g_kill9 PID...: the power cut, all at the same instant
  kill -9 "$@" 2>/dev/null || true
  local p
  for p in "$@"; do wait "$p" 2>/dev/null || true; done
}

# ---- guests ----------------------------------------------------------------
g_boot () {
  local name=$1 sock=$2 step=$3; shift 3
  _g_qemu_args "$name" "$sock" "$step" "$@"
  g_qemu "$name" "${_g_argv[@]}"
  say "guest $name: step $step ($GUEST_ACCEL${*:+, $*})"
}

# g_qemu NAME ARGV...: start the QEMU command ARGV (from _g_machine and
# more) as guest NAME, for g_wait_mark and g_wait_guest.
g_qemu () {
  local name=$1; shift
  rm -f "$T/$name.serial" "$T/$name.qpid"
  "$@" >"$T/$name.log" 2>&1 </dev/null &
  local pid=$!
  _g_pids+=("$pid")
  eval "${name}_qpid=$pid ${name}_t0=\$(date +%s.%N)"
}

# The serial log has tty line ends (\r\n).
_g_result () { grep -a '^RAMBACK-RESULT:' "$T/$1.serial" 2>/dev/null | tail -1 | tr -d '\r'; }

g_wait_mark () {
  local name=$1 mark=$2 timeout=${3:-$BOOT_TIMEOUT} pid i
  pid=$(eval echo "\$${name}_qpid")
  for (( i = 0; i < timeout * 20; i++ )); do
    grep -aq "^RAMBACK-MARK: $mark " "$T/$name.serial" 2>/dev/null && return 0
    if [ -n "$(_g_result "$name")" ] || ! kill -0 "$pid" 2>/dev/null; then
      die "guest $name ended before '$mark': $(_g_result "$name")"
    fi
    sleep 0.05
  done
  die "guest $name: no '$mark' within $timeout s"
}

g_has_mark () { grep -aq "^RAMBACK-MARK: $2 " "$T/$1.serial" 2>/dev/null; }

g_wait_guest () {
  local name=$1 timeout=${2:-$BOOT_TIMEOUT} pid i t0 res
  pid=$(eval echo "\$${name}_qpid")
  t0=$(eval echo "\$${name}_t0")
  for (( i = 0; i < timeout * 10; i++ )); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid"; wait "$pid" 2>/dev/null || true
    die "guest $name did not finish within $timeout s"
  fi
  wait "$pid" 2>/dev/null || true
  res=$(_g_result "$name")
  grep -a -E '^(attached|checksums|e2fsck|files present)' "$T/$name.serial" | tr -d '\r' | sed "s/^/  $name: /" || true
  say "guest $name: ${res:-no result} ($(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s wall)"
  [ "$res" = "RAMBACK-RESULT: PASS" ] || die "guest $name: ${res:-no RAMBACK-RESULT line (crashed?)}"
}

g_time () {
  grep -a "^RAMBACK-TIME: $2 " "$T/$1.serial" | tail -1 | cut -d' ' -f3 | tr -d '\r'
}

# g_check_image IMG PART...: offline check of a backing store on the
# host: e2fsck -fn clean, and every file of PARTs dumped with debugfs has
# its manifest checksum.  This sees only what reached the backing store.
g_check_image () {
  local img=$1; shift
  local d=$T/dump.$$ p
  e2fsck -fn "$img" >"$T/host-fsck.log" 2>&1 ||
    { cat "$T/host-fsck.log" >&2; die "host e2fsck -fn $img: not clean"; }
  rm -rf "$d"; mkdir -p "$d"
  debugfs -R "rdump / $d" "$img" >"$T/debugfs.log" 2>&1 ||
    { cat "$T/debugfs.log" >&2; die "debugfs rdump failed"; }
  for p in "$@"; do cat "$CACHE/src-$p.sha256"; done >"$T/want.sha256"
  (cd "$d" && sha256sum --quiet -c "$T/want.sha256") >"$T/host-sums.log" 2>&1 ||
    { head -20 "$T/host-sums.log" >&2; die "backing store $img: checksums differ"; }
  say "backing store: e2fsck clean, $(wc -l <"$T/want.sha256") files match"
  rm -rf "$d"
}
