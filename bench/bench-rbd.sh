#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# bench-rbd.sh: ramback in front of a Ceph RBD image (back=rbd:) against
# the image used directly by fio's rbd engine, without and with librbd's
# write-back cache (rbd_cache=true, rbd_cache_writethrough_until_flush=
# false), on a single-node test cluster (tests/rbd/ceph-cluster.sh) or
# the one of $CEPH_CONF.  fio jobs, one client, on the whole image:
#
#   randwrite4k-qd1, randwrite4k-qd32   4k random write
#   fsync4k                             4k random write, fsync after each
#   randread4k-qd32                     4k random read (after populate)
#   seqwrite1m                          1M sequential write, QD8
#
# and the drain: a whole image of dirty data written back by ramback
# (SIGTERM until the clean stop has synced) against the image's own
# sequential write bandwidth (seqwrite1m, direct).  ramback runs
# with fsync=ignore, and with fsync=wait and a local journal (journal=,
# a file in --dir).  Each repetition runs every configuration once, in
# turn (paired runs); the table has the medians.
#
# The table has each configuration's medians, and the ratios of
# ramback's to the image direct and to librbd's cache, each the median
# of the ratios of the paired runs.  --plot draws it (log scale) as
# bench-rbd-fio.svg.
#
# Targets: ramback fsync=ignore >= 10x the image direct on randwrite4k-
# qd1 and fsync4k; ramback with the journal >= 3x librbd's cache on
# fsync4k; drain >= 0.9x the image's sequential write.
#
#   bench/bench-rbd.sh [--quick] [--build=DIR] [--dir=DIR] [--size=SIZE]
#       [--runtime=S] [--reps=N] [--output=FILE] [--strict] [--keep]
#       [--plot[=DIR]]
#
# Exit status: 0 when it ran (3 with --strict if a target is missed),
# 1 if something failed, 2 on bad usage.

set -euo pipefail
. "$(dirname "$0")/lib.sh"

usage () {
    cat <<EOF
Usage: $prog [OPTION...]

ramback over a Ceph RBD image against the image direct (fio's rbd engine)
and librbd's write-back cache.

  --build=DIR     ramback build tree (default: the tree above bench/)
  --dir=DIR       work directory (default: a new one in /var/tmp)
  --size=SIZE     image size (default 512M, --quick 128M)
  --runtime=S     seconds per fio job (default 10, --quick 3)
  --reps=N        repetitions, medians taken (default 3, --quick 1)
  --quick         a short run
  --output=FILE   also write the report there
  --strict        exit 3 if a target is missed
  --keep          keep the work directory
  --plot[=DIR]    draw the table as an SVG chart in DIR (default: beside
                  --output=, or here)
EOF
}

size= runtime= reps=
for a in "$@"; do
    case $a in
        --size=*) size=$(size_arg "${a#*=}") ;;
        --runtime=*) runtime=${a#*=} ;;
        --reps=*) reps=${a#*=} ;;
        *) bench_opt "$a" ;;
    esac
done
find_build
if [ "${quick:-no}" = yes ]; then
    : "${size:=$((128 * 1048576))}" "${runtime:=3}" "${reps:=1}"
else
    : "${size:=$((512 * 1048576))}" "${runtime:=10}" "${reps:=3}"
fi
command -v rbd >/dev/null || die "rbd not found: install ceph-common"
fio --enghelp 2>/dev/null | grep -qw rbd || die "fio has no rbd engine"

WORK=$(mktemp -d "${workroot:-/var/tmp}/bench-rbd.XXXXXX")
cluster=
cleanup () {
    set +e
    kill_servers
    [ -z "$cluster" ] || "$srcdir/../tests/rbd/ceph-cluster.sh" stop "$cluster"
    [ "${keep:-no}" = yes ] || rm -rf "$WORK"
}
trap cleanup EXIT
if [ -z "${CEPH_CONF:-}" ]; then
    cluster=$WORK/ceph
    log "starting a single-node cluster in $cluster"
    CEPH_CONF=$("$srcdir/../tests/rbd/ceph-cluster.sh" start "$cluster")
