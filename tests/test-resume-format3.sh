#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# A RAM image of format 3 (before partial chunks, whose bits format 4
# keeps) is still resumed after a crash.  A ramback with ram= and
# populate=false writes whole chunks only (so nothing is partial: a
# format 3 image could not say so) and is killed with dirty data in the
# image; the file is rewritten in format 3's layout (version 3, no P
# and V regions, the image right after the sector bits, header CRC
# without the format 4 fields).  The next start must resume it
# (resumed-crash), with nothing partial, serve the dirty chunks from
# RAM and load whole chunks on a miss (format 3 has nowhere to keep
# partly loaded ones), and after a clean stop back= holds everything.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
set -x

back="$TMP/back.img"
ram="$TMP/ram.img"
py -c '
import random, sys
open (sys.argv[1], "wb").write (random.Random (3).randbytes (4 << 20))' "$back"

# Whole chunks 3 and 10, written into RAM only (flush-delay= holds
# write back off).
start_rb a back="$back" ram="$ram" chunk=64K populate=false flush-delay=60
py - "$a_uri" "$TMP/model.img" "$back" <<'EOF'
import sys
import model as M
uri, modelf, back = sys.argv[1:]
m = bytearray (open (back, "rb").read ())
h = M.connect (uri)
for c, b in ((3, 0x33), (10, 0xaa)):
    data = bytes ([b]) * 65536
    h.pwrite (data, c * 65536)
    m[c * 65536:(c + 1) * 65536] = data
h.shutdown ()
open (modelf, "wb").write (m)
EOF
[ "$(status_field "$a_ctl" partial_chunks)" = 0 ] ||
    fail "whole-chunk writes left partial chunks"
[ "$(status_field "$a_ctl" dirty_chunks)" = 2 ] ||
    fail "the writes are not dirty in RAM: $(ctl "$a_ctl" status)"
kill -9 "$a_pid"
wait "$a_job" || true

# Rewrite the image in format 3's layout.
py - "$ram" <<'EOF'
import struct, sys, zlib
path = sys.argv[1]
f = bytearray (open (path, "rb").read ())
u32 = lambda o: struct.unpack_from ("<I", f, o)[0]
u64 = lambda o: struct.unpack_from ("<Q", f, o)[0]
assert u32 (16) == 4, "not a format 4 image: %d" % u32 (16)
img_off, img_size, block = u64 (40), u64 (48), u64 (72)
sect_off, sect_size = u64 (1248), u64 (1256)
new_off = (sect_off + sect_size + block - 1) // block * block
assert new_off < img_off, "format 4 adds nothing before the image?"
h = bytearray (f[:4096])
struct.pack_into ("<I", h, 16, 3)
struct.pack_into ("<Q", h, 40, new_off)
struct.pack_into ("<QQQQ", h, 1264, 0, 0, 0, 0)
c = bytearray (h)
struct.pack_into ("<I", c, 24, 0)                 # state taken as 0
crc = zlib.crc32 (bytes (c[:1208]) + bytes (c[1248:1264])) & 0xffffffff
struct.pack_into ("<I", h, 1240, crc)
out = h + f[4096:sect_off + sect_size]
out += bytes (new_off - len (out)) + f[img_off:img_off + img_size]
open (path, "wb").write (out)
print ("format 3: image at %d (was %d)" % (new_off, img_off))
EOF

start_rb b back="$back" ram="$ram" chunk=64K populate=false
[ "$(status_field "$b_ctl" image_source)" = resumed-crash ] ||
    fail "the format 3 image was not resumed: $(ctl "$b_ctl" status)"
[ "$(status_field "$b_ctl" partial_chunks)" = 0 ] ||
    fail "partial chunks in a resumed format 3 image"
[ "$(status_field "$b_ctl" resumed_chunks_to_write)" -ge 2 ] ||
    fail "the dirty chunks of the format 3 image are not written back: $(ctl "$b_ctl" status)"
before=$(status_field "$b_ctl" demand_loaded_bytes)
py - "$b_uri" "$TMP/model.img" <<'EOF'
import sys
import model as M
uri, modelf = sys.argv[1:]
m = open (modelf, "rb").read ()
h = M.connect (uri)
# A 4 KiB read in a chunk never loaded (chunk 20).
got = h.pread (4096, 20 * 65536 + 8192)
if got != m[20 * 65536 + 8192:20 * 65536 + 12288]:
    M.fail ("chunk 20 reads wrong after resuming a format 3 image")
h.shutdown ()
EOF
after=$(status_field "$b_ctl" demand_loaded_bytes)
[ $((after - before)) -eq 65536 ] ||
    fail "a miss after resuming a format 3 image loaded $((after - before)) bytes, not its chunk (65536)"
check_device "$b_uri" "$TMP/model.img" "device resumed from a format 3 image"
stop_rb b
cmp "$back" "$TMP/model.img" || fail "back= after the clean stop is not the model"
echo "a format 3 image resumed: dirty chunks written back, misses load whole chunks"
