#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# bench-local.sh: ramback against nbdkit's memory, null and file plugins,
# side by side, in one run on this machine, plus the drain and populate
# bandwidth of ramback against the backing store's own sequential
# bandwidth, and the drain of scattered dirty data on a huge sparse
# device against a small one.  See bench/README.md for what each figure
# means and the targets.
#
#   bench/bench-local.sh [--quick] [--build=DIR] [--dir=DIR] [--size=SIZE]
#                        [--runtime=SECONDS] [--repeat=N] [--no-sparse]
#                        [--output=FILE] [--strict]
#
# Exit status: 0 when the benchmark ran (targets missed or not, unless
# --strict), 1 if something failed to run, 2 on bad usage.

set -euo pipefail
export PATH="/usr/bin:/bin:/usr/sbin:/sbin:$PATH"
export LC_ALL=C

prog=${0##*/}
srcdir=$(cd "$(dirname "$0")" && pwd)

usage () {
    cat <<EOF
Usage: $prog [OPTION...]

Benchmark ramback against nbdkit memory, null and file with fio's nbd
engine (2 connections), and measure drain and populate bandwidth.

  --build=DIR       ramback build tree (default: \$RAMBACK_BUILD, else the
                    directory above this script if the plugin is there)
  --dir=DIR         where the images go (default: \${TMPDIR:-/var/tmp}); use
                    the disk you want to measure, not a tmpfs
  --size=SIZE       image size, e.g. 1G (default 1G, --quick 256M)
  --runtime=S       seconds per fio job (default 10, --quick 3)
  --ramp=S          fio ramp time per job (default 1, --quick 0)
  --repeat=N        runs of each fio job on each server, interleaved; the
                    median is kept (default 1)
  --bw-repeat=N     runs of each bandwidth and sparse measurement, median
                    kept (default 5, --quick 1)
  --backing-bs=SIZE request size of the backing store baseline (default 1M)
  --sparse-dirty=SIZE  scattered dirty data for the sparse drain test
                    (default 1G, --quick 256M); the small device is twice
                    that, the sparse one 1T
  --sparse-dir=DIR  where the sparse test's backing files go (default
                    /dev/shm if it is a tmpfs with room, else --dir)
  --no-sparse       skip the 1 TiB sparse drain test
  --only=LIST       run only these parts: fio, bw, sparse (comma separated)
  --quick           smaller and shorter (a smoke test, about a minute)
  --output=FILE     also write the result tables to FILE
  --strict          exit 3 if any target is missed
  --keep            keep the work directory
EOF
}

size=; runtime=; ramp=; repeat_fio=1; repeat_bw=; sparse=yes
sparse_dirty=; sparse_dir=; backing_bs=1M; quick=no; output=; strict=no; keep=no; only=,fio,bw,sparse,
workroot=${TMPDIR:-/var/tmp}
build=${RAMBACK_BUILD:-}

for arg in "$@"; do
    case $arg in
        --build=*) build=${arg#*=} ;;
        --dir=*) workroot=${arg#*=} ;;
        --size=*) size=${arg#*=} ;;
        --runtime=*) runtime=${arg#*=} ;;
        --ramp=*) ramp=${arg#*=} ;;
        --repeat=*) repeat_fio=${arg#*=} ;;
        --bw-repeat=*) repeat_bw=${arg#*=} ;;
        --sparse-dirty=*) sparse_dirty=${arg#*=} ;;
        --backing-bs=*) backing_bs=${arg#*=} ;;
        --no-sparse) sparse=no ;;
        --sparse-dir=*) sparse_dir=${arg#*=} ;;
        --only=*) only=,${arg#*=}, ;;
        --quick) quick=yes ;;
        --output=*) output=${arg#*=} ;;
        --strict) strict=yes ;;
        --keep) keep=yes ;;
        -h|--help) usage; exit 0 ;;
        *) echo "$prog: unknown option '$arg' (try --help)" >&2; exit 2 ;;
    esac
done

if [ "$quick" = yes ]; then
    : "${size:=256M}" "${runtime:=3}" "${ramp:=0}" "${sparse_dirty:=256M}"
    : "${repeat_bw:=1}"
