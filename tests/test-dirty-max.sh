#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# dirty-max= under a write storm with a slow flush.
#
# dirty-max=2M, flush-rate=4M, chunk 64K, 16 MiB + 12345 bytes.  Four
# writer threads (own NBD connections, own regions) write as fast as they
# can, about 14 MiB in all, in requests of 4 KiB .. 256 KiB at unaligned
# offsets.  A sampler reads "status json" every ~2 ms and records
# dirty_bytes + inflight_bytes.
#
# Allowed slack: the core checks the limit before each write, so every
# writer already past the check may add one request's worth of chunks:
# a request of up to 256 KiB at any offset touches at most
# 256K/64K + 1 = 5 chunks.  So the bound is
#    dirty-max + writers * 5 * chunk = 2 MiB + 4 * 320 KiB = 3.25 MiB.
# Asserted: the bound is never exceeded; the storm really hit the limit
# (max seen >= dirty-max / 2 and throttled > 0); every write completes
# (writers wait, they do not fail); after "sync" and after SIGTERM the
# backing file equals the model.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"

size=$(( 16 * 1024 * 1024 + 12345 ))
seed=${SEED:-31337}
back="$TMP/back.img"
modelf="$TMP/model.img"

rm -f "$back"
start_rb rb -- back="$back" size="$size" chunk=64K dirty-max=2M flush-rate=4M

py - "$rb_uri" "$rb_ctl" "$back" "$modelf" "$seed" <<'EOF'
import random, sys, threading, time
import model as M

uri, ctlpath, back, modelf, seed = sys.argv[1:]
KiB, MiB = M.KiB, M.MiB
NWRITERS, WRITES, MAXREQ, CHUNK = 4, 40, 256 * KiB, 64 * KiB
DIRTY_MAX = 2 * MiB
BOUND = DIRTY_MAX + NWRITERS * (MAXREQ // CHUNK + 1) * CHUNK

def body ():
    M.log ("seed %s; bound %d bytes" % (seed, BOUND))
    ctl = M.Control (ctlpath)
    st = ctl.status ()
    if st["dirty_max"] != DIRTY_MAX or st["dirty_max_config"] != DIRTY_MAX:
        M.fail ("dirty_max %r / dirty_max_config %r, expected %d"
                % (st["dirty_max"], st["dirty_max_config"], DIRTY_MAX))
    throttled0 = st["throttled"]
    m = M.Model (st["size"])
    span = m.size // NWRITERS
    regions = [(i * span, span if i < NWRITERS - 1 else m.size - i * span)
               for i in range (NWRITERS)]
    done = [0] * NWRITERS
    errors = []
    writers_done = threading.Event ()
    samples = []

    def writer (i):
        try:
            rng = random.Random ("%s-%d" % (seed, i))
            start, n = regions[i]
            h = M.connect (uri)
            for _ in range (WRITES):
                ln = M.rand_len (rng, 4 * KiB, MAXREQ)
                off = start + rng.randrange (0, n - ln + 1)
                data = rng.randbytes (ln)
                h.pwrite (data, off)
                m.write (off, data)       # disjoint regions: no lock needed
                done[i] += 1
            h.shutdown ()
        except Exception as e:
            errors.append (e)

    def sampler ():
        c = M.Control (ctlpath)
        while not writers_done.is_set ():
            s = c.status ()
            samples.append (s["dirty_bytes"] + s["inflight_bytes"])
            time.sleep (0.002)

    sam = threading.Thread (target=sampler)
    sam.start ()
    threads = [threading.Thread (target=writer, args=(i,)) for i in range (NWRITERS)]
    for t in threads:
        t.start ()
    for t in threads:
        t.join (timeout=120)
        if t.is_alive ():
            writers_done.set ()
            M.fail ("a writer is stuck: writes done %r of %d each" % (done, WRITES))
    writers_done.set ()
    sam.join ()
    if errors:
        raise errors[0]

    st = ctl.status ()
    mx = max (samples)
    M.log ("%d samples; max dirty+inflight %d bytes (limit %d, bound %d); "
           "throttled %d; writes %r"
           % (len (samples), mx, DIRTY_MAX, BOUND, st["throttled"] - throttled0, done))
    if mx > BOUND:
        over = sum (1 for s in samples if s > BOUND)
        M.fail ("dirty+inflight reached %d > %d (%d of %d samples over)"
                % (mx, BOUND, over, len (samples)))
    if mx < DIRTY_MAX // 2:
        M.fail ("the storm never came near the limit (max %d): the test did "
                "not test anything" % mx)
    if st["throttled"] <= throttled0:
        M.fail ("throttled did not grow: %r" % st)
    if done != [WRITES] * NWRITERS:
        M.fail ("not every write completed: %r" % done)

    ctl.sync ()
    m.check_file (back, "backing file after sync")
    h = M.connect (uri)
    m.check_nbd (h)
    h.shutdown ()
    m.save (modelf)

M.main (body)
EOF

stop_rb_same rb "$back" "$modelf"
echo "backing == model"
