#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Journal amplification: with journal=, 4 KiB random writes (fio's nbd
# engine, uniform and then a zipf hot spot, several commits on the way)
# must cost the journal and the in-place writes about what was written,
# not a whole chunk each: journal_data_bytes / written_bytes and
# stored_bytes / written_bytes <= 1.5 for both.  Then the backing file
# must equal the RAM image byte for byte after a clean stop
# (sector-sized transactions must not lose any write).
#
# And the admission of writes counts the sectors written, not whole
# chunks: 1024 random 4 KiB writes over 16 MiB (256 chunks, all dirty)
# through a 2 MiB journal (which holds 31 whole chunks, or about 490
# sectors) without a FLUSH take a handful of commits, not one per ~31
# writes; the backing file is then the RAM image again.

source "$top_builddir/tests/functions.sh"
requires truncate

size=$(( 64 * 1024 * 1024 ))
back=$TMP/back.img
journal=$TMP/journal.img
truncate -s 256M "$journal"
start_rb rb back="$back" size="$size" journal="$journal" \
    commit-interval=100 fsync=wait
ctl "$rb_ctl" wait-populated 60000
ctl "$rb_ctl" sync >/dev/null

# amp NAME FIO-ARGS...: the writes, a sync; checks and prints the ratios.
amp () {
    local name=$1 s0 w0 j0 s1 w1 j1; shift
    ctl "$rb_ctl" sync >/dev/null
    s0=$(status_field "$rb_ctl" stored_bytes)
    w0=$(status_field "$rb_ctl" written_bytes)
    j0=$(status_field "$rb_ctl" journal_data_bytes)
    randwrite_4k "$name" "$rb_uri" "$size" --fsync=256 "$@"
    ctl "$rb_ctl" sync >/dev/null
    s1=$(status_field "$rb_ctl" stored_bytes)
    w1=$(status_field "$rb_ctl" written_bytes)
    j1=$(status_field "$rb_ctl" journal_data_bytes)
    [ $((w1 - w0)) -eq $((2048 * 4096)) ] ||
        fail "$name: written_bytes grew by $((w1 - w0)), not $((2048 * 4096))"
    /usr/bin/python3 - "$name" $((j1 - j0)) $((s1 - s0)) $((w1 - w0)) <<'EOP'
import sys
name = sys.argv[1]
j, s, w = (int (a) for a in sys.argv[2:5])
print("%s: %d bytes written: journal data %d (%.2fx), in place %d (%.2fx)"
      % (name, w, j, j / w, s, s / w))
if j / w > 1.5 or s / w > 1.5:
    sys.exit("FAIL: %s: journal %.2fx, in place %.2fx of what was written "
             "(> 1.5)" % (name, j / w, s / w))
EOP
}

bad=0
uniform_and_zipf amp || bad=1
stop_rb_image rb "$back" || fail "the backing file is not the RAM image"
[ "$bad" = 0 ] || fail "journal amplification over 1.5"

truncate -s 2M "$TMP/small.img"
start_rb sm back="$back" size="$size" journal="$TMP/small.img" \
    commit-interval=60
ctl "$sm_ctl" wait-populated 60000
fio --name=small --ioengine=nbd --uri="$sm_uri" --iodepth=8 \
    --rw=randwrite --bs=4k --size=16M --number_ios=1024 \
    --randseed=77 --output="$TMP/fio.out" ||
    { cat "$TMP/fio.out" >&2; fail "fio small"; }
commits=$(status_field "$sm_ctl" journal_commits)
throttled=$(status_field "$sm_ctl" throttled)
echo "small journal: 1024 writes, $commits commits, $throttled throttled"
stop_rb_image sm "$back" ||
    fail "small journal: the backing file is not the RAM image"
[ "$commits" -le 8 ] ||
    fail "small journal: $commits commits for 1024 writes of 4 KiB (> 8)"