else
    : "${size:=1G}" "${runtime:=10}" "${ramp:=1}" "${sparse_dirty:=1G}"
    : "${repeat_bw:=5}"
fi

# The flush-rate= that holds the flusher back while a drain test dirties
# its image.  Not lower: the core sizes write-back batches at a tenth of
# a second's worth of this rate, and keeps that size during the clean
# stop's drain, so 10M gives 1 MiB batches (what the fio baseline uses).
hold_rate=${RAMBACK_BENCH_HOLD_RATE:-10M}

die () { echo "$prog: $*" >&2; exit 1; }
want () { [[ $only == *,$1,* ]]; }

# SIZE with an optional K/M/G/T suffix (powers of 1024) -> bytes.
to_bytes () {
    local v=$1 n m=1
    case $v in
        *[kK]) m=1024 ;;
        *[mM]) m=$((1024 ** 2)) ;;
        *[gG]) m=$((1024 ** 3)) ;;
        *[tT]) m=$((1024 ** 4)) ;;
    esac
    n=${v%[kKmMgGtT]}
    [[ $n =~ ^[0-9]+$ ]] || { echo "$prog: bad size '$v'" >&2; exit 2; }
    echo $((n * m))
}
size_b=$(to_bytes "$size")
sparse_dirty_b=$(to_bytes "$sparse_dirty")
backing_bs_b=$(to_bytes "$backing_bs")
half_b=$((size_b / 2))
[ $((size_b % (2 * 1024 * 1024))) -eq 0 ] ||
    die "--size must be a multiple of 2M (each connection gets half)"
for v in "$runtime" "$ramp" "$repeat_fio" "$repeat_bw"; do
    [[ $v =~ ^[0-9]+$ ]] || { echo "$prog: bad number '$v'" >&2; exit 2; }
done
[ "$repeat_fio" -ge 1 ] && [ "$repeat_bw" -ge 1 ] ||
    die "--repeat and --bw-repeat must be at least 1"

# Locate the plugin.
if [ -z "$build" ] && [ -f "$srcdir/../plugin/.libs/nbdkit-ramback-plugin.so" ]; then
    build=$srcdir/..
fi
[ -n "$build" ] || die "give --build=DIR (the ramback build tree)"
PLUGIN=$(cd "$build" && pwd)/plugin/.libs/nbdkit-ramback-plugin.so
[ -f "$PLUGIN" ] || die "plugin not built: $PLUGIN"

for c in nbdkit fio python3; do
    command -v "$c" >/dev/null || die "'$c' is needed (apt-get install nbdkit fio python3)"
done
fio --enghelp=nbd >/dev/null 2>&1 ||
    die "this fio has no nbd engine (Debian's fio >= 3.20 has it)"
for p in memory null file; do
    nbdkit "$p" --dump-plugin >/dev/null 2>&1 ||
        die "nbdkit's $p plugin is missing (apt-get install nbdkit)"
done
PY=/usr/bin/python3
[ -x $PY ] || PY=$(command -v python3)

WORK=$(mktemp -d "$workroot/ramback-bench.XXXXXX")
sparse_work=
pids=()
cleanup () {
    local p
    set +e
    for p in "${pids[@]}"; do
        kill -TERM "$p" 2>/dev/null
    done
    for p in "${pids[@]}"; do
        for _ in $(seq 600); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null
    done
    if [ "$keep" = yes ]; then
        echo "work directory kept: $WORK"
    else
        rm -rf "$WORK"
    fi
    [ -z "$sparse_work" ] || rm -rf "$sparse_work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log () { printf '[%s] %s\n' "$(date +%T)" "$*" >&2; }

now () { echo "$EPOCHREALTIME"; }
# fsub A B -> A - B (floating point)
fsub () { $PY -c 'import sys; print(float(sys.argv[1]) - float(sys.argv[2]))' "$1" "$2"; }
# fdiv A B -> A / B
fdiv () { $PY -c 'import sys; print(float(sys.argv[1]) / float(sys.argv[2]))' "$1" "$2"; }
# mib BYTES -> whole MiB
mib () { $PY -c 'import sys; print(int(float(sys.argv[1]) / 2**20))' "$1"; }

# Page cache: drop it before each cold measurement if we may.
can_drop=no
if sync && echo 3 > /proc/sys/vm/drop_caches 2>/dev/null; then
    can_drop=yes
fi
drop_caches () {
    sync
    [ "$can_drop" = no ] || echo 3 > /proc/sys/vm/drop_caches
}

# fs_type DIR: the file system type name (findmnt says ext4 where stat
# says ext2/ext3).
fs_type () {
    local t
    t=$(findmnt -n -o FSTYPE -T "$1" 2>/dev/null | head -n1) || t=
    [ -n "$t" ] || t=$(stat -f -c %T "$1")
    echo "$t"
}
fstype=$(fs_type "$WORK")
case $fstype in
    tmpfs|ramfs) log "WARNING: $WORK is on $fstype: the 'backing store' is RAM" ;;
