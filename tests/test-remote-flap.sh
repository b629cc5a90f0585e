#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Reconnect back-off against a server that completes the handshake and
# then drops the connection (a proxy in front of a real server that
# closes every connection 50 ms after it opened).  A successful
# handshake is not health: the back-off must build up until a
# connection has completed a request, so ramback does not hammer the
# server with connections (it made over 70 a second before).  Dirty data waits meanwhile; once the proxy stops dropping,
# it is written back.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
source "$top_srcdir/tests/remote-functions.sh"

size=$(( 8 * 1024 * 1024 ))
truncate -s "$size" "$TMP/back.img"
start_remote srv file "$TMP/back.img"

# The proxy: relays to the server; while $TMP/flap exists it closes each
# connection 50 ms after accepting it (or after the file appears).
# Counts connections in $TMP/count.  ramback starts before the flapping
# does: its start needs one handshake through, which 50 ms do not always
# allow on a loaded machine.
/usr/bin/python3 - "$TMP/proxy.sock" "$srv_sock" "$TMP/flap" "$TMP/count" <<'PY' &
import os, socket, sys, threading, time
lsock, target, flap, count = sys.argv[1:]
n = 0
srv = socket.socket (socket.AF_UNIX)
srv.bind (lsock)
srv.listen (64)
def pump (a, b):
    try:
        while True:
            d = a.recv (65536)
            if not d:
                break
            b.sendall (d)
    except OSError:
        pass
    for s in (a, b):
        try:
            s.shutdown (socket.SHUT_RDWR)
        except OSError:
            pass
def serve (c):
    t = socket.socket (socket.AF_UNIX)
    t.connect (target)
    threading.Thread (target=pump, args=(c, t), daemon=True).start ()
    threading.Thread (target=pump, args=(t, c), daemon=True).start ()
    while not os.path.exists (flap):
        time.sleep (0.05)
        if c.fileno () < 0:
            return
    time.sleep (0.05)
    for s in (c, t):
        try:
            s.shutdown (socket.SHUT_RDWR)
        except OSError:
            pass
while True:
    c, _ = srv.accept ()
    n += 1
    with open (count + ".tmp", "w") as f:
        f.write (str (n))
    os.rename (count + ".tmp", count)
    threading.Thread (target=serve, args=(c,), daemon=True).start ()
PY
proxy=$!
cleanup_fn kill_if_running "$proxy"
for (( i=0; i<100; i++ )); do [ -S "$TMP/proxy.sock" ] && break; sleep 0.1; done

start_rb rb back="nbd+unix:///?socket=$TMP/proxy.sock" populate=false
touch "$TMP/flap"
head -c 1048576 /dev/urandom >"$TMP/data"
py - "$rb_uri" "$TMP/data" <<'PY'
import sys, nbd
h = nbd.NBD ()
h.connect_uri (sys.argv[1])
h.pwrite (open (sys.argv[2], "rb").read (), 0)
h.shutdown ()
PY
# Once the back-off has built up (it doubles from 50 ms to 5 s), each
# connection tries at most once per 5 s: 10 s may see about 10 of the
# default connections' attempts, not hundreds.
sleep 8
c0=$(cat "$TMP/count")
sleep 10
c1=$(cat "$TMP/count")
echo "connections in 10 s against a flapping server: $(( c1 - c0 ))"
[ $(( c1 - c0 )) -le 20 ] ||
    fail "$(( c1 - c0 )) connections in 10 s: no back-off against a server that drops every connection"
rm -f "$TMP/flap"
# A sync whose pass met the last drops fails; the next ones succeed.
for (( i=0; i<60; i++ )); do
    ctl "$rb_ctl" sync 10000 >/dev/null 2>&1 && break
    sleep 1
done
[ "$i" -lt 60 ] || fail "no sync once the server stopped dropping"
stop_rb rb
cmp -n 1048576 "$TMP/back.img" "$TMP/data" || fail "the data did not reach the server"
echo "ok: back-off against a flapping server, and the data written back after"
