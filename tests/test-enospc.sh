#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# ENOSPC during write back: a sparse 128 MiB backing file on a 48 MiB
# tmpfs (in a private mount namespace), 16 MiB of it taken by a filler
# file, fsync=wait.  About 38 MiB of writes complete in RAM; the flusher
# runs out of space.  Asserted while the store is full:
#  - status shows store_errors > 0 and ENOSPC / "No space" in last_errno
#    or last_error, and data is still dirty;
#  - every byte reads back correctly from RAM;
#  - control "sync 2000" fails (ENOSPC or ETIMEDOUT, never OK);
#  - NBD FLUSH fails (fsync=wait: it must not report success, nor hang);
#  - a FUA write fails, and so does a write in writethrough mode.
# Then the filler is removed: "sync" succeeds and the backing file equals
# what the device reads, including the ranges of the failed FUA and
# writethrough writes, which nobody writes again (RAM is the truth and
# reaches the store); FLUSH succeeds; the file equals the model while
# running and again after SIGTERM.

source "$top_srcdir/tests/harness.sh"
private_mount_ns "$@"

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"

mnt="$TMP/mnt"
mount_tmpfs "$mnt" 48M

random_file "$mnt/filler" $((16 << 20)) 1
truncate -s 128M "$mnt/back.img"
df -k "$mnt"

start_rb rb -- back="$mnt/back.img" chunk=64K fsync=wait
py - "$rb_uri" "$rb_ctl" "$mnt/back.img" "$mnt/filler" "$TMP/model.img" <<'EOF'
import errno, random, sys
import nbd
import model as M

uri, ctlpath, back, filler, modelf = sys.argv[1:]
MiB = M.MiB

def expect_nbd_error (what, fn):
    try:
        fn ()
    except nbd.Error as e:
        M.log ("ok: %s failed: %s" % (what, e))
        return
    M.fail ("%s succeeded while the backing store is full" % what)

def body ():
    rng = random.Random (2)
    ctl = M.Control (ctlpath)
    m = M.Model (ctl.status ()["size"])
    h = M.connect (uri)
    for i in range (36):
        off = i * 3 * MiB + 12345
        data = rng.randbytes (MiB)
        h.pwrite (data, off)
        m.write (off, data)
    st = ctl.wait_for (lambda s: s["store_errors"] > 0, 30,
                       "a store error once the tmpfs is full")
    M.log ("store full: store_errors=%d last_errno=%r last_error=%r "
           "dirty_bytes=%d store_state=%s" %
           (st["store_errors"], st["last_errno"], st["last_error"],
            st["dirty_bytes"], st["store_state"]))
    if st["last_errno"] != "ENOSPC" and "No space" not in st["last_error"]:
        M.fail ("status does not mention ENOSPC: %r" % st)
    if st["dirty_bytes"] == 0:
        M.fail ("nothing dirty after a failed write back")
    m.check_nbd (h, "device while the store is full")

    M.expect_sync_fails (ctl, 2000, ("ENOSPC", "ETIMEDOUT"),
                         "control sync reported success with the store full")

    # FLUSH must fail, not block until space appears.
    t, res = M.flush_in_thread (uri)
    t.join (30)
    flush_hung = t.is_alive ()

    redo = []
    if not flush_hung:
        if res == ["ok"]:
            M.fail ("NBD FLUSH succeeded with fsync=wait and the store full")
        M.log ("ok: NBD FLUSH failed: %s" % res[0])
        off = 110 * MiB + 3
        expect_nbd_error ("FUA write", lambda: h.pwrite (rng.randbytes (MiB),
                                                         off, nbd.CMD_FLAG_FUA))
        redo.append ((off, MiB))
        ctl ("mode writethrough")
        off = 115 * MiB + 5
        expect_nbd_error ("writethrough write", lambda: h.pwrite (
            rng.randbytes (MiB), off))
        redo.append ((off, MiB))
        ctl ("mode writeback")

    import os
    os.unlink (filler)
    M.log ("filler removed")
    t.join (60)
    if flush_hung:
        M.fail ("NBD FLUSH blocked for 30 s while the store was full instead "
                "of failing (it returned %r once space was freed)" % res)
    ctl.sync (50000)
    # RAM is the truth, and it reaches the store: whatever the failed
    # requests left in RAM (their ranges were clean before) must be in
    # the file after the sync, without writing them again.
    for off, n in redo:
        m.write (off, h.pread (n, off))
    m.check_file (back, "backing file right after sync (failed FUA and "
                  "writethrough writes not redone)")
    h.flush ()
    st = ctl.status ()
    M.log ("after freeing space: dirty_bytes=%d store_errors=%d syncs=%d state=%s"
           % (st["dirty_bytes"], st["store_errors"], st["syncs"], st["store_state"]))
    if st["dirty_bytes"] != 0:
        M.fail ("still dirty after sync and FLUSH: %r" % st)
    m.check_file (back, "backing file after space was freed")
    m.check_nbd (h)
    h.shutdown ()
    m.save (modelf)

M.main (body)
EOF
stop_rb_same rb "$mnt/back.img" "$TMP/model.img"
echo "backing == model after ENOSPC and recovery"
