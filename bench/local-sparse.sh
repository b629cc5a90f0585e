# SPDX-License-Identifier: GPL-2.0-or-later
# shellcheck shell=bash
# bench-local.sh: scattered dirty data, a small device against a 1 TiB
# sparse one.
# Sourced by bench-local.sh (its options and bench/lib.sh set the scene).

# The same amount of scattered dirty data drained from a device twice its
# size and from a 1 TiB sparse device.  Finding dirty chunks must cost
# O(dirty), not O(device), so the two drains should take about as long.
# As above, flush-rate= holds the flusher while the data is written and
# the clean stop drains it.
want sparse || sparse=no
if [ "$sparse" = yes ]; then
    chunk=65536
    nios=$((sparse_dirty_b / chunk))
    huge_b=$(size_arg 1T)
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

report_sparse () {
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
    SPV_S="${spv[small]}" SPV_H="${spv[huge]}" SPF_S="${spf[small]}" \
    SPF_H="${spf[huge]}" $PY - <<'EOP' |
import os, statistics as st
def m(k): return st.median([float(x) for x in os.environ[k].split()])
print("ramback drain\t%g\t%g" % (m("SPV_S"), m("SPV_H")))
print("the file alone\t%g\t%g" % (m("SPF_S"), m("SPF_H")))
EOP
    plot_bars sparse "scattered dirty data: small device against 1 TiB" \
        "seconds per GiB dirty" "small device" "1 TiB device"
}
