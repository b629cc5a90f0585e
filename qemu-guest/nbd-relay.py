#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-or-later
#
# guestfwd helper: QEMU's user networking runs this once per guest TCP
# connection with that connection on stdin/stdout, and it relays the bytes
# to nbdkit's Unix socket (argv[1]).
#
# Why not socat: libslirp hands the command a loopback *TCP* socket, and
# slirp writes the guest's data into it in pieces without TCP_NODELAY.
# With the relay's kernel delaying its ACKs (40 ms on Linux), Nagle holds
# the tail of every NBD request until that ACK: each request took 42 ms.
# Re-arming TCP_QUICKACK after every read sends the pending ACK at once,
# and TCP_NODELAY on our side does the same for the replies.

import os
import selectors
import socket
import sys

BUF = 1 << 20


def main():
    guest = socket.socket(fileno=os.dup(0))
    os.close(0)
    os.close(1)
    tcp = guest.family in (socket.AF_INET, socket.AF_INET6)
    if tcp:
        guest.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.connect(sys.argv[1])

    peer = {guest: server, server: guest}
    sel = selectors.DefaultSelector()
    sel.register(guest, selectors.EVENT_READ)
    sel.register(server, selectors.EVENT_READ)
    while True:
        for key, _ in sel.select():
            src = key.fileobj
            try:
                data = src.recv(BUF)
            except ConnectionError:
                data = b""
            if src is guest and tcp:
                guest.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
            if not data:
                # Either side closing ends the relay: NBD has no half-close.
                return
            try:
                peer[src].sendall(data)
            except (ConnectionError, BrokenPipeError):
                return


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        pass
