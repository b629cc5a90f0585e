#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The journal's bounds and bad input.
#  - A write that can never fit in the journal fails with a message
#    that says so; writes that fit only a few at a time go through in
#    many transactions (or wait, throttled, if the store lags) and the
#    data is all there after a clean stop.  A zero or trim longer than
#    the journal holds goes in pieces.
#  - Each transaction's data starts 4 KiB aligned in the journal.
#  - A journal of format version 1 holding a transaction is refused
#    (by the plugin and by ramback recover) with a message saying how to
#    replay it; an empty one is formatted anew.
#  - Bad journal= and commit-interval= values are refused with a clear
#    message, before anything is written: a journal too small, the
#    backing store itself (same path, or a link to it), a file that
#    holds other data, another device's journal, commit-interval=
#    without journal= or out of range.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"

size=$(( 8 * 1024 * 1024 ))
truncate -s "$size" "$TMP/back.img"
truncate -s $(( 1024 * 1024 )) "$TMP/j.img"

echo "=== a 1 MiB journal: a 2 MiB write fails, 6 MiB of 256K writes wait"
start_rb rb back="$TMP/back.img" journal="$TMP/j.img" chunk=64K
py - "$rb_uri" "$rb_ctl" "$TMP/model" <<'EOF'
import random, sys
import nbd
import model as M

uri, ctl, modelf = sys.argv[1:]

