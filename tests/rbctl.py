#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""A small client of ramback's control socket (docs/ramback-control.pod)
for the tests, the benchmarks and the guest scenarios.

As a module: Control (one connection; requests are serialized) and
ControlError.  tests/model.py re-exports both.

As a command (tests/harness.sh's ctl and status_field call it):

  rbctl.py SOCK REQUEST...        one request; prints the data lines;
                                  exit 0 on OK, 1 on ERR (the ERR line on
                                  stderr), 2 if the server closed first
  rbctl.py --field SOCK NAME...   fields of "status json", one a line
                                  (booleans as true/false)
  rbctl.py --wait ...             either of the above, retrying the
                                  connection for 30 s (a server still
                                  starting)
  rbctl.py --drain-time SOCK PID  SIGTERM PID and poll "status json" on
                                  SOCK until the server closes it; prints
                                  the seconds that took, then the wall
                                  clock time of the SIGTERM
"""

import json
import os
import signal
import socket
import sys
import time


class ControlError (Exception):
    def __init__ (self, request, reply):
        Exception.__init__ (self, "control request %r: %s" % (request, reply))
        self.reply = reply
        # "ERR ENOSPC message" -> "ENOSPC"
        parts = reply.split (" ", 2)
        self.errname = parts[1] if len (parts) > 1 else ""


class Control:
    """One connection to the control socket; requests are serialized."""

    # The server disconnects a client that sends no request for 30 s
    # after its last reply (ramback-control(5)); a test that holds one
    # connection across a long step connects again before its next
    # request instead, well before that.
    IDLE_RECONNECT_S = 20

    def __init__ (self, path, timeout=120):
        self.path = path
        self.timeout = timeout
        self._connect ()

    def _connect (self):
        self.sock = socket.socket (socket.AF_UNIX, socket.SOCK_STREAM)
        # A blocking connect waits while the listen backlog is full; with
        # a timeout set, AF_UNIX fails at once with EAGAIN instead.
        self.sock.connect (self.path)
        self.sock.settimeout (self.timeout)
        self.f = self.sock.makefile ("rb")
        self.last = time.monotonic ()

    def close (self):
        self.f.close ()
        self.sock.close ()

    def raw (self, line):
        """Send one request (bytes or str, newline added); return
        (final line, data lines).  final is "" if the server closed."""
        if isinstance (line, str):
            line = line.encode ()
        if time.monotonic () - self.last > self.IDLE_RECONNECT_S:
            self.close ()
            self._connect ()
        # A request that waits (wait-populated MS, sync MS) may take its
        # whole bound before it answers: read for that long, and more.
        w = line.split ()
        wait_s = int (w[1]) / 1000 if len (w) == 2 and w[1].isdigit () else 0
        self.sock.settimeout (max (self.timeout, wait_s + 30))
        self.sock.sendall (line + b"\n")
        data = []
        while True:
            l = self.f.readline ()
            if not l:
                return "", data
            l = l.decode (errors="replace").rstrip ("\r\n")
            if l == "OK" or l.startswith ("ERR "):
                self.last = time.monotonic ()
                return l, data
            data.append (l)

    def __call__ (self, line):
        final, data = self.raw (line)
        if final != "OK":
            raise ControlError (line, final or "connection closed")
        return data

    def status (self):
        data = self ("status json")
        if len (data) != 1:
            raise ControlError ("status json",
                                "expected one data line, got %r" % data)
        return json.loads (data[0])


def _show (v):
    return str (v).lower () if isinstance (v, bool) else str (v)


def _drain_time (path, pid):
    c = Control (path)
    t0 = time.time ()
    os.kill (pid, signal.SIGTERM)
    try:
        while True:
            final, _ = c.raw ("status json")
            if not final:
                break
            time.sleep (0.002)
    except OSError:
        pass
    print (time.time () - t0)
    print (t0)


def _connect (path, tries):
    for i in range (tries):
        try:
            return Control (path)
        except OSError:
            if i == tries - 1:
                raise
            time.sleep (0.01)


def main (argv):
    tries = 1
    if argv[:1] == ["--wait"]:
        argv, tries = argv[1:], 3000
    if len (argv) >= 3 and argv[0] == "--field":
        st = _connect (argv[1], tries).status ()
        for k in argv[2:]:
            print (_show (st[k]))
        return 0
    if len (argv) == 3 and argv[0] == "--drain-time":
        _drain_time (argv[1], int (argv[2]))
        return 0
    if len (argv) < 2 or argv[0].startswith ("--"):
        print ("usage: rbctl.py [--wait] SOCK REQUEST... | "
               "[--wait] --field SOCK NAME... | --drain-time SOCK PID",
               file=sys.stderr)
        return 2
    final, data = _connect (argv[0], tries).raw (" ".join (argv[1:]))
    for l in data:
        print (l)
    if final == "OK":
        return 0
    if final:
        print (final, file=sys.stderr)
        return 1
    print ("control socket closed without a reply", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit (main (sys.argv[1:]))
