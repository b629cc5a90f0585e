#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# journal= with ram= (a resumable RAM image): after kill -9 the start
# replays the journal onto the backing store *before* it resumes the
# image.  A committed chunk is clean in the resumed image (its
# transaction's commit retired its "not durable" bit): it is never
# written again, so it reaches the backing store only through the
# replay.  An uncommitted write is dirty in the image and written back.
#
# A at 0, FLUSH (committed in the journal, never in place: the backing
# store holds every in-place write); B at 1 MiB, no FLUSH; kill -9.
# Restart on the same ram=, back= and journal=, read A and B, clean
# stop: the backing store holds both.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
source "$top_srcdir/tests/remote-functions.sh"

ramdir=/dev/shm
if [ "$(stat -f -c %T "$ramdir" 2>/dev/null)" != tmpfs ]; then
    echo "$0: SKIP: /dev/shm is not a tmpfs"
    exit 77
fi
ram="$ramdir/ramback-journal-resume-$$.img"
cleanup_fn rm -f "$ram"

size=$(( 4 * 1024 * 1024 ))
head -c 65536 /dev/urandom >"$TMP/A"
head -c 65536 /dev/urandom >"$TMP/B"

nbdcopy_w () { py -c '
import sys, nbd
h = nbd.NBD (); h.connect_uri (sys.argv[1])
h.pwrite (open (sys.argv[2], "rb").read (), int (sys.argv[3]))
if sys.argv[4] == "flush":
    h.flush ()
h.shutdown ()' "$@"; }

# A committed, B not, kill -9, resume: with extra parameters "$@".
committed_then_resume () {
    rm -f "$ram"
    truncate -s 0 "$TMP/back.img" "$TMP/j.img"
    truncate -s "$size" "$TMP/back.img"
    truncate -s $(( 2 * 1024 * 1024 )) "$TMP/j.img"
    start_faultdisk bk "$TMP/back.img"
    fd_cmd bk stall store >/dev/null
    fd_cmd bk stall store >/dev/null
    args=(back="$bk_uri" journal="$TMP/j.img" ram="$ram" fsync=wait chunk=64K
          commit-interval=60 "$@")
    start_rb rb "${args[@]}"
    nbdcopy_w "$rb_uri" "$TMP/A" 0 flush
    nbdcopy_w "$rb_uri" "$TMP/B" $(( 1 << 20 )) noflush
    [ "$(status_field "$rb_ctl" journal_commits)" = 1 ] || fail "A is not committed"
    [ "$(status_field "$rb_ctl" journal_applied)" = 0 ] || fail "A is in place"

    kill -9 "$rb_pid"
    wait "$rb_job" 2>/dev/null || true
    kill_remote bk
    cmp -s "$TMP/back.img" <(head -c "$size" /dev/zero) ||
        fail "something reached the backing store in place"

    start_faultdisk bk "$TMP/back.img"
    start_rb rb2 "${args[@]}"
    [ "$(status_field "$rb2_ctl" image_source)" = resumed-crash ] ||
        fail "the RAM image was not resumed"
    py - "$rb2_uri" "$TMP" <<'EOF'
import sys
import model as M
uri, tmp = sys.argv[1:]

def body ():
    h = M.connect (uri)
    for name, off in (("A", 0), ("B", 1 << 20)):
        if h.pread (65536, off) != open (tmp + "/" + name, "rb").read ():
            M.fail ("%s does not read back after the resume" % name)

M.main (body)
EOF
    stop_rb rb2
    cmp -n 65536 "$TMP/back.img" "$TMP/A" || fail "A is not on the backing store"
    cmp -n 65536 -i $(( 1 << 20 )):0 "$TMP/back.img" "$TMP/B" ||
        fail "B is not on the backing store"
    grep -q 'journal: replayed 1 transactions' "$rb2_log" || fail "no replay logged"
    kill_remote bk
}
committed_then_resume
# The same with ram-size= a quarter of the device: the replay comes
# before the resumed image's chunks may be evicted (they are clean: the
# store holds them only once replayed), and B goes through the journal.
echo "=== with ram-size=1M"
committed_then_resume ram-size=1M

echo "=== 4 KiB writes scattered over many chunks: the same command resumes"
# The journal is sized for what was written (sector bits), not for
# whole chunks: the RAM image keeps the sector bits, so after a kill -9
# the same command line resumes, each write costing its 4 KiB of
# journal, not its chunk.
ram3="$ramdir/ramback-journal-resume3-$$.img"
cleanup_fn rm -f "$ram3"
truncate -s $(( 16 * 1024 * 1024 )) "$TMP/back3.img"
truncate -s $(( 2 * 1024 * 1024 )) "$TMP/j3.img"
args3=(back="$TMP/back3.img" journal="$TMP/j3.img" ram="$ram3" chunk=64K
       commit-interval=60)
start_rb rb5 "${args3[@]}"
py - "$rb5_uri" "$TMP/scatter" <<'EOF'
import os, sys
import model as M
uri, out = sys.argv[1:]

def body ():
    h = M.connect (uri)
    with open (out, "wb") as f:
        for i in range (200):
            b = os.urandom (4096)
            h.pwrite (b, i * 65536 + 8192)
            f.write (b)

M.main (body)
EOF
kill -9 "$rb5_pid"
wait "$rb5_job" 2>/dev/null || true
start_rb rb6 "${args3[@]}"
[ "$(status_field "$rb6_ctl" image_source)" = resumed-crash ] ||
    fail "the scattered image was not resumed"
stop_rb rb6
py - "$TMP/back3.img" "$TMP/scatter" <<'EOF'
import sys
import model as M
back, scatter = sys.argv[1:]
b = open (back, "rb").read ()
s = open (scatter, "rb").read ()
for i in range (200):
    if b[i * 65536 + 8192:i * 65536 + 12288] != s[i * 4096:(i + 1) * 4096]:
        M.fail ("write %d is not on the backing store after the resume" % i)
EOF

echo "=== a resumed image with more dirty data than the journal holds"
ram2="$ramdir/ramback-journal-resume2-$$.img"
cleanup_fn rm -f "$ram2"
truncate -s $(( 8 * 1024 * 1024 )) "$TMP/back2.img"
truncate -s $(( 1024 * 1024 )) "$TMP/small.img"
start_rb rb3 back="$TMP/back2.img" ram="$ram2" flush-rate=1
head -c $(( 4 * 1024 * 1024 )) /dev/urandom >"$TMP/C"
nbdcopy_w "$rb3_uri" "$TMP/C" 0 noflush
kill -9 "$rb3_pid"
wait "$rb3_job" 2>/dev/null || true
expect_fail "dirty image larger than the journal" \
    "dirty chunks .* more than journal=.* holds" \
    back="$TMP/back2.img" ram="$ram2" journal="$TMP/small.img"
start_rb rb4 back="$TMP/back2.img" ram="$ram2"
stop_rb rb4
cmp -n $(( 4 * 1024 * 1024 )) "$TMP/back2.img" "$TMP/C" ||
    fail "the refused image lost data"
echo PASS
