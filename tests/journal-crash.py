# SPDX-License-Identifier: GPL-2.0-or-later
"""The point-in-time checker of the write-back journal.

  journal-crash.py client URI SEED SIZE ACKLOG [PART NPARTS]
      Writes op 0, 1, 2, ... to the device, in order, one at a time,
      with a FLUSH after every few writes and the FUA flag on some
      writes, until a request fails (the server was killed).  After
      each acknowledgement it appends to ACKLOG "w I ISSUED ACKED"
      (write I, with the monotonic times it was sent and acknowledged;
      "u I ISSUED ACKED" for a FUA write) or "f N ISSUED" (a FLUSH sent
      at ISSUED after N writes were acknowledged was acknowledged).  With
      PART and NPARTS the client owns part PART of NPARTS equal parts of
      the device, and several clients (connections) run at once.

  journal-crash.py check IMAGE SEED SIZE wait|ignore ACKLOG...
      IMAGE must be the device as it was at one point in time: for each
      part (one ACKLOG each, in part order), its content after SOME
      prefix of that client's writes, and the prefixes must be
      consistent with the order of acknowledgements (no write in the
      image was sent after a write missing from it was acknowledged).
      With fsync=wait every write acknowledged before an acknowledged
      FLUSH was sent, on any connection, must be in the image, and so
      must every acknowledged FUA write.

Op I of a part is derived from (SEED, PART, I) alone, so the checker
regenerates what the client wrote.  Every 512-byte sector of op I
starts with (I + 1, MAGIC + PART): the largest stamp found in a part
names the only prefix it can be, which the checker then compares byte
for byte.  The device starts all zero.
"""

import random
import struct
import sys
import time

import nbd

MAGIC = 0x4a524e4c43524153     # "SARCLNRJ"
SECTOR = 512
BLOCK = 4096


def op (seed, part, i, size):
    rng = random.Random ((seed * 1000003 + i) * 64 + part)
    nblocks = rng.choice ((1, 1, 1, 2, 4, 8, 16))
    off = rng.randrange (0, size // BLOCK - nblocks + 1) * BLOCK
    data = bytearray (rng.randbytes (nblocks * BLOCK))
    for s in range (0, len (data), SECTOR):
        data[s:s + 16] = struct.pack ("<QQ", i + 1, MAGIC + part)
    return off, bytes (data)


def client (uri, seed, size, acklog, part=0, nparts=1):
    rng = random.Random (seed * 64 + part)
    psize = size // nparts
    base = part * psize
    h = nbd.NBD ()
    h.connect_uri (uri)
    # The test counts acknowledgements towards the cut only once every
    # client is connected: a late client must not find ramback killed.
    open (acklog + ".connected", "w").close ()
    log = open (acklog, "a", buffering=1)
    i = 0
    try:
        while True:
            off, data = op (seed, part, i, psize)
            fua = rng.random () < 0.1
            t0 = time.monotonic ()
            h.pwrite (data, base + off, nbd.CMD_FLAG_FUA if fua else 0)
            log.write ("%s %d %.6f %.6f\n"
                       % ("u" if fua else "w", i, t0, time.monotonic ()))
            i += 1
            if rng.random () < 0.2:
                n = i
                t0 = time.monotonic ()
                h.flush ()
                log.write ("f %d %.6f\n" % (n, t0))
    except nbd.Error:
        pass                    # the server is gone: that is the point
    log.close ()


def read_log (path):
    """[(issued, acked)] of the acknowledged writes, [issued] of the
    acknowledged FLUSHes, and how many writes the last acknowledged FUA
    write ends (0 if none)."""
    writes, flushes, fua = [], [], 0
    for line in open (path):
        w = line.split ()
        if w[0] in ("w", "u"):
            assert int (w[1]) == len (writes), path
            writes.append ((float (w[2]), float (w[3])))
            if w[0] == "u":
                fua = len (writes)
        else:
            flushes.append (float (w[2]))
    return writes, flushes, fua


def check (image, seed, size, fsync, acklogs):
    img = open (image, "rb").read ()
    if len (img) != size:
        sys.exit ("FAIL: %s is %d bytes, expected %d" % (image, len (img), size))
    nparts = len (acklogs)
    psize = size // nparts
    logs = [read_log (a) for a in acklogs]
    ks = []
    for part in range (nparts):
        base = part * psize
        k = 0
        for s in range (base, base + psize, SECTOR):
            stamp, magic = struct.unpack_from ("<QQ", img, s)
            if magic == MAGIC + part and stamp > k:
                k = stamp
        model = bytearray (psize)
        for i in range (k):
            off, data = op (seed, part, i, psize)
            model[off:off + len (data)] = data
        got = img[base:base + psize]
        if got != model:
            diff = next (j for j in range (psize) if got[j] != model[j])
            st = struct.unpack_from ("<QQ", got, diff - diff % SECTOR)
            want = struct.unpack_from ("<QQ", model, diff - diff % SECTOR)
            sys.exit ("FAIL: part %d is no point in time: it holds write %d, "
                      "but differs from the part after writes 0..%d at "
                      "offset %d (sector stamped %s, expected %s); %d writes "
                      "acknowledged"
                      % (part, k - 1, k - 1, base + diff,
                         st[0] - 1 if st[1] == MAGIC + part else "none",
                         want[0] - 1 if want[1] == MAGIC + part else "none",
                         len (logs[part][0])))
        ks.append (k)
    # One point in time: nothing in the image was sent after something
    # missing from it had been acknowledged.
    for p in range (nparts):
        wp = logs[p][0]
        if ks[p] >= len (wp):
            continue            # nothing acknowledged is missing
        missing_acked = wp[ks[p]][1]
        for q in range (nparts):
            if q != p and ks[q] > 0 and ks[q] <= len (logs[q][0]) and \
               logs[q][0][ks[q] - 1][0] > missing_acked:
                sys.exit ("FAIL: not one point in time: part %d's write %d "
                          "is in the image, and was sent after part %d's "
                          "write %d, which is not, was acknowledged"
                          % (q, ks[q] - 1, p, ks[p]))
    # fsync=wait: what an acknowledged FLUSH covers is there, and so is
    # an acknowledged FUA write (with the prefix before it, since the
    # image is a point in time).
    covered = [0] * nparts
    if fsync == "wait":
        for p in range (nparts):
            covered[p] = logs[p][2]
        for p in range (nparts):
            for tf in logs[p][1]:
                for q in range (nparts):
                    n = sum (1 for (_, a) in logs[q][0] if a < tf)
                    covered[q] = max (covered[q], n)
        for p in range (nparts):
            if ks[p] < covered[p]:
                sys.exit ("FAIL: part %d is the part after %d writes, but %d "
                          "were covered by an acknowledged FLUSH or FUA "
                          "write" % (p, ks[p], covered[p]))
    print ("ok: a point in time: %s" % ", ".join (
        "part %d after %d writes (%d acknowledged, %d covered by a FLUSH "
        "or FUA)"
        % (p, ks[p], len (logs[p][0]), covered[p]) for p in range (nparts)))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "client":
        uri, seed, size, acklog = sys.argv[2:6]
        rest = [int (x) for x in sys.argv[6:8]]
        client (uri, int (seed), int (size), acklog, *rest)
    else:
        image, seed, size, fsync = sys.argv[2:6]
        check (image, int (seed), int (size), fsync, sys.argv[6:])
