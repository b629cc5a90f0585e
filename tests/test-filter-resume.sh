#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# ram= and resume= in the filter form (nbdkit --filter=ramback file A):
# the same parameters as the plugin form, and the RAM image is resumed
# only onto the plugin it was made for.
#
#  1. flush-rate= holds a write dirty; kill -9; the next start on the
#     same ram= resumes it (image_source resumed-crash, the write is
#     among the chunks to write back) and a clean stop writes it to A.
#  2. The next start resumes the clean image (resumed-clean).
#  3. The same ram= in front of another file of the same size is
#     refused, naming both plugins' parameters, and nothing changes;
#     resume=discard populates from the other file instead.

RAMBACK_FORM=filter
source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"

a="$TMP/a.img"
b="$TMP/b.img"
ram="$TMP/ram.img"
py -c '
import random, sys
open (sys.argv[1], "wb").write (random.Random (1).randbytes (4 << 20))
open (sys.argv[2], "wb").write (random.Random (2).randbytes (4 << 20))' \
    "$a" "$b"
cp "$a" "$TMP/a-expect.img"
printf 'resumed!%.0s' $(seq 512) |
    dd of="$TMP/a-expect.img" bs=4096 seek=10 conv=notrunc status=none

# 1. A write left dirty by a kill -9 is resumed and written back.
# (The flusher writes the first write at once, then waits 64K/1 s
# before its next batch.)
start_rb k -- back="$a" ram="$ram" flush-rate=1 populate=false
nbdsh -u "$k_uri" -c 'h.pwrite (h.pread (4096, 1 << 20), 1 << 20)'
for (( i=0; i<600; i++ )); do
    [ "$(status_field "$k_ctl" dirty_chunks)" = 0 ] && break
    sleep 0.1
done
[ "$(status_field "$k_ctl" dirty_chunks)" = 0 ] ||
    fail "the first write was not written back"
nbdsh -u "$k_uri" -c 'h.pwrite (b"resumed!" * 512, 40960)'
[ "$(status_field "$k_ctl" dirty_chunks)" -ge 1 ] ||
    fail "the write was not held dirty"
kill -9 "$k_pid"; wait "$k_job" || true
cmp -s "$a" "$TMP/a-expect.img" && fail "the write reached A before the kill"

start_rb r -- back="$a" ram="$ram"
[ "$(status_field "$r_ctl" image_source)" = resumed-crash ] ||
    fail "after kill -9: image_source $(status_field "$r_ctl" image_source)"
[ "$(status_field "$r_ctl" resumed_chunks_to_write)" -ge 1 ] ||
    fail "after kill -9: no resumed chunk to write back"
nbdsh -u "$r_uri" -c 'assert h.pread (4096, 40960) == b"resumed!" * 512'
stop_rb_same r "$a" "$TMP/a-expect.img"
echo "ok: a write dirty at kill -9 resumed from ram= and written to the plugin"

# 2. A clean stop leaves an image that resumes.
start_rb c -- back="$a" ram="$ram"
[ "$(status_field "$c_ctl" image_source)" = resumed-clean ] ||
    fail "after a clean stop: image_source $(status_field "$c_ctl" image_source)"
stop_rb c
echo "ok: resumed after a clean stop"

# 3. Another plugin below: refused, then discarded on request.
protect "$ram" "$a" "$b"
expect_fail "ram= of file A in front of file B" \
    "RAM image of back=\(plugin\) file=$a, not of back=\(plugin\) file=$b.*resume=discard" \
    back="$b" ram="$ram"
start_rb d -- back="$b" ram="$ram" resume=discard
[ "$(status_field "$d_ctl" image_source)" = populated ] ||
    fail "resume=discard: image_source $(status_field "$d_ctl" image_source)"
ctl "$d_ctl" wait-populated 60000 >/dev/null
stop_rb_image d "$b"
echo "ok: refused in front of another file; resume=discard populates from it"
