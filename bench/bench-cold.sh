#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# bench-cold.sh: misses before populate has loaded the device.  A slow
# remote NBD export (nbdkit file behind the delay and rate filters),
# used directly and through ramback (plugin and filter form) that was
# just started, so populate runs and almost nothing is loaded: fio 4k
# random read and random write, iodepth 32.  Each ramback run starts a
# new ramback on the same export (cold again); the runs are paired
# (direct, ramback, ... interleaved) and the medians kept.  With
# --base=DIR the ramback of another build tree (e.g. the previous
# version) is measured in the same run, side by side.  A plugin with
# populate=false (misses only) is measured too, for reference.  Then
# populate alone: the time a new ramback takes to load a device of
# --fill-size over the same link with no client (until wait-populated
# returns), against nbdcopy of the export (the link's capacity), paired
# the same way.
#
# Target: ramback >= 0.9x the export direct, with the default chunk
# size (a miss loads the sectors it asks for, not the chunk).
#
#   bench/bench-cold.sh [--quick] [--build=DIR] [--base=DIR] [--dir=DIR]
#       [--size=SIZE] [--fill-size=SIZE] [--delay=MS] [--rate=BITS/S] [--runtime=S]
#       [--repeat=N] [--output=FILE] [--strict] [--keep]
#
# Exit status: 0 when the benchmark ran (targets missed or not, unless
# --strict: then 3 if a target is missed), 1 if something failed to run,
# 2 on bad usage.

set -euo pipefail
# die, log, size_arg, median, start_server, the arithmetic (bench/lib.sh,
# which also sets PATH, LC_ALL=C, prog and srcdir)
. "$(dirname "$0")/lib.sh"

usage () {
    cat <<EOF
Usage: $prog [OPTION...]

Benchmark 4k random I/O through a ramback that has just started (cold:
populate has loaded almost nothing) against a slow remote NBD export
used directly.

  --build=DIR     ramback build tree (default: \$RAMBACK_BUILD, else the
                  directory above this script if the plugin is there)
  --base=DIR      another build tree measured side by side (a baseline)
  --dir=DIR       where the work directory goes (default: \${TMPDIR:-/var/tmp})
  --size=SIZE     device size (default 256M, --quick 64M): populate must
                  not finish during a run (at 25 Mbit/s, 256M takes 80 s)
  --fill-size=SIZE  device size for populate alone (default 32M, --quick 16M)
  --delay=MS      remote delay per request in ms (default 5)
  --rate=BITS     the rate filter's cap, in bits per second (its unit;
                  default 25M)
  --runtime=S     seconds per fio job (default 10, --quick 4)
  --repeat=N      paired runs, the median kept (default 3, --quick 1)
  --quick         smaller and shorter
  --output=FILE   also write the result table to FILE
  --strict        exit 3 if a target is missed
  --keep          keep the work directory
EOF
}

size=; fill_size=; delay=5; rate=25M; runtime=; repeat=; quick=no; output=
strict=no; keep=no; build=${RAMBACK_BUILD:-}; base=

for arg in "$@"; do
    case $arg in
        --size=*) size=${arg#*=} ;;
        --fill-size=*) fill_size=${arg#*=} ;;
        --delay=*) delay=${arg#*=} ;;
        --rate=*) rate=${arg#*=} ;;
        --runtime=*) runtime=${arg#*=} ;;
        --repeat=*) repeat=${arg#*=} ;;
        --base=*) base=${arg#*=} ;;
        *) bench_opt "$arg" ;;
    esac
done
if [ "$quick" = yes ]; then
    : "${size:=64M}" "${fill_size:=16M}" "${runtime:=4}" "${repeat:=1}"
else
    : "${size:=256M}" "${fill_size:=32M}" "${runtime:=10}" "${repeat:=3}"
fi
size_b=$(size_arg "$size")
fill_b=$(size_arg "$fill_size")
rate_b=$(size_arg "$rate")
for v in "$delay" "$runtime" "$repeat"; do
    [[ $v =~ ^[0-9]+$ ]] || { echo "$prog: bad number '$v'" >&2; exit 2; }
done

find_build filter
BASE_PLUGIN=; BASE_FILTER=
if [ -n "$base" ]; then
    base=$(cd "$base" && pwd)
    BASE_PLUGIN=$base/plugin/.libs/nbdkit-ramback-plugin.so
    BASE_FILTER=$base/filter/.libs/nbdkit-ramback-filter.so
    [ -f "$BASE_PLUGIN" ] && [ -f "$BASE_FILTER" ] ||
        die "--base=$base: plugin or filter not built"
