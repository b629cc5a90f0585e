# SPDX-License-Identifier: GPL-2.0-or-later
"""Model-checked crash test of ram= resume (run by test-crash-resume.sh).

Two connections apply random writes, zeroes, trims, reads and flushes
to a ramback whose image lives in a ram= file on a tmpfs, and to a
Model of what the device must hold.  At a random moment nbdkit is
killed with SIGKILL (in writeback and writethrough mode, with write
back slowed by flush-rate= so the flusher is mid-batch, with
fsync=wait so syncs run, and during a populate slowed by
populate-rate=), then started again on the same ram= and back=.  After
every restart:

  - every acknowledged request must read back exactly;
  - a request that was in flight at the kill may read back as its old
    or its new value, byte by byte (a copy into RAM can be cut short);
    what it reads is then what the model holds from there on;
  - status says image_source resumed-crash.

Some starts have populate=false (the first one always): chunks are then
loaded only in part, by the sectors the requests miss, and they are in
that state at the kills; the run fails if no start ever resumed an
image with such partial chunks (with chunks larger than a sector).

The two connections never have overlapping requests in flight at once
(overlapping requests in flight have no defined result in NBD).  Some
cycles end in a clean stop instead: then the backing file must equal
the model, and the next start resumes with nothing to write.  The run
ends with a clean stop and the same comparison.

With FAULTDISK (the path of tests' faultdisk plugin) the backing store
is that plugin serving the backing file over NBD, and most kills are
forced rather than timed: a FLUSH (the sync that ends a write back
sweep, or a FUA/FLUSH with fsync=wait) or a write back write is held
by the server, ramback is killed while it waits for it, and the held
request is then applied or failed.  Before the restart the driver
waits until the server has no connection left, so that nothing of the
dead ramback lands after the new one started.

Environment: PLUGIN, NBDKIT, NBDKIT_PRELOAD (sanitizer runtime), TMP,
RAMDIR (a tmpfs), CHUNK, SIZE, SECONDS_BUDGET (time budget) or CYCLES,
SEED, FAULTDISK, RBD_IMAGE (with CEPH_CONF), RAM_SIZE (ram-size= of
every start: chunks are evicted from the ram= file, and holes in it
at a kill).
"""

import os
import random
import signal
import subprocess
import sys
import threading
import time

import nbd

import model as M

PLUGIN = os.environ["PLUGIN"]
NBDKIT = os.environ.get ("NBDKIT", "nbdkit")
PRELOAD = os.environ.get ("NBDKIT_PRELOAD", "")
TMP = os.environ["TMP"]
RAMDIR = os.environ.get ("RAMDIR", "/dev/shm")
CHUNK = int (os.environ.get ("CHUNK", "65536"))
SIZE = int (os.environ.get ("SIZE", str (4 * M.MiB + 52345)))
SECONDS = float (os.environ.get ("SECONDS_BUDGET", "45"))
CYCLES = int (os.environ.get ("CYCLES", "0"))
MAXLEN = 256 * M.KiB
FAULTDISK = os.environ.get ("FAULTDISK", "")
# RBD_IMAGE=POOL/IMAGE: the backing store is that Ceph RBD image (made
# here from the initial backing file) of the cluster of $CEPH_CONF.
RBD_IMAGE = os.environ.get ("RBD_IMAGE", "")
RAM_SIZE = os.environ.get ("RAM_SIZE", "")


def nbdkit_env ():
    env = dict (os.environ)
    if PRELOAD:
        env["LD_PRELOAD"] = PRELOAD
        env["ASAN_OPTIONS"] = "detect_leaks=0:abort_on_error=1"
    return env


