#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Write amplification: 4 KiB random writes (fio's nbd engine, uniform
# and then a zipf hot spot) must cost about what was written in
# write-back, not a whole chunk each: stored_bytes / written_bytes
# <= 1.5 for both.  Then the backing file must equal the RAM image
# byte for byte (sector-sized write-back must not lose any write).
# And sequential writes still go out as one large request, as does a
# chunk with half or more of its sectors dirty.

source "$top_builddir/tests/functions.sh"

size=$(( 64 * 1024 * 1024 ))
back=$TMP/back.img
start_rb rb back="$back" size="$size" fsync=wait
ctl "$rb_ctl" wait-populated 60000
ctl "$rb_ctl" sync >/dev/null

# amp NAME FIO-ARGS...: the writes, a sync; checks and prints the ratio.
amp () {
    local name=$1 s0 w0 s1 w1; shift
    s0=$(status_field "$rb_ctl" stored_bytes)
    w0=$(status_field "$rb_ctl" written_bytes)
    randwrite_4k "$name" "$rb_uri" "$size" "$@"
    ctl "$rb_ctl" sync >/dev/null
    s1=$(status_field "$rb_ctl" stored_bytes)
    w1=$(status_field "$rb_ctl" written_bytes)
    [ $((w1 - w0)) -eq $((2048 * 4096)) ] ||
        fail "$name: written_bytes grew by $((w1 - w0)), not $((2048 * 4096))"
    /usr/bin/python3 - "$name" $((s1 - s0)) $((w1 - w0)) <<'EOP'
import sys
name, s, w = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
a = s / w
print("%s: stored %d bytes for %d written: amplification %.2f" % (name, s, w, a))
if a > 1.5:
    sys.exit("FAIL: %s: write amplification %.2f > 1.5" % (name, a))
EOP
}

bad=0
uniform_and_zipf amp || bad=1
stop_rb_image rb "$back" || fail "the backing file is not the RAM image"
[ "$bad" = 0 ] || fail "write amplification over 1.5"

# Sequential writes still go out as large requests: 4 MiB written as
# 1024 writes of 4 KiB, held back (flush-delay=) until one sync, are
# one store request (the flusher's trace says how many it made).
start_rb seq back="$back" flush-delay=30 trace=true
ctl "$seq_ctl" wait-populated 60000
/usr/bin/python3 - "$seq_uri" <<'EOP'
import sys, nbd
h = nbd.NBD(); h.connect_uri(sys.argv[1])
for i in range(1024):
    h.pwrite(bytes([i % 251 + 1]) * 4096, (1 << 20) + i * 4096)
EOP
ctl "$seq_ctl" sync >/dev/null
grep "flush: " "$seq_log" || fail "no write back traced"
grep -q "flush: 1 runs, 1 requests, 4194304 bytes" "$seq_log" ||
    fail "4 MiB of sequential writes did not go out as one request"

# every_other OFFSET N: N writes of 4 KiB at OFFSET, every other sector,
# a sync; prints the flusher's last trace line.
every_other () {
    /usr/bin/python3 - "$seq_uri" "$1" "$2" <<'EOP'
import sys, nbd
h = nbd.NBD(); h.connect_uri(sys.argv[1])
for i in range(int(sys.argv[3])):
    h.pwrite(bytes([i + 7]) * 4096, int(sys.argv[2]) + 2 * i * 4096)
EOP
    ctl "$seq_ctl" sync >/dev/null
    grep "flush: " "$seq_log" | tail -1
}
# A 64 KiB chunk with under half its sectors dirty is written sector
# by sector; with half or more, whole, as one request.
last=$(every_other $((8 << 20)) 7); echo "7 of 16 sectors: $last"
[[ $last == *"flush: 1 runs, 7 requests, 28672 bytes" ]] ||
    fail "7 of 16 sectors dirty: '$last', not 7 requests of 4 KiB"
last=$(every_other $((16 << 20)) 8); echo "8 of 16 sectors: $last"
[[ $last == *"flush: 1 runs, 1 requests, 65536 bytes" ]] ||
    fail "8 of 16 sectors dirty: '$last', not the whole chunk in one request"
stop_rb_image seq "$back" ||
    fail "the backing file is not the RAM image after the chunk tests"