fi
for c in nbdkit fio nbdcopy /usr/bin/python3; do
    command -v "$c" >/dev/null ||
        die "'$c' is needed (apt-get install nbdkit fio libnbd-bin python3)"
done

W=$(mktemp -d "${workroot:-${TMPDIR:-/var/tmp}}/bench-cold.XXXXXX")
WORK=$W
cleanup () {
    kill_servers
    if [ "$keep" = yes ]; then echo "work directory kept: $W"; else rm -rf "$W"; fi
}
trap cleanup EXIT INT TERM

# The export: real data (populate has all of it to read), behind the
# delay and rate filters.  Started afresh for every run: a ramback is
# killed at the end of its run, and nbdkit (1.32) may abort when a
# reply races the close of a client that died with requests in flight.
head -c "$size_b" /dev/urandom >"$W/link.img"
head -c "$fill_b" /dev/urandom >"$W/fill.img"
link="nbd+unix:///?socket=$W/link.sock"
linkimg=$W/link.img
start_link () {
    start_server link --filter=delay --filter=rate file "$linkimg" \
        delay-read="${delay}ms" delay-write="${delay}ms" rate="$rate_b"
}
kill_link () {
    kill -KILL "$link_pid" 2>/dev/null || true
    while kill -0 "$link_pid" 2>/dev/null; do sleep 0.02; done
    _forget_pid "$link_pid"
    rm -f "$W/link.sock"
}

# fio_iops URI RW: one 4k iodepth 32 job, prints IOPS.
fio_iops () {
    fio --name=cold --ioengine=nbd --uri="$1" --rw="$2" --bs=4k \
        --iodepth=32 --size="$size_b" --time_based --runtime="$runtime" \
        --norandommap --randrepeat=0 \
        --output-format=json --output="$W/fio.json" >"$W/fio.err" 2>&1 ||
        { cat "$W/fio.err" >&2; die "fio $2 on $1 failed"; }
    /usr/bin/python3 -c '
import json, sys
j = json.load (open (sys.argv[1]))["jobs"][0]
print ("%.1f" % (j["read"]["iops"] + j["write"]["iops"]))' "$W/fio.json"
}

# start_rb KIND SO [PARAM...]: a new ramback (KIND plugin or filter, SO
# its .so) on the export.
start_rb () {
    local kind=$1 so=$2
    shift 2
    rm -f "$W/rb.ctl"
    if [ "$kind" = plugin ]; then
        start_server rb "$so" back="$link" control="$W/rb.ctl" "$@"
    else
        start_server rb --filter="$so" nbd uri="$link" control="$W/rb.ctl" "$@"
    fi
}
kill_rb () {
    kill -KILL "$rb_pid"
    while kill -0 "$rb_pid" 2>/dev/null; do sleep 0.02; done
    _forget_pid "$rb_pid"
}

# cold KIND SO RW [PARAM...]: a new ramback on the export, fio at once,
# then the fraction of the device it had loaded; prints "IOPS
# LOADED-FRACTION".
cold () {
    local kind=$1 so=$2 rw=$3 iops progress
    shift 3
    start_rb "$kind" "$so" "$@"
    iops=$(fio_iops "$rb_uri" "$rw")
    progress=$(fdiv "$(status_field "$W/rb.ctl" loaded_bytes)" "$size_b")
    # Killed: a clean stop would write the random writes back over the
    # slow link first.
    kill_rb
    echo "$iops $progress"
}

# fill SO: seconds a new ramback plugin takes to load the whole export
# with no client (from its start to wait-populated's answer).
fill () {
    local t0 t1
    t0=$(now)
    start_rb plugin "$1"
    ctl_wait "$W/rb.ctl" "wait-populated 600000" >/dev/null
    t1=$(now)
    kill_rb
    fsub "$t1" "$t0"
}

# copy_link: seconds nbdcopy takes to read the whole export.
copy_link () {
    local t0 t1
    t0=$(now)
    nbdcopy "$link" null: || die "nbdcopy $link failed"
    t1=$(now)
    fsub "$t1" "$t0"
}

declare -A res
run_one () {
    local key=$1 out
    shift
    start_link
    out=$("$@")
    kill_link
    res[$key]+="${out%% *} "
    [ "$out" = "${out%% *}" ] || res[$key.progress]+="${out#* } "
}

