#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# bench-remote.sh: remote disk acceleration.  In one run, side
# by side, a client using a slow remote NBD export directly against the
# same client through ramback (back=nbd+unix://..., fsync=ignore):
#
#   1. fio 4k random write, QD1, fsync after every write
#   2. fio 4k random read, QD1, after populate
#      remote: nbdkit memory behind --filter=delay (DELAY per request)
#   3. drain: a full image of dirty data written back (until "sync")
#   4. populate: the full image loaded (until "wait-populated")
#      remote: nbdkit file behind the delay and rate filters, so the
#      link's bandwidth is known (--rate); also measured with nbdcopy.
#
# Targets: 1 and 2 at least 25x faster through ramback, 3 and 4
# at least 80% of the link's bandwidth.
#
#   bench/bench-remote.sh [--quick] [--build=DIR] [--dir=DIR] [--size=SIZE]
#       [--bw-size=SIZE] [--delay=MS] [--rate=BYTES/S] [--runtime=S]
#       [--output=FILE] [--plot[=DIR]] [--strict] [--keep]
#
# Exit status: 0 when the benchmark ran (targets missed or not, unless
# --strict: then 3 if a target is missed), 1 if something failed to run,
# 2 on bad usage.

set -euo pipefail
# die, size_arg, start_server, ctl, status_field, arithmetic (bench/lib.sh, which
# also sets PATH, LC_ALL=C, prog and srcdir)
. "$(dirname "$0")/lib.sh"

usage () {
    cat <<EOF
Usage: $prog [OPTION...]

Benchmark ramback in front of a slow NBD remote against the remote used
directly: fio 4k QD1 random write with fsync and random read, and drain
and populate bandwidth against a rate-capped link.

  --build=DIR     ramback build tree (default: \$RAMBACK_BUILD, else the
                  directory above this script if the plugin is there)
  --dir=DIR       where the work directory goes (default: \${TMPDIR:-/var/tmp})
  --size=SIZE     device size for the fio parts (default 256M, --quick 64M)
  --bw-size=SIZE  image drained and populated (default 256M, --quick 64M)
  --delay=MS      remote delay per request in ms (default 5)
  --rate=SIZE     link bandwidth cap in bytes/s (default 25M, --quick 16M)
  --runtime=S     seconds per fio job (default 10, --quick 4)
  --quick         smaller and shorter (about a minute)
  --output=FILE   also write the result table to FILE
  --plot[=DIR]    also draw the table as SVG charts (gnuplot) in DIR
                  (default: beside --output=, else here)
  --strict        exit 3 if any target is missed
  --keep          keep the work directory
EOF
}

size=; bw_size=; delay=5; rate=; runtime=; quick=no; output=; strict=no
keep=no; build=${RAMBACK_BUILD:-}

for arg in "$@"; do
    case $arg in
        --size=*) size=${arg#*=} ;;
        --bw-size=*) bw_size=${arg#*=} ;;
        --delay=*) delay=${arg#*=} ;;
        --rate=*) rate=${arg#*=} ;;
        --runtime=*) runtime=${arg#*=} ;;
        *) bench_opt "$arg" ;;
    esac
done
if [ "$quick" = yes ]; then
    : "${size:=64M}" "${bw_size:=64M}" "${rate:=16M}" "${runtime:=4}"
else
    : "${size:=256M}" "${bw_size:=256M}" "${rate:=25M}" "${runtime:=10}"
fi

size_b=$(size_arg "$size")
bw_size_b=$(size_arg "$bw_size")
rate_b=$(size_arg "$rate")
for v in "$delay" "$runtime"; do
    [[ $v =~ ^[0-9]+$ ]] || { echo "$prog: bad number '$v'" >&2; exit 2; }
done

find_build
for c in nbdkit fio nbdcopy /usr/bin/python3; do
    command -v "$c" >/dev/null ||
        die "'$c' is needed (apt-get install nbdkit fio libnbd-bin python3)"
done