fi
export CEPH_CONF
# fio's rbd engine reads $CEPH_CONF: one copy without, one with the cache.
nocache=$WORK/nocache.conf cache=$WORK/cache.conf
{ cat "$CEPH_CONF"; printf '[client]\nrbd_cache = false\n'; } > "$nocache"
{ cat "$CEPH_CONF"
  printf '[client]\nrbd_cache = true\nrbd_cache_writethrough_until_flush = false\n'
} > "$cache"

img=bench-$$
rbd -c "$CEPH_CONF" create --size "${size}B" "rbd/$img"
trap 'rbd -c "$CEPH_CONF" rm --no-progress "rbd/$img" >/dev/null 2>&1 || :; cleanup' EXIT
# Fill it once, so that reads read data and populate has work.
fio --name=fill --ioengine=rbd --pool=rbd --rbdname="$img" --rw=write \
    --bs=4M --iodepth=8 --size="$size" >/dev/null 2>&1 ||
    die "fio could not write rbd/$img"
head -c $((64 * 1048576)) /dev/zero > "$WORK/journal.img"

JOBS=(randwrite4k-qd1 randwrite4k-qd32 fsync4k randread4k-qd32 seqwrite1m)
declare -A jargs=(
    [randwrite4k-qd1]="--rw=randwrite --bs=4k --iodepth=1"
    [randwrite4k-qd32]="--rw=randwrite --bs=4k --iodepth=32"
    [fsync4k]="--rw=randwrite --bs=4k --iodepth=1 --fsync=1"
    [randread4k-qd32]="--rw=randread --bs=4k --iodepth=32"
    [seqwrite1m]="--rw=write --bs=1M --iodepth=8")
declare -A jdir=([randread4k-qd32]=read)
declare -A junit=([seqwrite1m]=bw_bytes)
CONFIGS=(direct cache ramback journal)
declare -A cdesc=([direct]="image direct (fio rbd)"
    [cache]="librbd rbd_cache=true (fio rbd)"
    [ramback]="ramback fsync=ignore (fio nbd)"
    [journal]="ramback journal= local, fsync=wait (fio nbd)")
declare -A cconf=([direct]=$nocache [cache]=$cache)
declare -A results=()         # "config job" -> values, space-separated
drains=()

common=(--name=j --size="$size" --runtime="$runtime" --time_based
        --direct=1 --randrepeat=0 --norandommap --output-format=json)

run_fio () {
    local cfg=$1 job=$2 out=$WORK/$cfg-$job.json v
    # shellcheck disable=SC2086
    case $cfg in
        direct|cache)
            CEPH_CONF=${cconf[$cfg]} fio --ioengine=rbd --pool=rbd \
                --rbdname="$img" "${common[@]}" ${jargs[$job]} \
                --output="$out" >/dev/null || die "fio $cfg $job failed" ;;
        *)
            fio_nbd "$rb_uri" "$out" "${common[@]}" ${jargs[$job]} ;;
    esac
    v=$(fio_metric "$out" "${jdir[$job]:-write}" "${junit[$job]:-iops}")
    results["$cfg $job"]+="$v "
}

for (( rep = 1; rep <= reps; rep++ )); do
    for cfg in "${CONFIGS[@]}"; do
        log "repetition $rep: $cfg"
        if [ "$cfg" = ramback ] || [ "$cfg" = journal ]; then
            args=(back="rbd:rbd/$img" rbd-conf="$CEPH_CONF" control="$WORK/rb.ctl")
            if [ "$cfg" = journal ]; then
                args+=(journal="$WORK/journal.img" fsync=wait)
            else
                args+=(fsync=ignore)
            fi
            rm -f "$WORK/rb.ctl"
            start_server rb "$PLUGIN" "${args[@]}"
            wait_ctl "$WORK/rb.ctl"
            ctl_wait "$WORK/rb.ctl" wait-populated >/dev/null
        fi
        for job in "${JOBS[@]}"; do
            run_fio "$cfg" "$job"
        done
        if [ "$cfg" = ramback ]; then
            # The drain: the whole image written at RAM speed, then a
            # clean stop; from the first write to the store synced (the
            # write back starts during the fill).
            t0=$(now)
            fio_nbd "$rb_uri" "$WORK/fill.json" --name=fill --rw=write \
                --bs=1M --iodepth=8 --size="$size" --direct=1
            t1=$(now)
            t=$(timed_drain rb "$WORK/rb.ctl")
            t=${t%%$'\n'*}             # until drained and synced
            drains+=("$(fdiv "$size" "$(fadd "$(fsub "$t1" "$t0")" "$t")")")
        elif [ "$cfg" = journal ]; then
            stop_server rb
        fi
    done
