#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# bench-filter.sh: the filter form (nbdkit --filter=ramback PLUGIN ...)
# side by side with the plugin form (nbdkit ramback back=...) and with
# nbdkit's own cache filter (nbdkit --filter=cache PLUGIN ...) over the
# same kind of backend, for two backends:
#
#   file   a local image file (the file plugin; back=IMG)
#   nbd    an NBD server on a Unix socket: nbdkit file behind the delay
#          filter (--delay ms per read, write, zero, trim, extents), so
#          every request to it costs a round trip (the nbd plugin;
#          back=nbd+unix://...)
#
# Each server has its own copy of the image (and its own delayed
# backend), so one's write back does not disturb another's.  fio with
# its nbd engine, 2 connections, the five jobs of bench-local.sh.  Jobs
# run job by job, each on every server in turn, repeated --repeat times
# (interleaved, so a change in the machine's load hits all alike); the
# report shows the medians and, the figure to read, the median of the
# per-run ratios filter/plugin (target >= 0.9x) and cache/plugin (for
# information).  Before each run ramback's dirty data is synced, the
# cache filter is sent an NBD FLUSH, and the kernel's page cache is
# written back.
#
# Before the fio jobs, each form alone (plugin, then filter, --repeat
# times): populate of the whole image (from nbdkit's start until
# wait-populated returns), and the drain of scattered dirty data (a
# 64K chunk in every 128K of the image, written while flush-rate=64K
# holds the flusher back, then SIGTERM: the clean stop drains at full
# speed; timed until the control socket closes, as bench-local.sh
# does).  Over the delayed NBD backend the drain is one request per
# chunk, so it measures how well each form hides the latency.
# bench/README.md has the results.
#
#   bench/bench-filter.sh [--quick] [--build=DIR] [--dir=DIR] [--size=SIZE]
#       [--runtime=S] [--repeat=N] [--delay=MS] [--backends=file,nbd]
#       [--jobs=LIST] [--output=FILE] [--plot[=DIR]] [--strict] [--keep]
#
# Exit status: 0 when the benchmark ran (targets missed or not, unless
# --strict: then 3 if a target is missed), 1 if something failed to run,
# 2 on bad usage.

set -euo pipefail
# die, log, size_arg, servers, control, fio, median (bench/lib.sh, which
# also sets PATH, LC_ALL=C, prog and srcdir)
. "$(dirname "$0")/lib.sh"

usage () {
    cat <<EOF
Usage: $prog [OPTION...]

The ramback filter against the ramback plugin and nbdkit's cache filter,
over a local file and over a delayed NBD server; fio nbd engine, 2
connections, five jobs.

  --build=DIR      ramback build tree (default: \$RAMBACK_BUILD, else the
                   directory above this script if the filter is there)
  --dir=DIR        where the images go (default: \${TMPDIR:-/var/tmp})
  --size=SIZE      image size (default 256M, --quick 128M; a multiple of 2M)
  --runtime=S      seconds per fio run (default 5, --quick 2)
  --repeat=N       runs of each job on each server (default 3, --quick 2)
  --delay=MS       the NBD backend's delay per request (default 2)
  --backends=LIST  file, nbd or both (default file,nbd)
  --jobs=LIST      some of randread4k,randwrite4k,seqread1m,seqwrite1m,fsync4k
  --quick          smaller and shorter (about 3 minutes)
  --output=FILE    also write the report to FILE
  --plot[=DIR]     also draw the tables as SVG charts (gnuplot) in DIR
                   (default: beside --output=, else here)
  --strict         exit 3 if a filter/plugin ratio is below 0.9
  --keep           keep the work directory
EOF
}

size=; runtime=; repeat=; delay=2; backends=file,nbd; quick=no; output=
strict=no; keep=no; build=${RAMBACK_BUILD:-}; workroot=${TMPDIR:-/var/tmp}
jobs_arg=randread4k,randwrite4k,seqread1m,seqwrite1m,fsync4k

