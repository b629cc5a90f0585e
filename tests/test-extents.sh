#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Block status: zeroed and trimmed ranges, and the store's holes, are
# reported as holes; data as data; and a sparse copy reads only the data.
#
# 1. A 64 MiB sparse backing file with data at [8 MiB, 12 MiB) and 12345
#    bytes at 20 MiB + 100, chunk=64K, populate=false (chunks stay
#    EMPTY, so the store answers for them).  nbdinfo --map shows the two
#    data ranges and holes elsewhere.  A trim of [9 MiB, 11 MiB) shows
#    as a hole at once (ZERO chunks in RAM) and after the write back
#    (CLEAN chunks, the store's punched hole); a write into a hole
#    shows as data.  Every extent said to be zero reads as zeroes (the
#    model), with and without REQ_ONE.
# 2. A 4 GiB device holding 64 MiB of data in 64 pieces: nbdcopy of it
#    (to null:, then to a file compared with the image) makes ramback
#    read no more than the data from its store (loaded_bytes, the
#    store's reads), rounded out to nbdcopy's requests, where without
#    block status it would read 4 GiB.
#
# Runs in both forms (the filter asks the file plugin's extents).

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
requires nbdinfo nbdcopy truncate

MiB=$((1024 * 1024))
back="$TMP/back.img"

# The filesystem must report holes (SEEK_DATA) for the store to say so.
truncate -s 1M "$TMP/probe"
if ! py - "$TMP/probe" <<'EOF'
import os, sys
fd = os.open (sys.argv[1], os.O_RDONLY)
try:
    os.lseek (fd, 0, os.SEEK_DATA)
    sys.exit (1)                 # a 1 MiB hole reported as data
except OSError:
    sys.exit (0)
EOF
then
    echo "$0: SKIP: the filesystem of $TMP ($(stat -f -c %T "$TMP")) does" \
         "not report holes with SEEK_DATA"
    exit 77
fi

# map URI: nbdinfo --map as "offset length type" lines.
map () {
    nbdinfo --map --json "$1" |
        py -c 'import json, sys
for e in json.load (sys.stdin): print (e["offset"], e["length"], e["type"])'
}

echo "=== 1. holes, data, trims"
truncate -s $((64 * MiB)) "$back"
head -c $((4 * MiB)) /dev/urandom |
    dd of="$back" bs=1M seek=8 conv=notrunc status=none
head -c 12345 /dev/urandom |
    dd of="$back" bs=1 seek=$((20 * MiB + 100)) conv=notrunc status=none
cp --sparse=always "$back" "$TMP/orig.img"
start_rb rb -- back="$back" chunk=64K populate=false flush-delay=0

got=$(map "$rb_uri")
echo "$got"
# The file's own map, block-granular: the 12345 bytes make data from
# 20 MiB to the block after 20 MiB + 12445.
want=$(printf '%s\n' "0 $((8 * MiB)) 3" "$((8 * MiB)) $((4 * MiB)) 0" \
    "$((12 * MiB)) $((8 * MiB)) 3")
[ "$(echo "$got" | head -3)" = "$want" ] ||
    fail "map of the fresh device: expected"$'\n'"$want"$'\n'"got"$'\n'"$got"
echo "$got" | sed -n 4p | grep -q "^$((20 * MiB)) [0-9]* 0$" ||
    fail "the 12345 bytes at 20 MiB + 100 are not reported as data"
loaded=$(status_field "$rb_ctl" loaded_bytes)
[ "$loaded" -eq 0 ] || fail "the map loaded $loaded bytes from the store"

py - "$rb_uri" "$rb_ctl" "$TMP/orig.img" <<'EOF'
import sys
import nbd
import model as M

uri, ctlpath, orig = sys.argv[1:]
MiB = M.MiB

def extents (h, offset, count, flags=0):
    out = []
    def cb (meta, off, entries, err):
        if meta != nbd.CONTEXT_BASE_ALLOCATION:
            return 0
        pos = off
        for i in range (0, len (entries), 2):
            out.append ((pos, entries[i], entries[i + 1]))
            pos += entries[i]
        return 0
    h.block_status (count, offset, cb, flags)
    return out

def full_map (h):
    m, pos = [], 0
    while pos < h.get_size ():
        ex = extents (h, pos, min (h.get_size () - pos, 1 << 30))
        m += ex
        pos = ex[-1][0] + ex[-1][1]
    return m

