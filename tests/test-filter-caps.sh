#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The filter form follows what the plugin below it can do.
#
#  1. No multi-conn, per-connection flush (perconn-disk.sh, thread model
#     serialize_requests): the filter opens 4 contexts; writes go through
#     several of them (asserted from the plugin's own record), and after
#     each NBD FLUSH with fsync=wait the plugin's durable image equals
#     the model: every context written through was flushed.
#  2. can_flush false (the same disk, PERCONN_NOFLUSH): fsync=wait is
#     refused with a message; with fsync=ignore writes still reach it.
#  3. can_zero none (the nozero filter, zeromode=none) and emulate:
#     zeroes and trims are written as zeroes, the file equals the model;
#     a fast zero that must reach the plugin (writethrough) fails with
#     ENOTSUP, and succeeds over the file plugin's native zero where the
#     plugin itself says it can zero fast (its can_fast_zero).
#  4. Extents: populate of a sparse file reads only its data; with the
#     noextents filter it reads everything.
#  5. Block size (blocksize-policy, minimum 4096, maximum 64K, errors
#     on violation): unaligned writes and zeroes in writethrough and
#     writeback all land, the file equals the model.
#  6. A read-only plugin (pattern) gives a read-only export that reads
#     the plugin's data.

RAMBACK_FORM=filter
source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"

mk_image () { random_file "$1" "$2"; }

echo "=== 1. no multi-conn: every context written through is flushed"
export PERCONN_IMG="$TMP/pc.img" PERCONN_DURABLE="$TMP/pc.durable"
export PERCONN_DIR="$TMP/pc.d"
mkdir "$PERCONN_DIR"
mk_image "$PERCONN_IMG" $(( 4 * 1024 * 1024 ))
cp "$PERCONN_IMG" "$PERCONN_DURABLE"
cp "$PERCONN_IMG" "$TMP/pc.model"
RB_PLUGIN=(sh "$top_srcdir/tests/perconn-disk.sh")
start_rb pc -- fsync=wait
py - "$pc_uri" "$pc_ctl" "$PERCONN_DURABLE" "$TMP/pc.model" \
   "$PERCONN_DIR/writers" "$PERCONN_DIR/zeroers" <<'EOF'
import random, sys
import model as M

uri, ctlpath, durable, modelf, writers, zeroers = sys.argv[1:]

def nwriters ():
    with open (writers) as f:
        return len (set (l.strip () for l in f if l.strip ()))

def body ():
    rng = random.Random (11)
    ctl = M.Control (ctlpath)
    # Populate through the shell plugin forks a shell per read: 60 s
    # were not enough under ASan on a loaded machine.  The bound only
    # catches a hang.
    ctl ("wait-populated 300000")
    st = ctl.status ()
    want = { "store": "plugin", "store_connections": 4,
             "store_thread_model": "serialize_requests",
             "store_multi_conn": False, "store_can_flush": True }
    for k, v in want.items ():
        if st[k] != v:
            M.fail ("status %s = %r, expected %r" % (k, st[k], v))
    m = M.Model.from_file (modelf)
    h = M.connect (uri)
    m.check_nbd (h, "device after populate")
    ctl.sync ()
    # Writethrough: each write goes to the plugin on the calling thread,
    # on the contexts in turn, so they are spread over all four.
    ctl ("mode writethrough")
    for _ in range (8):
        off, n = M.rand_extent (rng, m.size, 65536, 200000)
        data = rng.randbytes (n)
        h.pwrite (data, off)
        m.write (off, data)
    M.log ("writethrough writes went through %d contexts" % nwriters ())
    if nwriters () < 2:
        M.fail ("8 writethrough writes used %d context(s): the test tests "
                "nothing" % nwriters ())
    h.flush ()
    m.check_file (durable, "durable image after FLUSH (writethrough)")
    # Writeback: the flusher's batches, cut into pieces for 4 workers.
    ctl ("mode writeback")
    for rnd in range (3):
        for _ in range (12):
            off, n = M.rand_extent (rng, m.size, 65536, 300000)
            data = rng.randbytes (n)
            h.pwrite (data, off)
            m.write (off, data)
        h.flush ()
        m.check_file (durable, "durable image after FLUSH (round %d)" % rnd)
    M.log ("writes went through %d contexts in all" % nwriters ())
    # Only zeroes and trims between two FLUSHes: the FLUSH must still
    # reach every context they went through (whole chunks become holes
    # sent as zero requests; the partial edges are written as data).
    for mode in ("writeback", "writethrough"):
        ctl ("mode " + mode)
        for _ in range (6):
            off, n = M.rand_extent (rng, m.size, 65536, 400000)
            if rng.random () < 0.5:
                h.zero (n, off)
                m.zero (off, n)
            else:
                # What a trim leaves is unspecified: whatever reads see
                # is what must be durable after the FLUSH.
                h.trim (n, off)
                m.write (off, h.pread (n, off))
        h.flush ()
        m.check_file (durable, "durable image after FLUSH of zeroes and "
                      "trims only (%s)" % mode)
    with open (zeroers) as f:
        nz = len (set (l.strip () for l in f if l.strip ()))
    M.log ("zeroes and trims went through %d contexts" % nz)
    if nz < 2:
        M.fail ("zeroes and trims reached %d context(s) as zero requests: "
                "the test tests nothing" % nz)
    h.shutdown ()
    m.save (modelf)

