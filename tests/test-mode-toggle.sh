#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Mode switches under concurrent writers (the flush race).
#
# Device: 32 MiB + 12345 bytes, chunk 64K.
#  - [0, 16 MiB): two fio jobs (own NBD connections) doing randwrite with
#    verify=crc32c and a verify backlog, four passes;
#  - [16 MiB, end): four Python threads, each with its own NBD handle and
#    its own region.  Region edges are not chunk aligned, so neighbours
#    write different bytes of the same chunk at the same time.  Each
#    thread writes, zeroes, flushes and reads back (checking its own
#    shadow copy) synchronously, so its final content is known.
#  - meanwhile a thread flips "mode writeback" / "mode writethrough" on
#    the control socket every 2 ms, at least 300 times, until fio ends.
# Then: control "sync" and the backing file equals every region's shadow
# while running; SIGTERM; the backing file equals them again and fio's
# verify_only pass over the backing file itself succeeds.
# Run twice: plain, and with the delay filter slowing client writes
# (the filter form: plain only).

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
requires fio

size=$(( 32 * 1024 * 1024 + 12345 ))
seed=${SEED:-777}
back="$TMP/back.img"
fio_args=(--bs=4k --offset=0 --size=8M --offset_increment=8M --numjobs=2
          --rw=randwrite --verify=crc32c --verify_fatal=1 --loops=4
          --randseed="$seed" --group_reporting)

cat > "$TMP/toggle.py" <<'EOF'
import random, subprocess, sys, threading, time
import model as M

uri, ctlpath, back, seed, run = sys.argv[1:6]
fio_cmd = sys.argv[6:]
MiB = M.MiB
NWRITERS = 4
MIN_TOGGLES = 300

def body ():
    ctl = M.Control (ctlpath)
    size = ctl.status ()["size"]
    base = 16 * MiB
    span = (size - base) // NWRITERS
    regions = [(base + i * span, span if i < NWRITERS - 1 else size - base - i * span)
               for i in range (NWRITERS)]
    shadows = [bytearray (n) for _, n in regions]   # fresh file: zeroes
    stop = threading.Event ()
    errors = []
    stats = [0] * NWRITERS

    def writer (i):
        try:
            rng = random.Random ("%s-%s-%d" % (seed, run, i))
            start, n = regions[i]
            sh = shadows[i]
            h = M.connect (uri)
            while not stop.is_set ():
                r = rng.random ()
                ln = M.rand_len (rng, 1, min (128 * 1024, n))
                off = rng.randrange (0, n - ln + 1)
                if r < 0.75:
                    data = M.rand_data (rng, ln)
                    h.pwrite (data, start + off)
                    sh[off:off + ln] = data
                elif r < 0.82:
                    h.zero (ln, start + off)
                    sh[off:off + ln] = bytes (ln)
                elif r < 0.97:
                    got = h.pread (ln, start + off)
                    if got != sh[off:off + ln]:
                        d = M.first_diff (got, sh[off:off + ln])
                        raise M.TestFailure (M.describe_diff (
                            "writer %d read-back" % i, d, got,
                            sh[off:off + ln], start + off))
                else:
                    h.flush ()
                stats[i] += 1
            got = bytearray ()
            for o in range (0, n, 4 * MiB):
                got += h.pread (min (4 * MiB, n - o), start + o)
            if got != sh:
                d = M.first_diff (got, sh)
                raise M.TestFailure (M.describe_diff ("writer %d region" % i,
                                                      d, got, sh, start))
            h.shutdown ()
        except Exception as e:
            errors.append (e)
            stop.set ()

    threads = [threading.Thread (target=writer, args=(i,)) for i in range (NWRITERS)]
    for t in threads:
        t.start ()
    fio = subprocess.Popen (fio_cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)

    toggles = 0
    mode = "writeback"
    try:
        while not stop.is_set () and (toggles < MIN_TOGGLES or fio.poll () is None):
            mode = "writethrough" if mode == "writeback" else "writeback"
            ctl ("mode " + mode)
            toggles += 1
            if toggles % 50 == 0:
                got = ctl.status ()["mode"]
                if got != mode:
                    M.fail ("status mode %s after 'mode %s'" % (got, mode))
            time.sleep (0.002)
            if toggles > 20000:
                M.fail ("fio did not finish")
    finally:
        stop.set ()
        for t in threads:
            t.join ()
        out = fio.communicate ()[0].decode (errors="replace")
    if errors:
        raise errors[0]
    if fio.returncode != 0:
        print (out)
        M.fail ("fio exited with %d" % fio.returncode)
    M.log ("%d mode switches; writer ops %r; fio ok" % (toggles, stats))
    if min (stats) < 50:
        M.fail ("a writer made too little progress: %r" % stats)

    # Everything acknowledged is on the backing store after a sync.
    ctl.sync ()
    with open (back, "rb") as f:
        for (start, n), sh in zip (regions, shadows):
            f.seek (start)
            got = f.read (n)
            if got != sh:
                d = M.first_diff (got, sh)
                M.fail (M.describe_diff ("backing file after sync", d, got, sh, start))
    # For the check after stop.
    with open (back + ".regions", "wb") as f:
        for sh in shadows:
            f.write (sh)

M.main (body)
EOF

check_after_stop () {
    py - "$back" <<'EOF'
import sys
import model as M
back = sys.argv[1]
want = open (back + ".regions", "rb").read ()
with open (back, "rb") as f:
    f.seek (16 * M.MiB)
    got = f.read ()
if got != want:
    d = M.first_diff (got, want)
    print ("FAIL: " + M.describe_diff ("backing file after stop", d, got,
                                        want, 16 * M.MiB), file=sys.stderr)
    sys.exit (1)
print ("backing file == writers' last content")
EOF
    fio --name=verify --ioengine=psync --filename="$back" --verify_only \
        "${fio_args[@]}" --output="$TMP/fio-verify.out" ||
        { cat "$TMP/fio-verify.out"; fail "fio verify_only of the backing file"; }
    echo "fio verify_only of the backing file: ok"
}

run () {
    local name=$1; shift
    echo "=== run $name"
    rm -f "$back"
    start_rb rb "$@" back="$back" size="$size" chunk=64K
    py "$TMP/toggle.py" "$rb_uri" "$rb_ctl" "$back" "$seed" "$name" \
       fio --name=toggle --ioengine=nbd --uri="$rb_uri" --iodepth=8 \
           --verify_backlog=256 "${fio_args[@]}"
    stop_rb rb
    check_after_stop
}

run plain --
# The delay filter slows the client's writes above ramback, the same in
# both forms: the filter form runs the plain case only.
[ "$RAMBACK_FORM" = plugin ] || exit 0
run delay --filter=delay -- delay-write=1ms
