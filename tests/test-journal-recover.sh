#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Recovery from the journal: a FLUSH with fsync=wait is acknowledged
# once its transaction is committed in the journal, even while the
# backing store holds every in-place write; after a crash the journal
# alone brings the backing store to the last commit.  A damaged last
# transaction (a corrupted data byte, a lost commit block) is ignored
# and everything before it is replayed; replaying twice, or again over
# an image already replayed, gives the same image.  The plugin replays
# at start, before it serves; then, in writethrough mode, each write is
# in place on the backing store when it is acknowledged.
#
# A: 64 KiB at 0, then FLUSH; B: 64 KiB at 1 MiB, then FLUSH; the
# backing store (faultdisk) holds the writes in place it gets.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
source "$top_srcdir/tests/remote-functions.sh"

size=$(( 4 * 1024 * 1024 ))
truncate -s "$size" "$TMP/back.img"
truncate -s $(( 2 * 1024 * 1024 )) "$TMP/j.img"

start_faultdisk bk "$TMP/back.img"
# Two rules: the in-place pass may take A and B together (two writes).
fd_cmd bk stall store >/dev/null
fd_cmd bk stall store >/dev/null
start_rb rb back="$bk_uri" journal="$TMP/j.img" fsync=wait chunk=64K \
    commit-interval=60

py - "$rb_uri" "$rb_ctl" "$TMP" <<'EOF'
import os, random, sys
import model as M

uri, ctl, tmp = sys.argv[1:]
rng = random.Random (3)
a, b = rng.randbytes (65536), rng.randbytes (65536)
open (tmp + "/A", "wb").write (a)
open (tmp + "/B", "wb").write (b)

def body ():
    c = M.Control (ctl)
    h = M.connect (uri)
    h.pwrite (a, 0)
    h.flush ()
    h.pwrite (b, 1 << 20)
    h.flush ()
    st = c.status ()
    M.log ("both FLUSHes acknowledged: journal_commits=%d journal_applied=%d "
           "syncs=%d" % (st["journal_commits"], st["journal_applied"],
                         st["syncs"]))
    if st["journal_commits"] != 2 or st["journal_applied"] != 0:
        M.fail ("expected 2 commits and nothing in place: %r" % st)

M.main (body)
EOF
for (( i=0; i<600; i++ )); do
    [ "$(fd_field bk held)" -ge 1 ] && break
    sleep 0.1
done
[ "$(fd_field bk held)" -ge 1 ] || fail "the in-place write is not held"

echo "=== crash: ramback killed, the held in-place write never lands"
kill -9 "$rb_pid"
wait "$rb_job" 2>/dev/null || true
kill_remote bk
cmp -s "$TMP/back.img" <(head -c "$size" /dev/zero) ||
    fail "something reached the backing store in place"
cp "$TMP/j.img" "$TMP/j.orig"
cp "$TMP/back.img" "$TMP/back.orig"

# has OFFSET FILE: does the backing image hold FILE's 64 KiB at OFFSET?
has () {
    cmp -s -n 65536 -i "$1:0" "$TMP/back.img" "$2"
}
# Where B's data is in the journal.
bpos=$(py -c '
import sys
j = open (sys.argv[1], "rb").read ()
b = open (sys.argv[2], "rb").read ()
print (j.find (b))' "$TMP/j.orig" "$TMP/B")
[ "$bpos" -gt 0 ] || fail "B is not in the journal"

echo "=== a corrupted byte in the last transaction's data"
cp "$TMP/j.orig" "$TMP/j.img"
printf '\xff' | dd of="$TMP/j.img" bs=1 seek=$(( bpos + 1000 )) conv=notrunc \
    status=none
ramback recover "$TMP/back.img" "$TMP/j.img" | tee "$TMP/out"
grep -q 'replayed 1 transactions' "$TMP/out" || fail "did not replay A alone"
grep -q 'ignored a damaged or incomplete transaction' "$TMP/out" ||
    fail "did not report the damaged transaction"
has 0 "$TMP/A" || fail "A is missing"
has $(( 1 << 20 )) "$TMP/B" && fail "the damaged B was replayed"

echo "=== the last transaction's commit block lost"
cp "$TMP/back.orig" "$TMP/back.img"
cp "$TMP/j.orig" "$TMP/j.img"
dd if=/dev/zero of="$TMP/j.img" bs=1 seek=$(( bpos + 65536 )) count=512 \
    conv=notrunc status=none
ramback recover --json "$TMP/back.img" "$TMP/j.img" | tee "$TMP/out"
grep -q '"replayed":1,' "$TMP/out" || fail "did not replay A alone"
grep -q '"torn_tail":true' "$TMP/out" || fail "torn_tail not reported"
has 0 "$TMP/A" || fail "A is missing"
has $(( 1 << 20 )) "$TMP/B" && fail "B without its commit was replayed"

echo "=== intact: both, and replay is idempotent"
cp "$TMP/back.orig" "$TMP/back.img"
cp "$TMP/j.orig" "$TMP/j.img"
ramback recover "$TMP/back.img" "$TMP/j.img" | tee "$TMP/out"
grep -q 'replayed 2 transactions' "$TMP/out" || fail "did not replay A and B"
has 0 "$TMP/A" && has $(( 1 << 20 )) "$TMP/B" || fail "A or B missing"
cp "$TMP/back.img" "$TMP/back.once"
ramback recover "$TMP/back.img" "$TMP/j.img" | grep -q 'replayed 0 trans' ||
    fail "a recovered journal was not empty"
cp "$TMP/j.orig" "$TMP/j.img"
ramback recover "$TMP/back.img" "$TMP/j.img" | grep -q 'replayed 2 trans' ||
    fail "the copy of the journal did not replay again"
cmp "$TMP/back.img" "$TMP/back.once" || fail "replaying twice changed the image"

echo "=== recovery at start: the plugin replays before it serves"
cp "$TMP/back.orig" "$TMP/back.img"
cp "$TMP/j.orig" "$TMP/j.img"
start_rb rb2 back="$TMP/back.img" journal="$TMP/j.img"
grep -q 'journal: replayed 2 transactions' "$rb2_log" ||
    fail "no replay at start"
[ "$(status_field "$rb2_ctl" journal_replayed)" = 2 ] ||
    fail "status journal_replayed is not 2"
py - "$rb2_uri" "$rb2_ctl" "$TMP" <<'EOF'
import os, sys
import model as M
uri, ctl, tmp = sys.argv[1:]

def body ():
    h = M.connect (uri)
    if h.pread (65536, 0) != open (tmp + "/A", "rb").read ():
        M.fail ("A does not read back after the replay")
    if h.pread (65536, 1 << 20) != open (tmp + "/B", "rb").read ():
        M.fail ("B does not read back after the replay")
    # Writethrough with a journal: on the backing store when acknowledged.
    M.Control (ctl) ("mode writethrough")
    for i in range (3):
        d = os.urandom (65536)
        h.pwrite (d, (2 << 20) + i * 65536)
        with open (tmp + "/back.img", "rb") as f:
            f.seek ((2 << 20) + i * 65536)
            if f.read (65536) != d:
                M.fail ("writethrough write %d is not on the backing store "
                        "when acknowledged" % i)
    M.log ("writethrough with a journal: each write in place when acknowledged")

M.main (body)
EOF
stop_rb rb2
cmp -n $(( 2 << 20 )) "$TMP/back.img" "$TMP/back.once" ||
    fail "the start replayed otherwise"
echo PASS