W=$(mktemp -d "${workroot:-${TMPDIR:-/var/tmp}}/bench-remote.XXXXXX")
WORK=$W
cleanup () {
    local p
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    if [ "$keep" = yes ]; then echo "work directory kept: $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT INT TERM

# start_nbdkit NAME ARGS...: nbdkit -f on $W/NAME.sock; sets NAME_pid.
start_nbdkit () { start_server "$@"; }

stop_nbdkit () {
    local pid=$1 i
    kill -TERM "$pid" 2>/dev/null || return 0
    for (( i=0; i<3000; i++ )); do
        [ -r "/proc/$pid/stat" ] || return 0
        [ "$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)" = Z ] && return 0
        sleep 0.05
    done
    die "nbdkit $pid did not exit"
}

uri () { echo "nbd+unix:///?socket=$W/$1.sock"; }

# fio_iops URI RW: one 4k QD1 job (randwrite gets fsync=1), prints IOPS.
fio_iops () {
    local u=$1 rw=$2 extra=()
    [ "$rw" = randwrite ] && extra=(--fsync=1)
    fio --name=bench --ioengine=nbd --uri="$u" --rw="$rw" --bs=4k \
        --iodepth=1 --size="$size_b" --time_based --runtime="$runtime" \
        --norandommap --randrepeat=0 "${extra[@]}" \
        --output-format=json --output="$W/fio.json" >"$W/fio.err" 2>&1 ||
        { cat "$W/fio.err" >&2; die "fio $rw on $u failed"; }
    /usr/bin/python3 -c '
import json, sys
j = json.load (open (sys.argv[1]))["jobs"][0]
print ("%.1f" % (j["read"]["iops"] + j["write"]["iops"]))' "$W/fio.json"
}

# secs T0 T1: T1 - T0 with two decimals
secs () { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

echo "== $prog: size $size, bw-size $bw_size, delay ${delay}ms, rate $rate/s, fio ${runtime}s"

# --- 1, 2: latency: fio against the delayed remote, direct vs ramback ---
delays=(delay-read="${delay}ms" delay-write="${delay}ms"
        delay-zero="${delay}ms" delay-trim="${delay}ms"
        delay-extents="${delay}ms")
start_nbdkit slow --filter=delay memory "$size_b" "${delays[@]}"
# Give the remote real data so that populate has something to read.
head -c "$size_b" /dev/urandom >"$W/rand.img"
nbdcopy "$W/rand.img" "$(uri slow)"

echo "-- fio 4k randwrite QD1 fsync=1: direct"
w_direct=$(fio_iops "$(uri slow)" randwrite)
echo "-- fio 4k randread QD1: direct"
r_direct=$(fio_iops "$(uri slow)" randread)

start_nbdkit rb "$PLUGIN" back="$(uri slow)" control="$W/rb.ctl" fsync=ignore
t0=$(now)
ctl "$W/rb.ctl" "wait-populated 600000"
t1=$(now)
echo "   (populate of $size over the delayed link: $(secs "$t0" "$t1") s)"
echo "-- fio 4k randwrite QD1 fsync=1: ramback"
w_rb=$(fio_iops "$(uri rb)" randwrite)
echo "-- fio 4k randread QD1: ramback"
r_rb=$(fio_iops "$(uri rb)" randread)
stop_nbdkit "$rb_pid"
stop_nbdkit "$slow_pid"

# --- 3, 4: bandwidth against a rate-capped, delayed link ---------------
rate_bits=$((rate_b * 8))
burst=0.5
truncate -s "$bw_size_b" "$W/link.img"
# burstiness: the rate filter's bucket, in seconds of rate.  It is full
# at the start of each measurement (we idle 1 s first), so BURST bytes
# pass at once; the figures against the cap subtract them.
start_nbdkit link --filter=delay --filter=rate file "$W/link.img" \
    "${delays[@]}" rate="$rate_bits" burstiness="$burst"
head -c "$bw_size_b" /dev/urandom >"$W/bw.img"

echo "-- link: nbdcopy write and read, direct"
sleep 1
t0=$(now); nbdcopy "$W/bw.img" "$(uri link)"; t1=$(now)
link_w=$(fdiv "$bw_size_b" "$(fsub "$t1" "$t0")")
sleep 1
t0=$(now); nbdcopy "$(uri link)" null:; t1=$(now)
link_r=$(fdiv "$bw_size_b" "$(fsub "$t1" "$t0")")
# Make it a hole again: the drain must write all of it.
stop_nbdkit "$link_pid"
rm -f "$W/link.img"; truncate -s "$bw_size_b" "$W/link.img"
start_nbdkit link --filter=delay --filter=rate file "$W/link.img" \
    "${delays[@]}" rate="$rate_bits" burstiness="$burst"

echo "-- drain: $bw_size of dirty data through ramback"
start_nbdkit rbw "$PLUGIN" back="$(uri link)" control="$W/rbw.ctl"
ctl "$W/rbw.ctl" "wait-populated 600000"
sleep 1
t0=$(now)
nbdcopy "$W/bw.img" "$(uri rbw)"
t_written=$(now)
ctl "$W/rbw.ctl" "sync 3600000"
t1=$(now)
drain=$(fdiv "$bw_size_b" "$(fsub "$t1" "$t0")")
echo "   (written into RAM in $(secs "$t0" "$t_written") s, drained in $(secs "$t0" "$t1") s)"
stop_nbdkit "$rbw_pid"
cmp "$W/bw.img" "$W/link.img" || die "the remote does not hold what was written"

echo "-- populate: $bw_size through ramback"
sleep 1
t0=$(now)
start_nbdkit rbp "$PLUGIN" back="$(uri link)" control="$W/rbp.ctl"
ctl "$W/rbp.ctl" "wait-populated 3600000"
t1=$(now)
populate=$(fdiv "$bw_size_b" "$(fsub "$t1" "$t0")")
loaded=$(status_field "$W/rbp.ctl" loaded_bytes)
conns=$(status_field "$W/rbp.ctl" store_connections)
inflight=$(status_field "$W/rbp.ctl" store_inflight_max)
[ "$loaded" -eq "$bw_size_b" ] || die "populate loaded $loaded bytes, not $bw_size_b"
nbdcopy "$(uri rbp)" "$W/check.img"
cmp "$W/bw.img" "$W/check.img" || die "populated device differs"
stop_nbdkit "$rbp_pid"
stop_nbdkit "$link_pid"

# --- table ---------------------------------------------------------------
rc=0
/usr/bin/python3 - "$w_direct" "$w_rb" "$r_direct" "$r_rb" "$rate_b" \
    "$link_w" "$link_r" "$drain" "$populate" "$bw_size_b" "$burst" \
    "$delay" "$conns" "$inflight" "$strict" "${output:-}" "$W" <<'EOP' || rc=$?
import sys
(wd, wr, rd, rr, rate, lw, lr, dr, po, size, burst) = map (float, sys.argv[1:12])
delay, conns, inflight, strict, output, work = sys.argv[12:18]
# Bandwidths as if the bucket had been empty: the first rate*burst
# bytes passed for free.
def net (bw):
    t = size / bw
    return (size - rate * burst) / t
lw, lr, dr, po = map (net, (lw, lr, dr, po))
MiB = 1 << 20
rows = []
missed = 0
def row (name, direct, rb, unit, ratio, target, ok):
    global missed
    missed += not ok
    rows.append ((name, direct, rb, unit, ratio, target, "ok" if ok else "MISSED"))

row ("4k randwrite QD1 fsync=1", "%.0f" % wd, "%.0f" % wr, "IOPS",
     "%.1fx" % (wr / wd), ">= 25x", wr / wd >= 25)
row ("4k randread QD1 populated", "%.0f" % rd, "%.0f" % rr, "IOPS",
     "%.1fx" % (rr / rd), ">= 25x", rr / rd >= 25)
row ("drain (write back)", "%.1f" % (rate / MiB), "%.1f" % (dr / MiB),
     "MiB/s", "%.0f%%" % (100 * dr / rate), ">= 80%", dr >= 0.8 * rate)
row ("populate", "%.1f" % (rate / MiB), "%.1f" % (po / MiB),
     "MiB/s", "%.0f%%" % (100 * po / rate), ">= 80%", po >= 0.8 * rate)

hdr = ("measurement", "direct", "ramback", "unit", "ratio", "target", "")
w = [max (len (str (r[i])) for r in rows + [hdr]) for i in range (len (hdr))]
lines = ["remote: %s ms per request (delay filter); link cap %.1f MiB/s "
         "(rate filter); %s connections, up to %s requests in flight"
         % (delay, rate / MiB, conns, inflight)]
for r in [hdr] + rows:
    lines.append ("  ".join (str (c).ljust (w[i]) for i, c in enumerate (r)))
lines.append ("link measured with nbdcopy (direct, many requests in flight): "
              "write %.1f MiB/s, read %.1f MiB/s; drain is %.0f%% and "
              "populate %.0f%% of those"
              % (lw / MiB, lr / MiB, 100 * dr / lw, 100 * po / lr))
lines.append ("drain/populate 'direct' column: the rate= cap of the link; "
              "all bandwidths less the rate filter's initial burst "
              "(%.1f s of rate)" % burst)
text = "\n".join (lines)
with open (work + "/plot-iops.tsv", "w") as f:
    f.write ("4k randwrite QD1 fsync=1\t%g\t%g\n" % (wd, wr))
    f.write ("4k randread QD1 populated\t%g\t%g\n" % (rd, rr))
with open (work + "/plot-bw.tsv", "w") as f:
    f.write ("drain (write back)\t%g\t%g\n" % (rate / MiB, dr / MiB))
    f.write ("populate\t%g\t%g\n" % (rate / MiB, po / MiB))
print ()
print (text)
if output:
    with open (output, "w") as f:
        f.write (text + "\n")
sys.exit (3 if strict == "yes" and missed else 0)
EOP
plot_bars --log iops "a remote store ${delay} ms away: 4 KiB at queue depth 1" \
    "IOPS (log scale)" "direct" "ramback" < "$W/plot-iops.tsv"
plot_bars bandwidth "a remote store behind a capped link" MiB/s \
    "link cap" "ramback" < "$W/plot-bw.tsv"
list_charts
exit $rc