def body ():
    c = M.Control (ctl)
    h = M.connect (uri)
    m = M.Model (h.get_size ())
    try:
        h.pwrite (bytes (2 << 20), 0)
        M.fail ("a write larger than the journal was accepted")
    except nbd.Error as e:
        M.log ("2 MiB write refused: %s" % e)
    rng = random.Random (5)
    for i in range (24):
        off = rng.randrange (0, m.size // 65536 - 4) * 65536
        d = rng.randbytes (256 * 1024)
        h.pwrite (d, off)
        m.write (off, d)
        st = c.status ()
        if st["journal_used_bytes"] > st["journal_size"]:
            M.fail ("the journal holds more than it can: %r" % st)
    st = c.status ()
    M.log ("throttled=%d journal_commits=%d" % (st["throttled"],
                                                 st["journal_commits"]))
    # A commit point as soon as the dirty data takes a quarter of the
    # journal: writers wait only if the store lags, but 6 MiB cannot
    # go through a 1 MiB journal in fewer than 6 transactions.
    if st["journal_commits"] < 6:
        M.fail ("6 MiB went through a 1 MiB journal in %d transactions: %r"
                % (st["journal_commits"], st))
    # A zero or trim longer than the journal holds (mkfs and fstrim
    # discard the whole device) goes in pieces; NBD promises no
    # atomicity for them.
    for what, off, n in (("zero", 4097, m.size - 8193),
                         ("trim", 65536, m.size - 65536)):
        d = rng.randbytes (8192)
        h.pwrite (d, 12288)
        m.write (12288, d)
        try:
            if what == "zero":
                h.zero (n, off)
            else:
                h.trim (n, off)
        except nbd.Error as e:
            M.fail ("a %s of %d bytes, more than the journal holds, "
                    "failed: %s" % (what, n, e))
        m.zero (off, n)
        m.check_nbd (h)
    d = rng.randbytes (65536 * 3)
    h.pwrite (d, 65536 * 40 + 512)
    m.write (65536 * 40 + 512, d)
    h.zero (m.size, 0, nbd.CMD_FLAG_FUA)
    m.zero (0, m.size)
    m.check_nbd (h)
    d = rng.randbytes (65536)
    h.pwrite (d, 100 * 4096)
    m.write (100 * 4096, d)
    m.check_nbd (h)
    m.save (modelf)

M.main (body)
EOF
grep -q 'more than journal=.* holds' "$rb_log" ||
    fail "no message says the write is larger than the journal"
ramback status "$rb_ctl" | tee "$TMP/st"
grep -Eq 'journal used: .* of .*, [0-9]+ commits' "$TMP/st" ||
    fail "status does not show the journal"
grep -q 'last commit: .* ago (commit lag' "$TMP/st" ||
    fail "status does not show the last commit"
ramback status --watch --count=2 --interval=0.1 "$rb_ctl" | tee "$TMP/st"
[ "$(grep -c ' commit-lag ' "$TMP/st")" = 2 ] ||
    fail "status --watch does not show the commit lag"
ramback status --prometheus "$rb_ctl" | grep -q '^ramback_journal_commits_total{' ||
    fail "no journal metrics"
stop_rb_same rb "$TMP/back.img" "$TMP/model"

echo "=== with ram-size=: the largest request fits, a larger one is refused"
# ram-size=1M of 64K chunks: 16 in RAM, dirty-max= 8 of them; a request
# goes into RAM whole, so it may span the 8 others: 7 chunks at any
# offset (8 when aligned).  A write over more is refused; a longer
# zero or trim goes in pieces.
truncate -s $(( 2 * 1024 * 1024 )) "$TMP/back3.img"
truncate -s $(( 1024 * 1024 )) "$TMP/j3.img"
start_rb rb back="$TMP/back3.img" journal="$TMP/j3.img" chunk=64K ram-size=1M
py - "$rb_uri" "$TMP/model3" <<'EOF2'
import random, sys
import nbd
import model as M

uri, modelf = sys.argv[1:]

def body ():
    h = M.connect (uri)
    h.set_strict_mode (0)       # send what the server says it refuses
    m = M.Model (h.get_size ())
    big = 7 * 65536
    if h.get_block_size (nbd.SIZE_MAXIMUM) != big:
        M.fail ("maximum block size %d, expected %d"
                % (h.get_block_size (nbd.SIZE_MAXIMUM), big))
    rng = random.Random (11)
    for off in (1, 65535, 3 * 65536, m.size - big):
        d = rng.randbytes (big)
        h.pwrite (d, off)
        m.write (off, d)
    try:
        h.pwrite (bytes (8 * 65536), 1)
        M.fail ("a write larger than the maximum block size was accepted")
    except nbd.Error as e:
        M.log ("write refused: %s" % e)
    # No payload: a longer zero or trim goes in pieces (NBD allows them
    # past the maximum block size).
    h.zero (1 << 20, 4095)
    m.zero (4095, 1 << 20)
    m.check_nbd (h)
    h.trim (m.size - 65536, 65536)
    m.write (65536, bytes (m.size - 65536))
    h.flush ()
    m.check_nbd (h)
    m.save (modelf)

M.main (body)
EOF2
grep -q 'with journal= and ram-size=1048576 a request goes into RAM whole' \
    "$rb_log" || fail "no message says why a large request was refused"
stop_rb_same rb "$TMP/back3.img" "$TMP/model3"

echo "=== each transaction's data starts 4 KiB aligned in the journal"
truncate -s $(( 2 * 1024 * 1024 )) "$TMP/j2.img"
truncate -s "$size" "$TMP/back2.img"
start_rb rb back="$TMP/back2.img" journal="$TMP/j2.img" chunk=4K \
    fsync=wait commit-interval=3600
py - "$rb_uri" "$TMP/j2.img" <<'EOF2'
import random, sys
import model as M

uri, jpath = sys.argv[1:]

def body ():
    h = M.connect (uri)
    rng = random.Random (9)
    pats = []
    for i in range (3):
        d = rng.randbytes (4096 * (i + 1))
        h.pwrite (d, (i * 5 + 1) * 65536)
        h.flush ()
        pats.append (d)
    j = open (jpath, "rb").read ()
    for i, d in enumerate (pats):
        pos = j.find (d)
        if pos < 0:
            M.fail ("transaction %d's data is not in the journal" % i)
        if pos % 4096:
            M.fail ("transaction %d's data is at %d, not 4 KiB aligned"
                    % (i, pos))
        M.log ("transaction %d: data at %d" % (i, pos))

M.main (body)
EOF2
stop_rb rb

echo "=== a journal of format version 1"
# The super block of version 1 (the layout is unchanged), with or
# without a transaction at its tail.
mkv1 () {
    py - "$1" "$2" <<'EOF2'
import struct, sys
path, with_txn = sys.argv[1], sys.argv[2] == "1"

def crc32c (b):
    c = 0xffffffff
    for x in b:
        c ^= x
        for _ in range (8):
            c = (c >> 1) ^ (0x82f63b78 & -(c & 1))
    return c ^ 0xffffffff

size, back, nonce = 2 << 20, 8 << 20, 0x1234
sb = struct.pack ("<8sII8Q", b"RAMBACKJ", 1, 512, size, 4096, size - 4096,
                  back, 1, nonce, 0, 7)
sb += bytes (508 - len (sb))
sb += struct.pack ("<I", crc32c (sb))
with open (path, "r+b") as f:
    f.write (sb)
    if with_txn:
        f.seek (4096)
        f.write (struct.pack ("<IIQQQQ", 0x44584a52, 1, nonce, 7, 512, 512))
EOF2
}
truncate -s $(( 2 * 1024 * 1024 )) "$TMP/v1.img" "$TMP/v1e.img"
mkv1 "$TMP/v1.img" 1
mkv1 "$TMP/v1e.img" 0
expect_fail "a version 1 journal holding a transaction" \
    "format version 1 .* may hold transactions not yet on the backing store: replay them with that release first" \
    back="$TMP/back.img" journal="$TMP/v1.img"
ramback recover "$TMP/back.img" "$TMP/v1.img" 2>"$TMP/err" &&
    fail "recover accepted a version 1 journal holding a transaction"
grep 'format version 1' "$TMP/err" ||
    fail "recover: no clear message for a version 1 journal"
start_rb rb back="$TMP/back.img" journal="$TMP/v1e.img"
stop_rb rb
grep -q 'an empty journal of format version 1, formatted as version 2' \
    "$rb_log" || fail "an empty version 1 journal was not formatted anew"
assert_same "$TMP/back.img" "$TMP/model"

echo "=== bad input"
truncate -s $(( 512 * 1024 )) "$TMP/small.img"
ln -s "$TMP/back.img" "$TMP/link.img"
head -c 8192 /dev/urandom >"$TMP/data.img"
truncate -s $(( 2 * 1024 * 1024 )) "$TMP/data.img"
truncate -s $(( 4 * 1024 * 1024 )) "$TMP/other.img"
protect "$TMP/back.img" "$TMP/j.img" "$TMP/data.img"
expect_fail "journal too small" "journal=.* is 524288 bytes: a journal must be at least" \
    back="$TMP/back.img" journal="$TMP/small.img"
expect_fail "journal is back=" "is the backing store itself" \
    back="$TMP/back.img" journal="$TMP/back.img"
expect_fail "journal is a link to back=" "is the backing store itself" \
    back="$TMP/back.img" journal="$TMP/link.img"
expect_fail "journal holds other data" "holds data that is not a ramback journal" \
    back="$TMP/back.img" journal="$TMP/data.img"
expect_fail "another device's journal" "belongs to a backing store of 8388608 bytes" \
    back="$TMP/other.img" journal="$TMP/j.img"
expect_fail "ram-size= leaves no room for a request" \
    "journal= with ram-size=1048576: a request goes into RAM whole, and room for only 1 chunk" \
    back="$TMP/back.img" journal="$TMP/j.img" chunk=64K ram-size=1M dirty-max=960K
expect_fail "commit-interval without journal" "commit-interval= only applies with journal=" \
    back="$TMP/back.img" commit-interval=2
expect_fail "commit-interval=0" "commit-interval=0: expected seconds" \
    back="$TMP/back.img" journal="$TMP/j.img" commit-interval=0
expect_fail "missing journal" "journal=.*nosuch.img does not exist: create it first" \
    back="$TMP/back.img" journal="$TMP/nosuch.img"
# One piece of advice, in the message and the man page: a journal file
# written in full (appends into the holes of a sparse one are slow).
grep -q "dd if=/dev/zero of=$TMP/nosuch.img bs=1M count=256" "$TMP/bad.out" ||
    fail "missing journal: the advice is not the man page's (dd)"
grep -q truncate "$TMP/bad.out" && fail "missing journal: a sparse file advised"
tr '\n' ' ' <"$top_srcdir/docs/nbdkit-ramback-plugin.pod" |
    grep -q 'C<dd if=/dev/zero of=JOURNAL bs=1M count=256>' ||
    fail "the man page gives other advice for a journal file"
ramback recover "$TMP/back.img" "$TMP/back.img" 2>"$TMP/err" &&
    fail "recover accepted the backing store as its own journal"
grep 'is the backing store itself' "$TMP/err" ||
    fail "recover: no clear message for journal = backing store"

echo "=== ramback recover writes only to a journal"
# What is not a journal is refused with exit status 6, byte for byte
# unchanged (nothing is formatted or created), and the message says
# what the file looks like: data behind 4 KiB of zeroes (what the
# plugin would take as a new journal), all zeroes, other data.
{ head -c 4096 /dev/zero; head -c $(( 1024 * 1024 )) /dev/urandom; } \
    >"$TMP/z.img"
truncate -s $(( 2 * 1024 * 1024 )) "$TMP/zero.img"
protect "$TMP/z.img" "$TMP/zero.img"
# recover_refused [BACK] JOURNAL ERE: refused, nothing changed, message
# ERE.  BACK is back.img if not given.
recover_refused () {
    local rc=0 i back="$TMP/back.img"
    [ $# = 3 ] && { back=$1; shift; }
    ramback recover "$back" "$1" >"$TMP/out" 2>"$TMP/err" || rc=$?
    cat "$TMP/out" "$TMP/err"
    [ "$rc" = 6 ] || fail "recover $1: exit status $rc, expected 6"
    [ ! -s "$TMP/out" ] || fail "recover $1: a result on stdout"
    [ "$(wc -l < "$TMP/err")" = 1 ] || fail "recover $1: not one line"
    grep -Eq -- "$2" "$TMP/err" ||
        fail "recover $1: the message does not match /$2/"
    for (( i=0; i<${#_protected[@]}; i+=2 )); do
        [ "$(sha256sum "${_protected[i]}" | cut -d' ' -f1)" = \
          "${_protected[i+1]}" ] || fail "recover $1: ${_protected[i]} changed"
    done
}
recover_refused "$TMP/z.img" \
    "z.img is not a ramback journal: its first 4 KiB are zero, and it holds data after them"
recover_refused "$TMP/zero.img" \
    "zero.img is not a ramback journal: it is all zero \(never used as one\): nothing to replay"
recover_refused "$TMP/data.img" "data.img is not a ramback journal: it starts with"
# A missing journal: not created, and no advice recover cannot take.
recover_refused "$TMP/nosuch.img" "nosuch.img does not exist"
grep -Eq 'back=|size=' "$TMP/err" &&
    fail "recover: a missing journal's message names plugin parameters"
[ ! -e "$TMP/nosuch.img" ] || fail "recover created the missing journal"
recover_refused "$TMP/nosuch-back.img" "$TMP/j.img" \
    "nosuch-back.img does not exist"
grep -Eq 'back=|size=' "$TMP/err" &&
    fail "recover: a missing backing store's message names plugin parameters"
[ ! -e "$TMP/nosuch-back.img" ] || fail "recover created the backing store"
# A journal: replayed (nothing left here), and only the result printed.
ramback recover "$TMP/back.img" "$TMP/j.img" >"$TMP/out" 2>"$TMP/err" ||
    fail "recover of a journal failed: $(cat "$TMP/err")"
cat "$TMP/out" "$TMP/err"
grep -q 'replayed 0 transactions' "$TMP/out" || fail "recover: no result"
[ ! -s "$TMP/err" ] || fail "recover printed more than its result"
echo "PASS ($ncases cases)"
