#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# An NBD backing store whose server has a minimum block size (4096) and
# refuses requests that do not keep to it (nbdkit's blocksize-policy
# filter, blocksize-error-policy=error, as a disk with 4K sectors
# exported by a strict server does; libnbd refuses them even before
# sending).  ramback must honour it: the
# requests it sends that are not aligned to the minimum (writethrough
# writes, FUA writes, zeroes and trims of a few bytes; the write back of
# single dirty 512-byte sectors) are widened to whole blocks by reading,
# patching and writing them.  Random unaligned I/O in writethrough and
# in write back mode; after each sync the remote's file equals the
# model, no request failed, and the server refused none.
# Also: a chunk size that is not a multiple of the minimum is refused at
# start with a message that says so.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
source "$top_srcdir/tests/remote-functions.sh"

size=$(( 8 * 1024 * 1024 ))
rio init "$TMP/model" "$size" 51 10
cp "$TMP/model" "$TMP/r.img"

start_remote r --filter=blocksize-policy file "$TMP/r.img" \
    blocksize-minimum=4096 blocksize-error-policy=error
nbdinfo "$r_uri" | grep -E 'block_size_minimum: 4096' ||
    fail "the test server does not advertise a 4096-byte minimum"

echo "=== a chunk size that is not a multiple of the minimum is refused"
rc=0
timeout 60 "${nbdkit_env[@]}" "$NBDKIT" -f -U "$TMP/bad.sock" "$PLUGIN" \
    back="$r_uri" chunk=2K >"$TMP/bad.out" 2>&1 || rc=$?
cat "$TMP/bad.out"
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] ||
    fail "chunk=2K accepted over a server with a 4096-byte minimum block"
grep -q 'minimum block size' "$TMP/bad.out" ||
    fail "the refusal does not name the server's minimum block size"

echo "=== unaligned I/O in writethrough, then in write back"
start_rb rb back="$r_uri" fsync=wait
ctl "$rb_ctl" wait-populated 60000
status_field "$rb_ctl" store_min_block | grep -qx 4096 ||
    fail "status store_min_block is not 4096"
py - "$rb_uri" "$rb_ctl" "$TMP/model" "$TMP/r.img" <<'EOF'
import random, sys
import model as M

uri, ctlpath, modelf, remote = sys.argv[1:]

def body ():
    rng = random.Random (52)
    ctl = M.Control (ctlpath)
    m = M.Model.from_file (modelf)
    h = M.connect (uri)
    for mode in ("writethrough", "writeback"):
        ctl ("mode " + mode)
        # Small and unaligned: bytes, sectors, across block edges.
        counts = M.random_ops (h, m, rng, 300, 512, maxlen=20000,
                               check_every=100)
        M.log ("%s: %s" % (mode, counts))
        ctl.sync ()
        m.check_file (remote, "remote after sync (%s)" % mode)
        ctl.status_no_errors ("after %s" % mode)
    h.shutdown ()
    m.save (modelf)

M.main (body)
EOF
stop_rb_same rb "$TMP/r.img" "$TMP/model"
# (libnbd itself refuses a request that is not aligned to the minimum
# the server advertised, before sending it: status_no_errors above saw
# any; a request that got through would be refused and logged here.)
if grep -E ': error: ' "$r_log"; then
    fail "the server refused requests"
fi
echo PASS
