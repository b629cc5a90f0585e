# SPDX-License-Identifier: GPL-2.0-or-later
# shellcheck shell=bash
# Helpers shared by the benchmarks.  Source it after setting WORK (the
# work directory); it puts /usr/bin first in PATH, sets LC_ALL=C, prog
# (the script's name, for messages, unless set) and srcdir (bench/,
# unless set), and sources tests/harness.sh (fail, to_bytes, serve_bg,
# ctl, status_field).
#
#   bench_workdir NAME     WORK: a new directory ramback-NAME.* in
#                          $workroot, removed at exit (servers stopped
#                          first) unless --keep
#   bench_opt ARG          the options every benchmark takes: --build=,
#                          --dir=, --quick, --output=, --strict, --keep,
#                          --plot[=DIR], --help (calls usage); exits 2 on
#                          anything else
#   find_build [filter]    build (absolute) from --build=, $RAMBACK_BUILD or
#                          the tree above bench/; PLUGIN (and FILTER)
#   FIO_JOBS, job_args, job_dir, job_unit   the five fio jobs: arguments,
#                          direction and metric (iops or bw_bytes)
#   die MSG / log MSG      error and exit 1 / a time-stamped line on stderr
#   size_arg SIZE          to_bytes, exiting 2 on a bad size
#   now                    wall clock seconds (floating point)
#   fadd A B / fsub A B / fdiv A B   floating point arithmetic (awk)
#   mib BYTES              whole MiB
#   ratio A B              A / B with two decimals
#   median N...            the median (the mean of the middle two if even)
#   start_server NAME ARGS...  nbdkit ARGS on $WORK/NAME.sock; sets
#                          NAME_pid, NAME_sock, NAME_uri; killed at exit
#                          by kill_servers
#   try_server NAME ARGS...    the same, but returns 1 if nbdkit refuses
#                          to start (its messages in $WORK/NAME.log)
#   stop_server NAME       SIGTERM (ramback drains first) and wait
#   kill_servers           SIGTERM every server still running, SIGKILL
#                          after 60 s (for the script's exit trap)
#   wait_ctl SOCK          wait (30 s at most) for a control socket
#   ctl_wait SOCK REQUEST  ctl, retrying the connection for 30 s
#   status_fields SOCK FIELD...  fields of "status json", one a line
#   pending_bytes SOCK     dirty + in flight + written but not synced
#   timed_drain NAME SOCK  SIGTERM ramback NAME, print the seconds until
#                          its clean stop drained and synced (its control
#                          socket closes then), then the seconds until the
#                          process was gone
#   fio_nbd URI OUT ARGS...     fio's nbd engine, JSON into OUT
#   fio_metric FILE read|write iops|bw_bytes|runtime
#   fio_runtime FILE read|write seconds the job ran
#   probe_drop_caches      find out whether we may drop the page cache
#                          (can_drop=yes|no; drops it once)
#   drop_caches            sync, and drop the page cache if we may
#   fs_type DIR            the file system type name
#   plot_bars [--log] [--target=Y[:LABEL]] NAME TITLE YLABEL SERIES...
#                          with --plot: the table on stdin (one line a
#                          group of bars: label, then a value per SERIES,
#                          tab-separated; "-" for none) as a bar chart,
#                          DIR/$plot_prefix-NAME.svg (plot.py); without
#                          --plot it reads stdin and draws nothing
#   list_charts            "chart: FILE" for each chart drawn
#   bench_finish REPORT    print REPORT, copy it to --output=, list the
#                          charts, and exit: 3 with --strict if it has a
#                          MISS, else 0

export PATH="/usr/bin:/bin:/usr/sbin:/sbin:$PATH"
export LC_ALL=C
: "${prog:=${0##*/}}"
: "${srcdir:=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}"

. "$srcdir/../tests/harness.sh"

die () { echo "$prog: $*" >&2; exit 1; }

