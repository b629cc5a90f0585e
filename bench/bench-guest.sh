#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# shellcheck disable=SC2154  # NAME_sock, NAME_pid... are set by eval in guest-lib.sh
#
# The headline benchmark: in a QEMU guest (Debian's kernel nbd client,
# ext4), the time to untar 3,484 real source files (77 MB, from Debian's
# linux-source) and sync, side by side in one run:
#   (a) slow    the guest directly on a slow disk model
#   (b) ramback the guest on ramback (writeback), whose backing store is
#               another instance of the same slow disk, over NBD
#   (c) memory  the guest on nbdkit memory: the pure-RAM bound
# The slow disk model is nbdkit's file plugin behind the noparallel filter
# (one request at a time, like one spindle) and the delay filter (every
# read, write and zero takes BENCH_DELAY, default 8 ms: a hard disk's
# seek plus rotation).  Also reported: how long ramback needs after the
# guest's sync to drain everything to its slow backing store (control
# socket "sync"), and a host-side check that the drained backing store
# is a clean ext4 holding every file with the right checksum.
#
# Usage: bench/bench-guest.sh [--plot[=DIR]]   (from a configured build
#        tree, or with top_builddir=/path/to/build); --plot draws the
#        table as an SVG chart (gnuplot) in DIR (default: here)
# Environment: BENCH_DELAY (8ms), BENCH_RUNS (1; more gives the median),
# BENCH_CONNS (nbd-client -C, 1), BENCH_BACK=nbd|file (nbd: the slow
# model over NBD; file: a plain local file, for when the NBD backing is
# unavailable), RAMBACK_GUEST_* as for qemu-guest/scenario.sh.
# Timings are the guest's own clock (/proc/uptime), so they are not
# inflated by the host's view of a TCG guest.  Exit status is non-zero
# only if something failed, never because of the numbers.

here=$(cd "$(dirname "$0")" && pwd)
: "${top_builddir:=$(cd "$here/.." && pwd)}"
if [ ! -f "$top_builddir/plugin/.libs/nbdkit-ramback-plugin.so" ] &&
   [ -f "$(pwd)/../plugin/.libs/nbdkit-ramback-plugin.so" ]; then
  top_builddir=$(cd .. && pwd)    # run from the build tree's bench/
fi
# median and ratio from bench/lib.sh; guest-lib.sh (sourced after it)
# keeps its own die and ctl.
prog=${0##*/} WORK=
. "$here/lib.sh"
. "$here/../qemu-guest/guest-lib.sh"
for a in "$@"; do
  case $a in
    --plot|--plot=*) bench_opt "$a" ;;
    *) echo "$prog: unknown option '$a' (the settings are environment variables)" >&2
       exit 2 ;;
  esac
done

delay=${BENCH_DELAY:-8ms}
runs=${BENCH_RUNS:-1}
conns=${BENCH_CONNS:-1}
back=${BENCH_BACK:-nbd}

# slow_disk NAME IMG: the slow disk model on $T/NAME.sock.
slow_disk () {
  rm -f "$2"
  truncate -s 1G "$2"
  g_nbdkit "$1" --filter=stats --filter=noparallel --filter=delay file "$2" \
    delay-read="$delay" delay-write="$delay" delay-zero="$delay" \
    statsfile="$T/$1.stats"
}
# What a slow disk served in its life (the stats filter writes at exit).
disk_ops () {
  awk '/^(read|write|zero|trim|flush):/ { printf "%s%s %s", sep, $1, $2; sep = " " }
       /^total:/ { tot = $2 } END { printf " (%s requests)", tot }' "$T/$1.stats"
}

# one_guest NAME SOCK: a bench boot; sets $secs and $ssecs to its
# untar+sync and sync-alone times.
one_guest () {
  g_boot "$1" "$2" bench ramback.conns="$conns"
  g_wait_guest "$1"
  secs=$(g_time "$1" untar+sync)
  ssecs=$(g_time "$1" sync)
}


