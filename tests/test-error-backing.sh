#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# A backing store that starts failing, then recovers; fsync=wait.
#
# A. back= an NBD export: nbdkit file behind the error filter, which
#    fails every request with EIO while a trigger file exists.  Healthy
#    writes + FLUSH reach the file.  Then the store fails: writes still
#    complete in RAM, status shows store_errors, EIO and store_state
#    failing, every byte reads back from RAM, NBD FLUSH and control
#    "sync" fail (not hang, not succeed), a writethrough write fails with
#    EIO.  Trigger removed: sync succeeds and the file equals what the
#    device reads, including the failed writethrough write's range, which
#    nobody writes again (RAM is the truth and reaches the store); again
#    after more writes and FLUSH, and after SIGTERM.  The log says the
#    store recovered.
# B. fsyncgate: back= a disk with a volatile write cache
#    (volatile-disk.sh) whose failing FLUSH throws away every write since
#    the last good one, while the writes themselves had "succeeded".
#    After recovery the durable image must still equal the model: the
#    core must not trust writes that no successful sync confirmed, and
#    must not trust a retried sync either.
# In the filter form (RAMBACK_FORM=filter) the error filter and the
# volatile disk are right below ramback in the same nbdkit.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"

size=$(( 8 * 1024 * 1024 + 12345 ))

cat > "$TMP/fail.py" <<'EOF'
import os, random, sys, time
import nbd
import model as M

uri, ctlpath, durable, trigger, modelf, part = sys.argv[1:]

def flush_must_fail (uri, what):
    t, res = M.flush_in_thread (uri, daemon=True)
    t.join (30)
    if t.is_alive ():
        M.fail ("%s: NBD FLUSH blocked for 30 s instead of failing" % what)
    if res == ["ok"]:
        M.fail ("%s: NBD FLUSH succeeded with fsync=wait" % what)
    M.log ("ok: %s: NBD FLUSH failed: %s" % (what, res[0]))

def writes (h, m, rng, n, span=None):
    for _ in range (n):
        off, ln = M.rand_extent (rng, span or m.size, 65536, 256 * 1024)
        data = rng.randbytes (ln)
        h.pwrite (data, off)
        m.write (off, data)

soft = []     # failures that need not stop the rest of the checks

def body ():
    rng = random.Random ("fail-" + part)
    ctl = M.Control (ctlpath)
    # Populate through part B's shell plugin forks a shell per read: on
    # a loaded machine that took over 30 s.  The bound only catches a
    # hang.
    ctl ("wait-populated 300000")
    m = M.Model.from_file (modelf)
    h = M.connect (uri)
    m.check_nbd (h, "device after populate")

    writes (h, m, rng, 20)
    h.flush ()
    ctl.sync ()
    m.check_file (durable, "durable image after FLUSH while healthy")
    errors0 = ctl.status ()["store_errors"] + ctl.status ()["sync_errors"]

    open (trigger, "w").close ()
    M.log ("backing store now failing")
    # Below 7 MiB: the writethrough write above it must find clean chunks.
    writes (h, m, rng, 20, span=7 * M.MiB)
    M.expect_sync_fails (ctl, 3000, ("EIO", "ETIMEDOUT"),
                         "control sync succeeded while the store fails")
    # A sync that timed out (a slow plugin, a loaded machine) may come
    # before the first failure: wait for it, a state, not a time.
    deadline = time.monotonic () + 120
    st = ctl.status ()
    while (st["store_errors"] + st["sync_errors"] <= errors0 and
           time.monotonic () < deadline):
        time.sleep (0.1)
        st = ctl.status ()
    M.log ("failing: store_errors=%d sync_errors=%d last_errno=%r last_error=%r "
           "store_state=%s dirty_bytes=%d inflight_bytes=%d unsynced_bytes=%d"
           % (st["store_errors"], st["sync_errors"], st["last_errno"],
              st["last_error"], st["store_state"], st["dirty_bytes"],
              st["inflight_bytes"], st["unsynced_bytes"]))
    if st["store_errors"] + st["sync_errors"] <= errors0:
        M.fail ("no store or sync error counted: %r" % st)
    if st["last_errno"] != "EIO":
        M.fail ("last_errno %r, expected EIO" % st["last_errno"])
    # What the store failed is held in RAM: dirty, or already in flight
    # again (the flusher retries at once), or written but not synced.
    if st["dirty_bytes"] + st["inflight_bytes"] + st["unsynced_bytes"] == 0:
        M.fail ("nothing dirty, in flight or unsynced after failures: %r" % st)
    m.check_nbd (h, "device while the store fails")
    flush_must_fail (uri, part)
    # The injected failure must really have kept data from the store, or
    # the recovery below proves nothing.
    try:
        m.check_file (durable, "durable image while failing")
        M.fail ("the durable image already equals the model: no failure "
                "was injected")
    except M.TestFailure as e:
        if "no failure" in str (e):
            raise

    redo = []
    if part == "A":
        if st["store_state"] != "failing":
            soft.append ("store_state %r while every write to the store fails, "
                         "expected failing" % st["store_state"])
            M.log ("FAIL (reported at the end): " + soft[-1])
        ctl ("mode writethrough")
        off = 7 * M.MiB + 17
        try:
            h.pwrite (rng.randbytes (100000), off)
            M.fail ("a writethrough write succeeded while the store fails")
        except nbd.Error as e:
            if e.errno != "EIO":
                M.fail ("writethrough write failed with %s, expected EIO" % e.errno)
            M.log ("ok: writethrough write failed: %s" % e)
        redo.append ((off, 100000))
        ctl ("mode writeback")

    os.unlink (trigger)
    M.log ("backing store healthy again")
    ctl.sync (60000)
    # RAM is the truth, and it reaches the store: what the failed
    # writethrough write left in RAM must be on the store after the
    # sync, without anybody writing it again.
    for off, n in redo:
        m.write (off, h.pread (n, off))
    m.check_file (durable, "durable image right after sync (the failed "
                  "writethrough write not redone)")
    writes (h, m, rng, 5)
    h.flush ()
    st = ctl.status ()
    if st["dirty_bytes"] != 0 or st["unsynced_bytes"] != 0:
        M.fail ("after recovery, FLUSH: dirty %d unsynced %d"
                % (st["dirty_bytes"], st["unsynced_bytes"]))
    m.check_file (durable, "durable image after recovery")
    m.check_nbd (h)
    h.shutdown ()
    m.save (modelf)
    M.log ("part %s: recovered, durable image == model" % part)
    if soft:
        # Exit 3: failed, but the model is saved and the shell goes on.
        for f in soft:
            print ("FAIL: " + f, file=sys.stderr)
        sys.exit (3)

