#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# bench-bigger.sh: a device four times ram-size= (ramback as a RAM cache
# of a bigger disk).  4K random reads (fio, 2 connections of queue
# depth 32) over a hot set that fits in RAM (half of ram-size=) and
# uniformly over the whole device, through ramback with ram-size= a
# quarter of the device, through ramback holding the whole device,
# through nbdkit file on the same image, and on the image itself (fio
# psync, 2 threads: the backing store's own speed, without NBD).  The
# report has IOPS, each against nbdkit file and the raw file, and the
# hit ratio of the small ramback.  The image is in the page cache (so a
# miss costs a page cache copy, not a disk read: the least a cache can
# gain); --drop-caches drops the cache before each uniform run instead
# (root).  See bench/README.md.
#
#   bench/bench-bigger.sh [--quick] [--build=DIR] [--dir=DIR]
#       [--size=SIZE] [--runtime=SECONDS] [--repeat=N] [--drop-caches]
#       [--output=FILE] [--plot[=DIR]] [--keep]
#
# Exit status: 0 when the benchmark ran, 1 if something failed to run,
# 2 on bad usage.

set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage () {
    cat <<END
Usage: $prog [OPTION...]

4K random reads, over a hot set that fits in ram-size= and uniformly
over a device four times ram-size=, through ramback with and without
ram-size=, nbdkit file and on the image itself.

  --build=DIR     ramback build tree (default: \$RAMBACK_BUILD, else the
                  directory above this script if the plugin is there)
  --dir=DIR       where the image goes (default: \${TMPDIR:-/var/tmp})
  --size=SIZE     device size, a multiple of 4M (default 1G, --quick
                  256M); ram-size= is a quarter of it, the hot set half
                  of ram-size=
  --runtime=S     seconds per fio run (default 5, --quick 2)
  --repeat=N      runs per job and server, taking turns, median kept
                  (default 3, --quick 1)
  --drop-caches   drop the page cache before each uniform run (root)
  --quick         smaller and shorter
  --output=FILE   also write the report to FILE
  --plot[=DIR]    also draw the table as an SVG chart (gnuplot) in DIR
                  (default: beside --output=, else here)
  --keep          keep the work directory
END
}

size=; runtime=; repeat=; quick=no; output=; keep=no; dropping=no
workroot=${TMPDIR:-/var/tmp}
build=${RAMBACK_BUILD:-}
for arg in "$@"; do
    case $arg in
        --size=*) size=${arg#*=} ;;
        --runtime=*) runtime=${arg#*=} ;;
        --repeat=*) repeat=${arg#*=} ;;
        --drop-caches) dropping=yes ;;
        *) bench_opt "$arg" ;;
    esac
done
if [ "$quick" = yes ]; then
    : "${size:=256M}" "${runtime:=2}" "${repeat:=1}"
else
    : "${size:=1G}" "${runtime:=5}" "${repeat:=3}"
fi
size_b=$(size_arg "$size")
[ $(( size_b % (4 << 20) )) -eq 0 ] && [ "$size_b" -ge $(( 64 << 20 )) ] ||
    { echo "$prog: --size must be a multiple of 4M, at least 64M" >&2; exit 2; }
[[ $runtime =~ ^[1-9][0-9]*$ ]] || { echo "$prog: bad --runtime '$runtime'" >&2; exit 2; }
[[ $repeat =~ ^[1-9][0-9]*$ ]] || { echo "$prog: bad --repeat '$repeat'" >&2; exit 2; }
ram_b=$(( size_b / 4 ))
hot_b=$(( ram_b / 2 ))
find_build
for c in nbdkit fio; do
    command -v "$c" >/dev/null || die "'$c' is needed (apt-get install nbdkit fio)"
done
if [ "$dropping" = yes ]; then
    probe_drop_caches
    [ "$can_drop" = yes ] || die "--drop-caches: cannot drop the page cache (not root?)"
fi

bench_workdir bigger

IMG=$WORK/disk.img
head -c "$size_b" /dev/urandom > "$IMG"
# One writer per backing store: each ramback has its own copy.
cp "$IMG" "$WORK/small.img"
cp "$IMG" "$WORK/whole.img"
sync
log "image: $size of random data on $(fs_type "$WORK"); ram-size=$(mib "$ram_b")M," \
    "hot set the first $(mib "$hot_b") MiB"

# The two jobs: where the reads go (each connection on its half).
declare -A span=([hot]=$hot_b [uniform]=$size_b)
jobs=(hot uniform)
targets=(small whole file raw)
declare -A label=([small]="ramback ram-size=$(mib "$ram_b")M"
                  [whole]="ramback, whole device" [file]="nbdkit file"
                  [raw]="the image (psync)")

# run_fio TARGET JOB OUT: one run; prints its IOPS.
run_fio () {
    local target=$1 job=$2 out=$3 half=$(( span[$2] / 2 ))
    local common=(--name="$job-$target" --rw=randread --bs=4k --numjobs=2
                  --group_reporting --size="$half" --offset_increment="$half"
                  --time_based --runtime="$runtime" --randrepeat=0)
    if [ "$target" = raw ]; then
        fio --ioengine=psync --filename="$IMG" --output-format=json \
            --output="$out" "${common[@]}" >/dev/null ||
            { cat "$out" >&2 || true; die "fio failed on the image"; }
    else
        local uriv=${target}_uri
        fio_nbd "${!uriv}" "$out" --iodepth=32 "${common[@]}"
    fi
    fio_metric "$out" read iops
}