declare -a ta tb tc td sa sb sc
load0=$(cut -d' ' -f1-3 /proc/loadavg)
for (( r = 1; r <= runs; r++ )); do
  say "run $r of $runs (slow disk: $delay per request, serialised; -C $conns; $GUEST_ACCEL)"

  # (a) straight onto the slow disk.
  slow_disk slowa "$T/slowa.img"
  one_guest a$r "$slowa_sock"
  ta+=("$secs"); sa+=("$ssecs")
  g_stop slowa
  say "the slow disk served $(disk_ops slowa)"

  # (b) ramback in front of a second slow disk.
  case $back in
    nbd)
      slow_disk slowb "$T/slowb.img"
      g_ramback rb back="nbd+unix:///?socket=$slowb_sock"
      ;;
    file)
      rm -f "$T/slowb.img"
      g_ramback rb back="$T/slowb.img" size=1G
      ;;
    *) die "BENCH_BACK must be nbd or file" ;;
  esac
  g_boot b$r "$rb_sock" bench ramback.conns="$conns"
  g_wait_mark b$r synced
  t0=$(date +%s.%N)
  ctl "$rb_ctl" sync 1800000 || die "ramback could not drain to the slow disk"
  td+=("$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')")
  g_wait_guest b$r
  tb+=("$(g_time b$r untar+sync)"); sb+=("$(g_time b$r sync)")
  say "ramback drained to the slow disk ${td[-1]} s after the guest's sync; it wrote back $(( $(status_field "$rb_ctl" stored_bytes) >> 20 )) MiB in all"
  g_stop rb
  if [ "$back" = nbd ]; then
    g_stop slowb
    say "ramback's slow disk served $(disk_ops slowb)"
  fi
  # What ramback wrote back is a clean ext4 with every file intact.
  g_check_image "$T/slowb.img" a b

  # (c) the pure-RAM bound.
  g_nbdkit mem memory 1G
  one_guest c$r "$mem_sock"
  tc+=("$secs"); sc+=("$ssecs")
  g_stop mem

  say "run $r: untar+sync (sync alone): slow ${ta[-1]} (${sa[-1]}) s, ramback ${tb[-1]} (${sb[-1]}) s, memory ${tc[-1]} (${sc[-1]}) s"
done

med () { local -n arr=$1; median "${arr[@]}"; }
a=$(med ta) b=$(med tb) c=$(med tc) d=$(med td)
as=$(med sa) bs=$(med sb) cs=$(med sc)

cat <<EOF

In the guest ($GUEST_ACCEL), $GUEST_FILES_A + $GUEST_FILES_B files, median of $runs run(s), seconds:
                                  untar+sync   sync alone
  (a) slow disk ($delay/request)   $(printf '%10s %12s' "$a" "$as")
  (b) ramback on it ($back)        $(printf '%10s %12s' "$b" "$bs")
  (c) nbdkit memory               $(printf '%10s %12s' "$c" "$cs")
  (a)/(b)                         $(printf '%10s %12s' "$(ratio "$a" "$b")" "$(ratio "$as" "$bs")")   (target >= 25)
  (b)/(c)                         $(printf '%10s %12s' "$(ratio "$b" "$c")" "$(ratio "$bs" "$cs")")   (target <= 1.2)
  slow disk cost ramback removes   $(awk -v a="$a" -v b="$b" -v c="$c" 'BEGIN { if (a > c) printf "%.0f%%", 100 * (a - b) / (a - c); else print "n/a" }')   ((a)-(b)) / ((a)-(c))
  ramback drained to the slow disk $d s after the guest's sync returned
  host load average: $load0 at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end
EOF
printf '%s\t%s\t%s\n' "slow disk ($delay/request)" "$a" "$as" \
  "ramback on it ($back)" "$b" "$bs" "nbdkit memory" "$c" "$cs" |
  WORK=$T plot_bars --log untar "a QEMU guest: untar and sync on ext4 over NBD" \
    "seconds (log scale)" "untar+sync" "sync alone"
WORK=$T list_charts
echo "bench-guest: slow=$a ramback=$b memory=$c sync_slow=$as sync_ramback=$bs sync_memory=$cs speedup=$(ratio "$a" "$b") vs_memory=$(ratio "$b" "$c") drain=$d accel=$GUEST_ACCEL delay=$delay back=$back"
