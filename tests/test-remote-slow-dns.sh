#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# A reconnect is bounded even when the name server stops answering:
# back=nbd://NAME:PORT, the server dies, and from then on every lookup
# of NAME hangs (slowdns-shim.c).  A writethrough write must fail with
# EIO within the documented bound instead of waiting for the lookup.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/remote-functions.sh"
requires nbdkit
requires nbdsh
set -x

shim="$TMP/slowdns-shim.so"
${CC:-cc} -shared -fPIC -o "$shim" "$top_srcdir/tests/slowdns-shim.c" -ldl ||
    fail "cannot build the test shim"
export SLOWDNS_NAME=ramback-slowdns.invalid SLOWDNS_HANG="$TMP/hang"
cleanup_fn rm -f "$SLOWDNS_HANG"

size=$(( 4 * 1024 * 1024 ))
port=$(/usr/bin/python3 -c '
import socket
s = socket.socket ()
s.bind (("127.0.0.1", 0))
print (s.getsockname ()[1])')
nbdkit -f -i 127.0.0.1 -p "$port" memory "$size" >"$TMP/r.log" 2>&1 &
rpid=$!
cleanup_fn kill_if_running "$rpid"
for (( i=0; i<100; i++ )); do
    nbdinfo --size "nbd://127.0.0.1:$port" >/dev/null 2>&1 && break
    sleep 0.1
done

LD_PRELOAD="$shim${LD_PRELOAD:+:$LD_PRELOAD}" \
    start_rb rb back="nbd://$SLOWDNS_NAME:$port" mode=writethrough connections=1
nbdsh -u "$rb_uri" -c 'h.pwrite (b"a" * 512, 0)'

# The server dies and the name server stops answering.
touch "$SLOWDNS_HANG"
kill -KILL "$rpid"
_wait_gone "$rpid"

start=$(date +%s%N)
rc=0
timeout 60 nbdsh -u "$rb_uri" -c '
try:
    h.pwrite (b"b" * 512, 4096)
    print ("WRITE OK")
except nbd.Error as e:
    print ("WRITE FAILED:", e)
' >"$TMP/w.out" 2>&1 || rc=$?
ms=$(( ($(date +%s%N) - start) / 1000000 ))
cat "$TMP/w.out"
echo "writethrough write returned after $ms ms (rc=$rc)"
[ "$rc" -ne 124 ] || fail "the write was still waiting on the name lookup after 60 s"
grep -q "WRITE FAILED" "$TMP/w.out" || fail "the write did not fail with the server gone"
# Documented bound: one reconnection attempt (5 s), with room for load.
[ "$ms" -lt 20000 ] || fail "the write waited $ms ms, beyond one reconnection attempt"

# The name server and the server come back: ramback reconnects (a
# clean stop needs the store) and stops cleanly.
rm -f "$SLOWDNS_HANG"
nbdkit -f -i 127.0.0.1 -p "$port" memory "$size" >>"$TMP/r.log" 2>&1 &
rpid=$!
cleanup_fn kill_if_running "$rpid"
stop_rb rb
echo PASS
