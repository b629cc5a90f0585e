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
#                        [--rb-args=ARGS] [--output=FILE] [--plot[=DIR]] [--strict]
#
# Exit status: 0 when the benchmark ran (targets missed or not, unless
# --strict), 1 if something failed to run, 2 on bad usage.

set -euo pipefail
# die, log, size_arg, the arithmetic, servers, control, fio (bench/lib.sh, which
# also sets PATH, LC_ALL=C, prog and srcdir)
. "$(dirname "$0")/lib.sh"

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
  --rb-args=ARGS    more parameters for the ramback of the fio jobs, space
                    separated (e.g. --rb-args=flush-delay=0 to compare
                    with prompt write back)
  --quick           smaller and shorter (a smoke test, about a minute)
  --output=FILE     also write the result tables to FILE
  --plot[=DIR]      also draw the tables as SVG charts (gnuplot) in DIR
                    (default: beside --output=, else here)
  --strict          exit 3 if any target is missed
  --keep            keep the work directory
EOF
}

size=; runtime=; ramp=; repeat_fio=1; repeat_bw=; sparse=yes
sparse_dirty=; sparse_dir=; backing_bs=1M; quick=no; output=; strict=no; keep=no; only=,fio,bw,sparse,
rb_args=
workroot=${TMPDIR:-/var/tmp}
build=${RAMBACK_BUILD:-}

for arg in "$@"; do
    case $arg in
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
        --rb-args=*) rb_args=${arg#*=} ;;
        *) bench_opt "$arg" ;;
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

PY=/usr/bin/python3
probe_drop_caches
want () { [[ $only == *,$1,* ]]; }

size_b=$(size_arg "$size")
sparse_dirty_b=$(size_arg "$sparse_dirty")
backing_bs_b=$(size_arg "$backing_bs")
half_b=$((size_b / 2))
[ $((size_b % (2 * 1024 * 1024))) -eq 0 ] ||
    die "--size must be a multiple of 2M (each connection gets half)"
for v in "$runtime" "$ramp" "$repeat_fio" "$repeat_bw"; do
    [[ $v =~ ^[0-9]+$ ]] || { echo "$prog: bad number '$v'" >&2; exit 2; }
done
[ "$repeat_fio" -ge 1 ] && [ "$repeat_bw" -ge 1 ] ||
    die "--repeat and --bw-repeat must be at least 1"

find_build

for c in nbdkit fio python3; do
    command -v "$c" >/dev/null || die "'$c' is needed (apt-get install nbdkit fio python3)"
done
fio --enghelp=nbd >/dev/null 2>&1 ||
    die "this fio has no nbd engine (Debian's fio >= 3.20 has it)"
for p in memory null file; do
    nbdkit "$p" --dump-plugin >/dev/null 2>&1 ||
        die "nbdkit's $p plugin is missing (apt-get install nbdkit)"
done
WORK=$(mktemp -d "$workroot/ramback-bench.XXXXXX")
sparse_work=
cleanup () {
    set +e
    kill_servers
    if [ "$keep" = yes ]; then
        echo "work directory kept: $WORK"
    else
        rm -rf "$WORK"
    fi
    [ -z "$sparse_work" ] || rm -rf "$sparse_work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fstype=$(fs_type "$WORK")
case $fstype in
    tmpfs|ramfs) log "WARNING: $WORK is on $fstype: the 'backing store' is RAM" ;;
esac

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

# The parts, each with its measurement and its report_* table.
. "$srcdir/local-bw.sh"
. "$srcdir/local-fio.sh"
. "$srcdir/local-sparse.sh"

# --- report ------------------------------------------------------------------

report=$WORK/report.txt
{
    echo "ramback bench-local: $(date -u +%Y-%m-%dT%H:%MZ), $(uname -sr)," \
         "$(nproc) CPUs, $(( $(getconf _PHYS_PAGES) * $(getconf PAGESIZE) >> 30 )) GiB RAM"
    echo "image $size on $fstype ($WORK), fio $(fio --version) nbd engine," \
         "2 connections, ${runtime}s per job (ramp ${ramp}s), median of $repeat_fio;"
    [ -z "$rb_args" ] || echo "ramback of the fio jobs with: $rb_args"
    echo "page cache dropped before cold measurements: $can_drop;" \
         "load average at start: $load0, at end: $(cut -d' ' -f1-3 /proc/loadavg)"
    if want fio; then echo; report_fio; fi
    if want bw; then echo; report_bw; fi
    if [ "$sparse" = yes ]; then echo; report_sparse; fi
} > "$report"

bench_finish "$report"
