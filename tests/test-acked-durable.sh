#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# What an acknowledged write promises, checked the moment it is
# acknowledged, while ramback's write back is held in flight: nothing
# else can have put the data on the backing store in the meantime.
#
# Backing: volatile-disk.sh (a disk with a volatile write cache: VOLATILE
# is what it reads back, DURABLE what survives a power cut), requests in
# parallel, with a gate that holds writes to chunk 3.  ramback
# fsync=wait, chunk=64K, 8 MiB + 12345 bytes.
#  1. A write to chunk 3 is written back and held at the gate: the
#     flusher is stuck, it can neither write back nor sync anything else.
#  2. mode writethrough: every acknowledged write and zero is on the disk
#     (VOLATILE) at once.
#  3. mode writeback, FUA writes and zeroes: each one is in DURABLE at
#     once.
#  4. Power cut: ramback is killed (SIGKILL), the held write finishes,
#     the disk drops its cache.  ramback restarted on what survived: every
#     FUA-acknowledged write reads back.
# Then a clean stop: the backing equals what ramback serves.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
requires flock dd

size=$(( 8 * 1024 * 1024 + 12345 ))
chunk=65536
export VOLATILE_IMG="$TMP/volatile.img" DURABLE_IMG="$TMP/durable.img"
export VOLATILE_LIST="$TMP/volatile.list" VOLATILE_FAIL="$TMP/volatile.fail"
export VOLATILE_GATE="$TMP/gate" VOLATILE_PARALLEL=1
disk="$top_srcdir/tests/volatile-disk.sh"

py -c '
import random, sys
open (sys.argv[1], "wb").write (random.Random (7).randbytes (int (sys.argv[2])))' \
   "$DURABLE_IMG" "$size"
cp "$DURABLE_IMG" "$VOLATILE_IMG"
: > "$VOLATILE_LIST"

start_backing disk sh "$disk"
start_rb rb -- back="$disk_uri" fsync=wait chunk=$chunk

py - "$rb_uri" "$rb_ctl" "$VOLATILE_IMG" "$DURABLE_IMG" "$VOLATILE_GATE" \
   "$chunk" "$TMP/fua.json" <<'EOF'
import json, os, random, sys, time
import nbd
import model as M

uri, ctlpath, volatile, durable, gate, chunk, fuaf = sys.argv[1:]
chunk = int (chunk)
HELD = 3

def wait_file (path, what, timeout=60):
    deadline = time.monotonic () + timeout
    while not os.path.exists (path):
        if time.monotonic () > deadline:
            M.fail ("timed out after %ds waiting for %s" % (timeout, what))
        time.sleep (0.01)

def check_image (path, m, off, n, what):
    with open (path, "rb") as f:
        f.seek (off)
        got = f.read (n)
    m.check_range (got, off, what)

def extent (rng, size):
    """A random extent that does not touch the held chunk."""
    while True:
        off, n = M.rand_extent (rng, size, chunk, 256 * 1024)
        if off + n <= HELD * chunk or off >= (HELD + 1) * chunk:
            return off, n

def body ():
    rng = random.Random (11)
    ctl = M.Control (ctlpath)
    ctl ("wait-populated 60000")
    m = M.Model.from_file (durable)
    h = M.connect (uri)

    with open (gate, "w") as f:
        f.write ("%d %d\n" % (HELD * chunk, chunk))
    data = rng.randbytes (chunk)
    h.pwrite (data, HELD * chunk)
    m.write (HELD * chunk, data)
    wait_file (gate + ".held", "the write back of chunk %d to be held" % HELD)
    st = ctl.status ()
    M.log ("write back held: inflight_chunks=%d dirty_chunks=%d"
           % (st["inflight_chunks"], st["dirty_chunks"]))
    if st["inflight_chunks"] < 1:
        M.fail ("the gate holds a write but nothing is in flight: %r" % st)

    ctl ("mode writethrough")
    for i in range (12):
        off, n = extent (rng, m.size)
        if i % 4 == 3:
            h.zero (n, off)
            m.zero (off, n)
        else:
            d = M.rand_data (rng, n)
            h.pwrite (d, off)
            m.write (off, d)
        check_image (volatile, m, off, n,
                     "backing store right after acknowledged writethrough "
                     "%s #%d" % ("zero" if i % 4 == 3 else "write", i))
    M.log ("writethrough: every acknowledged write was on the backing store")

    ctl ("mode writeback")
    fua = []
    for i in range (8):
        off, n = extent (rng, m.size)
        if i % 3 == 2:
            h.zero (n, off, nbd.CMD_FLAG_FUA)
            m.zero (off, n)
        else:
            d = M.rand_data (rng, n)
            h.pwrite (d, off, nbd.CMD_FLAG_FUA)
            m.write (off, d)
        check_image (durable, m, off, n,
                     "durable image right after acknowledged FUA %s #%d"
                     % ("zero" if i % 3 == 2 else "write", i))
        fua.append ((off, n))
    M.log ("fsync=wait: every acknowledged FUA request was durable")
    # What the FUA ranges must hold after a power cut (later FUA writes
    # may overlap earlier ones: the model has the last word).
    with open (fuaf, "w") as f:
        json.dump ([(off, n, m.buf[off:off + n].hex ()) for off, n in fua], f)

M.main (body)
EOF

echo "=== power cut"
kill -9 "$rb_pid"
wait "$rb_job" 2>/dev/null || true
rm -f "$VOLATILE_GATE"
for (( i=0; i<600; i++ )); do
    [ -e "$VOLATILE_GATE.held" ] || break
    sleep 0.1
done
[ ! -e "$VOLATILE_GATE.held" ] || fail "the held write did not finish"
stop_nbdkit "$disk_pid"
"$disk" power_cut
cmp -s "$VOLATILE_IMG" "$DURABLE_IMG" || fail "power_cut left the cache"

start_backing disk2 sh "$disk"
start_rb rb2 -- back="$disk2_uri" fsync=wait chunk=$chunk
py - "$rb2_uri" "$TMP/fua.json" <<'EOF'
import json, sys
import model as M

uri, fuaf = sys.argv[1:]

def body ():
    h = M.connect (uri)
    for i, (off, n, want) in enumerate (json.load (open (fuaf))):
        got = h.pread (n, off)
        if got != bytes.fromhex (want):
            d = M.first_diff (got, bytes.fromhex (want))
            M.fail (M.describe_diff ("FUA write #%d after a power cut" % i,
                                     d, got, bytes.fromhex (want), off))
    M.log ("every FUA-acknowledged write survived the power cut")
    h.shutdown ()

M.main (body)
EOF
stop_rb rb2
stop_nbdkit "$disk2_pid"
cmp "$VOLATILE_IMG" "$DURABLE_IMG" || fail "unflushed writes after a clean stop"