for arg in "$@"; do
    case $arg in
        --size=*) size=${arg#*=} ;;
        --runtime=*) runtime=${arg#*=} ;;
        --repeat=*) repeat=${arg#*=} ;;
        --delay=*) delay=${arg#*=} ;;
        --backends=*) backends=${arg#*=} ;;
        --jobs=*) jobs_arg=${arg#*=} ;;
        *) bench_opt "$arg" ;;
    esac
done
if [ "$quick" = yes ]; then
    : "${size:=128M}" "${runtime:=2}" "${repeat:=2}"
else
    : "${size:=256M}" "${runtime:=5}" "${repeat:=3}"
fi

size_b=$(size_arg "$size")
half_b=$((size_b / 2))
[ $((size_b % (2 * 1024 * 1024))) -eq 0 ] ||
    { echo "$prog: --size must be a multiple of 2M" >&2; exit 2; }
for v in "$runtime" "$repeat" "$delay"; do
    [[ $v =~ ^[0-9]+$ ]] || { echo "$prog: bad number '$v'" >&2; exit 2; }
done
[ "$repeat" -ge 1 ] || { echo "$prog: --repeat must be at least 1" >&2; exit 2; }
bk_list=()
IFS=, read -r -a bk_list <<<"$backends"
for b in "${bk_list[@]}"; do
    case $b in file|nbd) ;; *) echo "$prog: unknown backend '$b'" >&2; exit 2 ;; esac
done

find_build filter
for c in nbdkit fio nbdsh; do
    command -v "$c" >/dev/null ||
        die "'$c' is needed (apt-get install nbdkit fio libnbd-bin python3-libnbd)"
done
fio --enghelp=nbd >/dev/null 2>&1 ||
    die "this fio has no nbd engine (Debian's fio >= 3.20 has it)"
PY=/usr/bin/python3

WORK=$(mktemp -d "$workroot/ramback-bench-filter.XXXXXX")
cleanup () {
    set +e
    kill_servers
    if [ "$keep" = yes ]; then echo "work directory kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

jobs=()
IFS=, read -r -a jobs <<<"$jobs_arg"
for job in "${jobs[@]}"; do
    [ -n "${job_args[$job]:-}" ] ||
        { echo "$prog: unknown job '$job'" >&2; exit 2; }
done
targets=(plugin filter cache)

run_job () {
    local job=$1 uri=$2 out=$3
    # shellcheck disable=SC2086
    fio_nbd "$uri" "$out" --name="$job" ${job_args[$job]} \
        --numjobs=2 --group_reporting --size="$half_b" \
        --offset_increment="$half_b" --time_based --runtime="$runtime" \
        --ramp_time=1
    fio_metric "$out" "${job_dir[$job]}" "${job_unit[$job]}"
}

# start_front NAME BACKEND FORM [ramback parameters]: the plugin or
# filter form over BACKEND (for nbd, over the delayed server NAME_bk,
# started first); control socket $WORK/NAME.ctl.
start_front () {
    local name=$1 bk=$2 form=$3; shift 3
    local img=$WORK/$name.img ctlp=$WORK/$name.ctl bkv
    if [ "$bk" = nbd ]; then
        start_server "${name}_bk" --filter=delay file "$img" "${delays[@]}"
        bkv=${name}_bk_sock
    fi
    case $bk,$form in
        file,plugin) start_server "$name" "$PLUGIN" back="$img" control="$ctlp" "$@" ;;
        file,filter) start_server "$name" --filter="$FILTER" file "$img" control="$ctlp" "$@" ;;
        file,cache) start_server "$name" --filter=cache file "$img" cache-on-read=true ;;
        nbd,plugin) start_server "$name" "$PLUGIN" back="nbd+unix:///?socket=${!bkv}" control="$ctlp" "$@" ;;
        nbd,filter) start_server "$name" --filter="$FILTER" nbd socket="${!bkv}" control="$ctlp" "$@" ;;
        nbd,cache) start_server "$name" --filter=cache nbd socket="${!bkv}" cache-on-read=true ;;
    esac
}

stop_front () {
    stop_server "$1"
    [ "$2" != nbd ] || stop_server "${1}_bk"
}

