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
# sequential write bandwidth (seqwrite1m, direct, in the same
# repetition: the ratio is the median of the paired ones).  For the drain,
# ramback starts with flush-delay=60, so that it writes nothing back
# while fio fills it (1M writes, QD8): all of the image is dirty at the
# SIGTERM.  The drain is the bytes the clean stop wrote back over the
# time from the SIGTERM until synced; the end-to-end figure (from the
# first write until synced, the fill into RAM included) is shown too.
# The drain and populate run twice: back=rbd: (the native store) and
# back= an NBD URI of qemu-nbd serving the same image through QEMU's
# rbd driver (cache=none: librbd without its cache, as the native
# store), when QEMU has it (Debian: apt-get install qemu-block-extra);
# else that row is skipped and says so.  ramback runs with fsync=
# ignore, and with fsync=wait and a local journal (journal=, a file in
# --dir).  Each repetition runs every configuration once, in turn
# (paired runs); the table has the medians.
#
# librbd's persistent write-log cache (rbd_plugins=pwl_cache) would be
# another column, but it is a plugin library of its own
# (ceph/librbd/libceph_librbd_pwl_cache.so beside librbd.so.1), and
# Debian 12's librbd1 (16.2.15) does not ship it, nor does any other of
# its packages: the report says whether it was found.
#
# The table has each configuration's medians, and the ratios of
# ramback's to the image direct and to librbd's cache, each the median
# of the ratios of the paired runs.  --plot draws it (log scale) as
# bench-rbd-fio.svg.
#
# Targets: ramback fsync=ignore >= 10x the image direct on randwrite4k-
# qd1 and fsync4k; ramback with the journal >= 3x librbd's cache on
# fsync4k; drain >= 0.9x the image's sequential write; the native
# store's drain >= 1.3x the qemu-nbd route's.
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

if qemu-img --help 2>/dev/null | grep -qw rbd; then
    qemu_rbd=yes
else
    qemu_rbd="no: QEMU has no rbd driver (Debian: apt-get install qemu-block-extra)"
    command -v qemu-nbd >/dev/null ||
        qemu_rbd="no: qemu-nbd not found (Debian: apt-get install qemu-utils qemu-block-extra)"
