#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# bench-untar.sh: the headline on the host, as a new user would try it.
# The host kernel's own ext4 on its own loop device over nbdfuse
# (nothing of ours is loaded into any kernel); the time to untar a real
# source tree (Debian's linux-headers, ~9,400 files) and sync, on:
#   slow     the slow disk alone: nbdkit file + delay filter (every
#            read, write and zero takes --delay, default 8 ms)
#   ramback  ramback (writeback, defaults) whose backing store is that
#            same slow disk over NBD; ramback has drained the mkfs to
#            the slow disk before the timed part starts
#   memory   nbdkit memory: the pure-RAM bound
# Runs are interleaved (slow, ramback, memory, slow, ...); medians.
# Needs root (losetup, mount), nbdfuse, mkfs.ext4.  See
# bench/README.md; the QEMU guest variant is bench-guest.sh.
#
#   bench/bench-untar.sh [--build=DIR] [--runs=N] [--delay=8ms]
#                        [--size=2G] [--src=DIR] [--dir=DIR] [--plot[=DIR]]

set -euo pipefail
export PATH="/usr/bin:/bin:/usr/sbin:/sbin:$PATH"
export LC_ALL=C
prog=${0##*/}
srcdir=$(cd "$(dirname "$0")" && pwd)
build=${RAMBACK_BUILD:-}
runs=5 delay=8ms size=2G src= workroot=${TMPDIR:-/var/tmp}
for arg in "$@"; do
    case $arg in
        --build=*) build=${arg#*=} ;;
        --runs=*) runs=${arg#*=} ;;
        --delay=*) delay=${arg#*=} ;;
        --size=*) size=${arg#*=} ;;
        --src=*) src=${arg#*=} ;;
        --dir=*) workroot=${arg#*=} ;;
        --plot) plot=yes ;;
        --plot=*) plot=yes plotdir=${arg#*=} ;;
        -h|--help) sed -n '3,20p' "$0"; exit 0 ;;
        *) echo "$prog: unknown option '$arg'" >&2; exit 2 ;;
    esac
done
# die, log, start_server, stop_server, ctl, status_field (bench/lib.sh)
. "$srcdir/lib.sh"
find_build
[ "$(id -u)" = 0 ] || die "needs root (losetup, mount)"
for c in nbdkit nbdfuse losetup mkfs.ext4 tar; do
    command -v "$c" >/dev/null || die "'$c' is needed"
done
if [ -z "$src" ]; then
    src=$(ls -d /usr/src/linux-headers-*-common 2>/dev/null | head -1) ||
        true
    [ -n "$src" ] || die "no /usr/src/linux-headers-*-common: give --src=DIR"
fi
PY=/usr/bin/python3

WORK=$(mktemp -d "$workroot/ramback-bench-untar.XXXXXX")
mnt= loop= fuse=
# Undo attach, in order.  A loop device is detached only once nobody
# has it open (udev probes it after every change), and the FUSE file
# below it stays busy until then: wait for both, bounded.
teardown () {
    local i
    set +e
    [ -z "$mnt" ] || { umount "$mnt"; mnt=; }
    if [ -n "$loop" ]; then
        command -v udevadm >/dev/null && udevadm settle
        losetup -d "$loop"
        for (( i = 0; i < 600; i++ )); do
            [ -e "/sys/block/${loop#/dev/}/loop/backing_file" ] || break
            sleep 0.05
        done
        loop=
    fi
    if [ -n "$fuse" ]; then
        # As root, umount does what fusermount3 -u does.
        for (( i = 0; i < 100; i++ )); do
            umount "$fuse" 2>/dev/null && break
            sleep 0.1
        done
        if mountpoint -q "$fuse"; then
            echo "$prog: $fuse is still busy; unmounting it lazily" >&2
            umount -l "$fuse"
        fi
        fuse=
    fi
}
cleanup () {
    set +e
    teardown
    kill_servers
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# attach URI: nbdfuse, loop device, mkfs, mount at $WORK/mnt.
attach () {
    local i
    mkdir -p "$WORK/fuse" "$WORK/mnt"
    nbdfuse -P "$WORK/fuse.pid" "$WORK/fuse" "$1" &
    for (( i = 0; i < 3000; i++ )); do
        [ -s "$WORK/fuse.pid" ] && break
        sleep 0.01
    done
    [ -s "$WORK/fuse.pid" ] || die "nbdfuse did not start"
    fuse=$WORK/fuse
    loop=$(losetup -f --show "$WORK/fuse/nbd")
    mkfs.ext4 -q -F "$loop"
    mount "$loop" "$WORK/mnt"
    mnt=$WORK/mnt
}
detach () {
    teardown
    set -e
    rm -f "$WORK/fuse.pid"
}

log "packing $src ($(find "$src" -type f | wc -l) files) into a plain tar"
tar -C "$(dirname "$src")" -cf "$WORK/src.tar" "$(basename "$src")"
nfiles=$(tar -tf "$WORK/src.tar" | grep -vc '/$')
tarsz=$(( $(stat -c %s "$WORK/src.tar") >> 20 ))

# timed: untar and sync in the mounted file system; prints seconds.
timed () {
    local t0 t1
    sync
    t0=$EPOCHREALTIME
    tar -C "$mnt" -xf "$WORK/src.tar"
    sync
    t1=$EPOCHREALTIME
    awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }'
}

