#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Application I/O while the image is still being loaded.
#
# The backing file is 64 MiB + 12345 bytes (a partial last chunk): 24 MiB
# of data at the start, then random extents and holes.
#  1. populate-rate=2M holds the background load in progress for the whole
#     phase (status populated=false is asserted at its end; at the start,
#     loaded_bytes <= rate * (uptime + 1 s) + 8 MiB).  Random reads
#     must return the backing data; random writes, trims and zeroes (many
#     of them just ahead of the populate cursor, where a background load
#     is most likely in flight) must survive the load that follows: the
#     populate race.  NBD_CMD_CACHE of 8 MiB loads at least 128 chunks.
#     SIGTERM in mid-populate; the backing file must equal the model.
#  2. populate=false: nothing is loaded in the background.  CACHE loads
#     exactly the chunks asked for; partial writes to unloaded chunks merge
#     with the backing data; on stop, chunks never loaded are left alone.
#  3. No rate cap: wait-populated, every chunk loaded, the whole device
#     equals the model, and so does the backing file after stop.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"

size=$(( 64 * 1024 * 1024 + 12345 ))
seed=${SEED:-4242}
back="$TMP/back.img"
modelf="$TMP/model.img"

py -c '
import model, random, sys
rng = random.Random (int (sys.argv[3]))
m = model.make_sparse_image (sys.argv[1], int (sys.argv[2]), rng, 80)
# One long data extent at the start: a populator that reads it in one go
# at full speed is not held by populate-rate.
data = rng.randbytes (24 * model.MiB)
with open (sys.argv[1], "r+b") as f:
    f.write (data)
m.write (0, data)
m.save (sys.argv[4])
' "$back" "$size" "$seed" "$modelf"
echo "backing: $(du -k "$back" | cut -f1) KiB allocated of $size bytes"

cat > "$TMP/phase.py" <<'EOF'
import random, sys
import model as M

uri, ctlpath, back, modelf, seed, phase = sys.argv[1:]
chunk = 65536
MiB = M.MiB

def cache_check (h, ctl, off, n, exact):
    before = ctl.status ()["loaded_chunks"]
    h.cache (n, off)
    after = ctl.status ()["loaded_chunks"]
    want = n // chunk
    M.log ("cache [%d,+%d): loaded_chunks %d -> %d" % (off, n, before, after))
    if exact and after != before + want:
        M.fail ("CACHE of %d chunks with populate=false: loaded_chunks went "
                "from %d to %d" % (want, before, after))
    if after < before + want:
        M.fail ("CACHE of %d chunks: loaded_chunks only went from %d to %d"
                % (want, before, after))

