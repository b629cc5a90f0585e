# SPDX-License-Identifier: GPL-2.0-or-later
"""The point-in-time checker of the write-back journal.

  journal-crash.py client URI SEED SIZE ACKLOG
      Writes op 0, 1, 2, ... to the device, in order, one at a time,
      with a FLUSH after every few writes, until a request fails (the
      server was killed).  After each acknowledgement it appends to
      ACKLOG "w I" (write I acknowledged) or "f N" (a FLUSH issued
      after N writes were acknowledged was acknowledged).

  journal-crash.py check IMAGE SEED SIZE ACKLOG [wait|ignore]
      IMAGE must be the device as it was after SOME prefix 0..K-1 of
      the writes (a point in time), and with fsync=wait (the default) K
      must cover every write acknowledged before the last acknowledged
      FLUSH.

Op I is derived from (SEED, I) alone, so the checker regenerates what
the client wrote.  Every 512-byte sector of op I starts with (I + 1,
MAGIC): the largest stamp found in IMAGE names the only prefix it can
be, which the checker then compares byte for byte.  The device starts
all zero.
"""

import random
import struct
import sys

import nbd

MAGIC = 0x4a524e4c43524153     # "SARCLNRJ"
SECTOR = 512
BLOCK = 4096


def op (seed, i, size):
    rng = random.Random (seed * 1000003 + i)
    nblocks = rng.choice ((1, 1, 1, 2, 4, 8, 16))
    off = rng.randrange (0, size // BLOCK - nblocks + 1) * BLOCK
    data = bytearray (rng.randbytes (nblocks * BLOCK))
    for s in range (0, len (data), SECTOR):
        data[s:s + 16] = struct.pack ("<QQ", i + 1, MAGIC)
    return off, bytes (data)


def client (uri, seed, size, acklog):
    rng = random.Random (seed)
    h = nbd.NBD ()
    h.connect_uri (uri)
    log = open (acklog, "a", buffering=1)
    i = 0
    try:
        while True:
            off, data = op (seed, i, size)
            h.pwrite (data, off)
            i += 1
            log.write ("w %d\n" % (i - 1))
            if rng.random () < 0.2:
                n = i
                h.flush ()
                log.write ("f %d\n" % n)
    except nbd.Error:
        pass                    # the server is gone: that is the point
    log.close ()


def check (image, seed, size, acklog, fsync="wait"):
    img = open (image, "rb").read ()
    if len (img) != size:
        sys.exit ("FAIL: %s is %d bytes, expected %d" % (image, len (img), size))
    acked = flushed = 0
    for line in open (acklog):
        kind, n = line.split ()
        if kind == "w":
            acked = int (n) + 1
        else:
            flushed = int (n)
    k = 0
    for s in range (0, size, SECTOR):
        stamp, magic = struct.unpack_from ("<QQ", img, s)
        if magic == MAGIC and stamp > k:
            k = stamp
    model = bytearray (size)
    for i in range (k):
        off, data = op (seed, i, size)
        model[off:off + len (data)] = data
    if img != model:
        diff = next (j for j in range (size) if img[j] != model[j])
        st = struct.unpack_from ("<QQ", img, diff - diff % SECTOR)
        want = struct.unpack_from ("<QQ", model, diff - diff % SECTOR)
        sys.exit ("FAIL: the image is no point in time: it holds write %d, "
                  "but differs from the device after writes 0..%d at "
                  "offset %d (sector stamped %s, expected %s); %d writes "
                  "acknowledged, %d covered by a FLUSH"
                  % (k - 1, k - 1, diff, st[0] - 1 if st[1] == MAGIC
                     else "none", want[0] - 1 if want[1] == MAGIC
                     else "none", acked, flushed))
    if fsync == "wait" and k < flushed:
        sys.exit ("FAIL: the image is the device after %d writes, but %d "
                  "were covered by an acknowledged FLUSH" % (k, flushed))
    print ("ok: the image is the device after %d writes (%d acknowledged, "
           "%d covered by a FLUSH)" % (k, acked, flushed))


if __name__ == "__main__":
    cmd, a, seed, size, acklog = sys.argv[1:6]
    if cmd == "client":
        client (a, int (seed), int (size), acklog)
    else:
        check (a, int (seed), int (size), acklog, *sys.argv[6:])
