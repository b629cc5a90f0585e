# SPDX-License-Identifier: GPL-2.0-or-later
"""Shared Python helpers for the core plugin's integration tests.

A Model is a bytearray shadow of what the device must contain.  Tests
apply every acknowledged write, zero and trim to it, then compare it with
what the server returns over NBD and, after a clean stop, with the
backing file itself.  Control is a client of the control socket
(docs/ramback-control.pod).  Everything is seeded: a failing run prints
its seed and can be repeated exactly with SEED=N.

Run with /usr/bin/python3 (the distribution's libnbd bindings) and
PYTHONPATH=$top_srcdir/tests.
"""

import errno
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

import nbd

import rbctl
from rbctl import ControlError

KiB = 1 << 10
MiB = 1 << 20

# Largest request the tests send in one NBD command; reads used for
# whole-device comparisons are split into pieces of this size.
MAX_IO = 4 * MiB
READ_PIECE = 8 * MiB


class TestFailure (Exception):
    pass


def fail (msg):
    raise TestFailure (msg)


def log (*args):
    print (*args, flush=True)


def seed_from_env (default):
    """The seed: $SEED if set, else the test's fixed default.  Printed so
    that a failure in the log can be replayed."""
    s = int (os.environ.get ("SEED", default))
    log ("seed: %d (replay with SEED=%d)" % (s, s))
    return s


def first_diff (a, b):
    """Offset of the first byte where a and b differ, or -1."""
    n = min (len (a), len (b))
    if a[:n] == b[:n]:
        return -1 if len (a) == len (b) else n
    lo, hi = 0, n
    # Binary search on equal prefixes: cheap even for 100 MB buffers.
    while hi - lo > 4096:
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    for i in range (lo, hi):
        if a[i] != b[i]:
            return i
    return hi


def describe_diff (what, offset, got, want, base=0):
    end = offset
    while end < min (len (got), len (want)) and got[end] != want[end]:
        end += 1
        if end - offset >= 1 << 20:
            break
    return ("%s differs at offset %d (0x%x)%s: got %s, expected %s"
            % (what, base + offset, base + offset,
               ", %d+ bytes" % (end - offset),
               bytes (got[offset:offset + 16]).hex (),
               bytes (want[offset:offset + 16]).hex ()))


class Model:
    """What the device must contain."""

    def __init__ (self, size, initial=None):
        if initial is not None:
            assert len (initial) == size
            self.buf = bytearray (initial)
        else:
            self.buf = bytearray (size)
        self.size = size

    @classmethod
    def from_file (cls, path):
        with open (path, "rb") as f:
            data = f.read ()
        return cls (len (data), data)

    def write (self, offset, data):
        assert offset + len (data) <= self.size
        self.buf[offset:offset + len (data)] = data

    def zero (self, offset, count):
        assert offset + count <= self.size
        self.buf[offset:offset + count] = bytes (count)

    def save (self, path):
        with open (path, "wb") as f:
            f.write (self.buf)

    def check_range (self, got, offset, what="read"):
        want = self.buf[offset:offset + len (got)]
        if got != want:
            d = first_diff (got, want)
            fail (describe_diff ("%s of [%d, +%d)" % (what, offset, len (got)),
                                 d, got, want, offset))

    def check_nbd (self, h, what="device"):
        """Read the whole device through NBD and compare."""
        size = h.get_size ()
        if size != self.size:
            fail ("%s: NBD size %d, expected %d" % (what, size, self.size))
        off = 0
        while off < size:
            n = min (READ_PIECE, size - off)
            self.check_range (h.pread (n, off), off, what)
            off += n

    def check_file (self, path, what=None):
        """Compare the backing file itself, byte for byte; an
        rbd:POOL/IMAGE is exported first (the cluster of $CEPH_CONF)."""
        what = what or ("backing file %s" % path)
        if path.startswith ("rbd:"):
            with tempfile.TemporaryDirectory () as d:
                f = os.path.join (d, "export.img")
                subprocess.run (["rbd", "-c", os.environ["CEPH_CONF"],
                                 "export", "--no-progress", path[4:], f],
                                check=True, stdout=subprocess.DEVNULL)
                return self.check_file (f, what)
        st = os.stat (path)
        if st.st_size != self.size:
            fail ("%s: size %d, expected %d" % (what, st.st_size, self.size))
        with open (path, "rb") as f:
            off = 0
            while off < self.size:
                got = f.read (READ_PIECE)
                if not got:
                    fail ("%s: short read at %d" % (what, off))
                self.check_range (got, off, what)
                off += len (got)


def connect (uri):
    h = nbd.NBD ()
    h.connect_uri (uri)
    return h