M.main (body)
EOF

mk_image () { random_file "$1" "$2"; }

echo "=== A: error filter on an nbdkit file export"
img="$TMP/a.img"
mk_image "$img" "$size"
cp "$img" "$TMP/a.model"
errs=(error=EIO error-rate=100% error-file="$TMP/a.fail")
if [ "$RAMBACK_FORM" = filter ]; then
    # The error filter right below ramback, in the same nbdkit.
    RB_PLUGIN=(--filter=error file "$img" "${errs[@]}")
    start_rb rb -- fsync=wait
    RB_PLUGIN=()
    ba_log=$rb_log
else
    start_backing ba --filter=error file "$img" "${errs[@]}"
    start_rb rb -- back="$ba_uri" fsync=wait
fi
soft_rc=0
py "$TMP/fail.py" "$rb_uri" "$rb_ctl" "$img" "$TMP/a.fail" "$TMP/a.model" A || soft_rc=$?
[ "$soft_rc" -eq 0 ] || [ "$soft_rc" -eq 3 ] || fail "part A"
# The recovery is in the log at every level (not only with -v).
for (( i = 0; i < 600; i++ )); do
    grep -q '^ramback: backing store recovered after [0-9]* errors' "$rb_log" && break
    sleep 0.1
done
grep '^ramback: backing store recovered after [0-9]* errors' "$rb_log" ||
    fail "no 'backing store recovered' line in the log"
stop_rb_same rb "$img" "$TMP/a.model"
[ "$RAMBACK_FORM" = filter ] || stop_nbdkit "$ba_pid"
grep -c 'injecting' "$ba_log" | sed 's/^/errors injected: /' || true

echo "=== B: volatile write cache lost on a failed FLUSH (fsyncgate)"
export VOLATILE_IMG="$TMP/b.volatile" DURABLE_IMG="$TMP/b.durable"
export VOLATILE_LIST="$TMP/b.list" VOLATILE_FAIL="$TMP/b.fail"
mk_image "$DURABLE_IMG" "$size"
cp "$DURABLE_IMG" "$VOLATILE_IMG"
cp "$DURABLE_IMG" "$TMP/b.model"
: > "$VOLATILE_LIST"
if [ "$RAMBACK_FORM" = filter ]; then
    # The sh plugin right below ramback (it serialises all requests).
    RB_PLUGIN=(sh "$top_srcdir/tests/volatile-disk.sh")
    start_rb rb -- fsync=wait
    RB_PLUGIN=()
else
    start_backing bb sh "$top_srcdir/tests/volatile-disk.sh"
    start_rb rb -- back="$bb_uri" fsync=wait
fi
rc=0
py "$TMP/fail.py" "$rb_uri" "$rb_ctl" "$DURABLE_IMG" "$VOLATILE_FAIL" "$TMP/b.model" B || rc=$?
[ "$rc" -eq 0 ] || [ "$rc" -eq 3 ] || fail "part B"
[ "$rc" -eq 0 ] || soft_rc=$rc
stop_rb_same rb "$DURABLE_IMG" "$TMP/b.model"
[ "$RAMBACK_FORM" = filter ] || stop_nbdkit "$bb_pid"
echo "durable image == model after SIGTERM"
[ "$soft_rc" -eq 0 ] || fail "see the FAIL lines above"
