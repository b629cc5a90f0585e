#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# ram= only ever overwrites a RAM image that ramback created.
#
# Refused, with every file involved unchanged (SHA-256): ram= naming the
# backing file itself, a hard link to it, a symlink to it, a symlink to
# an unrelated file, a dangling symlink (nothing is created at its
# target), an unrelated file, a file with a second hard link, an empty
# file, a directory, a character device, and a RAM image that another
# running ramback uses (the message names its pid).
# Accepted: a path that does not exist (created with a RAMBACK-IMAGE
# header, state IN_USE while running, the image at the header's offset
# holds the device; kept in state CLEAN_STOP after a clean stop, with the
# backing file's mtime), an image left by a clean stop or a kill
# (resumed: same uuid and generation), and with resume=discard an image
# left by a ramback that was killed (taken over, reloaded from the
# backing store, generation incremented), but only by its owner's uid.
# test-crash-resume.sh and test-resume-mismatch.sh test resume itself.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"

back="$TMP/back.img"
back2="$TMP/back2.img"
other="$TMP/other.txt"
py -c '
import random, sys
open (sys.argv[1], "wb").write (random.Random (7).randbytes (8 << 20))
open (sys.argv[2], "wb").write (random.Random (8).randbytes (4 << 20))
open (sys.argv[3], "w").write ("precious notes\n" * 1000)' \
    "$back" "$back2" "$other"
protect "$back" "$back2" "$other"
b="back=$back"

# header FILE: the RAM image header as "key=value" lines (the layout is
# described in lib/ram/ramimage.h).
header () {
    py - "$1" <<'EOF'
import struct, sys
h = open (sys.argv[1], "rb").read (4096)
if len (h) < 256 or h[:16] != b"RAMBACK-IMAGE\0\0\0":
    print ("magic=none")
    sys.exit (0)
(version, hsize, state, chunk, devsize, imgoff, imgsize, mapoff, mapsize,
 bsize) = struct.unpack_from ("<IIIIQQQQQQ", h, 16)
uuid = h[80:96].hex ()
gen, bdev, bino, bsz, bkind = struct.unpack_from ("<QQQQI", h, 96)
uri = h[144:144 + 1024].split (b"\0")[0].decode ()
mtime = struct.unpack_from ("<q", h, 1208)[0]
state = {1: "CREATING", 2: "IN_USE", 3: "CLEAN_STOP"}.get (state, state)
for k, v in (("magic", "ok"), ("version", version), ("state", state),
             ("chunk_size", chunk), ("device_size", devsize),
             ("image_offset", imgoff), ("image_size", imgsize),
             ("map_offset", mapoff), ("map_size", mapsize),
             ("block_size", bsize), ("uuid", uuid), ("generation", gen),
             ("back_dev", bdev), ("back_ino", bino), ("back_size", bsz),
             ("back_kind", bkind), ("back", uri), ("back_mtime", mtime)):
    print ("%s=%s" % (k, v))
EOF
}
hfield () { header "$1" | sed -n "s/^$2=//p"; }

same='same file as back=|is the backing store'
expect_fail "ram= is back="             "$same" "$b" ram="$back"
ln "$back" "$TMP/hardlink.img"
expect_fail "ram= a hard link to back=" "$same" "$b" ram="$TMP/hardlink.img"
ln -s "$back" "$TMP/symlink-back"
expect_fail "ram= a symlink to back="   "$same|symbolic link" "$b" ram="$TMP/symlink-back"
ln -s "$other" "$TMP/symlink-other"
expect_fail "ram= a symlink to another file" "symbolic link" "$b" ram="$TMP/symlink-other"
ln -s "$TMP/nowhere.img" "$TMP/dangling"
expect_fail "ram= a dangling symlink"   "symbolic link" "$b" ram="$TMP/dangling"
[ ! -e "$TMP/nowhere.img" ] || fail "a ram= file was created through a symlink"
expect_fail "ram= an unrelated file"    "not a ramback RAM image" "$b" ram="$other"
ln "$other" "$TMP/other-link"
expect_fail "ram= a file with 2 links"  "hard links|not a ramback RAM image" "$b" ram="$TMP/other-link"
: > "$TMP/empty"
expect_fail "ram= an empty file"        "not a ramback RAM image" "$b" ram="$TMP/empty"
[ -f "$TMP/empty" ] && [ ! -s "$TMP/empty" ] || fail "the empty file was changed"
mkdir "$TMP/dir"
expect_fail "ram= a directory"          "not a regular file" "$b" ram="$TMP/dir"
expect_fail "ram= a character device"   "not a regular file" "$b" ram=/dev/null
[ -c /dev/null ] || fail "/dev/null is no longer a character device"