class FaultDisk:
    """The faultdisk test plugin serving the backing file over NBD;
    commands through files in a directory (tests/faultdisk-plugin.c)."""

    class Died (Exception):
        pass

    def __init__ (self, img):
        self.img = img
        self.dir = os.path.join (TMP, "fd-%d" % CHUNK)
        os.makedirs (self.dir, exist_ok=True)
        self.sock = os.path.join (TMP, "fd-%d.sock" % CHUNK)
        self.log = os.path.join (TMP, "fd-%d.log" % CHUNK)
        self.seq = 0
        self.restarts = 0
        self.start ()

    def start (self):
        if os.path.exists (self.sock):
            os.unlink (self.sock)
        self.p = subprocess.Popen ([NBDKIT, "-f", "-v", "-U", self.sock,
                                    FAULTDISK, "file=" + self.img,
                                    "dir=" + self.dir],
                                   stdout=open (self.log, "a"),
                                   stderr=subprocess.STDOUT,
                                   env=nbdkit_env ())
        deadline = time.monotonic () + 60
        while not os.path.exists (self.sock):
            if self.p.poll () is not None or time.monotonic () > deadline:
                M.fail ("faultdisk did not start")
            time.sleep (0.02)
        self.uri = "nbd+unix:///?socket=" + self.sock

    def cmd (self, line, may_die=False):
        self.seq += 1
        name = os.path.join (self.dir, "c%06d" % self.seq)
        with open (name + ".tmp", "w") as f:
            f.write (line + "\n")
        os.rename (name + ".tmp", name + ".cmd")
        deadline = time.monotonic () + 60
        while not os.path.exists (name + ".reply"):
            if may_die and self.p.poll () is not None:
                raise FaultDisk.Died ()
            if self.p.poll () is not None or time.monotonic () > deadline:
                self.fail ("no reply to %r" % line)
            time.sleep (0.005)
        with open (name + ".reply") as f:
            lines = f.read ().splitlines ()
        os.unlink (name + ".reply")
        if not lines or lines[0] != "ok":
            M.fail ("faultdisk: %r: %s" % (line, lines[:1]))
        return lines[1:]

    def status (self, may_die=False):
        return dict (l.split ("=", 1) for l in self.cmd ("status", may_die))

    def wait_for (self, key, value, timeout=120, may_die=False):
        deadline = time.monotonic () + timeout
        while self.status (may_die).get (key) != value:
            if time.monotonic () > deadline:
                M.fail ("faultdisk: %s is not %s after %d s: %s"
                        % (key, value, timeout, self.status ()))
            time.sleep (0.01)

    def release_after_kill (self, how):
        """Let the held request go on after its client (ramback) was
        killed, and wait until nothing of that client is left.  nbdkit
        1.32 itself can abort here ("raw_send_socket: Assertion `sock >=
        0' failed"): the reply races the server's own close of the dead
        connection.  That is the test server's nbdkit, not ramback; it
        serves a plain file, and an applied write reached the file
        before the reply, so a new server serves the same data."""
        try:
            self.cmd ("release all " + how, may_die=True)
            self.wait_for ("connections", "0", may_die=True)
        except FaultDisk.Died:
            with open (self.log) as f:
                log = f.read ()
            if "raw_send_socket: Assertion" not in log[-4000:]:
                self.fail ("died after 'release all %s'" % how)
            print ("faultdisk: nbdkit aborted replying to the killed "
                   "client (its own race); restarted", file=sys.stderr)
            self.restarts += 1
            self.p.wait ()
            self.start ()

    def fail (self, msg):
        with open (self.log) as f:
            tail = f.readlines ()[-30:]
        M.fail ("faultdisk: %s (%s); end of its log:\n%s"
                % (msg, "running" if self.p.poll () is None
                   else "exited with status %d" % self.p.returncode,
                   "".join (tail)))

    def stop (self):
        self.p.send_signal (signal.SIGTERM)
        try:
            # With a sanitizer runtime preloaded, nbdkit can hang on its
            # way out after the work is done (see stop_nbdkit in
            # functions.sh): give it 5 s then, as stop_nbdkit does.
            self.p.wait (timeout=5 if PRELOAD else 60)
        except subprocess.TimeoutExpired:
            if PRELOAD:
                # The test server's exit is not what is tested, and
                # every check has passed by now.
                print ("faultdisk: hung on exit after SIGTERM under the "
                       "sanitizer runtime; killed", file=sys.stderr)
                self.p.kill ()
                self.p.wait ()
                return
            self.p.kill ()
            self.fail ("did not exit after SIGTERM")


