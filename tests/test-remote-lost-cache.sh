#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# A remote server dies with its write cache in the middle of a
# write-back sweep, while no request is in flight: the sweep's first
# write had completed (acknowledged by the server, not flushed) and the
# flusher waits out its rate cap before the next one.  The server comes
# back; the NBD store reconnects; the sweep goes on and ends with a sync
# on the new connections, where it succeeds.  That sync (and the client
# FLUSH waiting for it, fsync=wait) must not count: the store reports
# the connection lost with unflushed writes, and ramback writes them
# again before a sync succeeds.  (A FLUSH in flight when a connection
# dies fails by itself; this is the case where none is.)
#
#   1. back= is a faultdisk server with a volatile write cache
#      (durable=), holding random data;
#   2. flush-rate= makes each batch of the sweep wait: two chunks far
#      apart are written, and the first reaches the server;
#   3. the server is killed (-9: its cache is gone, what reads see is
#      the durable image again) and a new one starts at the same socket,
#      and ramback reconnects, all within the rate cap's wait;
#   4. FLUSHes until one succeeds: after a successful FLUSH the durable
#      image must equal the model, and so after a clean stop.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/remote-functions.sh"

size=$(( 8 * 1024 * 1024 ))
rio init "$TMP/model" "$size" 41 12
cp "$TMP/model" "$TMP/r.img"
cp "$TMP/model" "$TMP/r.dur"

# flush URI: one NBD FLUSH; exit status 1 if it failed.
flush () {
    /usr/bin/python3 - "$1" <<'EOP'
import sys, nbd
h = nbd.NBD (); h.connect_uri (sys.argv[1])
try:
    h.flush ()
except nbd.Error as e:
    print ("FLUSH failed:", e, file=sys.stderr)
    sys.exit (1)
h.shutdown ()
EOP
}

start_faultdisk r "$TMP/r.img" durable="$TMP/r.dur"
# 64 KiB chunks; flush-rate=4K: one chunk per batch, 16 s between them
# (the server's restart and the reconnect must fit in between).
start_rb rb back="$r_uri" fsync=wait flush-rate=4K
ctl "$rb_ctl" wait-populated 60000
nconn=$(status_field "$rb_ctl" store_connections)
flush "$rb_uri" || fail "the first FLUSH failed"

w0=$(fd_field r writes)
/usr/bin/python3 - "$rb_uri" "$TMP/model" <<'EOP'
import sys, nbd
h = nbd.NBD (); h.connect_uri (sys.argv[1])
with open (sys.argv[2], "r+b") as f:
    for off, byte in ((65536, 0x5a), (6 * 1048576, 0xa5)):
        data = bytes ([byte]) * 65536
        h.pwrite (data, off)
        f.seek (off); f.write (data)
h.shutdown ()
EOP
_wait_value "faultdisk r: writes" 30 ge $(( w0 + 1 )) fd_field r writes ||
    fail "the sweep's first write never reached the server"
n=$(fd_field r unflushed_writes)
echo "the server holds $n unflushed writes, $(fd_field r held) held"
[ "$n" -gt 0 ] || fail "no unflushed write on the server: the test tests nothing"

kill_remote r
cp "$TMP/r.dur" "$TMP/r.img"
cmp -s "$TMP/r.dur" "$TMP/model" &&
    fail "the server lost nothing: the test tests nothing"
start_faultdisk r "$TMP/r.img" durable="$TMP/r.dur"
_wait_value "status store_reconnects" 30 ge "$nconn" \
            status_field "$rb_ctl" store_reconnects ||
    fail "ramback did not reconnect all its $nconn connections"
[ "$(fd_field r writes)" -eq 0 ] ||
    fail "the sweep went on before the server came back: the test tests nothing"

ok=
for (( i=0; i<60; i++ )); do
    if flush "$rb_uri"; then
        ok=1
        break
    fi
    sleep 0.5
done
[ -n "$ok" ] || fail "no FLUSH succeeded after the server came back"
echo "FLUSH succeeded after $i failed ones; ramback said:"
grep -E 'nbd: |backing store error' "$rb_log" | tail -20 || true
cmp "$TMP/r.dur" "$TMP/model" ||
    fail "a FLUSH succeeded, but the server lost writes that ramback had" \
         "written on the lost connection"
stop_rb rb
cmp "$TMP/r.dur" "$TMP/model" || fail "the durable image differs after stop"
kill_remote r
echo PASS