fi
# librbd's plugins are in ceph/librbd/ beside the library.
librbd=$(ldconfig -p | awk '$1 == "librbd.so.1" { print $NF; exit }')
pwl=${librbd%/*}/ceph/librbd/libceph_librbd_pwl_cache.so

WORK=$(mktemp -d "${workroot:-/var/tmp}/bench-rbd.XXXXXX")
cluster= img=
# Everything this run started goes, also on failure or Ctrl-C: the
# servers (nbdkit, qemu-nbd), the image on a cluster of $CEPH_CONF,
# our own cluster's daemons (ceph-cluster.sh stop ends those without a
# pid file too).  The work directory stays if the cluster would not
# stop, so that its daemons can still be found.
cleanup () {
    set +e
    kill_servers
    if [ -n "$cluster" ]; then
        "$srcdir/../tests/rbd/ceph-cluster.sh" stop "$cluster" ||
            { echo "$prog: the cluster in $cluster did not stop; kept" >&2; keep=yes; }
    elif [ -n "$img" ]; then
        timeout 60 rbd -c "$CEPH_CONF" rm --no-progress "rbd/$img" >/dev/null 2>&1
    fi
    [ "${keep:-no}" = yes ] || rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
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

# The drain and populate of one route: native (back=rbd:) or qemu
# (back= qemu-nbd's socket).  Appends to drains[ROUTE], e2e[ROUTE],
# pops[ROUTE].
declare -A drains=() e2e=() pops=()
drain_run () {
    local route=$1 back t0 t1 t2 t n
    local args=(control="$WORK/rb.ctl" fsync=ignore flush-delay=60)
    if [ "$route" = qemu ]; then
        # cache=none: librbd's cache off, as in the native store;
        # ramback's NBD store opens several connections.
        SERVE_TIMEOUT=60 serve_bg "$WORK/qn.sock" "$WORK/qn.pid" "$WORK/qn.log" \
            qemu-nbd --socket="$WORK/qn.sock" --pid-file="$WORK/qn.pid" \
            --format=raw --cache=none --discard=unmap --shared=64 --persistent \
            "rbd:rbd/$img:conf=$CEPH_CONF" || die "qemu-nbd failed to start"
        pids+=("$SERVE_PID")
        qn_pid=$SERVE_PID
        args+=(back="nbd+unix:///?socket=$WORK/qn.sock")
    else
        args+=(back="rbd:rbd/$img" rbd-conf="$CEPH_CONF")
    fi
    rm -f "$WORK/rb.ctl"
    t0=$(now)
    start_server rb "$PLUGIN" "${args[@]}"
    wait_ctl "$WORK/rb.ctl"
    ctl_wait "$WORK/rb.ctl" wait-populated >/dev/null
    t1=$(now)
    pops[$route]+="$(fdiv "$size" "$(fsub "$t1" "$t0")") "
    fio_nbd "$rb_uri" "$WORK/fill.json" --name=fill --rw=write \
        --bs=1M --iodepth=8 --size="$size" --direct=1
    t2=$(now)
    t=$(timed_drain rb "$WORK/rb.ctl")
    t=${t%%$'\n'*}             # SIGTERM until drained and synced
    n=$(sed -n 's/.*clean stop: wrote back \([0-9]*\) bytes.*/\1/p' "$WORK/rb.log" | tail -1)
    [ -n "$n" ] || die "no 'wrote back' line in the log of ramback ($route)"
    drains[$route]+="$(fdiv "$n" "$t") "
    e2e[$route]+="$(fdiv "$size" "$(fadd "$(fsub "$t2" "$t1")" "$t")") "
    if [ "$route" = qemu ]; then stop_server qn; fi
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
        if [ "$cfg" = ramback ] || [ "$cfg" = journal ]; then
            stop_server rb
        fi
    done
    log "repetition $rep: drain, native"
    drain_run native
    if [ "$qemu_rbd" = yes ]; then
        log "repetition $rep: drain, qemu-nbd"
        drain_run qemu
    fi
done

med () { median ${results["$1 $2"]}; }
# The median of the paired ratios of two lists of values.
lratio () {
    local a=($1) b=($2) r=() i
    for i in "${!a[@]}"; do r+=("$(fdiv "${a[i]}" "${b[i]}")"); done
    awk -v v="$(median "${r[@]}")" 'BEGIN { printf "%.2f\n", v }'
}
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
    dr=$(median ${drains[native]})
    seq=$(med direct seqwrite1m)
    echo "drain (whole image dirty, SIGTERM until synced): $(fmt "$dr" seqwrite1m), image direct seqwrite1m $(fmt "$seq" seqwrite1m) (paired ratio $(lratio "${drains[native]}" "${results["direct seqwrite1m"]}")x)"
    echo "  end to end (first write until synced, the fill into RAM included): $(fmt "$(median ${e2e[native]})" seqwrite1m)"
    echo "  populate: $(fmt "$(median ${pops[native]})" seqwrite1m)"
    if [ "$qemu_rbd" = yes ]; then
        echo "qemu-nbd route (back= qemu-nbd rbd:, cache=none): drain $(fmt "$(median ${drains[qemu]})" seqwrite1m), end to end $(fmt "$(median ${e2e[qemu]})" seqwrite1m), populate $(fmt "$(median ${pops[qemu]})" seqwrite1m)"
        echo "  native / qemu-nbd: drain $(lratio "${drains[native]}" "${drains[qemu]}")x, end to end $(lratio "${e2e[native]}" "${e2e[qemu]}")x, populate $(lratio "${pops[native]}" "${pops[qemu]}")x"
    else
        echo "qemu-nbd route: skipped, $qemu_rbd"
    fi
    if [ -e "$pwl" ]; then
        echo "librbd persistent write-log cache: $pwl is there, but this benchmark has no column for it yet"
    else
        echo "librbd persistent write-log cache: not available (no ${pwl:-ceph/librbd/libceph_librbd_pwl_cache.so}; Debian 12's librbd1 does not ship the plugin)"
    fi
    echo "targets:"
    check "ramback / direct, randwrite4k-qd1" "$(pratio ramback direct randwrite4k-qd1)" 10
    check "ramback / direct, fsync4k" "$(pratio ramback direct fsync4k)" 10
    check "journal / rbd_cache, fsync4k" "$(pratio journal cache fsync4k)" 3
    check "drain / direct seqwrite1m" "$(lratio "${drains[native]}" "${results["direct seqwrite1m"]}")" 0.9
    if [ "$qemu_rbd" = yes ]; then
        check "native / qemu-nbd, drain" "$(lratio "${drains[native]}" "${drains[qemu]}")" 1.3
    fi
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