M.main (body)
EOF
stop_rb_same pc "$PERCONN_DURABLE" "$TMP/pc.model"
RB_PLUGIN=()

echo "=== 2. can_flush false: fsync=wait refused, fsync=ignore works"
export PERCONN_NOFLUSH=1
rc=0
timeout 60 "${nbdkit_env[@]}" "$NBDKIT" -f -U "$TMP/nf.sock" \
    --filter="$FILTER" sh "$top_srcdir/tests/perconn-disk.sh" fsync=wait \
    >"$TMP/nf.out" 2>&1 || rc=$?
cat "$TMP/nf.out"
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "fsync=wait accepted over a plugin that cannot flush"
grep -q "fsync=wait.*cannot flush" "$TMP/nf.out" || fail "no message saying why fsync=wait was refused"
RB_PLUGIN=(sh "$top_srcdir/tests/perconn-disk.sh")
start_rb nf --
RB_PLUGIN=()
py - "$nf_uri" "$nf_ctl" "$PERCONN_IMG" "$TMP/pc.model" <<'EOF'
import random, sys
import model as M

uri, ctlpath, img, modelf = sys.argv[1:]

def body ():
    rng = random.Random (12)
    ctl = M.Control (ctlpath)
    ctl ("wait-populated 300000")
    if ctl.status ()["store_can_flush"]:
        M.fail ("store_can_flush is true for a plugin that cannot flush")
    m = M.Model.from_file (modelf)
    h = M.connect (uri)
    for _ in range (10):
        off, n = M.rand_extent (rng, m.size, 65536, 300000)
        data = rng.randbytes (n)
        h.pwrite (data, off)
        m.write (off, data)
    h.flush ()
    ctl.sync ()
    m.check_file (img, "image after sync, plugin without flush")
    ctl.status_no_errors ("plugin without flush")
    h.shutdown ()
    m.save (modelf)

M.main (body)
EOF
stop_rb_same nf "$PERCONN_IMG" "$TMP/pc.model"
unset PERCONN_NOFLUSH

echo "=== 3. can_zero none / emulate: zeroes written as data; fast zero"
size=$(( 8 * 1024 * 1024 + 12345 ))
cat > "$TMP/zero.py" <<'EOF'
import errno, random, sys
import nbd
import model as M

uri, ctlpath, back, modelf, zmode, plugin_fast = sys.argv[1:]
# A fast zero that must reach the plugin works only where the plugin
# zeroes natively and says itself that it can zero fast.
fast_ok = zmode == "native" and plugin_fast == "true"