# What a run leaves dirty is written back before the next one.
quiesce () {
    local bk=$1
    ctl_wait "$WORK/${bk}_plugin.ctl" sync
    ctl_wait "$WORK/${bk}_filter.ctl" sync
    nbdsh -u "$(eval echo "\$${bk}_cache_uri")" -c 'h.flush()'
    sync
}

log "work directory $WORK, image $size, fio ${runtime}s per run (ramp 1s)," \
    "$repeat run(s) per job and server, NBD delay ${delay}ms"
load0=$(cut -d' ' -f1-3 /proc/loadavg)
fio --name=create --filename="$WORK/image" --rw=write --bs=1M \
    --size="$size_b" --ioengine=psync --end_fsync=1 \
    --output="$WORK/create.out" >/dev/null
delays=(delay-read="${delay}ms" delay-write="${delay}ms"
        delay-zero="${delay}ms" delay-trim="${delay}ms"
        delay-extents="${delay}ms")

declare -A vals popv drainv
nios=$((size_b / (128 * 1024)))
for bk in "${bk_list[@]}"; do
    # Populate and scattered drain, each form alone.
    for (( i = 0; i < repeat; i++ )); do
        for t in plugin filter; do
            sync
            cp "$WORK/image" "$WORK/pd.img"
            t0=$EPOCHREALTIME
            start_front pd "$bk" "$t" flush-rate=64K
            ctl_wait "$WORK/pd.ctl" wait-populated
            t1=$EPOCHREALTIME
            popv[$bk,$t]+=" $(fdiv "$size_b" "$(fsub "$t1" "$t0")")"
            fio_nbd "$pd_uri" "$WORK/pd-w.json" --name=scatter \
                --rw=write:64k --bs=64k --iodepth=32 --size="$size_b" \
                --number_ios="$nios"
            pending=$(pending_bytes "$WORK/pd.ctl")
            mapfile -t ts < <(timed_drain pd "$WORK/pd.ctl")
            secs=${ts[0]}
            [ "$bk" != nbd ] || stop_server pd_bk
            drainv[$bk,$t]+=" $(fdiv "$pending" "$secs")"
            log "$bk $t: populated in $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }') s;" \
                "$((pending >> 20)) MiB scattered drained in $secs s"
        done
    done
    rm -f "$WORK/pd.img"

    for t in "${targets[@]}"; do
        cp "$WORK/image" "$WORK/${bk}_$t.img"
        start_front "${bk}_$t" "$bk" "$t"
    done
    ctl_wait "$WORK/${bk}_plugin.ctl" wait-populated
    ctl_wait "$WORK/${bk}_filter.ctl" wait-populated

    for job in "${jobs[@]}"; do
        for (( i = 0; i < repeat; i++ )); do
            for t in "${targets[@]}"; do
                quiesce "$bk"
                uriv=${bk}_${t}_uri
                v=$(run_job "$job" "${!uriv}" "$WORK/$bk-$job-$t.json")
                vals[$bk,$job,$t]+=" $v"
                if [ "${job_unit[$job]}" = iops ]; then
                    log "$bk $job $t: ${v%.*} IOPS"
                else
                    log "$bk $job $t: $((${v%.*} >> 20)) MiB/s"
                fi
            done
        done
    done
    quiesce "$bk"
    for t in "${targets[@]}"; do stop_front "${bk}_$t" "$bk"; done
    rm -f "$WORK/$bk"_*.img
done