echo "== $prog: size $size, delay ${delay}ms, rate $rate bit/s, fio ${runtime}s, $repeat paired runs"
for (( i = 1; i <= repeat; i++ )); do
    for rw in randread randwrite; do
        log "run $i: $rw direct"
        run_one "$rw.direct" fio_iops "$link" "$rw"
        log "run $i: $rw ramback plugin"
        run_one "$rw.plugin" cold plugin "$PLUGIN" "$rw"
        log "run $i: $rw ramback filter"
        run_one "$rw.filter" cold filter "$FILTER" "$rw"
        log "run $i: $rw ramback plugin, populate=false"
        run_one "$rw.nopop" cold plugin "$PLUGIN" "$rw" populate=false
        if [ -n "$base" ]; then
            log "run $i: $rw base plugin"
            run_one "$rw.bplugin" cold plugin "$BASE_PLUGIN" "$rw"
            log "run $i: $rw base filter"
            run_one "$rw.bfilter" cold filter "$BASE_FILTER" "$rw"
        fi
    done
done

linkimg=$W/fill.img
for (( i = 1; i <= repeat; i++ )); do
    log "run $i: populate alone ($fill_size): nbdcopy of the export"
    run_one fill.direct copy_link
    log "run $i: populate alone ($fill_size): ramback plugin"
    run_one fill.plugin fill "$PLUGIN"
    if [ -n "$base" ]; then
        log "run $i: populate alone ($fill_size): base plugin"
        run_one fill.bplugin fill "$BASE_PLUGIN"
    fi
done

args=("fill.direct=$(median ${res[fill.direct]})"
      "fill.plugin=$(median ${res[fill.plugin]})"
      "fill.bplugin=$( [ -n "$base" ] && median ${res[fill.bplugin]} || echo -)")
for rw in randread randwrite; do
    for k in direct plugin filter nopop bplugin bfilter; do
        v=${res[$rw.$k]:-}
        if [ -n "$v" ]; then args+=("$rw.$k=$(median $v)"); else args+=("$rw.$k=-"); fi
        p=${res[$rw.$k.progress]:-}
        [ -z "$p" ] || args+=("$rw.$k.progress=$(median $p)")
    done
done

/usr/bin/python3 - "$delay" "$rate" "$size" "$strict" "${output:-}" \
    "${base:+base}" "$fill_size" "${args[@]}" <<'EOP'
import sys
delay, rate, size, strict, output, base, fill_size = sys.argv[1:8]
v = dict (a.split ("=", 1) for a in sys.argv[8:])
rows, missed = [], 0
for rw in ("randread", "randwrite"):
    d = float (v[rw + ".direct"])
    for k, name in (("plugin", "ramback plugin"), ("filter", "ramback filter"),
                    ("nopop", "plugin populate=false"),
                    ("bplugin", "base plugin"), ("bfilter", "base filter")):
        x = v.get (rw + "." + k, "-")
        if x == "-":
            continue
        x = float (x)
        target = k in ("plugin", "filter")
        ok = x >= 0.9 * d
        missed += target and not ok
        rows.append (("4k %s QD32 cold" % rw, name, "%.0f" % d, "%.0f" % x,
                      "%.2fx" % (x / d),
                      "%.1f%%" % (100 * float (v.get (rw + "." + k + ".progress", 0))),
                      (">= 0.9x " + ("ok" if ok else "MISSED")) if target else ""))
hdr = ("job", "through", "direct IOPS", "IOPS", "ratio", "loaded", "target")
w = [max (len (r[i]) for r in rows + [hdr]) for i in range (len (hdr))]
lines = ["remote: nbdkit file, delay filter %s ms per request, rate filter "
         "rate=%s (bits/s); device %s, populate running (loaded: the share "
         "of the device in RAM when the job ended)" % (delay, rate, size)]
for r in [hdr] + rows:
    lines.append ("  ".join (c.ljust (w[i]) for i, c in enumerate (r)))
d = float (v["fill.direct"])
lines.append ("")
lines.append ("populate alone, %s, no client: nbdcopy of the export %.1f s" %
              (fill_size, d))
for k, name in (("plugin", "ramback plugin"), ("bplugin", "base plugin")):
    if v.get ("fill." + k, "-") != "-":
        x = float (v["fill." + k])
        lines.append ("  %-15s %.1f s (%.2fx the link's time)" % (name, x, x / d))
text = "\n".join (lines)
print ()
print (text)
if output:
    with open (output, "w") as f:
        f.write (text + "\n")
sys.exit (3 if strict == "yes" and missed else 0)
EOP
