#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# ups-window= bounds the time to make everything durable, not only the
# time to submit it.  The backing server takes writes at memory speed
# and syncs at 4 MiB/s (faultdisk flush-rate=4M: a FLUSH takes the bytes
# written since the last one / 4 MiB/s), like a page cache or a server's
# write cache in front of a slow disk.  With ups-window=2:
#   - the measured flush_bandwidth is the durable bandwidth (~4 MiB/s),
#     not the speed at which writes were accepted;
#   - after a write burst much larger than the window, "sync" takes at
#     most 1.5x the window (a ratio, with generous slack; the limit
#     aims at 0.8x).

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/remote-functions.sh"

M=$(( 1024 * 1024 ))
size=$(( 64 * M ))
truncate -s "$size" "$TMP/img"
start_faultdisk fd "$TMP/img" flush-rate=4M
start_rb rb back="$fd_uri" ups-window=2
ctl "$rb_ctl" wait-populated 60000

burst () {      # burst URI MIB WRITERS: random 128 KiB writes, MIB in all
    /usr/bin/python3 - "$@" <<'EOP'
import random, sys, threading, nbd
uri, mib, writers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
REQ, size = 128 * 1024, 64 << 20
def writer(i):
    h = nbd.NBD(); h.connect_uri(uri)
    r = random.Random(i)
    for _ in range(mib * 8 // writers):
        h.pwrite(r.randbytes(REQ), r.randrange(0, size // REQ) * REQ)
    h.shutdown()
ts = [threading.Thread(target=writer, args=(i,)) for i in range(writers)]
for t in ts: t.start()
for t in ts: t.join()
EOP
}

# Warm up: one burst made durable, so the bandwidth has been measured.
burst "$rb_uri" 8 1
ctl "$rb_ctl" sync 120000
bw=$(status_field "$rb_ctl" flush_bandwidth)
echo "measured flush_bandwidth $bw B/s (the store syncs at $(( 4 * M )) B/s)"
[ "$bw" -le $(( 8 * M )) ] ||
    fail "flush_bandwidth $bw counts submission, not durability"
[ "$bw" -ge $(( 1 * M )) ] || fail "flush_bandwidth $bw is far too low"

# A burst far over the window: writers wait; then the drain is timed.
burst "$rb_uri" 48 3
status=$(ctl "$rb_ctl" status json)
echo "after the burst: $status" | tr ',' '\n' | grep -E 'dirty_max|drain_seconds|unsynced|dirty_bytes|throttled'
t0=$EPOCHREALTIME
ctl "$rb_ctl" sync 120000
t1=$EPOCHREALTIME
ratio=$(/usr/bin/python3 -c "print(round(($t1 - $t0) / 2, 2))")
echo "drain after the burst / ups-window: $ratio"
/usr/bin/python3 -c "import sys; sys.exit(0 if $ratio <= 1.5 else 1)" ||
    fail "the drain took ${ratio}x the UPS window"
[ "$(status_field "$rb_ctl" throttled)" -gt 0 ] || fail "writers were never throttled"
stop_rb rb