# A new path: created with our header, removed after a clean stop.
ram="$TMP/ram.img"
start_rb a -- "$b" ram="$ram"
ctl "$a_ctl" wait-populated 60000 >/dev/null
header "$ram"
[ "$(hfield "$ram" magic)" = ok ] || fail "no RAMBACK-IMAGE header in ram="
[ "$(hfield "$ram" state)" = IN_USE ] || fail "state is not IN_USE while running"
[ "$(hfield "$ram" device_size)" = $((8 << 20)) ] || fail "wrong device_size"
[ "$(hfield "$ram" back)" = "$back" ] || fail "the header does not name back="
[ "$(hfield "$ram" back_ino)" = "$(stat -c %i "$back")" ] || fail "wrong back_ino"
[ "$(hfield "$ram" generation)" = 1 ] || fail "generation of a new file is not 1"
off=$(hfield "$ram" image_offset)
[ $((off % 4096)) -eq 0 ] && [ "$off" -ge 4096 ] || fail "image_offset $off"
[ "$(stat -c %a "$ram")" = 600 ] || fail "ram= file mode is not 0600"
# The image sits at image_offset: it holds the device (== back=).
py - "$ram" "$off" "$back" <<'EOF'
import sys
import model as M
ram, off, back = sys.argv[1], int (sys.argv[2]), sys.argv[3]
want = open (back, "rb").read ()
with open (ram, "rb") as f:
    f.seek (off)
    got = f.read (len (want))
d = M.first_diff (got, want)
if d != -1:
    M.fail ("the image in ram= differs from back= at %d" % d)
print ("image at offset %d of ram= == back=" % off)
EOF
uuid1=$(hfield "$ram" uuid)

# In use by the running instance: refused, naming it.
expect_fail "ram= in use by another ramback" "in use.*pid $a_pid" \
    back="$back2" ram="$ram"
[ "$(hfield "$ram" state)" = IN_USE ] || fail "the refused start changed the header"

py - "$a_uri" <<'EOF'
import sys
import model as M
h = M.connect (sys.argv[1])
h.pwrite (b"written through ram=" * 1000, 123456)
h.flush ()
h.shutdown ()
EOF
# Written back without a sync or a stop asking for it.
for (( i=0; i<600; i++ )); do
    [ "$(status_field "$a_ctl" dirty_chunks)" = 0 ] &&
        [ "$(status_field "$a_ctl" stored_bytes)" -gt 0 ] && break
    sleep 0.1
done
[ "$(status_field "$a_ctl" dirty_chunks)" = 0 ] ||
    fail "the write to a ram= image is not written back: $(ctl "$a_ctl" status)"
stop_rb a
[ "$(hfield "$ram" state)" = CLEAN_STOP ] || fail "state is not CLEAN_STOP after a clean stop"
[ "$(hfield "$ram" back_mtime)" = "$(stat -c %Y "$back")" ] ||
    fail "the header does not record back='s mtime after the final sync"
py -c '
import sys
b = open (sys.argv[1], "rb").read ()
assert b[123456:123456 + 20000] == b"written through ram=" * 1000, "write lost"
' "$back"
echo "ok: created, used, kept at a clean stop; the write reached back="

# The next start resumes it: nothing is loaded; then it is killed.
protect_clear
protect "$back" "$back2" "$other"
start_rb k -- "$b" ram="$ram"
[ "$(status_field "$k_ctl" image_source)" = resumed-clean ] || fail "not resumed after a clean stop"
[ "$(status_field "$k_ctl" populated)" = true ] || fail "a resumed image is not populated at once"
[ "$(status_field "$k_ctl" loaded_bytes)" = 0 ] || fail "a clean resume read the backing store"
[ "$(status_field "$k_ctl" resumed_chunks_to_write)" = 0 ] || fail "a clean resume has chunks to write"
ramback status "$k_ctl" | grep -E '^image: +resumed after a clean stop \(128 chunks kept, 0 written back at start\)$' ||
    fail "ramback status does not show the resume"
[ "$(hfield "$ram" uuid)" = "$uuid1" ] || fail "resumed: the uuid changed"
[ "$(hfield "$ram" generation)" = 1 ] || fail "resumed: the generation changed"
kill -9 "$k_pid"
wait "$k_job" || true
[ "$(hfield "$ram" state)" = IN_USE ] || fail "killed: state is not IN_USE"
if [ "$(id -u)" = 0 ]; then
    chown 65534 "$ram"
    expect_fail "leftover image of another uid" "owned by uid 65534" "$b" ram="$ram"
    chown 0 "$ram"
fi
# resume=discard: taken over, loaded again from back=.
start_rb t -- "$b" ram="$ram" resume=discard
ctl "$t_ctl" wait-populated 60000 >/dev/null
grep -E "taking over" "$t_log" || fail "no message about taking over the old image"
[ "$(status_field "$t_ctl" image_source)" = populated ] || fail "resume=discard: not populated"
[ "$(hfield "$ram" state)" = IN_USE ] || fail "taken over: state is not IN_USE"
[ "$(hfield "$ram" generation)" = 2 ] || fail "taken over: generation is not 2"
[ "$(hfield "$ram" uuid)" != "$uuid1" ] || fail "taken over: same uuid"
check_device "$t_uri" "$back" "device after taking over a leftover image"
stop_rb t
[ "$(hfield "$ram" state)" = CLEAN_STOP ] || fail "state is not CLEAN_STOP after a clean stop"
rm -f "$ram"
echo "$ncases refusals, every file unchanged; new and leftover images used"
