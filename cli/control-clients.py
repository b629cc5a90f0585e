#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-or-later
# Hold N connections to a control socket, to fill its client slots:
#   control-clients.py SOCKET KIND N OUT
# Each connection first sends "status json" and waits for its reply (so
# it has been accepted and served), then
#   idle      sends nothing more
#   sync      sends "sync" (which a stalled write back keeps waiting)
#   modesync  sends "mode writeback", waits for OK, then "sync"
# Then OUT gets a line "ready N".  After that, every event is appended
# to OUT as it happens: "I eof" (the plugin closed connection I),
# "I reply LINE" (a final line arrived), "I closed" (closed by us).
# SIGUSR1 closes the oldest connection still open.  Runs until killed.
import os
import select
import signal
import socket
import sys

path, kind, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
assert kind in ("idle", "sync", "modesync"), kind


def log(line):
    with open(out, "a") as f:
        f.write(line + "\n")


def final(conn):
    """Read up to and including the final line of one reply."""
    buf = b""
    while True:
        ch = conn.recv(1)
        if not ch:
            raise SystemExit("%s: connection closed in a reply: %r" %
                             (path, buf))
        buf += ch
        if ch == b"\n":
            line = buf.rstrip(b"\n")
            buf = b""
            if line == b"OK" or line.startswith(b"ERR "):
                return line


conns = []
for i in range(n):
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(path)
    c.sendall(b"status json\n")
    r = final(c)
    if r != b"OK":
        raise SystemExit("%s: connection %d: status json: %r" % (path, i, r))
    if kind == "modesync":
        c.sendall(b"mode writeback\n")
        r = final(c)
        if r != b"OK":
            raise SystemExit("%s: connection %d: mode: %r" % (path, i, r))
    if kind in ("sync", "modesync"):
        c.sendall(b"sync\n")
    conns.append([i, c])

open_ = {c.fileno(): (i, c) for i, c in conns}
order = [i for i, _ in conns]


to_close = 0


def close_oldest(signum, frame):
    global to_close
    to_close += 1


signal.signal(signal.SIGUSR1, close_oldest)
log("ready %d" % n)
while True:
    while to_close and order:
        to_close -= 1
        i = order.pop(0)
        for fd, (j, c) in list(open_.items()):
            if j == i:
                c.close()
                del open_[fd]
                log("%d closed" % i)
    r, _, _ = select.select(list(open_), [], [], 0.1)
    for fd in r:
        i, c = open_[fd]
        try:
            data = c.recv(4096)
        except ConnectionResetError:
            data = b""
        if not data:
            log("%d eof" % i)
            c.close()
            del open_[fd]
            order.remove(i)
        else:
            for line in data.decode(errors="replace").splitlines():
                if line == "OK" or line.startswith("ERR "):
                    log("%d reply %s" % (i, line))