def check_map (h, m, what):
    """Every extent said to be zero reads as zeroes, in the model and on
    the device."""
    for off, length, typ in full_map (h):
        if typ & 2:
            want = bytes (m.buf[off:off + length])
            if want.count (0) != length:
                M.fail ("%s: [%d, %d) reported zero, but the model has "
                        "data there" % (what, off, off + length))
            if h.pread (length, off) != want:
                M.fail ("%s: [%d, %d) reported zero, but does not read "
                        "as zeroes" % (what, off, off + length))
    m.check_nbd (h, what)

def type_at (h, off, what, want):
    ex = extents (h, off, 4096, nbd.CMD_FLAG_REQ_ONE)
    if len (ex) != 1 or ex[0][0] != off:
        M.fail ("%s: REQ_ONE gave %r" % (what, ex))
    if ex[0][2] != want:
        M.fail ("%s: block status at %d is %d, expected %d"
                % (what, off, ex[0][2], want))

def body ():
    ctl = M.Control (ctlpath)
    m = M.Model.from_file (orig)
    h = nbd.NBD ()
    h.add_meta_context (nbd.CONTEXT_BASE_ALLOCATION)
    h.connect_uri (uri)
    check_map (h, m, "fresh device")
    type_at (h, 0, "a hole of the store", 3)
    type_at (h, 8 * MiB, "data of the store", 0)

    h.trim (2 * MiB, 9 * MiB)
    m.zero (9 * MiB, 2 * MiB)
    type_at (h, 9 * MiB, "trimmed, in RAM", 3)
    type_at (h, 11 * MiB, "after the trim", 0)
    check_map (h, m, "after the trim")
    ctl.sync ()
    type_at (h, 9 * MiB, "trimmed and written back", 3)
    check_map (h, m, "after the trim was written back")

    d = b"\xa5" * 100000
    h.pwrite (d, 30 * MiB + 7)
    m.write (30 * MiB + 7, d)
    type_at (h, 30 * MiB, "written into a hole, dirty", 0)
    h.zero (MiB, 40 * MiB)
    m.zero (40 * MiB, MiB)
    check_map (h, m, "after a write and a zero")
    ctl.sync ()
    type_at (h, 30 * MiB, "written into a hole, written back", 0)
    type_at (h, 40 * MiB, "zeroed, written back", 3)
    check_map (h, m, "after write back")
    h.shutdown ()

M.main (body)
EOF
got=$(map "$rb_uri")
echo "$got" | grep -q "^$((9 * MiB)) $((2 * MiB)) 3$" ||
    fail "nbdinfo --map does not show the trimmed hole:"$'\n'"$got"
stop_rb rb

echo "=== 2. a sparse copy reads only the data"
size=$((4 * 1024 * MiB))
rm -f "$back"
truncate -s "$size" "$back"
# nbdcopy reads in requests of --request-size= (256 KiB by default),
# and reads a request whole if any of it is data: the bound is the data
# rounded out to those requests.
req=$((256 * 1024))
bound=0
for (( i = 0; i < 64; i++ )); do
    # 1 MiB of data every 64 MiB, at an odd place in each.
    s=$(( i * 64 * MiB + i * 128 * 1024 ))
    head -c "$MiB" /dev/urandom |
        dd of="$back" bs=64K seek=$(( s / 65536 )) conv=notrunc status=none
    bound=$(( bound + ( (s + MiB + req - 1) / req - s / req ) * req ))
done
data_b=$(( 64 * MiB ))
start_rb rb -- back="$back" chunk=64K populate=false
t0=$EPOCHREALTIME
nbdcopy --request-size=$req "$rb_uri" null:
t1=$EPOCHREALTIME
loaded=$(status_field "$rb_ctl" loaded_bytes)
echo "nbdcopy of a 4 GiB device with $data_b bytes of data to null:" \
     "$(( (${t1/./} - ${t0/./}) / 1000 )) ms, the store read $loaded bytes" \
     "(at most $bound: the data in nbdcopy's requests)"
[ "$loaded" -le "$bound" ] ||
    fail "nbdcopy made ramback read $loaded bytes from its store for" \
         "$data_b bytes of data, $bound in nbdcopy's requests (holes" \
         "copied as data?)"
truncate -s "$size" "$TMP/copy.img"
nbdcopy --request-size=$req --destination-is-zero "$rb_uri" "$TMP/copy.img"
cmp "$back" "$TMP/copy.img" || fail "the copy differs from the image"
loaded=$(status_field "$rb_ctl" loaded_bytes)
[ "$loaded" -le "$bound" ] ||
    fail "the second copy made the store read $loaded bytes"
stop_rb rb
rm -f "$TMP/copy.img" "$back"
