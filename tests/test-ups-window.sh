#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# ups-window=: the dirty limit follows the measured write-back bandwidth.
#
# flush-rate=4M makes the bandwidth known.  With ups-window=2 the limit
# must be 2 s x 4 MiB/s x 0.8 (the documented safety margin) = 6.4 MiB:
# first from flush-rate= standing in for a measurement, then from the
# measured moving average (which a rate cap cannot push above 4 MiB/s).
# Under a write storm dirty + in-flight data stays within that limit
# (plus one request per writer, the documented slack); a smaller
# dirty-max= wins over the window; after SIGTERM the backing file equals
# the model.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"

size=$(( 48 * 1024 * 1024 ))
back="$TMP/back.img"
modelf="$TMP/model.img"

start_rb rb -- back="$back" size="$size" ups-window=2 flush-rate=4M
expect=$(( 2 * 4 * 1024 * 1024 * 8 / 10 ))
[ "$(status_field "$rb_ctl" ups_window)" = 2 ] || fail "ups_window not shown"
dm=$(status_field "$rb_ctl" dirty_max)
[ "$dm" -ge $(( expect - 65536 )) ] && [ "$dm" -le "$expect" ] ||
    fail "dirty_max $dm before any write back, expected ~$expect"

py - "$rb_uri" "$rb_ctl" "$modelf" "$size" <<'PY'
import json, random, socket, sys, threading, time
import nbd

uri, ctl, modelf, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
MiB = 1024 * 1024
WRITERS, REQ = 3, 128 * 1024
model = bytearray(size)
maxseen = [0]
done = threading.Event()

def status():
    s = socket.socket(socket.AF_UNIX)
    s.connect(ctl)
    s.sendall(b"status json\n")
    f = s.makefile("r")
    v = json.loads(f.readline())
    assert f.readline().strip() == "OK"
    s.close()
    return v

def sampler():
    while not done.is_set():
        v = status()
        maxseen[0] = max(maxseen[0], v["dirty_bytes"] + v["inflight_bytes"])

def writer(i):
    h = nbd.NBD()
    h.connect_uri(uri)
    r = random.Random(i)
    region = size // WRITERS
    for k in range(60):
        off = i * region + r.randrange(0, region - REQ)
        buf = bytes([r.randrange(256)]) * REQ
        h.pwrite(buf, off)
        model[off:off + REQ] = buf
    h.shutdown()

t = threading.Thread(target=sampler)
t.start()
ws = [threading.Thread(target=writer, args=(i,)) for i in range(WRITERS)]
for w in ws: w.start()
for w in ws: w.join()
done.set()
t.join()
# The bandwidth is measured when a write-back pass ends with its sync,
# and the first pass may still be going when the storm is over (seen
# once under ASan: bandwidth 0 there, the limit still the one from
# flush-rate=), so wait for that first measurement: the dirty data
# drains in about 2 s at the cap.
deadline = time.time() + 60
v = status()
while v["flush_bandwidth"] == 0 and time.time() < deadline:
    time.sleep(0.1)
    v = status()
limit = int(2 * 4 * MiB * 0.8)
CHUNK = v["chunk_size"]
# Each writer past the check adds at most the chunks one request touches.
slack = WRITERS * (REQ + CHUNK)
print("max dirty+inflight", maxseen[0], "limit", v["dirty_max"],
      "bandwidth", v["flush_bandwidth"], "throttled", v["throttled"])
assert v["flush_bandwidth"] > 0, "no bandwidth measured 60 s after the storm"
# A rate-capped flusher cannot measure more than the cap (+5% jitter).
assert v["flush_bandwidth"] <= 4 * MiB * 1.05, v["flush_bandwidth"]
# The derived limit follows the measurement: 0.8 x window x bandwidth.
want = int(v["flush_bandwidth"] * 2 * 0.8)
assert abs(v["dirty_max"] - want) <= max(want // 5, 4 * CHUNK), (v["dirty_max"], want)
assert v["dirty_max"] <= limit + CHUNK
assert maxseen[0] <= limit + slack, (maxseen[0], limit + slack)
assert v["throttled"] > 0, "the storm never reached the limit"
open(modelf, "wb").write(model)
PY

stop_rb_same rb "$back" "$modelf"

# dirty-max= below the window's limit wins.
start_rb rb2 -- back="$back" ups-window=60 flush-rate=4M dirty-max=1M
[ "$(status_field "$rb2_ctl" dirty_max)" = $(( 1024 * 1024 )) ] ||
    fail "dirty-max= did not cap the ups-window limit"
stop_rb_same rb2 "$back" "$modelf"
