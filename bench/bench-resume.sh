#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# bench-resume.sh: how long a restart takes until the first read is
# served, after kill -9 of a ramback whose whole device is dirty in a
# ram= file (resume), against a cold start that populates.
#
#   bench/bench-resume.sh --build=BUILDDIR [--size=4G] [--dir=DIR]
#                         [--ramdir=/dev/shm] [--cold] [--plot[=DIR]]
#
# Steps:
#   1. back.img of SIZE, written in full (allocated: populate reads it
#      all; no holes to skip);
#   2. cold start: ramback back= ram= (a new file): the time until the
#      first 4 KiB read at a random offset is served, and until status
#      says populated (the whole image in RAM);
#   3. flush-rate=1K (nothing drains), the whole device overwritten
#      with nbdcopy from nbdkit's pattern plugin, kill -9;
#   4. restart on the same ram= and back=: the time until the first read
#      is served and until status says populated, then how long the
#      write back of the resumed dirty data takes.
# The times start when nbdkit is executed.  The page cache holds
# back.img for step 2 unless --cold (as root: drop_caches first),
# which makes populate slower: the ratio printed is then larger.
# --plot draws the times as an SVG chart (gnuplot) in DIR (default: .).
# Memory: SIZE on RAMDIR plus up to SIZE of page cache.

set -euo pipefail
export PATH=/usr/bin:/bin:/usr/sbin:/sbin:$PATH

build= size=4G dir=${TMPDIR:-/var/tmp} ramdir=/dev/shm cold=false plotdir=
for a in "$@"; do
    case $a in
        --build=*) build=${a#*=} ;;
        --size=*) size=${a#*=} ;;
        --dir=*) dir=${a#*=} ;;
        --ramdir=*) ramdir=${a#*=} ;;
        --cold) cold=true ;;
        --plot) plotdir=. ;;
        --plot=*) plotdir=${a#*=} ;;
        *) sed -n '3,25p' "$0"; exit 2 ;;
    esac
done
[ -n "$build" ] || { echo "--build=BUILDDIR is required" >&2; exit 2; }
plugin=$build/plugin/.libs/nbdkit-ramback-plugin.so
[ -f "$plugin" ] || { echo "no plugin at $plugin" >&2; exit 1; }

rbctl=$(cd "$(dirname "$0")/../tests" && pwd)/rbctl.py
w=$(mktemp -d "$dir/bench-resume.XXXXXX")
ram=$ramdir/bench-resume-$$.img
pid=
cleanup () {
    [ -z "$pid" ] || kill -9 "$pid" 2>/dev/null || true
    rm -rf "$w" "$ram"
}
trap cleanup EXIT

now () { date +%s.%N; }
ms () { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.0f", (b - a) * 1000 }'; }

# start ARGS...: nbdkit in the background; sets pid and t_exec.
start () {
    rm -f "$w/s.sock" "$w/c.sock" "$w/pid"
    t_exec=$(now)
    nbdkit -f -U "$w/s.sock" -P "$w/pid" "$plugin" back="$w/back.img" \
        ram="$ram" control="$w/c.sock" "$@" >>"$w/log" 2>&1 &
    pid=$!
}

# measure: poll until a 4 KiB read at a random offset is served, then
# until status says populated; prints both in ms since t_exec.
measure () {
    /usr/bin/python3 - "$w/s.sock" "$w/c.sock" "$t_exec" <<'EOF'
import json, os, random, socket, sys, time
import nbd
sock, ctl, t0 = sys.argv[1], sys.argv[2], float (sys.argv[3])
while True:
    if os.path.exists (sock):
        try:
            h = nbd.NBD ()
            h.connect_unix (sock)
            off = random.randrange (0, h.get_size () // 4096) * 4096
            h.pread (4096, off)
            break
        except nbd.Error:
            pass
    time.sleep (0.001)
t_first = time.time () - t0
s = socket.socket (socket.AF_UNIX)
s.connect (ctl)
f = s.makefile ()
while True:
    s.sendall (b"status json\n")
    st = json.loads (f.readline ())
    f.readline ()
    if st["populated"]:
        break
    time.sleep (0.001)
print ("%.0f %.0f" % (t_first * 1000, (time.time () - t0) * 1000))
EOF
}

# status FIELD: one field of "status json" (waits for the server to
# answer; tests/rbctl.py).
status () {
    /usr/bin/python3 "$rbctl" --wait --field "$w/c.sock" "$1"
}

wait_for () {  # FIELD VALUE
    while [ "$(status "$1")" != "$2" ]; do sleep 0.1; done
}

echo "size $size, back.img in $dir, ram= in $ramdir"
bytes=$(numfmt --from=iec "$size")
dd if=/dev/zero bs=1M count=$((bytes >> 20)) of="$w/back.img" \
    status=none conv=fsync

if $cold; then
    sync; echo 3 > /proc/sys/vm/drop_caches
fi
start
read -r t_first t_pop < <(measure)
echo "cold start:     first read after $t_first ms, populated after $t_pop ms"

kill -TERM "$pid"; wait "$pid" || true
start flush-rate=1K resume=discard
wait_for populated true
nbdcopy --flush -- [ nbdkit pattern "$size" ] "nbd+unix:///?socket=$w/s.sock"
dirty=$(status dirty_bytes)
echo "dirty before kill -9: $dirty bytes"
kill -9 "$pid"; wait "$pid" 2>/dev/null || true

start
read -r t_first_r t_pop_r < <(measure)
echo "resume:         first read after $t_first_r ms, populated after $t_pop_r ms" \
     "($(status image_source), $(status resumed_chunks_to_write) chunks to write back)"
t0=$(now)
/usr/bin/python3 "$rbctl" "$w/c.sock" sync
echo "write back of the resumed dirty data: $(ms "$t0" "$(now)") ms (served meanwhile)"
kill -TERM "$pid"; wait "$pid" || true
pid=
cmp <(nbdkit -U - pattern "$size" --run 'nbdcopy "$uri" -') "$w/back.img" &&
    echo "back.img == the pattern written before kill -9"
awk -v p="$t_pop" -v r="$t_pop_r" -v f="$t_first_r" 'BEGIN {
    printf "ratio: cold populate / resume until populated: %.0fx", p / r
    printf " (resume served its first read after %d ms)\n", f }'
if [ -n "$plotdir" ]; then
    mkdir -p "$plotdir"
    printf 'cold start (populate)\t%s\t%s\nresume (ram= file)\t%s\t%s\n' \
        "$t_first" "$t_pop" "$t_first_r" "$t_pop_r" |
        /usr/bin/python3 "$(dirname "$0")/plot.py" "$plotdir/bench-resume.svg" \
            "restart of a $size device, kill -9 with all of it dirty" \
            "milliseconds (log scale)" "first read served" "populated" --log
    echo "chart: $plotdir/bench-resume.svg"
fi
