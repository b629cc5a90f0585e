#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The filter in front of nbdkit's memory plugin, with nbdkit's log filter
# between them recording every request that reaches the plugin (the
# plugin's data dies with nbdkit, so the log is the evidence).
#
#  1. A fresh memory disk is all hole: populate reads nothing.
#  2. Random writes, zeroes and trims (checked against a model through
#     NBD); after "sync", every 4 KiB block the model changed was
#     written or zeroed in the plugin (write back goes by dirty 4 KiB
#     sector, so a block, not a whole chunk, is the unit), and a successful Flush follows the last of
#     those writes.
#  3. flush-rate= holds 8 MiB of new writes dirty; SIGTERM: nbdkit exits
#     0, the plugin got writes covering every block still dirty, then a
#     Flush that succeeded, and only then was the filter's context to it
#     closed (its Disconnect is the log's last line): the clean stop
#     drains through the plugin before nbdkit unloads it.

RAMBACK_FORM=filter
source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
export PYTHONPATH="$TMP:$PYTHONPATH"

size=$(( 64 * 1024 * 1024 ))
plog="$TMP/plugin.log"
RB_PLUGIN=(--filter=log memory "$size" logfile="$plog")
start_rb m -- flush-rate=4M
RB_PLUGIN=()

cat > "$TMP/plog.py" <<'EOF'
# What the log filter saw: requests in order, with their results.
import re

REQ = re.compile (r"connection=\d+ (Write|Zero|Trim|Flush) id=(\d+)"
                  r"(?: offset=0x([0-9a-f]+) count=0x([0-9a-f]+))?")
RET = re.compile (r"connection=\d+ \.\.\.(Write|Zero|Trim|Flush) id=(\d+) "
                  r"return=(-?\d+)")

def parse (path):
    reqs, done = {}, {}
    order = []
    with open (path) as f:
        for line in f:
            m = REQ.search (line)
            if m:
                op, i = m.group (1), int (m.group (2))
                off = int (m.group (3), 16) if m.group (3) else 0
                n = int (m.group (4), 16) if m.group (4) else 0
                reqs[i] = (op, off, n)
                order.append (i)
                continue
            m = RET.search (line)
            if m:
                done[int (m.group (2))] = int (m.group (3))
    return [(i,) + reqs[i] + (done.get (i),) for i in order]

def stored_blocks (entries, unit):
    """Blocks of UNIT bytes fully covered by successful writes or zeroes."""
    got = set ()
    for i, op, off, n, ret in entries:
        if op in ("Write", "Zero") and ret == 0:
            for c in range ((off + unit - 1) // unit, (off + n) // unit):
                got.add (c)
    return got
EOF

py - "$m_uri" "$m_ctl" "$plog" <<'EOF'
import random, sys
import model as M
import plog as P

uri, ctlpath, plogf = sys.argv[1:]
CHUNK = 65536
UNIT = 4096

def changed_blocks (a, b):
    return set (c for c in range (len (a) // UNIT)
                if a[c * UNIT:(c + 1) * UNIT] != b[c * UNIT:(c + 1) * UNIT])

def body ():
    rng = random.Random (21)
    ctl = M.Control (ctlpath)
    ctl ("wait-populated 30000")
    st = ctl.status ()
    if st["loaded_bytes"] != 0:
        M.fail ("populate read %d bytes of an empty memory disk"
                % st["loaded_bytes"])
    if st["store_block_status"] is not True:
        M.fail ("no block status from the memory plugin: %r" % st)
    m = M.Model (st["size"])
    h = M.connect (uri)
    counts = M.random_ops (h, m, rng, 200, CHUNK, maxlen=512 * 1024,
                           check_every=100)
    M.log ("ops: %r" % counts)
    ctl.sync ()
    entries = P.parse (plogf)
    want = changed_blocks (m.buf, bytes (m.size))
    missing = want - P.stored_blocks (entries, UNIT)
    if missing:
        M.fail ("%d changed 4 KiB blocks never reached the plugin, e.g. block %d"
                % (len (missing), min (missing)))
    last_write = max (k for k, e in enumerate (entries)
                      if e[1] in ("Write", "Zero"))
    if not any (e[1] == "Flush" and e[4] == 0 for e in entries[last_write:]):
        M.fail ("no successful Flush after the last write to the plugin")
    M.log ("after sync: %d changed 4 KiB blocks, all stored, then flushed"
           % len (want))

    # Held dirty by flush-rate=4M, then a clean stop.
    n0 = len (entries)
    before = bytes (m.buf)
    for i in range (16):
        off = rng.randrange (0, m.size - 512 * 1024)
        data = rng.randbytes (512 * 1024)
        h.pwrite (data, off)
        m.write (off, data)
    h.shutdown ()
    st = ctl.status ()
    pending = st["dirty_bytes"] + st["inflight_bytes"]
    M.log ("at SIGTERM: %d bytes dirty or in flight" % pending)
    if pending < 2 * M.MiB:
        M.fail ("flush-rate=4M did not hold the data dirty: %r" % st)
    ctl.close ()
    with open (plogf + ".want", "w") as f:
        f.write (" ".join (str (c) for c in sorted (changed_blocks (before, m.buf))))
        f.write ("\n%d\n" % n0)

M.main (body)
EOF
stop_rb m

py - "$plog" <<'EOF'
import sys
import model as M
import plog as P

plogf = sys.argv[1]

def body ():
    with open (plogf + ".want") as f:
        want = set (int (c) for c in f.readline ().split ())
        n0 = int (f.readline ())
    entries = P.parse (plogf)
    missing = want - P.stored_blocks (entries[n0:], 4096)
    if missing:
        M.fail ("%d blocks dirty at SIGTERM never reached the plugin"
                % len (missing))
    last_write = max (k for k, e in enumerate (entries)
                      if e[1] in ("Write", "Zero"))
    if not any (e[1] == "Flush" and e[4] == 0 for e in entries[last_write:]):
        M.fail ("the clean stop did not flush the plugin after its writes")
    with open (plogf) as f:
        last = [l for l in f if l.strip ()][-1]
    if "Disconnect" not in last:
        M.fail ("the log does not end with the context's Disconnect: %r" % last)
    M.log ("clean stop: %d dirty blocks written to the plugin, flushed, "
           "then the context closed" % len (want))

M.main (body)
EOF
echo PASS
