# SPDX-License-Identifier: GPL-2.0-or-later
"""Data generator and checker of the NBD backing store tests.

The model is a plain file holding what the device must contain; every
acknowledged write and zero is applied to it.  Tests compare it with the
device (through NBD), with the remote's backing file (cmp), or with an
nbdcopy of the remote.  Everything is seeded, and the seed is printed.

  remote-io.py init FILE SIZE SEED EXTENTS   sparse file, random extents
  remote-io.py write URI MODEL SEED COUNT [MAXLEN]
                 COUNT random writes (1 in 8 a zero), unaligned, up to
                 MAXLEN bytes (default 1 MiB); MODEL is updated
  remote-io.py writer URI MODEL SEED STOPFILE [MAXLEN]
                 the same until STOPFILE exists; prints the count
  remote-io.py check URI MODEL               whole device == MODEL
  remote-io.py read URI MODEL OFFSET LENGTH  that range == MODEL
  remote-io.py read-eio URI OFFSET LENGTH    that read fails with EIO

Run with /usr/bin/python3 (it has the libnbd bindings).
"""

import errno
import os
import random
import sys

import nbd

# The script's own directory is on sys.path: share the core tests' helper.
from model import first_diff

MiB = 1 << 20


def fail (msg):
    print ("FAIL: " + msg, file=sys.stderr, flush=True)
    sys.exit (1)


def load (path):
    with open (path, "rb") as f:
        return bytearray (f.read ())


def save (path, buf):
    tmp = path + ".tmp"
    with open (tmp, "wb") as f:
        f.write (buf)
    os.rename (tmp, path)


def connect (uri):
    """$RIO_TLS_PSK and $RIO_TLS_USERNAME set TLS-PSK credentials for
    nbds:// URIs (the TLS test checks the remote through them)."""
    h = nbd.NBD ()
    if os.environ.get ("RIO_TLS_PSK"):
        h.set_tls_psk_file (os.environ["RIO_TLS_PSK"])
    if os.environ.get ("RIO_TLS_USERNAME"):
        h.set_tls_username (os.environ["RIO_TLS_USERNAME"])
    h.connect_uri (uri)
    return h


def compare (what, got, want, base):
    if got != want:
        d = first_diff (got, want)
        fail ("%s differs at offset %d: got %s, expected %s"
              % (what, base + d, bytes (got[d:d + 16]).hex (),
                 bytes (want[d:d + 16]).hex ()))


def cmd_init (path, size, seed, extents):
    size, rng = int (size), random.Random (int (seed))
    print ("init seed %s" % seed)
    with open (path, "wb") as f:
        f.truncate (size)
        for _ in range (int (extents)):
            n = rng.randint (1, 2 * MiB)
            off = rng.randrange (0, size - n)
            f.seek (off)
            f.write (rng.randbytes (n))


def one_op (h, m, rng, maxlen):
    size = len (m)
    n = rng.randint (1, maxlen)
    off = rng.randrange (0, size - n + 1)
    if rng.randrange (8) == 0:
        h.zero (n, off)
        m[off:off + n] = bytes (n)
    else:
        data = rng.randbytes (n)
        h.pwrite (data, off)
        m[off:off + n] = data


def cmd_write (uri, model, seed, count, maxlen=MiB):
    rng = random.Random (int (seed))
    print ("write seed %s" % seed)
    m = load (model)
    h = connect (uri)
    if h.get_size () != len (m):
        fail ("device size %d, model %d" % (h.get_size (), len (m)))
    for _ in range (int (count)):
        one_op (h, m, rng, int (maxlen))
    h.shutdown ()
    save (model, m)


def cmd_writer (uri, model, seed, stopfile, maxlen=MiB):
    rng = random.Random (int (seed))
    print ("writer seed %s" % seed)
    m = load (model)
    h = connect (uri)
    n = 0
    while not os.path.exists (stopfile):
        one_op (h, m, rng, int (maxlen))
        n += 1
    h.shutdown ()
    save (model, m)
    print ("writer: %d writes" % n)


def cmd_check (uri, model):
    m = load (model)
    h = connect (uri)
    if h.get_size () != len (m):
        fail ("device size %d, model %d" % (h.get_size (), len (m)))
    off = 0
    while off < len (m):
        n = min (8 * MiB, len (m) - off)
        compare ("device", h.pread (n, off), m[off:off + n], off)
        off += n
    h.shutdown ()


def cmd_read (uri, model, offset, length):
    m = load (model)
    off, n = int (offset), int (length)
    h = connect (uri)
    compare ("read", h.pread (n, off), m[off:off + n], off)
    h.shutdown ()


def cmd_read_eio (uri, offset, length):
    h = connect (uri)
    try:
        h.pread (int (length), int (offset))
    except nbd.Error as e:
        # The bindings give the errno as its name ("EIO").
        if e.errno not in (errno.EIO, "EIO"):
            fail ("read failed with %s, expected EIO: %s"
                  % (errno.errorcode.get (e.errno, e.errno), e))
        print ("read failed with EIO as expected: %s" % e)
        return
    fail ("read of %s bytes at %s succeeded, expected EIO" % (length, offset))


cmds = {
    "init": cmd_init, "write": cmd_write, "writer": cmd_writer,
    "check": cmd_check, "read": cmd_read, "read-eio": cmd_read_eio,
}

if len (sys.argv) < 2 or sys.argv[1] not in cmds:
    print (__doc__, file=sys.stderr)
    sys.exit (2)
cmds[sys.argv[1]] (*sys.argv[2:])
