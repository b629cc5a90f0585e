#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The fault injecting test server itself (tests/faultdisk-plugin.c),
# driven with python3-libnbd: a held write does not block others and
# lands when released even after its client is gone; release ... fail;
# one failed FLUSH; a failed write with ENOSPC; the volatile cache
# (durable= untouched until FLUSH, flush-rate= delay, power cut keeping
# whole, torn and lost writes, the same for the same seed).

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
source "$top_srcdir/tests/remote-functions.sh"
set -x

size=$(( 4 * 1024 * 1024 ))
head -c "$size" /dev/urandom >"$TMP/img"
cp "$TMP/img" "$TMP/img.orig"
start_faultdisk f "$TMP/img"

# A write held by the server, from a client that is then killed.
fd_cmd f stall write offset=1048576 | grep -qx 'id=1'
/usr/bin/python3 - "$f_uri" "$TMP/held.data" <<'EOF' &
import nbd, os, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
buf = os.urandom(65536)
open(sys.argv[2], "wb").write(buf)
h.pwrite(buf, 1048576)          # held until the client is killed
EOF
writer=$!
fd_wait f held 1
# Others go on meanwhile, on another connection.
/usr/bin/python3 - "$f_uri" <<'EOF'
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
h.pwrite(b"\x5a" * 4096, 0)
assert h.pread(4096, 0) == b"\x5a" * 4096
h.shutdown()
EOF
kill -9 "$writer"
wait "$writer" || true
cmp -n 65536 -i 1048576:1048576 "$TMP/img" "$TMP/img.orig" ||
    fail "the held write landed before its release"
[ "$(fd_field f held)" = 1 ] || fail "the held write is gone"
fd_cmd f release 1 apply | grep -qx 'released=1'
fd_wait f held 0
# The connection ends once its held request is done.
fd_wait f connections 0
cmp -n 65536 -i 0:1048576 "$TMP/held.data" "$TMP/img" ||
    fail "the released write did not land"

# release ... fail; fail flush once; fail write with ENOSPC.
fd_cmd f stall store nth=2 | grep -qx 'id=2'
fd_cmd f fail flush >/dev/null
fd_cmd f fail write offset=3145728 errno=ENOSPC >/dev/null
/usr/bin/python3 - "$f_uri" "$f_fd" <<'EOF'
import errno, nbd, os, sys, threading, time
import model as M
uri, d = sys.argv[1], sys.argv[2]

def cmd(line):
    return M.fd_cmd(d, line)

def expect_err(fn, err):
    try:
        fn()
    except nbd.Error as e:
        # python3-libnbd gives the errno's name.
        assert e.errno == errno.errorcode[err], (e.errno, e.string)
        return
    raise Exception("did not fail")

h = nbd.NBD()
h.connect_uri(uri)
h.pwrite(b"\1" * 4096, 2 * 1048576)             # 1st store: not held
res = {}
def second():
    h2 = nbd.NBD()
    h2.connect_uri(uri)
    try:
        h2.zero(4096, 2 * 1048576 + 8192)       # 2nd store: held
        res["r"] = 0
    except nbd.Error as e:
        res["r"] = e.errno
        h2.close()
t = threading.Thread(target=second)
t.start()
for _ in range(600):
    if cmd("status")["held"] == "1":
        break
    time.sleep(0.05)
assert cmd("status")["held_ids"] == "2,"
assert cmd("release 2 fail")["released"] == "1"
t.join()
assert res["r"] == "EIO", res
expect_err(h.flush, errno.EIO)                  # fails once
h.flush()
expect_err(lambda: h.pwrite(b"\2" * 8192, 3 * 1048576 - 4096), errno.ENOSPC)
h.pwrite(b"\2" * 8192, 3 * 1048576 - 4096)      # once only
s = cmd("status")
assert s["failed"] == "2" and s["stalled"] == "2", s
# Bad commands get a clear error and change nothing.
for bad in ["stall", "stall write offset=99999999999", "stall flush offset=0",
            "fail write errno=EWHAT", "release x", "powercut", "frob"]:
    name = d + "/bad"
    open(name + ".tmp", "w").write(bad + "\n")
    os.rename(name + ".tmp", name + ".cmd")
    for _ in range(600):
        if os.path.exists(name + ".reply"):
            break
        time.sleep(0.05)
    r = open(name + ".reply").read()
    os.unlink(name + ".reply")
    assert r.startswith("error: "), (bad, r)
h.shutdown()
EOF
kill_remote f

# The volatile cache: durable= changes only on FLUSH; a power cut keeps
# a seeded subset of the unflushed writes.
powercut_run () {
    local tag=$1
    cp "$TMP/img.orig" "$TMP/dur.$tag"
    truncate -s 0 "$TMP/view.$tag"
    start_faultdisk "v$tag" "$TMP/view.$tag" durable="$TMP/dur.$tag" \
        flush-rate=4M
    local uriv="v${tag}_uri" dirv="v${tag}_fd"
    /usr/bin/python3 - "${!uriv}" "${!dirv}" "$TMP/dur.$tag" \
        "$TMP/img.orig" <<'EOF'
import nbd, os, random, sys, time
import model as M
uri, d, dur, orig = sys.argv[1:]

def cmd(line):
    return M.fd_cmd(d, line)

base = open(orig, "rb").read()
h = nbd.NBD()
h.connect_uri(uri)
assert h.pread(65536, 0) == base[:65536]        # the view starts as dur
rng = random.Random(5)
w1 = [(i * 65536, rng.randbytes(65536)) for i in range(0, 32, 2)]
for off, data in w1:
    h.pwrite(data, off)
assert cmd("status")["unflushed_writes"] == str(len(w1))
assert open(dur, "rb").read() == base, "durable changed before a flush"
assert h.pread(65536, w1[3][0]) == w1[3][1]     # reads see the cache
h.flush()
# 16 * 64 KiB at 4 MiB/s: 250 ms, computed, not measured.
assert cmd("status")["last_flush_delay_ms"] == "250"
d1 = bytearray(base)
for off, data in w1:
    d1[off:off + len(data)] = data
assert open(dur, "rb").read() == bytes(d1), "flush did not reach durable"

# Unflushed writes, then the power goes.
w2 = [(2 * 1048576 + i * 16384, rng.randbytes(16384)) for i in range(0, 40, 2)]
for off, data in w2:
    h.pwrite(data, off)
h.zero(16384, 3 * 1048576)
r = cmd("powercut seed=11 keep=40 torn=30")
after = open(dur, "rb").read()
whole = none = 0
for off, data in w2 + [(3 * 1048576, bytes(16384))]:
    got = after[off:off + len(data)]
    for s in range(0, len(data), 512):
        sec = got[s:s + 512]
        assert sec in (data[s:s + 512], d1[off + s:off + s + 512]), \
            "a sector holds neither the old nor the new data"
    whole += got == data
    none += got == bytes(d1[off:off + len(data)])
kept, torn, lost = int(r["kept"]), int(r["torn"]), int(r["lost"])
assert kept + torn + lost == len(w2) + 1, r
assert kept <= whole and lost <= none and torn > 0, (r, whole, none)
print("powercut:", r, "whole", whole, "none", none)
EOF
    local pidv="v${tag}_pid"
    _wait_gone "${!pidv}"                # the power cut shut nbdkit down
    remote_log_clean "v$tag"
    cmp "$TMP/dur.$tag" "$TMP/view.$tag" ||
        fail "after the power cut the view is not the durable image"
}
powercut_run a
powercut_run b
cmp "$TMP/dur.a" "$TMP/dur.b" || fail "the same seed cut differently"
echo PASS
