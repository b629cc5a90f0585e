#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# ram= resume refuses an image that does not match this start, saying
# what differs and how to proceed, and changes nothing (SHA-256 of the
# RAM image and of every backing file): another back=, a resized
# backing store, another chunk size, a damaged header, an unknown
# format version, a backing file changed after the clean stop, a
# backing file replaced by a copy (another inode), and the same after a
# kill -9 (the message says the unwritten data would be lost).
# resume=discard populates from the backing store instead;
# resume=force resumes and writes the whole image back over back=.
# resume= needs ram=, and takes auto, discard or force.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"

back="$TMP/back.img"
back2="$TMP/back2.img"
ram="$TMP/ram.img"
py -c '
import random, sys
open (sys.argv[1], "wb").write (random.Random (1).randbytes (4 << 20))
open (sys.argv[2], "wb").write (random.Random (2).randbytes (4 << 20))' \
    "$back" "$back2"

# write_pattern URI OFFSET BYTE COUNT
write_pattern () {
    py - "$@" <<'EOF2'
import sys
import model as M
h = M.connect (sys.argv[1])
h.pwrite (bytes ([int (sys.argv[3])]) * int (sys.argv[4]), int (sys.argv[2]))
h.shutdown ()
EOF2
}
# set_header FILE OFFSET STRUCT-FORMAT VALUE: poke the RAM image header.
set_header () {
    py - "$@" <<'EOF2'
import struct, sys
with open (sys.argv[1], "r+b") as f:
    f.seek (int (sys.argv[2]))
    f.write (struct.pack (sys.argv[3], int (sys.argv[4])))
EOF2
}

# An image with data of its own: written, populated whole (resume=force
# below writes back every chunk the image holds), then cleanly stopped.
start_rb a -- back="$back" ram="$ram"
write_pattern "$a_uri" 65536 171 65536
ctl "$a_ctl" wait-populated 60000
stop_rb a
cp "$back" "$TMP/back-after-a.img"
protect "$ram" "$back" "$back2"

expect_fail "another back="  "RAM image of back=$back, not of back=$back2.*resume=discard" \
    back="$back2" ram="$ram"
expect_fail "another chunk size" "made with chunk=65536, not chunk=4096: give chunk=65536" \
    back="$back" ram="$ram" chunk=4K
cp "$ram" "$TMP/ram.saved"
set_header "$ram" 80 '<I' 12345        # the uuid: covered by the checksum
protect_clear; protect "$ram" "$back" "$back2"
expect_fail "a damaged header" "header checksum is wrong.*resume=discard" \
    back="$back" ram="$ram"
set_header "$ram" 16 '<I' 99           # the format version
protect_clear; protect "$ram" "$back" "$back2"
expect_fail "an unknown format" "RAM image of format 99.*resume=discard" \
    back="$back" ram="$ram"
cp "$TMP/ram.saved" "$ram"
protect_clear; protect "$ram" "$back" "$back2"
expect_fail "resume= without ram=" "resume= only applies with ram=" \
    back="$back" resume=auto
expect_fail "resume=bogus" "resume=bogus: expected auto, discard or force" \
    back="$back" ram="$ram" resume=bogus

# The backing file grows: the device no longer fits the image.
truncate -s 5M "$back"
protect_clear; protect "$ram" "$back" "$back2"
expect_fail "a resized backing file" "holds a device of 4194304 bytes, but back=$back is 5242880 bytes" \
    back="$back" ram="$ram"
truncate -s 4M "$back"
# (truncate changed back='s mtime: that is caught next.)

# Changed after the clean stop.
protect_clear; protect "$ram" "$back" "$back2"
expect_fail "back= changed after the clean stop" \
    "was changed after the clean stop.*nothing is lost.*resume=force" \
    back="$back" ram="$ram"

# Replaced by a copy: same path and contents, another inode.
cp -p "$back" "$TMP/copy.img"
mv "$TMP/copy.img" "$back"
protect_clear; protect "$ram" "$back" "$back2"
expect_fail "back= replaced by a copy" "another file than the one this image was made for.*inode" \
    back="$back" ram="$ram"

# resume=force: the image is the truth, written back whole over back=.
start_rb f -- back="$back" ram="$ram" resume=force
[ "$(status_field "$f_ctl" image_source)" = resumed-clean ] || fail "resume=force did not resume"
[ "$(status_field "$f_ctl" resumed_chunks_to_write)" = 64 ] ||
    fail "resume=force: $(status_field "$f_ctl" resumed_chunks_to_write) chunks to write, not all 64"
grep -q "resume=force: resuming although" "$f_log" || fail "resume=force: no warning"
stop_rb_same f "$back" "$TMP/back-after-a.img"
echo "ok: resume=force wrote the image back over back="

# After a kill -9: a mismatch is refused, and says what would be lost.
start_rb k -- back="$back" ram="$ram"
[ "$(status_field "$k_ctl" image_source)" = resumed-clean ] || fail "not resumed"
write_pattern "$k_uri" 131072 172 4096
kill -9 "$k_pid"; wait "$k_job" || true
protect_clear; protect "$ram" "$back" "$back2"
expect_fail "another back= after a kill" \
    "RAM image of back=$back, not of back=$back2.*not written back is then lost" \
    back="$back2" ram="$ram"
# (The right back= resumes it: test-crash-resume.sh.)

# resume=discard: thrown away, populated from back2.
start_rb d -- back="$back2" ram="$ram" resume=discard
[ "$(status_field "$d_ctl" image_source)" = populated ] || fail "resume=discard did not populate"
ctl "$d_ctl" wait-populated 60000 >/dev/null
grep -q "taking over the RAM image of a ramback that did not stop cleanly" "$d_log" ||
    fail "resume=discard of a killed image: no warning"
py - "$d_uri" "$back2" <<'EOF2'
import sys
import model as M
M.Model.from_file (sys.argv[2]).check_nbd (M.connect (sys.argv[1]), "after resume=discard")
EOF2
stop_rb d
rm -f "$ram"
echo "$ncases refusals, nothing changed; discard populates, force writes back"