class Server:
    """One nbdkit process serving ramback on ram= and back=."""

    n = 0

    def __init__ (self, back, ram, extra):
        Server.n += 1
        self.sock = os.path.join (TMP, "crash.sock")
        self.ctl = os.path.join (TMP, "crash.ctl")
        self.pidf = os.path.join (TMP, "crash.pid")
        self.log = os.path.join (TMP, "crash-%d.log" % Server.n)
        for f in (self.sock, self.ctl, self.pidf):
            if os.path.exists (f):
                os.unlink (f)
        env = nbdkit_env ()
        args = [NBDKIT, "-f", "-v", "-U", self.sock, "-P", self.pidf, PLUGIN,
                "back=" + back, "ram=" + ram, "chunk=%d" % CHUNK,
                "control=" + self.ctl] + extra
        if RAM_SIZE:
            args.append ("ram-size=" + RAM_SIZE)
        if back.startswith ("rbd:"):
            args.append ("rbd-conf=" + os.environ["CEPH_CONF"])
        self.args = extra
        self.p = subprocess.Popen (args, stdout=open (self.log, "w"),
                                   stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic () + 120
        while not (os.path.exists (self.sock) and os.path.exists (self.ctl)
                   and os.path.exists (self.pidf)
                   and os.path.getsize (self.pidf) > 0):
            if self.p.poll () is not None:
                self.fail ("nbdkit exited at start (status %d)"
                           % self.p.returncode)
            if time.monotonic () > deadline:
                self.fail ("nbdkit did not start")
            time.sleep (0.02)
        self.uri = "nbd+unix:///?socket=" + self.sock
        self.control = M.Control (self.ctl)

    def fail (self, msg):
        with open (self.log) as f:
            tail = f.readlines ()[-30:]
        M.fail ("%s %s; end of its log:\n%s" % (msg, self.args, "".join (tail)))

    def status (self):
        return self.control.status ()

    def kill (self):
        self.p.send_signal (signal.SIGKILL)
        self.p.wait ()
        self.control.close ()

    def stop (self):
        self.control.close ()
        self.p.send_signal (signal.SIGTERM)
        try:
            rc = self.p.wait (timeout=300)
        except subprocess.TimeoutExpired:
            self.p.kill ()
            self.fail ("nbdkit did not stop after SIGTERM")
        if rc != 0:
            self.fail ("nbdkit exited with status %d after SIGTERM" % rc)
        with open (self.log) as f:
            text = f.read ()
        if "Sanitizer" in text or "runtime error:" in text:
            self.fail ("sanitizer report")


class Workload:
    """Two connections, random requests, a shared model."""

    def __init__ (self, model, rng, fsync_wait):
        self.model = model
        self.rng = rng
        self.lock = threading.Lock ()
        self.inflight = {}          # worker -> (op, off, n, data)
        self.fsync_wait = fsync_wait
        self.counts = {}
        self.errors = []

    def pick (self, w, rng):
        """Choose a request whose range overlaps no other worker's
        request in flight, and register it.  Called with the lock."""
        for _ in range (50):
            r = rng.random ()
            if r < 0.45:
                op = "write"
            elif r < 0.55:
                op = "zero"
            elif r < 0.62:
                op = "trim"
            elif r < 0.90:
                op = "read"
            else:
                op = "flush"
            if op == "flush":
                return (op, 0, 0, None, 0)
            off, n = M.rand_extent (rng, SIZE, CHUNK,
                                    MAXLEN if op in ("write", "read")
                                    else 2 * MAXLEN)
            clash = any (o[0] != "flush" and off < o[1] + o[2]
                         and o[1] < off + n
                         for k, o in self.inflight.items () if k != w)
            if clash:
                continue
            data = M.rand_data (rng, n) if op == "write" else None
            flags = 0
            if op in ("write", "zero") and rng.random () < 0.1:
                flags = nbd.CMD_FLAG_FUA
            return (op, off, n, data, flags)
        return ("flush", 0, 0, None, 0)

    def worker (self, w, uri, seed):
        rng = random.Random (seed)
        try:
            h = M.connect (uri)
        except nbd.Error:
            return
        while True:
            with self.lock:
                req = self.pick (w, rng)
                self.inflight[w] = req
            try:
                got = self.send (h, req)
            except nbd.Error:
                return                  # killed: the request stays in flight
            try:
                self.done (w, req, got)
            except M.TestFailure as e:
                self.errors.append (str (e))
                return

    @staticmethod
    def send (h, req):
        """Send one request picked by pick; returns what a read read."""
        op, off, n, data, flags = req
        if op == "write":
            h.pwrite (data, off, flags)
        elif op == "zero":
            h.zero (n, off, flags)
        elif op == "trim":
            h.trim (n, off, flags)
        elif op == "read":
            return h.pread (n, off)
        else:
            h.flush ()
        return None

    def done (self, w, req, got):
        """Connection w's request req completed: apply it to the model
        (a read is checked against it) and take it out of flight."""
        op, off, n, data, flags = req
        with self.lock:
            if op == "write":
                self.model.write (off, data)
            elif op in ("zero", "trim"):
                # ramback's trim zeroes (NBD allows it).
                self.model.zero (off, n)
            elif op == "read":
                self.model.check_range (got, off,
                                        "read by connection %d" % w)
            self.counts[op] = self.counts.get (op, 0) + 1
            del self.inflight[w]

    def run_until_killed (self, server, delay, fd=None, hold=None):
        """Run, then kill -9 the server: after 'delay' seconds, or with
        fd and hold (a faultdisk request type), as soon as the server
        holds such a request of ours (or after 'delay' at the latest).
        Returns whether a held request was what the kill interrupted."""
        seed = self.rng.randrange (1 << 30)
        if hold:
            fd.cmd ("stall %s nth=%d" % (hold, self.rng.randint (1, 3)))
        ts = [threading.Thread (target=self.worker,
                                args=(w, server.uri, seed + w))
              for w in (0, 1)]
        for t in ts:
            t.start ()
        held = False
        deadline = time.monotonic () + delay
        while time.monotonic () < deadline:
            if hold and fd.status ().get ("held", "0") != "0":
                held = True
                break
            time.sleep (0.005 if hold else deadline - time.monotonic ())
        server.kill ()
        if fd:
            # The held request lands now, or never; then nothing of the
            # dead ramback is left on the server.
            fd.release_after_kill (self.rng.choice (("apply", "fail")))
        for t in ts:
            t.join ()
        if self.errors:
            M.fail (self.errors[0])
        return held

    def run_then_stop (self, server, delay):
        """Run, then let the requests in flight finish: nothing is in
        flight afterwards."""
        self.stop_flag = True
        seed = self.rng.randrange (1 << 30)
        done = threading.Event ()
        ts = [threading.Thread (target=self.worker_until,
                                args=(w, server.uri, seed + w, done))
              for w in (0, 1)]
        for t in ts:
            t.start ()
        time.sleep (delay)
        done.set ()
        for t in ts:
            t.join ()
        if self.errors:
            M.fail (self.errors[0])

    def worker_until (self, w, uri, seed, done):
        # The same loop, ending between two requests.
        rng = random.Random (seed)
        h = M.connect (uri)
        while not done.is_set ():
            with self.lock:
                req = self.pick (w, rng)
                self.inflight[w] = req
            self.done (w, req, self.send (h, req))
        h.shutdown ()

    def check_after_crash (self, h, what):
        """The device must equal the model, except that the requests in
        flight at the kill may have landed or not, byte by byte; adopt
        what they read as."""
        got = bytearray ()
        off = 0
        while off < SIZE:
            n = min (M.READ_PIECE, SIZE - off)
            got += h.pread (n, off)
            off += n
        want = self.model.buf
        uncertain = [o for o in self.inflight.values ()
                     if o[0] in ("write", "zero", "trim")]
        # Outside the requests in flight: exact.
        masked_got = bytearray (got)
        for op, off, n, data, _ in uncertain:
            masked_got[off:off + n] = want[off:off + n]
        d = M.first_diff (masked_got, want)
        if d != -1:
            M.fail (M.describe_diff (what, d, masked_got, want))
        # Inside them: old or new, byte by byte.
        for op, off, n, data, _ in uncertain:
            new = data if op == "write" else bytes (n)
            old = want[off:off + n]
            g = got[off:off + n]
            if g != old and g != new:
                for i in range (n):
                    if g[i] != old[i] and g[i] != new[i]:
                        M.fail ("%s: byte %d, in a %s [%d, +%d) that was in "
                                "flight at the kill, is 0x%02x: neither old "
                                "0x%02x nor new 0x%02x"
                                % (what, off + i, op, off, n, g[i], old[i],
                                   new[i]))
            self.model.write (off, bytes (g))
        self.inflight.clear ()


def main ():
    seed = M.seed_from_env (1000 + CHUNK)
    rng = random.Random (seed)
    back = os.path.join (TMP, "crash-back-%d.img" % CHUNK)
    ram = os.path.join (RAMDIR, "ramback-crash-%d-%d.img"
                        % (os.getpid (), CHUNK))
    model = M.make_sparse_image (back, SIZE, rng, 12, maxlen=512 * M.KiB)
    fd = FaultDisk (back) if FAULTDISK else None
    if RBD_IMAGE:
        conf = os.environ["CEPH_CONF"]
        subprocess.run (["rbd", "-c", conf, "rm", "--no-progress", RBD_IMAGE],
                        stderr=subprocess.DEVNULL)
        subprocess.run (["rbd", "-c", conf, "import", "--no-progress", back,
                         RBD_IMAGE], check=True)
        back = "rbd:" + RBD_IMAGE
    try:
        run (rng, back, ram, model, fd)
    finally:
        if os.path.exists (ram):
            os.unlink (ram)
        if fd:
            fd.stop ()


def config (rng):
    extra, desc = [], []
    if rng.random () < 0.3:
        extra.append ("mode=writethrough")
    if rng.random () < 0.5:
        extra.append ("fsync=wait")
    r = rng.random ()
    if r < 0.4:
        extra.append ("flush-rate=%dK" % rng.choice ((256, 1024)))
    if rng.random () < 0.35:
        extra.append ("populate=false")
    return extra


def no_populate (extra):
    return extra if "populate=false" in extra else extra + ["populate=false"]


def count_partial (server, stats):
    """Before anything reads the device (which loads what is missing):
    did this start resume chunks that were loaded only in part?"""
    if server.status ().get ("partial_chunks", 0) > 0:
        stats["resumed with partial chunks"] += 1


def check_budget (server, stats):
    """With RAM_SIZE: what a start resumed fits in it (give or take the
    requests in flight at the kill), and the resume check's reads of
    the whole device evicted."""
    if not RAM_SIZE:
        return
    st = server.status ()
    if st["resident_bytes"] > st["ram_size"] + 4 * CHUNK:
        M.fail ("ram-size=%s: %d bytes resident after a start"
                % (RAM_SIZE, st["resident_bytes"]))
    stats["evictions"] = stats.get ("evictions", 0) + st["evictions"]


def run (rng, back_file, ram, model, fd):
    t0 = time.monotonic ()
    back = fd.uri if fd else back_file
    stats = {"kills": 0, "clean stops": 0, "populate kills": 0,
             "writethrough kills": 0, "kills with data to write back": 0,
             "chunks written back at resume": 0,
             "kills with a sync held": 0, "kills with a store held": 0,
             "resumed with partial chunks": 0, "ops": 0}
    wl = Workload (model, rng, False)
    server = Server (back, ram, no_populate (config (rng)))
    st = server.status ()
    if st.get ("image_source", "populated") != "populated":
        M.fail ("first start: image_source %s" % st.get ("image_source"))
    cycle = 0
    while True:
        cycle += 1
        if CYCLES and cycle > CYCLES:
            break
        if not CYCLES and time.monotonic () - t0 > SECONDS:
            break
        kind = rng.random ()
        # The first cycle: a kill of the populate=false start, and a
        # restart with populate=false, which finds the chunks that the
        # requests loaded in part.
        first = cycle == 1
        if first:
            kind = 1.0
        if kind < 0.12:
            # A clean stop: the backing file is the model; the next
            # start resumes with nothing to write.
            wl.run_then_stop (server, rng.uniform (0.05, 0.5))
            server.stop ()
            stats["clean stops"] += 1
            model.check_file (back_file, "backing file after a clean stop")
            server = Server (back, ram, config (rng))
            count_partial (server, stats)
            h = M.connect (server.uri)
            model.check_nbd (h, "device after a clean stop and resume")
            h.shutdown ()
            st = server.status ()
            if (st.get ("image_source") != "resumed-clean"
                    or st.get ("resumed_chunks_to_write") != 0):
                M.fail ("after a clean stop: image_source %s, "
                        "resumed_chunks_to_write %s"
                        % (st.get ("image_source"),
                           st.get ("resumed_chunks_to_write")))
            continue
        if kind < 0.24:
            # Kill during a populate: clean stop, throw the image away,
            # populate slowly, kill in the middle.  The next start loads
            # what is still EMPTY.
            wl.run_then_stop (server, 0.05)
            server.stop ()
            model.check_file (back_file, "backing file after a clean stop")
            server = Server (back, ram, config (rng) +
                             ["resume=discard", "populate-rate=1M"])
            stats["populate kills"] += 1
            delay = rng.uniform (0.05, 1.5)
            populating = True
        else:
            delay = rng.uniform (0.3 if first else 0.02, 1.0)
            populating = False
            if "mode=writethrough" in server.args:
                stats["writethrough kills"] += 1
        hold = None
        if fd and not populating and rng.random () < 0.7:
            hold = rng.choice (("flush", "write"))
            delay = 5.0
        if wl.run_until_killed (server, delay, fd, hold):
            stats["kills with a %s held"
                  % ("sync" if hold == "flush" else "store")] += 1
        stats["kills"] += 1
        server = Server (back, ram, no_populate (config (rng)) if first
                         else config (rng))
        count_partial (server, stats)
        h = M.connect (server.uri)
        wl.check_after_crash (h, "device after kill -9 #%d and resume"
                              % stats["kills"])
        check_budget (server, stats)
        st = server.status ()
        if st.get ("image_source") != "resumed-crash":
            M.fail ("after kill -9: image_source %s"
                    % st.get ("image_source"))
        if st.get ("resumed_chunks_to_write", 0) > 0:
            stats["kills with data to write back"] += 1
            stats["chunks written back at resume"] += \
                st["resumed_chunks_to_write"]
        h.shutdown ()
    wl.run_then_stop (server, 0.2)
    server.stop ()
    model.check_file (back_file, "backing file after the final clean stop")
    if RAM_SIZE and cycle > 1 and stats.get ("evictions", 0) == 0:
        M.fail ("ram-size=%s: nothing was evicted (%s)" % (RAM_SIZE, stats))
    if CHUNK > 4096 and cycle > 1 and stats["resumed with partial chunks"] == 0:
        M.fail ("no start resumed an image with partial chunks: the test "
                "did not test them (%s)" % stats)
    stats["ops"] = sum (wl.counts.values ())
    if fd:
        stats["test server restarts"] = fd.restarts
    M.log ("%s%schunk %d, size %d: %d cycles in %.0f s: %s; requests %s"
           % ("NBD backing store (faultdisk), " if fd else "",
              "ram-size=%s, " % RAM_SIZE if RAM_SIZE else "",
              CHUNK, SIZE, cycle - 1, time.monotonic () - t0, stats,
              wl.counts))


M.main (main)
