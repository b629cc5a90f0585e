#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# bench-journal.sh: what journal= costs and buys, side by side.
#
#   bench/bench-journal.sh [--build=DIR] [--dir=DIR] [--size=SIZE]
#                          [--runtime=SECONDS] [--repeat=N] [--delay=MS]
#                          [--journal-dir=DIR] [--drain=SIZE]
#                          [--only=fio|drain] [--plot[=DIR]]
#
# --plot draws the two tables as SVG charts (gnuplot) in DIR (default:
# the current directory).
# Three ramback configurations on the same machine, in paired runs (each
# round runs every configuration once, in turn; medians are kept):
#   plain     back=IMG fsync=wait                 (no journal)
#   journal   back=IMG fsync=wait journal=JNL      (journal beside it)
#   nbdkit    nbdkit file IMG                      (no ramback)
# Jobs (fio, nbd engine, one connection):
#   fsync4k      4k random writes, QD1, fsync after each (IOPS)
#   randwrite4k  4k random writes, QD16, no fsync (IOPS)
# With --delay=MS the backing store is remote instead: nbdkit memory
# behind the delay filter (MS each way), and the journal a local file;
# then "nbdkit" is that remote directly.  --journal-dir=DIR puts the
# fio runs' journal there (default: beside the backing image, the same
# disk; /dev/shm stands in for a fast separate device).
# Drain (local backing only, --drain=SIZE, default 256M, 0: skip): SIZE
# written sequentially (1M, QD8, no FLUSH) through a journal of SIZE/4,
# then SIGTERM: writers wait for journal space, so the time from the
# first write to the exit is the sustained write-back through the
# journal (appends pipelined with the in-place writes of the previous
# transactions).  Against the backing disk's own sequential write (dd
# oflag=direct conv=fsync of SIZE), with the journal on the same disk
# (drain-same) and on /dev/shm (drain-sep); plain is the same without
# a journal (RAM first, written back behind).
#
# Exit status: 0 when it ran, 1 if something failed, 2 on bad usage.

set -euo pipefail
export PATH="/usr/bin:/bin:/usr/sbin:/sbin:$PATH"
export LC_ALL=C

prog=${0##*/}
srcdir=$(cd "$(dirname "$0")" && pwd)
build=${RAMBACK_BUILD:-$srcdir/..}
workroot=${TMPDIR:-/var/tmp}
size=256M runtime=5 repeat=3 delay=0 jdir= drain=256M only=

for arg in "$@"; do
    case $arg in
        --build=*) build=${arg#*=} ;;
        --dir=*) workroot=${arg#*=} ;;
        --size=*) size=${arg#*=} ;;
        --runtime=*) runtime=${arg#*=} ;;
        --repeat=*) repeat=${arg#*=} ;;
        --delay=*) delay=${arg#*=} ;;
        --journal-dir=*) jdir=${arg#*=} ;;
        --drain=*) drain=${arg#*=} ;;
        --only=*) only=${arg#*=} ;;
        --plot) plot=yes ;;
        --plot=*) plot=yes plotdir=${arg#*=} ;;
        -h|--help) sed -n '3,34p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "$prog: unknown option $arg" >&2; exit 2 ;;
    esac
done
PLUGIN=$build/plugin/.libs/nbdkit-ramback-plugin.so
[ -f "$PLUGIN" ] || { echo "$prog: no plugin in $build" >&2; exit 1; }
command -v fio >/dev/null || { echo "$prog: fio is needed" >&2; exit 1; }

W=$(mktemp -d "$workroot/bench-journal.XXXXXX")
J=$(mktemp -d "${jdir:-$W}/bench-journal-j.XXXXXX")
S=
WORK=$W
# die, size_arg, start_server, stop_server, fio_metric, median, ratio
. "$srcdir/lib.sh"
cleanup () {
    kill_servers
    rm -rf "$W" "$J" ${S:+"$S"}
}
trap cleanup EXIT

size_b=$(size_arg "$size")
uri () { echo "nbd+unix:///?socket=$W/$1.sock"; }

start () { start_server "$@"; }
stop () { stop_server "$1"; }

fio_iops () {
    local u=$1 job=$2 extra=()
    case $job in
        fsync4k) extra=(--iodepth=1 --fsync=1) ;;
        randwrite4k) extra=(--iodepth=16) ;;
    esac
    fio --name=bench --ioengine=nbd --uri="$u" --rw=randwrite --bs=4k \
        --size="$size_b" --time_based --runtime="$runtime" \
        --norandommap --randrepeat=0 "${extra[@]}" \
        --output-format=json --output="$W/fio.json" >"$W/fio.err" 2>&1 ||
        { cat "$W/fio.err" >&2; die "fio $job on $u failed"; }
    printf '%.1f\n' "$(fio_metric "$W/fio.json" write iops)"
}

if [ "$delay" -gt 0 ]; then
    d="${delay}ms"
    start remote --filter=delay memory "$size_b" delay-read=$d \
        delay-write=$d delay-zero=$d delay-trim=$d delay-extents=$d
    back=$(uri remote)
    direct=$(uri remote)
else
    truncate -s "$size_b" "$W/back.img"
    back=$W/back.img
fi
# Written in full, as a partition would be: appends into the holes of
# a sparse file make every journal sync commit file system metadata too.
dd if=/dev/zero of="$J/journal.img" bs=1M count=256 status=none