def body ():
    rng = random.Random ("zero-" + zmode)
    ctl = M.Control (ctlpath)
    ctl ("wait-populated 300000")
    st = ctl.status ()
    if st["store_zero"] != zmode:
        M.fail ("store_zero = %r, expected %r" % (st["store_zero"], zmode))
    m = M.Model.from_file (modelf)
    h = M.connect (uri)
    counts = M.random_ops (h, m, rng, 120, 65536, maxlen=512 * 1024,
                           check_every=60)
    M.log ("ops: %r" % counts)
    ctl.sync ()
    m.check_file (back, "file after sync (zero %s)" % zmode)
    # Writeback: a fast zero is a RAM operation, always fast.
    h.zero (100000, 123456, nbd.CMD_FLAG_FAST_ZERO)
    m.zero (123456, 100000)
    ctl.sync ()
    ctl ("mode writethrough")
    try:
        h.zero (100000, 2 * M.MiB + 7, nbd.CMD_FLAG_FAST_ZERO)
        if not fast_ok:
            M.fail ("a fast zero in writethrough succeeded over zero %s "
                    "(the plugin's can_fast_zero: %s)" % (zmode, plugin_fast))
        m.zero (2 * M.MiB + 7, 100000)
        M.log ("ok: fast zero in writethrough over a fast native zero")
    except nbd.Error as e:
        if fast_ok:
            raise
        if e.errno != "ENOTSUP":
            M.fail ("fast zero failed with %s, expected ENOTSUP" % e.errno)
        M.log ("ok: fast zero refused: %s" % e)
    h.zero (70000, 5 * M.MiB + 3)
    m.zero (5 * M.MiB + 3, 70000)
    m.check_file (back, "file after a writethrough zero (zero %s)" % zmode)
    ctl ("mode writeback")
    h.shutdown ()
    m.save (modelf)

M.main (body)
EOF
for zmode in none emulate native; do
    mk_image "$TMP/z.img" "$size"
    cp "$TMP/z.img" "$TMP/z.model"
    if [ "$zmode" = native ]; then
        RB_PLUGIN=(file "$TMP/z.img")
    else
        RB_PLUGIN=(--filter=nozero file "$TMP/z.img" zeromode="$zmode")
    fi
    start_rb z --
    RB_PLUGIN=()
    # The file plugin's own answer (on this file system), as nbdinfo
    # gets it straight from the plugin.
    plugin_fast=$(nbdkit -U - file "$TMP/z.img" --run 'nbdinfo "$uri"' |
                  sed -n 's/^[[:space:]]*can_fast_zero: //p')
    py "$TMP/zero.py" "$z_uri" "$z_ctl" "$TMP/z.img" "$TMP/z.model" "$zmode" \
        "$plugin_fast"
    stop_rb_same z "$TMP/z.img" "$TMP/z.model"
    echo "zero $zmode: file == model"
done

echo "=== 4. extents: populate skips holes"
hsize=$(( 32 * 1024 * 1024 ))
truncate -s "$hsize" "$TMP/h.img"
py -c '
import sys
with open (sys.argv[1], "r+b") as f:
    for off in (3 << 20, 20 << 20):
        f.seek (off)
        f.write (b"\xab" * (1 << 20))' "$TMP/h.img"
for ext in yes no; do
    if [ "$ext" = yes ]; then
        RB_PLUGIN=(file "$TMP/h.img")
    else
        RB_PLUGIN=(--filter=noextents file "$TMP/h.img")
    fi
    start_rb h --
    RB_PLUGIN=()
    ctl "$h_ctl" wait-populated 300000
    loaded=$(status_field "$h_ctl" loaded_bytes)
    bs=$(status_field "$h_ctl" store_block_status)
    echo "extents $ext: block status $bs, loaded $loaded of $hsize bytes"
    if [ "$ext" = yes ]; then
        [ "$bs" = true ] || fail "store_block_status $bs over the file plugin"
        [ "$loaded" -le $(( 2 * 1024 * 1024 )) ] ||
            fail "populate read $loaded bytes of a file holding 2 MiB of data"
    else
        [ "$bs" = false ] || fail "store_block_status $bs below noextents"
        [ "$loaded" -eq "$hsize" ] ||
            fail "populate read $loaded of $hsize bytes without extents"
    fi
    py - "$h_uri" "$TMP/h.img" <<'EOF'
