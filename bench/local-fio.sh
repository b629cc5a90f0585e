# SPDX-License-Identifier: GPL-2.0-or-later
# shellcheck shell=bash
# bench-local.sh: the fio jobs on ramback, memory, null and file, side by
# side.
# Sourced by bench-local.sh (its options and bench/lib.sh set the scene).

# The five jobs of bench/lib.sh (FIO_JOBS), each on each server.
jobs=("${FIO_JOBS[@]}")
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

declare -A result
if want fio; then
    log "starting ramback, memory, null and file servers"
    # shellcheck disable=SC2086
    start_server rb "$PLUGIN" back="$IMG" control="$WORK/rb.ctl" $rb_args
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

report_fio () {
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
    local unit
    for unit in iops bw_bytes; do
        awk -v u="$unit" -v OFS='\t' '$2 == u {
                d = u == "iops" ? 1 : 1048576
                print $1, $3 / d, $4 / d, $5 / d, $6 / d }' <<<"$RESULTS" |
            if [ "$unit" = iops ]; then
                plot_bars --log fio-iops "fio, 2 connections: 4 KiB jobs" \
                    "IOPS (log scale)" ramback "nbdkit memory" "nbdkit null" \
                    "nbdkit file"
            else
                plot_bars fio-bw "fio, 2 connections: 1 MiB jobs" MiB/s \
                    ramback "nbdkit memory" "nbdkit null" "nbdkit file"
            fi
    done
}
