# SPDX-License-Identifier: GPL-2.0-or-later
# shellcheck shell=bash
# bench-local.sh: drain and populate bandwidth against the backing store's
# own sequential bandwidth.
# Sourced by bench-local.sh (its options and bench/lib.sh set the scene).

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
    drain_e2e+=("$(fdiv "$size_b" "$(fadd "$wsecs" "$(fsub "$t1" "$t0")")")")
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

report_bw () {
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
    BK_W="${bk_w[*]}" BK_R="${bk_r[*]}" DRAIN="${drain[*]}" POP="${pop[*]}" \
    E2E="${drain_e2e[*]}" $PY - <<'EOP' |
import os, statistics as st
v = {k: st.median([float(x) for x in os.environ[k].split()]) / 2**20
     for k in ("BK_W", "BK_R", "DRAIN", "POP", "E2E")}
print("drain of a fully dirty image\t%g\t%g" % (v["DRAIN"], v["BK_W"]))
print("populate, cache cold\t%g\t%g" % (v["POP"], v["BK_R"]))
print("full write, then sync\t%g\t%g" % (v["E2E"], v["BK_W"]))
EOP
    plot_bars bandwidth "drain and populate against the backing file" \
        MiB/s ramback "backing file, sequential"
}