esac

# --- servers -------------------------------------------------------------

# start_server NAME ARGS...: nbdkit on a Unix socket; sets NAME_uri.
start_server () {
    local name=$1; shift
    local sock=$WORK/$name.sock pidf=$WORK/$name.pid i
    rm -f "$sock" "$pidf"
    nbdkit -f -U "$sock" -P "$pidf" "$@" >"$WORK/$name.log" 2>&1 &
    for (( i = 0; i < 15000; i++ )); do
        [ -S "$sock" ] && [ -s "$pidf" ] && break
        kill -0 $! 2>/dev/null || {
            tail -20 "$WORK/$name.log" >&2; die "nbdkit $name failed to start"; }
        sleep 0.002
    done
    [ -S "$sock" ] || die "nbdkit $name did not start"
    pids+=("$(cat "$pidf")")
    printf -v "${name}_pid" %s "$(cat "$pidf")"
    printf -v "${name}_uri" %s "nbd+unix:///?socket=$sock"
}

# stop_server NAME: SIGTERM (ramback drains first) and wait.
stop_server () {
    local pidv=${1}_pid p
    p=${!pidv}
    kill -TERM "$p" 2>/dev/null || return 0
    while kill -0 "$p" 2>/dev/null; do sleep 0.02; done
    local np=()
    for q in "${pids[@]}"; do [ "$q" = "$p" ] || np+=("$q"); done
    pids=("${np[@]}")
}

# ctl SOCK REQUEST: one control request; prints the data lines.
ctl () {
    $PY - "$1" "$2" <<'EOP'
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.sendall((sys.argv[2] + "\n").encode())
for line in s.makefile("r"):
    line = line.rstrip("\r\n")
    if line == "OK":
        sys.exit(0)
    if line.startswith("ERR "):
        sys.exit("control: " + sys.argv[2] + ": " + line)
    print(line)
sys.exit("control: connection closed without a reply")
EOP
}

# status_json SOCK FIELD...: the fields, one per line.
status_fields () {
    local sock=$1; shift
    ctl "$sock" "status json" | $PY -c '
import json, sys
v = json.load(sys.stdin)
for k in sys.argv[1:]:
    print(v[k])' "$@"
}

# pending_bytes SOCK: dirty + in flight + written but not yet synced.
pending_bytes () {
    local st
    mapfile -t st < <(status_fields "$1" dirty_bytes inflight_bytes unsynced_bytes)
    [ "${#st[@]}" -eq 3 ] || die "status json on $1 failed"
    echo $(( st[0] + st[1] + st[2] ))
}