def body ():
    rng = random.Random ("%s-%s" % (seed, phase))
    cap_error = None
    M.log ("phase %s, seed %s-%s (replay with SEED=%s)" % (phase, seed, phase, seed))
    ctl = M.Control (ctlpath)
    m = M.Model.from_file (modelf)
    h = M.connect (uri)
    if not h.can_cache ():
        M.fail ("the plugin does not advertise NBD_CMD_CACHE")
    st = ctl.status ()
    chunks = st["chunks"]
    if chunks != (m.size + chunk - 1) // chunk:
        M.fail ("chunks = %d for size %d" % (chunks, m.size))

    if phase == "slow":
        if st["populate_rate"] != 2 * MiB:
            M.fail ("populate_rate = %r" % st["populate_rate"])
        # The cap, by the server's own clock (no timing on our side): no
        # more than rate * (uptime + 1 s) plus one 8 MiB read.  Checked
        # before any I/O of ours, which would load chunks on demand.
        bound = st["populate_rate"] * (st["uptime"] + 1) + 8 * MiB
        if st["loaded_bytes"] > bound:
            cap_error = ("populate-rate=2M not honoured: %d bytes loaded "
                         "%.2f s after start (bound %d); populate_bandwidth %d"
                         % (st["loaded_bytes"], st["uptime"], bound,
                            st["populate_bandwidth"]))
            M.log ("FAIL (reported at the end): " + cap_error)
        if st["populated"]:
            M.fail ("populated at once despite populate-rate=2M: %r" % st)
        # Far ahead of the scan, which starts at offset 0.
        cache_check (h, ctl, (m.size - 16 * MiB) // chunk * chunk, 8 * MiB, False)
        counts = M.random_ops (h, m, rng, 300, chunk, maxlen=1 * MiB,
                               check_every=0, flush=False)
        M.log ("random ops during populate: %r" % counts)
        # Writes right at and just ahead of the populate cursor.
        written = []
        for i in range (150):
            p = ctl.status ()["progress"]
            base = int (p * m.size) // chunk * chunk
            if rng.random () < 0.5:
                off = base + rng.randrange (0, 32) * chunk
                n = chunk * rng.randrange (1, 5)
            else:
                off = base + rng.randrange (0, 2 * MiB)
                n = rng.randrange (1, 3 * chunk)
            off = min (off, m.size - 1)
            n = min (n, m.size - off)
            data = rng.randbytes (n)
            h.pwrite (data, off)
            m.write (off, data)
            written.append ((off, n))
        for off, n in written:
            m.check_range (h.pread (n, off), off, "re-read of a write near "
                           "the populate cursor")
        st = ctl.status ()
        M.log ("end of phase: progress %.3f, loaded_chunks %d of %d"
               % (st["progress"], st["loaded_chunks"], chunks))
        if st["populated"]:
            M.fail ("populate finished before the checks did; populate-rate "
                    "is not holding it back: %r" % st)

    elif phase == "off":
        if st["populated"] or st["loaded_chunks"] != 0:
            M.fail ("populate=false but loaded_chunks=%d populated=%r"
                    % (st["loaded_chunks"], st["populated"]))
        cache_check (h, ctl, 16 * MiB, 8 * MiB, True)
        # Reads and partial-chunk writes anywhere, most of it never loaded.
        counts = M.random_ops (h, m, rng, 150, chunk, maxlen=256 * 1024,
                               check_every=0, flush=True)
        M.log ("random ops without populate: %r" % counts)
        st = ctl.status ()
        M.log ("loaded_chunks %d of %d" % (st["loaded_chunks"], chunks))
        if st["populated"] or st["loaded_chunks"] >= chunks:
            M.fail ("populate=false loaded everything: %r" % st)

    elif phase == "full":
        ctl ("wait-populated 30000")
        st = ctl.status ()
        if not st["populated"] or st["loaded_chunks"] != chunks:
            M.fail ("after wait-populated: populated=%r loaded_chunks=%d of %d"
                    % (st["populated"], st["loaded_chunks"], chunks))
        m.check_nbd (h, "device after populate")
        counts = M.random_ops (h, m, rng, 100, chunk, check_every=50)
        M.log ("random ops after populate: %r" % counts)

    h.shutdown ()
    m.save (modelf)
    if phase == "slow" and cap_error:
        # Exit 3: a failure, but the model is saved, so the shell still
        # stops nbdkit and compares the backing file before failing.
        print ("FAIL: " + cap_error, file=sys.stderr)
        sys.exit (3)

M.main (body)
EOF

echo "=== phase 1: populate held slow"
start_rb rb -- back="$back" chunk=64K populate-rate=2M
slow_rc=0
py "$TMP/phase.py" "$rb_uri" "$rb_ctl" "$back" "$modelf" "$seed" slow || slow_rc=$?
[ "$slow_rc" -eq 0 ] || [ "$slow_rc" -eq 3 ] || fail "phase 1"
stop_rb_same rb "$back" "$modelf"
echo "phase 1: backing == model after a stop in mid-populate"

echo "=== phase 2: populate=false"
start_rb rb -- back="$back" chunk=64K populate=false
py "$TMP/phase.py" "$rb_uri" "$rb_ctl" "$back" "$modelf" "$seed" off
stop_rb_same rb "$back" "$modelf"
echo "phase 2: backing == model, unloaded chunks left alone"

echo "=== phase 3: full populate"
start_rb rb -- back="$back" chunk=64K
py "$TMP/phase.py" "$rb_uri" "$rb_ctl" "$back" "$modelf" "$seed" full
stop_rb_same rb "$back" "$modelf"
echo "phase 3: backing == model"
[ "$slow_rc" -eq 0 ] || fail "populate-rate did not hold the populator (see phase 1)"