report=$WORK/report.txt
{
    echo "ramback bench-filter: $(date -u +%Y-%m-%dT%H:%MZ), $(uname -sr)," \
         "$(nproc) CPUs; image $size, fio $(fio --version) nbd engine," \
         "2 connections, ${runtime}s per run, $repeat run(s) per job and server"
    echo "load average at start: $load0, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
    for bk in "${bk_list[@]}"; do
        echo
        if [ "$bk" = file ]; then
            echo "backend: local file (plugin: back=IMG; filter: file IMG; cache: --filter=cache file IMG cache-on-read=true)"
        else
            echo "backend: nbdkit file behind --filter=delay ${delay}ms, on a Unix socket (plugin: back=nbd+unix://; filter and cache: nbd socket=)"
        fi
        POP="${popv[$bk,plugin]} |${popv[$bk,filter]}" \
        DRAIN="${drainv[$bk,plugin]} |${drainv[$bk,filter]}" $PY - <<'EOP'
import os, statistics as st
print("%-34s %9s %9s  %s" % ("each form alone, MiB/s", "plugin", "filter",
                             "filter/plugin"))
for name, key in (("populate", "POP"), ("drain, 64K in every 128K", "DRAIN")):
    p, f = ([float(x) for x in v.split()] for v in os.environ[key].split("|"))
    r = [x / y for x, y in zip(f, p)]
    print("%-34s %9.0f %9.0f  %5.2f (%4.2f-%4.2f)" % (
        name, st.median(p) / 2**20, st.median(f) / 2**20, st.median(r),
        min(r), max(r)))
EOP
        POP="${popv[$bk,plugin]} |${popv[$bk,filter]}" \
        DRAIN="${drainv[$bk,plugin]} |${drainv[$bk,filter]}" $PY - <<'EOP' |
import os, statistics as st
for name, key in (("populate", "POP"), ("drain, 64K in every 128K", "DRAIN")):
    p, f = ([float(x) for x in v.split()] for v in os.environ[key].split("|"))
    print("%s\t%g\t%g" % (name, st.median(p) / 2**20, st.median(f) / 2**20))
EOP
        plot_bars "$bk-bandwidth" "plugin and filter alone, $bk backend" \
            MiB/s plugin filter
        echo
        ROWS=$(for job in "${jobs[@]}"; do
            echo "$job ${job_unit[$job]} |${vals[$bk,$job,plugin]} |${vals[$bk,$job,filter]} |${vals[$bk,$job,cache]}"
        done) $PY - <<'EOP'
import os, statistics as st
print("%-12s %-5s %9s %9s %9s  %-18s %-18s %s" % (
    "job", "unit", "plugin", "filter", "cache", "filter/plugin", "cache/plugin",
    "target"))
for line in os.environ["ROWS"].splitlines():
    head, p, f, c = line.split("|")
    job, unit = head.split()
    p, f, c = ([float(x) for x in s.split()] for s in (p, f, c))
    def val(v):
        m = st.median(v)
        return "%.0f" % (m if unit == "iops" else m / 2**20)
    def ratio(a, b):
        r = [x / y for x, y in zip(a, b) if y]
        return (st.median(r) if r else 0.0, min(r, default=0.0),
                max(r, default=0.0))
    rf, rc = ratio(f, p), ratio(c, p)
    print("%-12s %-5s %9s %9s %9s  %5.2f (%4.2f-%4.2f)  %5.2f (%4.2f-%4.2f)  %s" % (
        job, "IOPS" if unit == "iops" else "MiB/s", val(p), val(f), val(c),
        rf[0], rf[1], rf[2], rc[0], rc[1], rc[2],
        ">=0.90 " + ("PASS" if rf[0] >= 0.9 else "MISS")))
EOP
        ROWS=$(for job in "${jobs[@]}"; do
            echo "$job |${vals[$bk,$job,plugin]} |${vals[$bk,$job,filter]} |${vals[$bk,$job,cache]}"
        done) $PY - <<'EOP' |
import os, statistics as st
for line in os.environ["ROWS"].splitlines():
    job, p, f, c = (x.strip () for x in line.split("|"))
    p, f, c = ([float(x) for x in s.split()] for s in (p, f, c))
    r = lambda a: st.median([x / y for x, y in zip(a, p) if y] or [0])
    print("%s\t%g\t%g" % (job, r(f), r(c)))
EOP
        plot_bars --target=0.9:"target, filter" "$bk-fio" \
            "fio against the plugin form, $bk backend" \
            "ratio to the plugin (median)" "filter/plugin" "cache/plugin"
    done
    echo
    echo "Ratios: median of the per-run ratios (lowest-highest in brackets)."
} > "$report"

bench_finish "$report"