bench_workdir () {
    WORK=$(mktemp -d "$workroot/ramback-$1.XXXXXX")
    trap _bench_cleanup EXIT
    trap 'exit 130' INT TERM
}
_bench_cleanup () {
    set +e
    kill_servers
    if [ "${keep:-no}" = yes ]; then echo "work directory kept: $WORK"; else rm -rf "$WORK"; fi
}

bench_opt () {
    case $1 in
        --build=*) build=${1#*=} ;;
        --dir=*) workroot=${1#*=} ;;
        --quick) quick=yes ;;
        --output=*) output=${1#*=} ;;
        --strict) strict=yes ;;
        --keep) keep=yes ;;
        --plot) plot=yes ;;
        --plot=*) plot=yes; plotdir=${1#*=} ;;
        -h|--help) usage; exit 0 ;;
        *) echo "$prog: unknown option '$1' (try --help)" >&2; exit 2 ;;
    esac
}

find_build () {
    local top
    top=$(dirname "${BASH_SOURCE[0]}")/..
    if [ -z "${build:-}" ] &&
       [ -f "$top/plugin/.libs/nbdkit-ramback-plugin.so" ]; then
        build=$top
    fi
    [ -n "${build:-}" ] || die "give --build=DIR (the ramback build tree)"
    build=$(cd "$build" && pwd)
    PLUGIN=$build/plugin/.libs/nbdkit-ramback-plugin.so
    [ -f "$PLUGIN" ] || die "plugin not built: $PLUGIN"
    if [ "${1:-}" = filter ]; then
        FILTER=$build/filter/.libs/nbdkit-ramback-filter.so
        [ -f "$FILTER" ] || die "filter not built: $FILTER"
    fi
}

# Two connections each (numjobs=2), each on its own half of the device.
FIO_JOBS=(randread4k randwrite4k seqread1m seqwrite1m fsync4k)
declare -A job_args=(
    [randread4k]="--rw=randread --bs=4k --iodepth=32"
    [randwrite4k]="--rw=randwrite --bs=4k --iodepth=32"
    [seqread1m]="--rw=read --bs=1M --iodepth=8"
    [seqwrite1m]="--rw=write --bs=1M --iodepth=8"
    [fsync4k]="--rw=randwrite --bs=4k --iodepth=1 --fsync=1")
declare -A job_dir=([randread4k]=read [randwrite4k]=write [seqread1m]=read
                    [seqwrite1m]=write [fsync4k]=write)
declare -A job_unit=([randread4k]=iops [randwrite4k]=iops [seqread1m]=bw_bytes
                     [seqwrite1m]=bw_bytes [fsync4k]=iops)
log () { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }

size_arg () { to_bytes "$1" 2>/dev/null || { echo "$prog: bad size '$1'" >&2; exit 2; }; }