# timed_drain NAME SOCK: SIGTERM ramback and time its clean stop.
# Prints two figures: seconds until the drain and final sync were done
# (the control server is stopped right after them, so that is when its
# connection closes, measured by polling 'status' on it) and seconds
# until the process was gone (adds freeing the image, nbdkit's exit).
timed_drain () {
    local pidv=${1}_pid p q np=() drained t1
    p=${!pidv}
    drained=$($PY - "$2" "$p" <<'EOP'
import os, signal, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
f = s.makefile("rwb", buffering=0)
t0 = time.time()
os.kill(int(sys.argv[2]), signal.SIGTERM)
try:
    while True:
        s.sendall(b"status json\n")
        while True:
            line = f.readline()
            if not line:
                raise EOFError
            if line in (b"OK\n", b"OK\r\n") or line.startswith(b"ERR "):
                break
        time.sleep(0.002)
except (EOFError, OSError):
    pass
print(time.time() - t0)
print(t0)
EOP
)
    while kill -0 "$p" 2>/dev/null; do sleep 0.002; done
    t1=$(now)
    for q in "${pids[@]}"; do [ "$q" = "$p" ] || np+=("$q"); done
    pids=("${np[@]}")
    # first line: drain seconds; second: exit seconds
    echo "${drained%%$'\n'*}"
    fsub "$t1" "${drained##*$'\n'}"
}

wait_ctl () {
    local i
    for (( i = 0; i < 3000; i++ )); do
        [ -S "$1" ] && return 0
        sleep 0.005
    done
    die "control socket $1 did not appear"
}

# --- fio -----------------------------------------------------------------

# fio_nbd URI OUT ARGS...: run fio's nbd engine, JSON into OUT.
fio_nbd () {
    local uri=$1 out=$2; shift 2
    fio --ioengine=nbd --uri="$uri" --output-format=json --output="$out" \
        "$@" >/dev/null
}

# fio_metric FILE read|write iops|bw_bytes
fio_metric () {
    $PY -c '
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
print(j[sys.argv[2]][sys.argv[3]])' "$@"
}

