#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# dm-ramback against the guest kernel's brd RAM disk and against its own
# backing device alone (dm-delay over a virtio disk), in a QEMU guest
# under TCG: fio's 4 KiB random reads and writes, 1 MiB sequential reads
# and writes, and 4 KiB writes each followed by an fsync.  Under TCG the
# absolute figures say little about real hardware, so only ratios are
# reported (ramback / brd, ramback / delay), medians of BENCH_REPS rounds.
# The guest side is dm/guest-bench.sh; the guest and the module are
# built as for make check-dm (dm/guest-build.sh, dm/build.sh).
#
# Usage: bench/bench-dm-guest.sh [--plot[=DIR]]  (--plot: the ratios as
#   an SVG chart, gnuplot, in DIR, default here)
# Environment: BENCH_SIZE_MB (device size, 128), BENCH_DELAY_R and
#   BENCH_DELAY_W (dm-delay's read and write delays in ms, 2 and 5),
#   BENCH_RUNTIME (seconds per fio run, 3), BENCH_REPS (3),
#   RAMBACK_DM_MODULE, RAMBACK_DM_CACHE, RAMBACK_DM_SMP (2) as for
#   dm/test-dm.sh.  Exit status is non-zero only if something failed.

set -euo pipefail
export PATH=/usr/bin:/bin:/usr/sbin:/sbin:$PATH LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dm=$here/../dm
CACHE=${RAMBACK_DM_CACHE:-/var/cache/ramback-guest/dm}
QEMU=${QEMU:-qemu-system-x86_64}
SMP=${RAMBACK_DM_SMP:-2}
SIZE_MB=${BENCH_SIZE_MB:-128}
REPS=${BENCH_REPS:-3}
RUNTIME=${BENCH_RUNTIME:-3}

die () { echo "FAIL: $*" >&2; exit 1; }
say () { echo "[$(date +%T)] $*"; }
plotdir=
for a in "$@"; do
  case $a in
    --plot) plotdir=. ;;
    --plot=*) plotdir=${a#*=} ;;
    *) echo "${0##*/}: unknown option '$a' (the settings are environment variables)" >&2
       exit 2 ;;
  esac
done
command -v "$QEMU" >/dev/null || { echo "SKIP: no $QEMU" >&2; exit 77; }

T=$(mktemp -d "${TMPDIR:-/var/tmp}/ramback-dmbench.XXXXXX")
qemu_pid=
cleanup () {
  local rc=$?
  set +e
  [ ! -s "$T/qpid" ] || kill -9 "$(cat "$T/qpid")" 2>/dev/null
  [ -z "$qemu_pid" ] || { kill -9 "$qemu_pid" 2>/dev/null; wait "$qemu_pid" 2>/dev/null; }
  [ $rc -eq 0 ] || tail -30 "$T/serial" 2>/dev/null | tr -d '\r' >&2
  rm -rf "$T"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$dm/guest-build.sh" || die "building the guest failed"
. "$CACHE/guest.env"
if [ -n "${RAMBACK_DM_MODULE:-}" ]; then
  ko=$RAMBACK_DM_MODULE
else
  ko=$(RAMBACK_DM_BUILD="$T/build" "$dm/build.sh" -o "$T" "$GUEST_KERNEL_VERSION" 2>/dev/null) ||
    die "building dm-ramback.ko failed"
fi

truncate -s "${SIZE_MB}M" "$T/back.img"
mkdir -p "$T/extra/ramback" "$T/extra/guest"
cp "$dm/guest-bench.sh" "$T/extra/init"
cp "$here/../qemu-guest/guest/console.sh" "$T/extra/guest/"
cp "$ko" "$T/extra/ramback/"
cat >"$T/extra/ramback/bench.conf" <<CONF
SECTORS=$((SIZE_MB * 2048))
DELAY_R=${BENCH_DELAY_R:-2}
DELAY_W=${BENCH_DELAY_W:-5}
RUNTIME=$RUNTIME
REPS=$REPS
CONF
(cd "$T/extra" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) |
  gzip >"$T/extra.cpio.gz"
cat "$CACHE/base.cpio.gz" "$CACHE/fio.cpio.gz" "$T/extra.cpio.gz" >"$T/initrd"

say "guest: ${SIZE_MB} MiB devices, $REPS round(s) of 5 jobs x 3 devices, ${RUNTIME} s each (TCG, smp $SMP)"
timeout -k 10 3600 "$QEMU" -accel tcg -m $((SIZE_MB * 2 + 768)) -smp "$SMP" \
  -nodefaults -display none -no-reboot -pidfile "$T/qpid" \
  -serial "file:$T/serial" -kernel "$CACHE/vmlinuz" -initrd "$T/initrd" \
  -append "console=ttyS0 rdinit=/init panic=-1 oops=panic loglevel=4" \
  -drive "file=$T/back.img,format=raw,if=virtio,cache=none,aio=threads" &
qemu_pid=$!
rc=0
wait "$qemu_pid" || rc=$?
qemu_pid=
tr -d '\r' <"$T/serial" >"$T/console"
grep -aq '^RAMBACK-RESULT: PASS' "$T/console" ||
  die "guest: $(grep -a '^RAMBACK-RESULT:' "$T/console" || echo "no result, qemu exit $rc")"

# Medians per device and job, then the ratios.
grep -a '^RAMBACK-BENCH:' "$T/console" | awk -v tsv="$T/plot.tsv" '
  { v[$2 " " $3] = v[$2 " " $3] " " $5; jobs[$3] = 1 }
  function median(s,   a, n, i, j, t) {
    n = split(s, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
      if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
    return a[int((n + 1) / 2)]
  }
  END {
    split("randread4k randwrite4k seqread1m seqwrite1m fsync4k", order, " ")
    printf "%-12s %12s %12s %12s %10s %10s\n", "job", "brd", "ramback", "delay", "rb/brd", "rb/delay"
    for (k = 1; k <= 5; k++) {
      j = order[k]
      b = median(v["brd " j]); r = median(v["ramback " j]); d = median(v["delay " j])
      printf "%-12s %12d %12d %12d %10.2f %10.1f\n", j, b, r, d,
             (b > 0 ? r / b : 0), (d > 0 ? r / d : 0)
      printf "%s\t%g\t%g\n", j, (b > 0 ? r / b : 0), (d > 0 ? r / d : 0) > tsv
    }
  }'
echo "(IOPS for the 4 KiB jobs, KiB/s for the 1 MiB jobs; medians of $REPS; TCG: compare the ratios only)"
if [ -n "$plotdir" ]; then
  mkdir -p "$plotdir"
  /usr/bin/python3 "$here/plot.py" "$plotdir/bench-dm-guest.svg" \
    "dm-ramback in a QEMU guest (TCG): ratios of medians" "ratio (log scale)" \
    "ramback / brd" "ramback / dm-delay" --log --target=1:"1x" < "$T/plot.tsv" ||
    die "--plot: no chart"
  echo "chart: $plotdir/bench-dm-guest.svg"
fi
