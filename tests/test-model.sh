#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Random unaligned writes (1 byte .. 4 MiB, across chunk boundaries and
# into the partial last chunk), trims and zeroes, checked against a
# Python shadow model: through NBD every 50 ops, in the backing file after
# a control-socket "sync" while running, and byte for byte after SIGTERM.
#
# Two devices of 37 MiB + 12345 bytes (not a whole number of chunks):
#   a) chunk=64K, backing file created by the plugin (size=), writeback;
#   b) chunk=4K, an existing sparse backing file with random extents,
#      writeback for the first half, then writethrough, where every
#      acknowledged write must already be in the backing file without a sync;
#   c) chunk=64K, ram-size= an eighth of the device (chunks are evicted
#      and loaded again all the time), the sparse backing file, writeback
#      then writethrough as b, half as many requests.
#
# RBD_MODEL=1 (tests/rbd/test-rbd-model.sh): the backing store of each is
# an RBD image made from that backing file, on the cluster of $CEPH_CONF
# (or one started for the test).

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
if [ -n "${RBD_MODEL:-}" ]; then
    source "$top_srcdir/tests/rbd/rbd-functions.sh"
    rbd_cluster
fi

size=$(( 37 * 1024 * 1024 + 12345 ))
seed=${SEED:-20260312}

run_case () {
    local name=$1 chunk=$2 init=$3
    local back="$TMP/$name.img" modelf="$TMP/$name.model"
    local args=(back="$back" chunk="$chunk" "${@:4}")

    echo "=== case $name: chunk=$chunk, backing $init"
    if [ "$init" = sparse ]; then
        py -c '
import model, random, sys
rng = random.Random (int (sys.argv[3]))
model.make_sparse_image (sys.argv[1], int (sys.argv[2]), rng, 40).save (sys.argv[1] + ".model0")
' "$back" "$size" "$seed"
        mv "$back.model0" "$modelf"
    else
        rm -f "$back"
        py -c 'import sys; open (sys.argv[1], "wb").truncate (int (sys.argv[2]))' \
           "$modelf" "$size"
        args+=(size="$size")
    fi
    if [ -n "${RBD_MODEL:-}" ]; then
        [ -f "$back" ] || truncate -s "$size" "$back"
        rbd_image "model-$name" "$back"
        back=rbd:rbd/model-$name
        args=(back="$back" rbd-conf="$CEPH_CONF" chunk="$chunk" "${@:4}")
    fi

    start_rb rb -- "${args[@]}"

    py - "$rb_uri" "$rb_ctl" "$back" "$modelf" "$chunk" "$seed" "$name" <<'EOF'
import random, sys
import model as M

uri, ctlpath, back, modelf, chunk, seed, name = sys.argv[1:]
chunk = int (chunk)

def body ():
    rng = random.Random ("%s-%s" % (seed, name))
    M.log ("seed: %s-%s (replay with SEED=%s)" % (seed, name, seed))
    ctl = M.Control (ctlpath)
    m = M.Model.from_file (modelf)
    size = m.size

    # c misses on most requests and reloads the device at every check
    # through NBD: half the requests keep it as short as the others.
    slotted = name == "c"
    ops = 200 if slotted else 400
    if slotted:
        st = ctl.status ()
    else:
        st = ctl.wait_for (lambda s: s["populated"], what="populate")
    expect = { "size": size, "chunk_size": chunk,
               "chunks": (size + chunk - 1) // chunk, "mode": "writeback" }
    for k, v in expect.items ():
        if st[k] != v:
            M.fail ("status %s = %r, expected %r" % (k, st[k], v))

    h = M.connect (uri)
    m.check_nbd (h, "device before any write")

    writethrough = False
    def on_check (i):
        nonlocal writethrough
        if writethrough:
            # Every acknowledged write is already on the backing store.
            m.check_file (back, "backing file in writethrough, op %d" % i)
        if i % 100 == 0:
            ctl.sync ()
            st = ctl.status ()
            if st["dirty_chunks"] != 0 or st["dirty_bytes"] != 0:
                M.fail ("dirty after sync with no writer: %r" % st)
            m.check_file (back, "backing file after sync at op %d" % i)
        if slotted:
            st = ctl.status ()
            if st["resident_bytes"] > st["ram_size"] + 8 * chunk:
                M.fail ("resident over ram-size: %r" % st)
        if name != "a" and i == ops // 2:
            ctl ("mode writethrough")
            if ctl.status ()["mode"] != "writethrough":
                M.fail ("mode did not switch to writethrough")
            writethrough = True
            M.log ("switched to writethrough at op %d" % i)

    counts = M.random_ops (h, m, rng, ops, chunk, on_check=on_check)
    M.log ("ops: %r" % counts)
    m.check_nbd (h, "device at the end")
    st = ctl.status_no_errors ("a healthy file")
    M.log ("status: stored_bytes=%d loaded_bytes=%d syncs=%d evictions=%d "
           "hits=%d misses=%d"
           % (st["stored_bytes"], st["loaded_bytes"], st["syncs"],
              st["evictions"], st["hits"], st["misses"]))
    if slotted and (st["evictions"] == 0 or st["misses"] == 0):
        M.fail ("ram-size= but no eviction or miss: %r" % st)
    h.shutdown ()
    m.save (modelf)

M.main (body)
EOF

    stop_rb_same rb "$back" "$modelf"
    echo "case $name: backing file == model after SIGTERM"
    rm -f "$back" "$modelf"
}

run_case a 65536 created
run_case b 4096 sparse
run_case c 65536 sparse ram-size=$(( size / 8 / 65536 * 65536 ))