declare -A res
configs=(plain journal nbdkit)
jobs=(fsync4k randwrite4k)
where="a local file"
[ "$delay" -eq 0 ] || where="remote, ${delay} ms each way"
echo "== $prog: size $size, fio ${runtime}s, $repeat rounds, backing $where," \
     "journal in ${jdir:-the same directory}"
[ "$only" = drain ] && repeat_fio=0 || repeat_fio=$repeat
for (( r=0; r<repeat_fio; r++ )); do
    for c in "${configs[@]}"; do
        case $c in
            plain) start s "$PLUGIN" back="$back" fsync=wait ;;
            journal)
                dd if=/dev/zero of="$J/journal.img" bs=4096 count=1 \
                   conv=notrunc status=none
                start s "$PLUGIN" back="$back" fsync=wait \
                    journal="$J/journal.img" ;;
            nbdkit)
                if [ "$delay" -gt 0 ]; then
                    u=$direct
                else
                    start s file "$W/back.img"
                fi ;;
        esac
        [ "$c" = nbdkit ] && [ "$delay" -gt 0 ] || u=$(uri s)
        for j in "${jobs[@]}"; do
            v=$(fio_iops "$u" "$j")
            res[$c,$j]="${res[$c,$j]:-} $v"
            echo "   round $r $c $j: $v IOPS"
        done
        [ "$c" = nbdkit ] && [ "$delay" -gt 0 ] || stop s
    done
done

[ "$only" = drain ] || {
echo
printf '%-12s %10s %10s %10s %14s %14s\n' job plain journal nbdkit \
    journal/plain journal/nbdkit
for j in "${jobs[@]}"; do
    # shellcheck disable=SC2086
    p=$(median ${res[plain,$j]})
    # shellcheck disable=SC2086
    q=$(median ${res[journal,$j]})
    # shellcheck disable=SC2086
    n=$(median ${res[nbdkit,$j]})
    printf '%-12s %10s %10s %10s %14s %14s\n' "$j" "$p" "$q" "$n" \
        "$(ratio "$q" "$p")x" "$(ratio "$q" "$n")x"
    printf '%s\t%s\t%s\t%s\n' "$j" "$p" "$q" "$n" >> "$W/plot-fio.tsv"
done
backing="a local file"
[ "$delay" -eq 0 ] || backing="a remote ${delay} ms away"
plot_bars --log fio "journal= on $backing: 4 KiB random writes" \
    "IOPS (log scale)" "ramback" "ramback journal=" "nbdkit file" \
    < "$W/plot-fio.tsv"
}

# ---- drain ----
drain_b=$(size_arg "$drain")
if [ "$delay" -ne 0 ] || [ "$drain_b" -eq 0 ] || [ "$only" = fio ]; then
    list_charts
    exit 0
fi

S=$(mktemp -d /dev/shm/bench-journal.XXXXXX)
jmib=$(( drain_b / 4 / 1048576 ))
[ "$jmib" -ge 16 ] || jmib=16
dd if=/dev/zero of="$J/journal.img" bs=1M count=$jmib status=none
dd if=/dev/zero of="$S/journal.img" bs=1M count=$jmib status=none
head -c "$drain_b" /dev/urandom >"$W/drain.src"
declare -A dr
dconfigs=(seq plain drain-same drain-sep)
echo
echo "== drain of $drain ($repeat rounds)"
for (( r=0; r<repeat; r++ )); do
    for c in "${dconfigs[@]}"; do
        if [ "$c" = seq ]; then
            t0=$(now)
            dd if="$W/drain.src" of="$W/back.img" bs=1M oflag=direct \
               conv=fsync,notrunc status=none
            t1=$(now)
        else
            jf=$J/journal.img
            [ "$c" = drain-sep ] && jf=$S/journal.img
            dd if=/dev/zero of="$jf" bs=4096 count=1 conv=notrunc status=none
            if [ "$c" = plain ]; then
                start s "$PLUGIN" back="$W/back.img"
            else
                start s "$PLUGIN" back="$W/back.img" journal="$jf" \
                    commit-interval=3600
            fi
            t0=$(now)
            fio --name=fill --ioengine=nbd --uri="$(uri s)" --rw=write \
                --bs=1M --size="$drain_b" --iodepth=8 \
                --buffer_compress_percentage=0 --refill_buffers \
                --output="$W/fio.err" >/dev/null 2>&1 ||
                { cat "$W/fio.err" >&2; die "fio fill failed"; }
            stop s
            t1=$(now)
        fi
        mbs=$(awk -v b="$drain_b" -v a="$t0" -v z="$t1" \
            'BEGIN { printf "%.1f", b / 1048576 / (z - a) }')
        dr[$c]="${dr[$c]:-} $mbs"
        echo "   round $r $c: $mbs MiB/s"
    done
done
echo
printf '%-12s %10s %10s\n' config 'MiB/s' '/seq'
# shellcheck disable=SC2086
sq=$(median ${dr[seq]})
for c in "${dconfigs[@]}"; do
    # shellcheck disable=SC2086
    v=$(median ${dr[$c]})
    printf '%-12s %10s %10s\n' "$c" "$v" "$(ratio "$v" "$sq")x"
    printf '%s\t%s\n' "$c" "$v" >> "$W/plot-drain.tsv"
done
plot_bars drain "drain of $drain through the journal, against dd" MiB/s \
    "MiB/s (median)" < "$W/plot-drain.tsv"
list_charts