# ticks PID...: CPU clock ticks (user + system) of these processes.
ticks () {
    local p t=0 v
    for p in "$@"; do
        read -r -a v < <(sed 's/^.*) //' "/proc/$p/stat")
        t=$(( t + v[11] + v[12] ))
    done
    echo "$t"
}

declare -A res
for (( r = 1; r <= runs; r++ )); do
    for target in slow ramback memory; do
        rm -f "$WORK/slow.img"
        truncate -s "$size" "$WORK/slow.img"
        case $target in
        slow)
            start_server slow --filter=delay file "$WORK/slow.img" \
                delay-read="$delay" delay-write="$delay" delay-zero="$delay" \
                delay-trim="$delay"
            uri=$slow_uri ;;
        ramback)
            start_server slow --filter=delay file "$WORK/slow.img" \
                delay-read="$delay" delay-write="$delay" delay-zero="$delay" \
                delay-trim="$delay"
            start_server rb "$PLUGIN" back="$slow_uri" control="$WORK/rb.ctl"
            ctl "$WORK/rb.ctl" wait-populated
            uri=$rb_uri ;;
        memory)
            start_server mem memory "$size"
            uri=$mem_uri ;;
        esac
        attach "$uri"
        # ramback: the mkfs is on the slow disk before the timed part.
        [ "$target" != ramback ] || { sync; ctl "$WORK/rb.ctl" sync; }
        # The servers' CPU during the timed part (ramback: with the slow
        # disk's server, which receives the write back).
        case $target in
        slow) srv=("$slow_pid") ;;
        ramback) srv=("$rb_pid" "$slow_pid")
                 w0=$(status_field "$WORK/rb.ctl" written_bytes)
                 s0=$(status_field "$WORK/rb.ctl" stored_bytes) ;;
        memory) srv=("$mem_pid") ;;
        esac
        c0=$(ticks "${srv[@]}")
        secs=$(timed)
        c1=$(ticks "${srv[@]}")
        res[$target]+=" $secs"
        res[cpu_$target]+=" $(( c1 - c0 ))"
        extra=", servers' CPU $(( c1 - c0 )) ticks"
        if [ "$target" = ramback ]; then
            t0=$EPOCHREALTIME
            ctl "$WORK/rb.ctl" sync
            d=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }')
            res[drain]+=" $d"
            w1=$(status_field "$WORK/rb.ctl" written_bytes)
            s1=$(status_field "$WORK/rb.ctl" stored_bytes)
            res[amp]+=" $(awk -v w0="$w0" -v w1="$w1" -v s0="$s0" -v s1="$s1" \
                'BEGIN { w = w1 - w0; if (w < 1) w = 1; printf "%.2f", (s1 - s0) / w }')"
            extra+=", then drained to the slow disk in $d s; written back ${res[amp]##* }x what was written"
        fi
        log "run $r, $target: untar+sync $secs s$extra"
        detach
        case $target in
        slow) stop_server slow ;;
        ramback) stop_server rb; stop_server slow ;;
        memory) stop_server mem ;;
        esac
    done
done

SLOW="${res[slow]}" RB="${res[ramback]}" MEM="${res[memory]}" \
DRAIN="${res[drain]}" AMP="${res[amp]}" CSLOW="${res[cpu_slow]}" \
CRB="${res[cpu_ramback]}" CMEM="${res[cpu_memory]}" \
$PY - "$nfiles" "$tarsz" "$delay" "$runs" "$size" "$(getconf CLK_TCK)" \
    "$WORK/plot.tsv" <<'EOP'
import os, statistics as st, sys, time
nf, mb, delay, runs, size, tck, tsv = sys.argv[1:]
v = {k: [float(x) for x in os.environ[k].split()]
     for k in ("SLOW", "RB", "MEM", "DRAIN", "AMP", "CSLOW", "CRB", "CMEM")}
m = {k: st.median(x) for k, x in v.items()}
print("ramback bench-untar: %s, %s, %d CPUs; host ext4 on loop on nbdfuse, %s device;"
      % (time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()), os.uname().release,
         os.cpu_count(), size))
print("untar of %s files (%s MiB) + sync, medians of %s; slow disk: nbdkit file + delay %s"
      % (nf, mb, runs, delay))
print()
print("%-10s %9s %11s   %s" % ("", "seconds", "server CPU", "runs (seconds)"))
for k, name in (("SLOW", "slow"), ("RB", "ramback"), ("MEM", "memory")):
    print("%-10s %9.2f %9.2f s   %s" % (name, m[k], m["C" + k] / float(tck),
                                       " ".join("%.2f" % x for x in v[k])))
print()
print("ramback vs slow disk: %.1fx faster (target >= 30x)" % (m["SLOW"] / m["RB"]))
print("ramback vs memory:    %.2fx the time (target <= 1.1x)" % (m["RB"] / m["MEM"]))
print("ramback's drain to the slow disk after the sync: %.1f s (median)" % m["DRAIN"])
print("ramback's write amplification (stored / written bytes): %.2f (median)" % m["AMP"])
print("(server CPU: ramback's nbdkit plus the slow disk's, which receives the write back)")
with open(tsv, "w") as f:
    for k, name in (("SLOW", "slow disk (delay %s)" % delay),
                    ("RB", "ramback on it"), ("MEM", "nbdkit memory")):
        f.write("%s\t%g\n" % (name, m[k]))
EOP
plot_bars --log untar "untar of $nfiles files and sync, ext4 over NBD" \
    "seconds (log scale)" "seconds (median)" < "$WORK/plot.tsv"
list_charts
