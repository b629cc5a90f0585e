#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Zero and trim reach a file backing as punched holes, not as written
# zeroes (the image stays sparse, and the write back costs no bandwidth).
#
# A backing file on the test's own filesystem (skipped, saying so, if
# that filesystem cannot punch holes), 16 MiB + 12345 bytes, chunk=64K,
# filled with data and synced.  Then, in writeback mode, NBD zero of
# [4 MiB, 8 MiB) and trim of [10 MiB, 12 MiB), control "sync": the file
# lost the blocks of both ranges (st_blocks) and SEEK_DATA skips them.
# In writethrough mode, a zero of [13 MiB, 14 MiB) is a hole as soon as
# it is acknowledged.  The file equals the model throughout.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
requires fallocate

size=$(( 16 * 1024 * 1024 + 12345 ))
back="$TMP/back.img"

# Can this filesystem punch holes and report them?
probe="$TMP/probe"
head -c $(( 1024 * 1024 )) /dev/urandom > "$probe"
sync "$probe"
if ! fallocate --punch-hole --keep-size --offset 262144 --length 524288 \
        "$probe" 2>/dev/null ||
   ! py - "$probe" <<'EOF'
import os, sys
fd = os.open (sys.argv[1], os.O_RDONLY)
try:
    sys.exit (0 if os.lseek (fd, 262144, os.SEEK_DATA) >= 786432 else 1)
except OSError:
    sys.exit (1)
EOF
then
    echo "$0: SKIP: the filesystem of $TMP ($(stat -f -c %T "$TMP")) cannot" \
         "punch holes or does not report them with SEEK_DATA"
    exit 77
fi
rm -f "$probe"

rm -f "$back"
start_rb rb -- back="$back" size="$size" chunk=64K

py - "$rb_uri" "$rb_ctl" "$back" <<'EOF'
import os, random, sys
import model as M

uri, ctlpath, back = sys.argv[1:]
MiB = M.MiB

def allocated ():
    return os.stat (back).st_blocks * 512

def next_data (off):
    fd = os.open (back, os.O_RDONLY)
    try:
        return os.lseek (fd, off, os.SEEK_DATA)
    except OSError:              # ENXIO: only a hole remains
        return os.fstat (fd).st_size
    finally:
        os.close (fd)

def expect_hole (start, end, what):
    d = next_data (start)
    if d < end:
        M.fail ("%s: [%d, %d) should be a hole in the backing file, but "
                "SEEK_DATA from %d finds data at %d (zeroes written as data?)"
                % (what, start, end, start, d))

def body ():
    rng = random.Random (3)
    ctl = M.Control (ctlpath)
    m = M.Model (ctl.status ()["size"])
    h = M.connect (uri)
    for off in range (0, m.size, MiB):
        d = rng.randbytes (min (MiB, m.size - off))
        h.pwrite (d, off)
        m.write (off, d)
    ctl.sync ()
    m.check_file (back, "backing file after writing everything")
    full = allocated ()
    M.log ("allocated after writing: %d bytes" % full)
    if full < 16 * MiB:
        M.fail ("only %d bytes allocated after writing 16 MiB" % full)

    h.zero (4 * MiB, 4 * MiB)
    m.zero (4 * MiB, 4 * MiB)
    h.trim (2 * MiB, 10 * MiB)
    m.zero (10 * MiB, 2 * MiB)      # ramback reads trimmed chunks as zero
    m.check_nbd (h, "device after zero and trim")
    ctl.sync ()
    m.check_file (back, "backing file after zero, trim and sync")
    after = allocated ()
    M.log ("allocated after zero and trim: %d bytes" % after)
    expect_hole (4 * MiB, 8 * MiB, "zero")
    expect_hole (10 * MiB, 12 * MiB, "trim")
    # 6 MiB freed, give or take the filesystem's own metadata.
    if full - after < 6 * MiB - 256 * 1024:
        M.fail ("zero and trim of 6 MiB freed only %d bytes of the backing "
                "file (%d -> %d)" % (full - after, full, after))

    ctl ("mode writethrough")
    h.zero (MiB, 13 * MiB)
    m.zero (13 * MiB, MiB)
    expect_hole (13 * MiB, 14 * MiB, "zero in writethrough mode, at once")
    m.check_file (back, "backing file after a writethrough zero")
    m.check_nbd (h)
    h.shutdown ()

M.main (body)
EOF

stop_rb rb