now () { echo "$EPOCHREALTIME"; }
fadd () { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.9g\n", a + b }'; }
fsub () { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.9g\n", a - b }'; }
fdiv () { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.9g\n", a / b }'; }
mib () { awk -v a="$1" 'BEGIN { printf "%d\n", a / 1048576 }'; }
ratio () { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f\n", a / b }'; }
median () {
    printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 }
        END { if (NR % 2) printf "%.9g\n", v[(NR + 1) / 2]
              else printf "%.9g\n", (v[NR / 2] + v[NR / 2 + 1]) / 2 }'
}

pids=()
start_server () {
    try_server "$@" || die "nbdkit $1 failed to start"
}
try_server () {
    local name=$1; shift
    local sock=$WORK/$name.sock
    : >"$WORK/$name.log"
    SERVE_POLL=0.002 SERVE_TIMEOUT=30 serve_bg "$sock" "$WORK/$name.pid" \
        "$WORK/$name.log" nbdkit -f -U "$sock" -P "$WORK/$name.pid" "$@" ||
        return 1
    pids+=("$SERVE_PID")
    printf -v "${name}_pid" %s "$SERVE_PID"
    printf -v "${name}_sock" %s "$sock"
    printf -v "${name}_uri" %s "nbd+unix:///?socket=$sock"
}

_forget_pid () {
    local q np=()
    for q in "${pids[@]}"; do [ "$q" = "$1" ] || np+=("$q"); done
    pids=("${np[@]}")
}

stop_server () {
    local pidv=${1}_pid p
    p=${!pidv}
    kill -TERM "$p" 2>/dev/null || return 0
    while kill -0 "$p" 2>/dev/null; do sleep 0.02; done
    _forget_pid "$p"
}

kill_servers () {
    local p
    for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do
        for _ in $(seq 600); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
    done
    pids=()
}

wait_ctl () {
    local i
    for (( i = 0; i < 6000; i++ )); do
        [ -S "$1" ] && return 0
        sleep 0.005
    done
    die "control socket $1 did not appear"
}

ctl_wait () { /usr/bin/python3 "$RBCTL" --wait "$@"; }

status_fields () { status_field "$@"; }

pending_bytes () {
    local st
    mapfile -t st < <(status_field "$1" dirty_bytes inflight_bytes unsynced_bytes)
    [ "${#st[@]}" -eq 3 ] || die "status json on $1 failed"
    echo $(( st[0] + st[1] + st[2] ))
}

timed_drain () {
    local pidv=${1}_pid p drained t1
    p=${!pidv}
    drained=$(/usr/bin/python3 "$RBCTL" --drain-time "$2" "$p")
    while kill -0 "$p" 2>/dev/null; do sleep 0.002; done
    t1=$(now)
    _forget_pid "$p"
    echo "${drained%%$'\n'*}"
    fsub "$t1" "${drained##*$'\n'}"
}

fio_nbd () {
    local uri=$1 out=$2; shift 2
    fio --ioengine=nbd --uri="$uri" --output-format=json --output="$out" \
        "$@" >/dev/null || { cat "$out" >&2 || true; die "fio failed on $uri"; }
}

fio_metric () {
    /usr/bin/python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
v = j[sys.argv[2]][sys.argv[3]]
print(v / 1000.0 if sys.argv[3] == "runtime" else v)' "$@"
}
fio_runtime () { fio_metric "$1" "$2" runtime; }

can_drop=no
probe_drop_caches () {
    if sync && echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then
        can_drop=yes
    fi
}
drop_caches () {
    sync
    [ "$can_drop" = no ] || echo 3 > /proc/sys/vm/drop_caches
}

# findmnt says ext4 where stat says ext2/ext3.
fs_type () {
    local t
    t=$(findmnt -n -o FSTYPE -T "$1" 2>/dev/null | head -n1) || t=
    [ -n "$t" ] || t=$(stat -f -c %T "$1")
    echo "$t"
}

# --plot without a DIR: beside --output=, or here.
: "${plot_prefix:=${prog%.sh}}"
plot_bars () {
    local opts=()
    while [ "${1:-}" != "${1#--}" ]; do opts+=("$1"); shift; done
    if [ "${plot:-no}" != yes ]; then cat >/dev/null; return 0; fi
    local name=$1 dir=${plotdir:-}
    shift
    if [ -z "$dir" ]; then
        if [ -n "${output:-}" ]; then dir=$(dirname "$output"); else dir=.; fi
    fi
    mkdir -p "$dir" || die "--plot: cannot create $dir"
    /usr/bin/python3 "$srcdir/plot.py" "$dir/$plot_prefix-$name.svg" "$@" \
        "${opts[@]}" || die "--plot: no chart $name"
    # A file, not an array: plot_bars often ends a pipeline (a subshell).
    echo "$dir/$plot_prefix-$name.svg" >> "$WORK/plots.txt"
}

list_charts () {
    local p
    [ -f "$WORK/plots.txt" ] || return 0
    while read -r p; do echo "chart: $p"; done < "$WORK/plots.txt"
}

bench_finish () {
    cat "$1"
    [ -z "${output:-}" ] || cp "$1" "$output"
    list_charts
    if [ "${strict:-no}" = yes ] && grep -q 'MISS' "$1"; then
        exit 3
    fi
    exit 0
}
