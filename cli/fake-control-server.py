#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-or-later
# A control socket that misbehaves in the ways the real plugin never
# does, to test how ramback(1) reports them:
#   fake-control-server.py SOCKET BEHAVIOUR
# BEHAVIOUR (for every request):
#   errname   reply "ERR not-an-errno-name" (a malformed final line)
#   badjson   "status json" gets a data line that is not JSON
#   nomode    "status json" gets a JSON object without "mode"
#   badfinal  reply "OKAY"
#   binary    reply with NUL bytes
#   hangup    close the connection without a reply
#   nosync    answer "status json" with a plausible status, never
#             answer anything else
#   replay FILE   answer "status json" with FILE's one line, byte for
#             byte, and anything else with ERR EINVAL
# Writes its pid to SOCKET.pid once listening; serves until killed.
import os
import socket
import sys
import threading

path, behaviour = sys.argv[1], sys.argv[2]
if behaviour == "replay":
    with open(sys.argv[3], "rb") as rf:
        replayed = rf.read().rstrip(b"\n") + b"\nOK\n"
replies = {
    "errname": b"ERR not-an-errno-name\n",
    "badjson": b"{\"mode\": writeback\nOK\n",
    "nomode": b"{\"size\": 1048576}\nOK\n",
    "badfinal": b"OKAY\n",
    "binary": b"\x00\x01\x02\x03\n",
}
status = (b'{"mode":"writeback","populated":true,"progress":1,'
          b'"size":1048576,"dirty_bytes":0,"inflight_bytes":0,'
          b'"stored_bytes":0}\nOK\n')
if behaviour not in replies and behaviour not in ("hangup", "nosync",
                                                 "replay"):
    sys.exit("unknown behaviour " + behaviour)


def serve(conn):
    f = conn.makefile("rb")
    for line in f:
        if behaviour == "hangup":
            break
        if behaviour == "replay":
            conn.sendall(replayed if line.strip() == b"status json"
                         else b"ERR EINVAL\n")
            continue
        if behaviour == "nosync":
            if line.strip () == b"status json":
                conn.sendall (status)
            continue
        conn.sendall(replies[behaviour])
    conn.close()


try:
    os.unlink(path)
except FileNotFoundError:
    pass
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind(path)
s.listen(8)
with open(path + ".pid", "w") as pf:
    pf.write("%d\n" % os.getpid())
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