done

med () { median ${results["$1 $2"]}; }
# The median of the ratios of paired runs: A's runs over B's, run by run.
pratio () {
    local a=(${results["$1 $3"]}) b=(${results["$2 $3"]}) r=() i
    for i in "${!a[@]}"; do r+=("$(fdiv "${a[i]}" "${b[i]}")"); done
    awk -v v="$(median "${r[@]}")" 'BEGIN { printf "%.2f\n", v }'
}
fmt () {
    case $2 in
        seqwrite1m) awk -v v="$1" 'BEGIN { printf "%.1f MiB/s", v / 1048576 }' ;;
        *) awk -v v="$1" 'BEGIN { printf "%.0f IOPS", v }' ;;
    esac
}
check () {          # NAME VALUE TARGET
    if awk -v v="$2" -v t="$3" 'BEGIN { exit !(v >= t) }'; then
        echo "  $1: ${2}x (target ${3}x): ok"
    else
        echo "  $1: ${2}x (target ${3}x): MISS"
    fi
}

report=$WORK/report.txt
{
    echo "bench-rbd: rbd/$img, $(mib "$size") MiB, fio ${runtime} s per job, medians of $reps paired run(s)"
    printf '%-18s' job
    for cfg in "${CONFIGS[@]}"; do printf ' | %-14s' "$cfg"; done
    printf ' | %-9s | %-9s | %-9s\n' rb/direct rb/cache jr/cache
    for job in "${JOBS[@]}"; do
        printf '%-18s' "$job"
        for cfg in "${CONFIGS[@]}"; do
            printf ' | %-14s' "$(fmt "$(med "$cfg" "$job")" "$job")"
        done
        printf ' | %-9s | %-9s | %-9s\n' "$(pratio ramback direct "$job")x" \
            "$(pratio ramback cache "$job")x" "$(pratio journal cache "$job")x"
    done
    for cfg in "${CONFIGS[@]}"; do echo "  $cfg: ${cdesc[$cfg]}"; done
    dr=$(median "${drains[@]}")
    seq=$(med direct seqwrite1m)
    echo "drain (whole image dirty, clean stop): $(fmt "$dr" seqwrite1m), image direct seqwrite1m $(fmt "$seq" seqwrite1m)"
    echo "targets:"
    check "ramback / direct, randwrite4k-qd1" "$(pratio ramback direct randwrite4k-qd1)" 10
    check "ramback / direct, fsync4k" "$(pratio ramback direct fsync4k)" 10
    check "journal / rbd_cache, fsync4k" "$(pratio journal cache fsync4k)" 3
    check "drain / direct seqwrite1m" "$(ratio "$dr" "$seq")" 0.9
} > "$report"
for job in "${JOBS[@]}"; do
    printf '%s' "$job"
    for cfg in "${CONFIGS[@]}"; do
        case $job in
            seqwrite1m) printf '\t%s' "$(fdiv "$(med "$cfg" "$job")" 1048576)" ;;
            *) printf '\t%s' "$(med "$cfg" "$job")" ;;
        esac
    done
    echo
done | plot_bars --log fio "ramback over RBD against the image direct and librbd's cache (seqwrite1m in MiB/s)" \
    "IOPS (MiB/s for seqwrite1m), median" "${CONFIGS[@]}"
bench_finish "$report"