# warm TARGET JOB: read the job's span once, sequentially (the hot set
# into ramback's RAM before its runs; the page cache for the others).
warm () {
    local target=$1 job=$2
    if [ "$target" = raw ]; then
        fio --ioengine=psync --filename="$IMG" --name=warm --rw=read \
            --bs=1M --size="${span[$job]}" --output-format=json \
            --output="$WORK/warm.json" >/dev/null || die "fio failed on the image"
    else
        local uriv=${target}_uri
        fio_nbd "${!uriv}" "$WORK/warm.json" --name=warm --rw=read --bs=1M \
            --iodepth=8 --size="${span[$job]}"
    fi
}

log "starting ramback (ram-size= and whole), nbdkit file"
start_server small "$PLUGIN" back="$WORK/small.img" control="$WORK/small.ctl" \
    ram-size="$ram_b" populate=false
wait_ctl "$WORK/small.ctl"
start_server whole "$PLUGIN" back="$WORK/whole.img" control="$WORK/whole.ctl"
wait_ctl "$WORK/whole.ctl"
ctl "$WORK/whole.ctl" wait-populated >/dev/null
start_server file file "$IMG"
raw_uri=

declare -A vals hits
for job in "${jobs[@]}"; do
    for target in "${targets[@]}"; do
        warm "$target" "$job"
    done
    for (( i = 0; i < repeat; i++ )); do
        for target in "${targets[@]}"; do
            if [ "$job" = uniform ] && [ "$dropping" = yes ]; then
                drop_caches
            fi
            if [ "$target" = small ]; then
                mapfile -t h0 < <(status_field "$WORK/small.ctl" hits misses)
            fi
            v=$(run_fio "$target" "$job" "$WORK/$job-$target.json")
            vals[$job,$target]+=" $v"
            if [ "$target" = small ]; then
                mapfile -t h1 < <(status_field "$WORK/small.ctl" hits misses)
                hh=$(( h1[0] - h0[0] )) mm=$(( h1[1] - h0[1] ))
                hits[$job]+=" $(fdiv "$hh" "$(( hh + mm > 0 ? hh + mm : 1 ))")"
            fi
            log "$job on ${label[$target]}: ${v%.*} IOPS"
        done
    done
done
mapfile -t ev < <(status_field "$WORK/small.ctl" evictions resident_bytes)
stop_server file
stop_server whole
stop_server small

report=$WORK/report.txt
{
    echo "ramback bench-bigger: $(date -u +%Y-%m-%dT%H:%MZ), $(uname -sr)," \
         "$(nproc) CPUs; $(fio --version)"
    echo "a $size device of random data on $(fs_type "$WORK"), page cache" \
         "$( [ "$dropping" = yes ] && echo "dropped before each uniform run" || echo warm);" \
         "ram-size=$(mib "$ram_b")M; 4K random reads, 2 connections"
    echo "of queue depth 32 (the image: 2 psync threads), $runtime s a run," \
         "medians of $repeat"
    echo
    printf '%-30s %10s %10s %9s %9s\n' "IOPS" "hot set" "uniform" "/ file" "/ image"
    for target in "${targets[@]}"; do
        # shellcheck disable=SC2086
        hv=$(median ${vals[hot,$target]})
        # shellcheck disable=SC2086
        uv=$(median ${vals[uniform,$target]})
        # shellcheck disable=SC2086
        printf '%-30s %10.0f %10.0f %4.2f/%-4.2f %4.2f/%-4.2f\n' \
            "${label[$target]}" "$hv" "$uv" \
            "$(fdiv "$hv" "$(median ${vals[hot,file]})")" \
            "$(fdiv "$uv" "$(median ${vals[uniform,file]})")" \
            "$(fdiv "$hv" "$(median ${vals[hot,raw]})")" \
            "$(fdiv "$uv" "$(median ${vals[uniform,raw]})")"
        printf '%s\t%s\t%s\n' "${label[$target]}" "$hv" "$uv" >> "$WORK/plot.tsv"
    done
    echo
    echo "/ file, / image: hot set/uniform against nbdkit file and the image."
    printf 'Hit ratio of ramback ram-size= (requests that found their chunks in RAM):\n'
    # shellcheck disable=SC2086
    printf 'hot set %.3f, uniform %.3f; %s evictions in all, %s MiB resident at the end.\n' \
        "$(median ${hits[hot]})" "$(median ${hits[uniform]})" "${ev[0]}" \
        "$(mib "${ev[1]}")"
} > "$report"
plot_bars --log iops "4K random reads, a $size device, ram-size=$(mib "$ram_b")M" \
    "IOPS (log scale)" "hot set" "uniform" < "$WORK/plot.tsv"
bench_finish "$report"
