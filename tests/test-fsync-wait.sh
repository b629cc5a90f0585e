#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# fsync=wait: once NBD FLUSH returns, or a FUA write or zero completes,
# the data is in the backing file (read directly with open(), while
# nbdkit keeps running), whichever connection wrote it.  flush-rate=2M
# keeps the background flusher slow, so a FLUSH that did not wait would
# leave most of the data missing.
# fsync=ignore: FLUSH returns at once; the log says how much had reached
# the file (no assertion: that is timing), then control "sync" makes the
# file equal the model.  Both end with SIGTERM and backing == model.
# In both, with the device clean and the flusher idle, 3 FLUSHes must
# make 3 syncs of the store (status "syncs") with fsync=wait and none
# with fsync=ignore.  (The filter form: fsync=wait only, see below.)

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"

size=$(( 16 * 1024 * 1024 + 12345 ))
seed=${SEED:-9001}
back="$TMP/back.img"
modelf="$TMP/model.img"

cat > "$TMP/fsync.py" <<'EOF'
import random, sys, time
import nbd
import model as M

uri, ctlpath, back, modelf, seed, phase = sys.argv[1:]
MiB = M.MiB

def flushes_sync (ctl, h, wait):
    """With nothing dirty or unsynced and the flusher idle (right after a
    control sync), FLUSH syncs the backing store with fsync=wait (one
    sync per FLUSH: somebody waits for it) and never with fsync=ignore."""
    ctl.sync ()
    s0 = ctl.status ()["syncs"]
    for _ in range (3):
        h.flush ()
    n = ctl.status ()["syncs"] - s0
    M.log ("fsync=%s: 3 FLUSHes on a clean device made %d syncs"
           % ("wait" if wait else "ignore", n))
    if wait and n < 3:
        M.fail ("fsync=wait: 3 FLUSHes made only %d syncs of the store" % n)
    if not wait and n != 0:
        M.fail ("fsync=ignore: 3 FLUSHes made %d syncs of the store" % n)

def body ():
    rng = random.Random ("%s-%s" % (seed, phase))
    ctl = M.Control (ctlpath)
    m = M.Model (ctl.status ()["size"])
    h = M.connect (uri)
    h2 = M.connect (uri)
    for what in ("can_flush", "can_fua", "can_multi_conn"):
        if not getattr (h, what) ():
            M.fail ("the plugin does not advertise %s" % what)

    if phase == "wait":
        st = ctl.status ()
        if st["fsync"] != "wait":
            M.fail ("status fsync = %r" % st["fsync"])
        syncs0 = st["syncs"]
        for rnd in range (3):
            for _ in range (12):
                off, n = M.rand_extent (rng, m.size, 65536, 512 * 1024)
                data = rng.randbytes (n)
                h.pwrite (data, off)
                m.write (off, data)
            h.flush ()
            m.check_file (back, "backing file right after FLUSH (round %d)" % rnd)
        st = ctl.status ()
        if st["syncs"] <= syncs0:
            M.fail ("FLUSH returned but syncs did not grow: %r" % st)
        if st["unsynced_bytes"] != 0:
            M.fail ("unsynced_bytes = %d right after FLUSH" % st["unsynced_bytes"])

        # Multi-conn: a FLUSH covers writes made on every connection.
        for writer, flusher in ((h, h2), (h2, h)):
            off, n = M.rand_extent (rng, m.size, 65536, 1 * MiB)
            data = rng.randbytes (n)
            writer.pwrite (data, off)
            m.write (off, data)
            flusher.flush ()
            m.check_file (back, "backing file after a write on one connection "
                          "and FLUSH on another")

        # FUA: durable on return, without a FLUSH.
        for i in range (10):
            off, n = M.rand_extent (rng, m.size, 65536, 256 * 1024)
            if i % 3 == 2:
                h.zero (n, off, nbd.CMD_FLAG_FUA)
                m.zero (off, n)
            else:
                data = rng.randbytes (n)
                h.pwrite (data, off, nbd.CMD_FLAG_FUA)
                m.write (off, data)
            m.check_file (back, "backing file after FUA request %d" % i)
        M.log ("fsync=wait: FLUSH and FUA data was in the file every time")
        flushes_sync (ctl, h, True)

    else:
        data = rng.randbytes (2 * MiB)
        off = 1 * MiB + 777
        h.pwrite (data, off)
        m.write (off, data)
        t = time.monotonic ()
        h.flush ()
        dt = time.monotonic () - t
        with open (back, "rb") as f:
            f.seek (off)
            got = f.read (len (data))
        same = sum (1 for i in range (0, len (data), 4096)
                    if got[i:i + 4096] == data[i:i + 4096])
        M.log ("fsync=ignore: FLUSH took %.3fs; %d of %d 4K blocks were in "
               "the file then (informational)" % (dt, same, len (data) // 4096))
        ctl.sync ()
        m.check_file (back, "backing file after control sync")
        flushes_sync (ctl, h, False)

    m.check_nbd (h, "device")
    h.shutdown ()
    h2.shutdown ()
    m.save (modelf)

M.main (body)
EOF

echo "=== fsync=wait, flush-rate=2M"
rm -f "$back"
start_rb rb -- back="$back" size="$size" fsync=wait flush-rate=2M
py "$TMP/fsync.py" "$rb_uri" "$rb_ctl" "$back" "$modelf" "$seed" wait
stop_rb_same rb "$back" "$modelf"

# The filter form runs the fsync=wait half only: with fsync=ignore a
# FLUSH never reaches the store, and what remains is the core's, the
# same in both forms.
[ "$RAMBACK_FORM" = plugin ] || exit 0

echo "=== fsync=ignore, flush-rate=512K"
rm -f "$back"
start_rb rb -- back="$back" size="$size" flush-rate=512K
py "$TMP/fsync.py" "$rb_uri" "$rb_ctl" "$back" "$modelf" "$seed" ignore
stop_rb_same rb "$back" "$modelf"
