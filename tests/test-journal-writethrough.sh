#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Writethrough mode with journal= and a backing store that fails.
#
# A writethrough write completes once its transaction is in place on
# the backing store.  While the store fails (the error filter fails
# every request while a trigger file exists) the transaction commits in
# the journal but cannot be written in place: the write must fail with
# EIO within a few seconds, not wait for the store to come back.  Once
# the store is healthy again nothing acknowledged is lost: the journal's
# in-place writes are retried, and the store equals what the device
# reads, the failed write's range included (it is in RAM and in the
# journal; nobody writes it again), after a sync and after SIGTERM.
# In the filter form the error filter is right below ramback.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"

size=$(( 4 * 1024 * 1024 ))
img="$TMP/back.img"
py -c '
import random, sys
open (sys.argv[1], "wb").write (random.Random (7).randbytes (int (sys.argv[2])))' "$img" "$size"
cp "$img" "$TMP/model"
truncate -s $(( 2 * 1024 * 1024 )) "$TMP/j.img"
errs=(error=EIO error-rate=100% error-file="$TMP/fail")
if [ "$RAMBACK_FORM" = filter ]; then
    RB_PLUGIN=(--filter=error file "$img" "${errs[@]}")
    start_rb rb -- journal="$TMP/j.img" fsync=wait chunk=64K
    RB_PLUGIN=()
else
    start_backing ba --filter=error file "$img" "${errs[@]}"
    start_rb rb -- back="$ba_uri" journal="$TMP/j.img" fsync=wait chunk=64K
fi

py - "$rb_uri" "$rb_ctl" "$img" "$TMP/fail" "$TMP/model" <<'EOF2'
import os, random, sys, threading, time
import nbd
import model as M

uri, ctlpath, durable, trigger, modelf = sys.argv[1:]

def body ():
    rng = random.Random (11)
    ctl = M.Control (ctlpath)
    ctl ("wait-populated 30000")
    m = M.Model.from_file (modelf)
    h = M.connect (uri)
    ctl ("mode writethrough")
    for i in range (8):
        off, ln = M.rand_extent (rng, m.size, 4096, 128 * 1024)
        d = rng.randbytes (ln)
        h.pwrite (d, off)
        m.write (off, d)
    m.check_file (durable, "store after healthy writethrough writes")

    open (trigger, "w").close ()
    M.log ("backing store now failing")
    off, ln = 3 * M.MiB + 17, 100000
    res = []
    def run ():
        try:
            h2 = M.connect (uri)
            h2.pwrite (rng.randbytes (ln), off)
            res.append ("ok")
        except nbd.Error as e:
            res.append (e)
    t0 = time.monotonic ()
    t = threading.Thread (target=run, daemon=True)
    t.start ()
    t.join (30)
    if t.is_alive ():
        M.fail ("writethrough write to a failing store: still waiting "
                "after 30 s")
    el = time.monotonic () - t0
    if res == ["ok"]:
        M.fail ("a writethrough write succeeded while the store fails")
    if res[0].errno != "EIO":
        M.fail ("writethrough write failed with %s, expected EIO" % res[0].errno)
    M.log ("ok: writethrough write failed after %.1f s: %s" % (el, res[0]))
    if el > 10:
        M.fail ("the failure took %.1f s, expected a few seconds" % el)

    os.unlink (trigger)
    M.log ("backing store healthy again")
    # Committed in the journal already; the applier retries the
    # in-place writes with backoff: wait until the journal is empty.
    ctl.sync (60000)
    for i in range (300):
        st = ctl.status ()
        if st["journal_used_bytes"] == 0:
            break
        time.sleep (0.1)
    else:
        M.fail ("the journal is not applied 30 s after the store is back: %r"
                % st)
    m.write (off, h.pread (ln, off))
    m.check_file (durable, "store once the journal is applied (the failed "
                  "write not redone)")
    d = rng.randbytes (65536)
    h.pwrite (d, 0)
    m.write (0, d)
    m.check_file (durable, "store after one more writethrough write")
    m.check_nbd (h)
    h.shutdown ()
    m.save (modelf)

M.main (body)
EOF2
stop_rb_same rb "$img" "$TMP/model"
[ "$RAMBACK_FORM" = filter ] || stop_nbdkit "$ba_pid"
echo PASS