# raw_io read|write FILE BYTES BS [STRIDE]: the backing store's own
# bandwidth, measured the way ramback's file store does its I/O:
# buffered pread/pwrite of BS bytes (every STRIDE bytes, default BS),
# POSIX_FADV_SEQUENTIAL, and for writes a final fdatasync.  Prints the
# wall-clock seconds, fdatasync included.  (Not fio: fio's reported
# runtime and bandwidth leave out its end_fsync, which is most of the
# time of a buffered write, and its startup takes longer than some of
# these transfers.)
raw_io () {
    $PY - "$@" <<'EOP'
import os, sys, time
op, path, total, bs = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
stride = int(sys.argv[5]) if len(sys.argv) > 5 else bs
fd = os.open(path, os.O_RDWR if op == "write" else os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
buf = os.urandom(bs) if op == "write" else bytearray(bs)
mv = memoryview(buf)
t0 = time.monotonic()
done = off = 0
while done < total:
    n = min(bs, total - done)
    if op == "write":
        os.pwrite(fd, mv[:n], off)
    else:
        os.preadv(fd, [mv[:n]], off)
    done += n
    off += stride
if op == "write":
    os.fdatasync(fd)
print(time.monotonic() - t0)
os.close(fd)
EOP
}

# fio_runtime FILE read|write: seconds the job ran.
fio_runtime () {
    $PY -c '
import json, sys
j = json.load(open(sys.argv[1]))["jobs"][0]
print(j[sys.argv[2]]["runtime"] / 1000.0)' "$@"
}

median () {
    $PY -c 'import statistics, sys; print(statistics.median(map(float, sys.argv[1:])))' "$@"
}

# The five jobs: NAME, metric (iops or bw), direction, fio arguments.
# Two connections: numjobs=2, each its own NBD connection, each on its
# own half of the device.
jobs=(randread4k randwrite4k seqread1m seqwrite1m fsync4k)
declare -A job_args job_dir job_unit
job_args[randread4k]="--rw=randread --bs=4k --iodepth=32"
job_args[randwrite4k]="--rw=randwrite --bs=4k --iodepth=32"
job_args[seqread1m]="--rw=read --bs=1M --iodepth=8"
job_args[seqwrite1m]="--rw=write --bs=1M --iodepth=8"
job_args[fsync4k]="--rw=randwrite --bs=4k --iodepth=1 --fsync=1"
job_dir=([randread4k]=read [randwrite4k]=write [seqread1m]=read
         [seqwrite1m]=write [fsync4k]=write)
job_unit=([randread4k]=iops [randwrite4k]=iops [seqread1m]=bw_bytes
          [seqwrite1m]=bw_bytes [fsync4k]=iops)
targets=(ramback memory null file)

run_job () {
    local job=$1 target=$2 uri=$3 out=$4
    # shellcheck disable=SC2086
    fio_nbd "$uri" "$out" --name="$job-$target" ${job_args[$job]} \
        --numjobs=2 --group_reporting --size="$half_b" \
        --offset_increment="$half_b" --time_based --runtime="$runtime" \
        --ramp_time="$ramp"
    fio_metric "$out" "${job_dir[$job]}" "${job_unit[$job]}"
}

# Quiesce between measurements: ramback writes back what the last job
# dirtied, the kernel writes back the page cache, so one job's backlog
# does not slow the next.
quiesce () {
    ctl "$WORK/rb.ctl" sync
    sync
}

# --- backing store and image ----------------------------------------------

IMG=$WORK/disk.img
load0=$(cut -d' ' -f1-3 /proc/loadavg)
log "work directory $WORK ($fstype), image $size, fio ${runtime}s per job," \
    "page cache drop: $can_drop"

if want fio || want bw; then
    log "creating the image (non-sparse, random data)"
    fio --name=create --filename="$IMG" --rw=write --bs=1M --size="$size_b" \
        --ioengine=psync --end_fsync=1 --output-format=json \
        --output="$WORK/create.json" >/dev/null
fi

declare -a bk_w bk_r pop drain drain_e2e
nbw=$repeat_bw
want bw || nbw=0
for (( i = 0; i < nbw; i++ )); do
    # Backing store, sequential write: buffered 1M writes and a final
    # fdatasync, which is how ramback's file store writes back.
    drop_caches
    secs=$(raw_io write "$IMG" "$size_b" "$backing_bs_b")
    bk_w+=("$(fdiv "$size_b" "$secs")")

    # Backing store, sequential read, page cache cold (if we may drop it).
    drop_caches
    secs=$(raw_io read "$IMG" "$size_b" "$backing_bs_b")
    bk_r+=("$(fdiv "$size_b" "$secs")")

    # Populate, page cache cold: from nbdkit serving (its socket exists
    # just before .after_fork starts the populate thread) until
    # wait-populated returns.  nbdkit's own startup is not counted.
    drop_caches
    start_server rb "$PLUGIN" back="$IMG" control="$WORK/rb.ctl"
    t0=$(now)
    wait_ctl "$WORK/rb.ctl"
    ctl "$WORK/rb.ctl" wait-populated
    t1=$(now)
    pop+=("$(fdiv "$size_b" "$(fsub "$t1" "$t0")")")

    # Write the whole image, then 'sync' (information only: the flusher
    # drains while the write runs, so this is "time until a full write
    # is durable", bounded by the NBD write speed as much as by drain).
    fio_nbd "$rb_uri" "$WORK/dw.json" --name=dirty --rw=write --bs=1M \
        --iodepth=8 --numjobs=2 --group_reporting --size="$half_b" \
        --offset_increment="$half_b"
    wsecs=$(fio_runtime "$WORK/dw.json" write)
    t0=$(now)
    ctl "$WORK/rb.ctl" sync
    t1=$(now)
    drain_e2e+=("$(fdiv "$size_b" "$($PY -c 'import sys; print(float(sys.argv[1]) + float(sys.argv[2]) - float(sys.argv[3]))' "$wsecs" "$t1" "$t0")")")
    stop_server rb

    # Drain of a fully dirty image.  flush-rate= holds the flusher back
    # while the image is written, so (nearly) all of it is dirty; a
    # clean stop lifts the cap and drains at full speed.  Timed from
    # SIGTERM to the end of the drain and final fdatasync (timed_drain).
    start_server rbh "$PLUGIN" back="$IMG" control="$WORK/rbh.ctl" \
        flush-rate="$hold_rate"
    wait_ctl "$WORK/rbh.ctl"
    ctl "$WORK/rbh.ctl" wait-populated
    fio_nbd "$rbh_uri" "$WORK/dw.json" --name=dirty --rw=write --bs=1M \
        --iodepth=8 --numjobs=2 --group_reporting --size="$half_b" \
        --offset_increment="$half_b"
    pending=$(pending_bytes "$WORK/rbh.ctl")
    drop_caches
    mapfile -t ts < <(timed_drain rbh "$WORK/rbh.ctl")
    secs=${ts[0]}
    drain+=("$(fdiv "$pending" "$secs")")
    log "bandwidth run $((i + 1)): backing w $(mib "${bk_w[i]}") MiB/s," \
        "r $(mib "${bk_r[i]}") MiB/s; populate $(mib "${pop[i]}") MiB/s;" \
        "drain $(mib "${drain[i]}") MiB/s ($(mib "$pending") MiB in $secs s, exit after ${ts[1]} s);" \
        "write+sync $(mib "${drain_e2e[i]}") MiB/s"
done

# --- fio jobs, side by side ------------------------------------------------

declare -A result
if want fio; then
    log "starting ramback, memory, null and file servers"
    start_server rb "$PLUGIN" back="$IMG" control="$WORK/rb.ctl"
    wait_ctl "$WORK/rb.ctl"
    ctl "$WORK/rb.ctl" wait-populated
    start_server memory memory "$size_b"
    start_server null null "$size_b"
    start_server file file "$IMG"
    # nbdkit memory holds the same data as the image (reads of a sparse,
    # never-written memory disk would be a memset, not a copy).
    fio_nbd "$memory_uri" "$WORK/fill.json" --name=fill --rw=write --bs=1M \
        --iodepth=8 --size="$size_b"

    # Job by job, each on every server in turn (repeats interleaved), so
    # that a change in the machine's load hits all servers alike.
    declare -A fvals
    for job in "${jobs[@]}"; do
        for (( i = 0; i < repeat_fio; i++ )); do
            for target in "${targets[@]}"; do
                uriv=${target}_uri
                [ "$target" = ramback ] && uriv=rb_uri
                quiesce
                v=$(run_job "$job" "$target" "${!uriv}" "$WORK/$job-$target.json")
                fvals[$job,$target]+=" $v"
                if [ "${job_unit[$job]}" = iops ]; then
                    log "$job on $target: ${v%.*} IOPS"
                else
                    log "$job on $target: $(mib "$v") MiB/s"
                fi
            done
        done
        for target in "${targets[@]}"; do
            # shellcheck disable=SC2086
            result[$job,$target]=$(median ${fvals[$job,$target]})
        done
    done
    quiesce
    stop_server file
    stop_server null
    stop_server memory
    stop_server rb
fi

# --- scattered dirty data, small device vs 1 TiB sparse device ------------

# The same amount of scattered dirty data drained from a device twice its
# size and from a 1 TiB sparse device.  Finding dirty chunks must cost
# O(dirty), not O(device), so the two drains should take about as long.
# As above, flush-rate= holds the flusher while the data is written and
# the clean stop drains it.
want sparse || sparse=no
if [ "$sparse" = yes ]; then
    chunk=65536
    nios=$((sparse_dirty_b / chunk))
    huge_b=$(to_bytes 1T)
    # By default on tmpfs: there the drain costs what ramback itself
    # costs (finding the dirty chunks, batching, copying), which is what
    # must not grow with the device.  On a disk, the kernel's write back
    # of 16384 scattered 64K pieces of page cache dominates and varies
    # from run to run by more than 2x; --sparse-dir= chooses.
    if [ -z "$sparse_dir" ]; then
        if [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] &&
           [ "$(( $(stat -f -c '%a * %S' /dev/shm) ))" -gt $((3 * sparse_dirty_b)) ]; then
            sparse_dir=/dev/shm
        else
            sparse_dir=$workroot
        fi
    fi
    sparse_work=$(mktemp -d "$sparse_dir/ramback-bench-sparse.XXXXXX")
    sparse_fs=$(fs_type "$sparse_work")
    declare -A devsize=([small]=$((2 * sparse_dirty_b)) [huge]=$huge_b)
    declare -A spv spw spf
    for dev in small huge; do
        if ! truncate -s "${devsize[$dev]}" "$sparse_work/probe" 2>/dev/null; then
            log "cannot create a ${devsize[$dev]} byte sparse file in $sparse_work: sparse test skipped"
            sparse=no
        fi
        rm -f "$sparse_work/probe"
    done
    # Runs alternate between the two devices, and the ratio is taken run
    # by run, so that a change in the machine's load hits both alike.
    for (( i = 0; i < repeat_bw && ${#devsize[@]} > 0; i++ )); do
        [ "$sparse" = yes ] || break
        for dev in small huge; do
            dev_b=${devsize[$dev]}
            f=$sparse_work/sparse-$dev.img
            stride=$((dev_b / nios))

            # The file system alone, same pattern: buffered writes and
            # one fdatasync, as ramback's write back does them.
            rm -f "$f"; truncate -s "$dev_b" "$f"
            drop_caches
            secs=$(raw_io write "$f" "$sparse_dirty_b" "$chunk" "$stride")
            spf[$dev]+=" $(fdiv "$secs" "$(fdiv "$sparse_dirty_b" $((1 << 30)))")"

            # ramback on a fresh, empty backing file.
            rm -f "$f"; truncate -s "$dev_b" "$f"
            start_server sp "$PLUGIN" back="$f" control="$WORK/sp.ctl" \
                overcommit=true flush-rate="$hold_rate"
            wait_ctl "$WORK/sp.ctl"
            ctl "$WORK/sp.ctl" wait-populated
            # One 64K chunk every 'stride' bytes: no two dirty chunks are
            # adjacent on either device, so the write-back I/O is the
            # same and only the size of the device differs.
            fio_nbd "$sp_uri" "$WORK/sp-w.json" --name=scatter \
                --rw=write:$((stride - chunk)) --bs=$chunk --iodepth=32 \
                --size="$dev_b" --number_ios="$nios"
            w=$(fio_runtime "$WORK/sp-w.json" write)
            spw[$dev]+=" $w"
            pending=$(pending_bytes "$WORK/sp.ctl")
            drop_caches
            mapfile -t ts < <(timed_drain sp "$WORK/sp.ctl")
            # Seconds per GiB actually pending, so that the odd chunk the
            # flusher stored before the hold favours neither side.
            spv[$dev]+=" $(fdiv "${ts[0]}" "$(fdiv "$pending" $((1 << 30)))")"
            log "sparse $dev ($((dev_b >> 20)) MiB device): $(mib "$pending") MiB" \
                "drained in ${ts[0]} s (exit after ${ts[1]} s); written in $w s"
            rm -f "$f"
        done
    done
    rm -rf "$sparse_work"
fi

# --- report ------------------------------------------------------------------

report=$WORK/report.txt
{
    echo "ramback bench-local: $(date -u +%Y-%m-%dT%H:%MZ), $(uname -sr)," \
         "$(nproc) CPUs, $(( $(getconf _PHYS_PAGES) * $(getconf PAGESIZE) >> 30 )) GiB RAM"
    echo "image $size on $fstype ($WORK), fio $(fio --version) nbd engine," \
         "2 connections, ${runtime}s per job (ramp ${ramp}s), median of $repeat_fio;"
    echo "page cache dropped before cold measurements: $can_drop;" \
         "load average at start: $load0, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
    if want fio; then
        echo
        export RESULTS
        RESULTS=$(for job in "${jobs[@]}"; do
            printf '%s %s %s %s %s %s\n' "$job" "${job_unit[$job]}" \
                "${result[$job,ramback]}" "${result[$job,memory]}" \
                "${result[$job,null]}" "${result[$job,file]}"
        done)
        $PY - <<'EOP'
import os
rows = [l.split() for l in os.environ["RESULTS"].splitlines()]
def fmt(unit, v):
    v = float(v)
    return "%.0f" % v if unit == "iops" else "%.0f" % (v / 2**20)
hdr = ("job", "unit", "ramback", "memory", "null", "file",
       "rb/mem", "rb/file", "target", "")
print("%-12s %-5s %9s %9s %9s %9s %7s %8s  %-22s %s" % hdr)
for job, unit, rb, mem, null, f in rows:
    rm = float(rb) / float(mem) if float(mem) else 0
    rf = float(rb) / float(f) if float(f) else 0
    verdict = "PASS" if rm >= 1.0 else "MISS"
    tgt = ">=1.0x memory"
    if job == "fsync4k":
        verdict += " / " + ("PASS" if rf >= 5.0 else "MISS")
        tgt += " / >=5x file"
    print("%-12s %-5s %9s %9s %9s %9s %7.2f %8.2f  %-22s %s" % (
        job, "IOPS" if unit == "iops" else "MiB/s",
        fmt(unit, rb), fmt(unit, mem), fmt(unit, null), fmt(unit, f),
        rm, rf, tgt, verdict))
EOP
    fi
    if want bw; then
        echo
        BK_W="${bk_w[*]}" BK_R="${bk_r[*]}" DRAIN="${drain[*]}" POP="${pop[*]}" \
        E2E="${drain_e2e[*]}" $PY - <<'EOP'
import os, statistics as st
v = {k: [float(x) for x in os.environ[k].split()]
     for k in ("BK_W", "BK_R", "DRAIN", "POP", "E2E")}
M = 2**20
print("bandwidth, %d run(s): medians, and the median of the per-run ratios" %
      len(v["BK_W"]))
print("%-34s %8s %8s %6s  %s" % ("MiB/s", "ramback", "backing", "ratio",
                                 "target"))
def row(name, a, b, tgt, judge=True):
    r = st.median([x / y for x, y in zip(v[a], v[b])])
    print("%-34s %8.0f %8.0f %6.2f  %-26s %s" % (
        name, st.median(v[a]) / M, st.median(v[b]) / M, r, tgt,
        ("PASS" if r >= 0.9 else "MISS") if judge else ""))
row("drain of a fully dirty image", "DRAIN", "BK_W", ">=0.90x backing seq write")
row("populate, page cache cold", "POP", "BK_R", ">=0.90x backing seq read")
row("full write, then sync", "E2E", "BK_W",
    "(info: not fully dirty)", judge=False)
EOP
    fi
    if [ "$sparse" = yes ]; then
        echo
        SPV_S="${spv[small]}" SPV_H="${spv[huge]}" SPW_S="${spw[small]}" \
        SPW_H="${spw[huge]}" SPF_S="${spf[small]}" SPF_H="${spf[huge]}" \
        $PY - "$((2 * sparse_dirty_b))" "$sparse_dirty" "$sparse_fs" <<'EOP'
import os, sys, statistics as st
def l(k): return [float(x) for x in os.environ[k].split()]
small = int(sys.argv[1])
dev = ("%.0fG" % (small / 2**30)) if small >= 2**30 else ("%.0fM" % (small / 2**20))
print("scattered dirty data: %s in 64K chunks, backing files on %s, %d run(s):" % (
    sys.argv[2], sys.argv[3], len(l("SPV_S"))))
print("medians, and the median of the per-run ratios")
print("%-40s %7s %7s %6s  %s" % ("", dev + " dev", "1T dev", "ratio", "target"))
def row(name, a, b, tgt=None):
    s, h = l(a), l(b)
    r = st.median([y / x for x, y in zip(s, h)])
    print("%-40s %7.3f %7.3f %6.2f  %-24s %s" % (
        name, st.median(s), st.median(h), r, tgt or "(info)",
        ("PASS" if r <= 1.2 else "MISS") if tgt else ""))
row("drain, seconds per GiB dirty", "SPV_S", "SPV_H", "1T <=1.2x small device")
row("writing it into ramback, seconds", "SPW_S", "SPW_H")
row("same pattern on the file alone, s/GiB", "SPF_S", "SPF_H")
EOP
    fi
} > "$report"

cat "$report"
[ -z "$output" ] || cp "$report" "$output"
if [ "$strict" = yes ] && grep -q 'MISS' "$report"; then
    exit 3
fi
exit 0
