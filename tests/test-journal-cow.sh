#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Copy on write at a commit point, forced: a transaction holds X (the
# first chunks, whole) and Y (4 KiB sectors of chunks 16 and 17: two
# extents in chunk 16, and one that spans into chunk 17); the journal
# (faultdisk) holds its first write.  While it is held the client
# overwrites chunks 16 and 17 whole, and X.  The overwrites complete at
# once (writes never wait for a commit), and the committed transaction
# must hold X and Y as they were at the commit point: after a crash,
# recovery gives X and Y, never an overwrite, not even in the sectors
# of chunks 16 and 17 that the transaction does not hold.
#
# Both ways a transaction reaches the journal: X of 64 KiB makes an
# 80 KiB transaction, under the one-write limit (RBJ_WHOLE_MAX, 128
# KiB): captured whole, then appended in one write; X of 256 KiB makes
# it 272 KiB: its capture streams into the journal, the held write is
# X's data, and Y is not captured yet while it is held (copy on write).
#
# First, a FUA write with fsync=wait, the journal's write held: it must
# not complete before the commit that holds it is durable.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
source "$top_srcdir/tests/remote-functions.sh"

for xlen in 65536 262144; do
echo "=== X of $xlen bytes"
truncate -s 0 "$TMP/back.img" "$TMP/j.img"
truncate -s $(( 4 * 1024 * 1024 )) "$TMP/back.img"
truncate -s $(( 2 * 1024 * 1024 )) "$TMP/j.img"
start_faultdisk jr "$TMP/j.img"
start_rb rb back="$TMP/back.img" journal="$jr_uri" fsync=wait chunk=64K \
    commit-interval=60

py - "$rb_uri" "$rb_ctl" "$jr_fd" "$TMP" "$xlen" <<'EOF'
import os, random, sys, time
import model as M

uri, ctl, fddir, tmp, xlen = sys.argv[1:]
xlen = int (xlen)
rng = random.Random (9)
x, x2 = (rng.randbytes (xlen) for _ in range (2))
y2 = rng.randbytes (131072)
# Y: sectors 1, 5 and 15-16 of the 128 KiB at 1 MiB, zero elsewhere.
y_parts = [(4096, rng.randbytes (4096)), (20480, rng.randbytes (4096)),
           (61440, rng.randbytes (8192))]
y = bytearray (131072)
for off, d in y_parts:
    y[off:off + len (d)] = d
for name, d in (("X", x), ("Y", y)):
    open (tmp + "/" + name, "wb").write (d)

def cmd (line):
    return M.fd_cmd (fddir, line)

def body ():
    c = M.Control (ctl)
    h = M.connect (uri)
    # First, a FUA write completes only once its commit is durable.
    cmd ("stall write nth=1")
    fua = h.aio_pwrite (rng.randbytes (4096), 2 << 20, flags=M.nbd.CMD_FLAG_FUA)
    deadline = time.monotonic () + 60
    while cmd ("status")["held"] != "1":
        if h.aio_command_completed (fua):
            M.fail ("a FUA write completed before the journal write of "
                    "its commit")
        if time.monotonic () > deadline:
            M.fail ("the journal write of the FUA write was not held")
        time.sleep (0.02)
    if h.aio_command_completed (fua):
        M.fail ("a FUA write completed while the journal write of its "
                "commit was held")
    cmd ("release all")
    while not h.aio_command_completed (fua):
        h.poll (1)
    if c.status ()["journal_commits"] != 1:
        M.fail ("the FUA write made no commit of its own")
    h.pwrite (x, 0)
    for off, d in y_parts:
        h.pwrite (d, (1 << 20) + off)
    cmd ("stall write nth=1")
    cookie = h.aio_flush ()
    deadline = time.monotonic () + 60
    while cmd ("status")["held"] != "1":
        if time.monotonic () > deadline:
            M.fail ("the journal write of the transaction was not held")
        time.sleep (0.02)
    M.log ("commit point taken, capture held at X's journal write")
    h.pwrite (y2, 1 << 20)
    h.pwrite (x2, 0)
    M.log ("both overwrites completed during the capture")
    if h.aio_command_completed (cookie):
        M.fail ("the FLUSH completed while its journal write was held")
    cmd ("release all")
    while not h.aio_command_completed (cookie):
        h.poll (1)
    st = c.status ()
    if st["journal_commits"] != 2:
        M.fail ("expected two commits: %r" % st)
    if h.pread (xlen, 0) != x2 or h.pread (131072, 1 << 20) != y2:
        M.fail ("RAM does not hold the overwrites")

M.main (body)
EOF

kill -9 "$rb_pid"
wait "$rb_job" 2>/dev/null || true
kill_remote jr
truncate -s 0 "$TMP/back.img"
truncate -s $(( 4 * 1024 * 1024 )) "$TMP/back.img"
ramback recover "$TMP/back.img" "$TMP/j.img" | grep 'replayed 2 trans' ||
    fail "the transactions were not replayed"
cmp -n "$xlen" "$TMP/back.img" "$TMP/X" || fail "X is not as at the commit point"
cmp -n 131072 -i $(( 1 << 20 )):0 "$TMP/back.img" "$TMP/Y" ||
    fail "Y is not as at the commit point (the overwrite during the capture leaked in)"
done
echo PASS