import sys
import model as M
h = M.connect (sys.argv[1])
M.Model.from_file (sys.argv[2]).check_nbd (h, "sparse device after populate")
h.shutdown ()
EOF
    stop_rb h
done

echo "=== 5. block size: minimum 4096, maximum 64K, violations are errors"
bsize=$(( 8 * 1024 * 1024 + 12288 ))
mk_image "$TMP/b.img" "$bsize"
cp "$TMP/b.img" "$TMP/b.model"
RB_PLUGIN=(--filter=blocksize-policy file "$TMP/b.img"
           blocksize-minimum=4096 blocksize-maximum=64K
           blocksize-error-policy=error)
start_rb b -- mode=writethrough chunk=4K
RB_PLUGIN=()
py - "$b_uri" "$b_ctl" "$TMP/b.img" "$TMP/b.model" <<'EOF'
import random, sys
import model as M

uri, ctlpath, back, modelf = sys.argv[1:]

def body ():
    rng = random.Random (5)
    ctl = M.Control (ctlpath)
    if ctl.status ()["store_min_block"] != 4096:
        M.fail ("store_min_block %r" % ctl.status ()["store_min_block"])
    m = M.Model.from_file (modelf)
    h = M.connect (uri)
    # Writethrough while populate runs: every write reaches the plugin at
    # once, most of them not aligned to its 4096-byte blocks.
    def wt_check (i):
        m.check_file (back, "file in writethrough, op %d" % i)
    counts = M.random_ops (h, m, rng, 150, 4096, maxlen=150000,
                           check_every=25, on_check=wt_check)
    M.log ("writethrough ops: %r" % counts)
    for off, n in ((1, 1), (4095, 2), (8191, 4098), (m.size - 3, 3)):
        data = rng.randbytes (n)
        h.pwrite (data, off)
        m.write (off, data)
    m.check_file (back, "file after unaligned writethrough writes")
    ctl ("mode writeback")
    counts = M.random_ops (h, m, rng, 150, 4096, maxlen=150000, check_every=50)
    M.log ("writeback ops: %r" % counts)
    ctl.sync ()
    m.check_file (back, "file after sync")
    ctl.status_no_errors ("the plugin refused requests")
    h.shutdown ()
    m.save (modelf)

M.main (body)
EOF
stop_rb_same b "$TMP/b.img" "$TMP/b.model"

echo "=== 6. a read-only plugin: a read-only export of its data"
RB_PLUGIN=(pattern size=$(( 4 * 1024 * 1024 + 4096 )))
start_rb p --
RB_PLUGIN=()
py - "$p_uri" "$p_ctl" <<'EOF'
import struct, sys
import model as M

uri, ctlpath = sys.argv[1:]

def body ():
    ctl = M.Control (ctlpath)
    ctl ("wait-populated 300000")
    st = ctl.status ()
    if not st["store_read_only"] or not st["populated"]:
        M.fail ("status: %r" % st)
    h = M.connect (uri)
    if not h.is_read_only ():
        M.fail ("the export of a read-only plugin is writable")
    size = h.get_size ()
    buf = h.pread (size, 0)
    for off in range (0, size, 8):
        if struct.unpack_from (">Q", buf, off)[0] != off:
            M.fail ("pattern data wrong at %d" % off)
    M.expect_write_refused (h)
    h.shutdown ()

M.main (body)
EOF
stop_rb p
echo PASS