# --- control socket --------------------------------------------------------

class Control (rbctl.Control):
    """rbctl.Control with the tests' failure reporting and waits."""

    def status (self):
        data = self ("status json")
        if len (data) != 1:
            fail ("status json: expected one data line, got %r" % data)
        return json.loads (data[0])

    def sync (self, timeout_ms=None):
        self ("sync" if timeout_ms is None else "sync %d" % timeout_ms)

    def status_no_errors (self, what):
        """The status, after checking that no store request and no sync
        has failed (store_errors, sync_errors)."""
        st = self.status ()
        if st["store_errors"] or st["sync_errors"]:
            fail ("%s: store_errors=%d sync_errors=%d, last_error %r"
                  % (what, st["store_errors"], st["sync_errors"],
                     st["last_error"]))
        return st

    def wait_for (self, pred, timeout=30.0, what="condition"):
        """Poll status until pred(status) is true; return that status."""
        deadline = time.monotonic () + timeout
        while True:
            st = self.status ()
            if pred (st):
                return st
            if time.monotonic () > deadline:
                fail ("timed out after %gs waiting for %s; last status: %s"
                      % (timeout, what, json.dumps (st)))
            time.sleep (0.02)


# --- random workloads ------------------------------------------------------

def expect_sync_fails (ctl, timeout_ms, errnames, if_not):
    """A control "sync" must fail, with one of errnames; if_not is the
    failure message if it succeeds."""
    try:
        ctl.sync (timeout_ms)
    except ControlError as e:
        if e.errname not in errnames:
            fail ("control sync: %s" % e)
        log ("ok: control sync failed: %s" % e.reply)
        return
    fail (if_not)


def flush_in_thread (uri, daemon=False):
    """Start an NBD FLUSH on a new connection to uri, in a thread.
    Returns the thread and a list that gets "ok" or the nbd.Error."""
    res = []

    def run ():
        try:
            h = connect (uri)
            h.flush ()
            res.append ("ok")
        except nbd.Error as e:
            res.append (e)
    t = threading.Thread (target=run, daemon=daemon)
    t.start ()
    return t, res


def expect_write_refused (h):
    """A write to h's (read-only) export must fail."""
    try:
        h.pwrite (b"x" * 512, 0)
    except nbd.Error as e:
        log ("ok: write refused: %s" % e)
        return
    fail ("a write to the read-only export succeeded")


_fd_seq = [0]


def fd_cmd (d, line):
    """One command to the fault injecting test server
    (tests/faultdisk-plugin.c) through its command directory d; returns
    the reply's key=value lines as a dict.  Fails on an error reply or
    on none in 30 s."""
    _fd_seq[0] += 1
    name = "%s/py%04d" % (d, _fd_seq[0])
    open (name + ".tmp", "w").write (line + "\n")
    os.rename (name + ".tmp", name + ".cmd")
    for _ in range (600):
        if os.path.exists (name + ".reply"):
            r = open (name + ".reply").read ().split ("\n")
            os.unlink (name + ".reply")
            if r[0] != "ok":
                fail ("faultdisk %r: %r" % (line, r))
            return dict (l.split ("=", 1) for l in r[1:] if "=" in l)
        time.sleep (0.05)
    fail ("faultdisk: no reply to " + line)


def rand_len (rng, lo, hi):
    """Log-uniform length in [lo, hi]: as many tiny writes as huge ones."""
    if lo >= hi:
        return lo
    import math
    return min (hi, max (lo, int (math.exp (rng.uniform (math.log (lo),
                                                       math.log (hi + 1))))))


def rand_data (rng, n):
    """Mostly random bytes; sometimes a repeated byte or all zeroes, which
    a server may store as a zero chunk."""
    r = rng.random ()
    if r < 0.08:
        return bytes (n)
    if r < 0.15:
        return bytes ([rng.randrange (1, 256)]) * n
    return rng.randbytes (n)


def rand_extent (rng, size, chunk, maxlen, minlen=1):
    """A random (offset, count) inside the device, biased towards the
    interesting places: chunk boundaries and the (partial) last chunk."""
    n = rand_len (rng, minlen, min (maxlen, size))
    r = rng.random ()
    if r < 0.15:
        # Touch the last, possibly partial, chunk.
        last = (size - 1) // chunk * chunk
        off = rng.randint (max (0, last - n + 1), size - n)
    elif r < 0.45:
        # Start or end a few bytes either side of a chunk boundary.
        b = rng.randrange (0, size // chunk + 1) * chunk
        off = b + rng.randrange (-3, 4)
        if rng.random () < 0.5:
            off -= n
        off = max (0, min (size - n, off))
    elif r < 0.6:
        # Exactly chunk aligned, whole chunks: no read-modify-write.
        nch = max (1, n // chunk)
        n = min (nch * chunk, size // chunk * chunk) or n
        off = rng.randrange (0, max (1, (size - n) // chunk + 1)) * chunk
        off = max (0, min (size - n, off))
    else:
        off = rng.randrange (0, size - n + 1)
    assert 0 <= off and off + n <= size and n >= 1
    return off, n


def random_ops (h, model, rng, nops, chunk, maxlen=MAX_IO, check_every=50,
                on_check=None, fua=True, flush=True, log_ops=False):
    """Apply nops random operations to the server and the model.  Every
    check_every ops the whole device is read back and compared; on_check
    (if given) is then called with the op number."""
    can_trim = h.can_trim ()
    can_zero = h.can_zero ()
    counts = {}
    for i in range (1, nops + 1):
        r = rng.random ()
        if r < 0.60:
            op = "write"
            off, n = rand_extent (rng, model.size, chunk, maxlen)
            data = rand_data (rng, n)
            flags = nbd.CMD_FLAG_FUA if fua and rng.random () < 0.05 else 0
            h.pwrite (data, off, flags)
            model.write (off, data)
        elif r < 0.70 and can_trim:
            op = "trim"
            off, n = rand_extent (rng, model.size, chunk, 2 * maxlen)
            old = bytes (model.buf[off:off + n])
            h.trim (n, off)
            # NBD leaves trimmed content unspecified; ramback may zero all
            # of it or keep partial chunks.  Each byte must be its old value
            # or zero, and from now on it must stay what we read.
            got = h.pread (n, off)
            if got != old:
                z = bytes (n)
                for j in range (0, n, 65536):
                    g, o = got[j:j + 65536], old[j:j + 65536]
                    if g != o and g != z[:len (g)]:
                        for k in range (len (g)):
                            if g[k] != o[k] and g[k] != 0:
                                fail ("after trim [%d,+%d): byte at %d is "
                                      "0x%02x, neither old 0x%02x nor zero"
                                      % (off, n, off + j + k, g[k], o[k]))
            model.write (off, got)
        elif r < 0.80 and can_zero:
            op = "zero"
            off, n = rand_extent (rng, model.size, chunk, 2 * maxlen)
            flags = 0
            if rng.random () < 0.3:
                flags |= nbd.CMD_FLAG_NO_HOLE
            if fua and rng.random () < 0.05:
                flags |= nbd.CMD_FLAG_FUA
            h.zero (n, off, flags)
            model.zero (off, n)
        elif r < 0.95:
            op = "read"
            off, n = rand_extent (rng, model.size, chunk, maxlen)
            model.check_range (h.pread (n, off), off, "read #%d" % i)
        elif flush:
            op = "flush"
            h.flush ()
        else:
            op = "read"
            off, n = rand_extent (rng, model.size, chunk, maxlen)
            model.check_range (h.pread (n, off), off, "read #%d" % i)
        counts[op] = counts.get (op, 0) + 1
        if log_ops and op != "flush":
            log ("  op %d: %s [%d, +%d)" % (i, op, off, n))
        if check_every and i % check_every == 0:
            model.check_nbd (h, "device after op %d" % i)
            if on_check:
                on_check (i)
    return counts


def make_sparse_image (path, size, rng, extents, maxlen=4 * MiB):
    """A backing file with random data in 'extents' places and holes
    elsewhere; returns its Model."""
    with open (path, "wb") as f:
        f.truncate (size)
    model = Model (size)
    with open (path, "r+b") as f:
        for _ in range (extents):
            n = rand_len (rng, 1, maxlen)
            off = rng.randrange (0, size - n + 1)
            data = rng.randbytes (n)
            f.seek (off)
            f.write (data)
            model.write (off, data)
        # Always end in data so the partial last chunk holds something.
        tail = rng.randbytes (min (size, 777))
        f.seek (size - len (tail))
        f.write (tail)
        model.write (size - len (tail), tail)
    return model


def main (fn):
    """Run a test body; print FAIL and exit 1 on a failed assertion."""
    try:
        fn ()
    except TestFailure as e:
        print ("FAIL: %s" % e, file=sys.stderr, flush=True)
        sys.exit (1)
    except nbd.Error as e:
        print ("FAIL: NBD error: %s (errno %s)" % (e, e.errno), file=sys.stderr,
               flush=True)
        sys.exit (1)
    except ControlError as e:
        print ("FAIL: %s" % e, file=sys.stderr, flush=True)
        sys.exit (1)
