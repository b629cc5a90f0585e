#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# "ramback status" in its three forms against a plugin holding known
# dirty data.  flush-rate=100 with 64 KiB chunks and flush-delay=0: the
# first chunk is written back and synced at once (the flush rate is
# measured), and the cap then holds the next one back for 655 s, so for
# the rest of the test exactly N-1 of the N chunks written are dirty,
# and every form must say so.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/cli/cli-functions.sh"
set -x

start_ramback rb back="$TMP/back.img" size=4M chunk=64K flush-rate=100 \
    flush-delay=0
cleanup_fn stop_nbdkit "$rb_pid"

# 5 chunks, not adjacent so that each is its own write back.
for i in 0 2 4 6 8; do
    nbd_write "$rb_uri" $(( i * 65536 )) 65536 $(( 16 + i ))
done
wait_field "$rb_ctl" stored_bytes 65536
wait_field "$rb_ctl" inflight_chunks 0

# --json: every field, against what we set up.
run_rb 0 status --json "$rb_ctl"
cp "$TMP/out" "$TMP/status.json"
[ "$(wc -l < "$TMP/status.json")" -eq 1 ] || fail "--json is not one line"
expect_field "$TMP/status.json" mode writeback
expect_field "$TMP/status.json" fsync ignore
expect_field "$TMP/status.json" trace false
expect_field "$TMP/status.json" populated true
expect_field "$TMP/status.json" progress 1
expect_field "$TMP/status.json" size 4194304
expect_field "$TMP/status.json" chunk_size 65536
expect_field "$TMP/status.json" chunks 64
expect_field "$TMP/status.json" loaded_chunks 64
expect_field "$TMP/status.json" dirty_chunks 4
expect_field "$TMP/status.json" dirty_bytes 262144
expect_field "$TMP/status.json" inflight_chunks 0
expect_field "$TMP/status.json" inflight_bytes 0
expect_field "$TMP/status.json" stored_bytes 65536
expect_field "$TMP/status.json" written_bytes 327680
expect_field "$TMP/status.json" dirty_max 0
expect_field "$TMP/status.json" flush_rate 100
expect_field "$TMP/status.json" populate_rate 0
expect_field "$TMP/status.json" store file
expect_field "$TMP/status.json" store_state ok
expect_field "$TMP/status.json" store_errors 0
expect_field "$TMP/status.json" sync_errors 0
expect_field "$TMP/status.json" last_errno ""

# The re-emitted object has the protocol's fields, in its order, with
# its values (all but the moving ones).
ctl "$rb_ctl" status json > "$TMP/raw.json"
/usr/bin/python3 - "$TMP/raw.json" "$TMP/status.json" <<'EOP'
import json, sys
raw, ours = (json.load (open (f)) for f in sys.argv[1:])
assert list (raw) == list (ours), (list (raw), list (ours))
for k in raw:
    if k in ("uptime", "flush_bandwidth", "populate_bandwidth",
             "drain_seconds", "syncs", "unsynced_bytes"):
        continue
    assert raw[k] == ours[k] and type (raw[k]) == type (ours[k]), k
EOP

# Human form.
run_rb 0 status "$rb_ctl"
cat "$TMP/out"
expect_line () {
    grep -Eq "$1" "$TMP/out" || fail "no line matching '$1'"
}
expect_line "^socket: +$rb_ctl\$"
expect_line '^mode: +writeback$'
expect_line '^fsync: +ignore$'
expect_line '^trace: +off$'
expect_line '^store: +file, ok, 1 connection$'
expect_line '^size: +4\.0 MiB \(64 chunks of 64\.0 KiB\)$'
expect_line '^populate: +done \(64 chunks in RAM\)$'
expect_line '^dirty: +256\.0 KiB \(4 chunks\)$'
expect_line '^in flight: +0 B \(0 chunks\)$'
expect_line '^dirty limit: +none$'
expect_line '^flush rate: +.* \(cap 100 B/s\)$'
expect_line '^flush delay: +none \(written back at once\)$'
expect_line '^time to drain: +([0-9.]+ s|[0-9]+m [0-9]+s|unknown.*)$'
expect_line '^written back: +64\.0 KiB, zeroed 0 B, [0-9]+ syncs?$'
expect_line '^client writes: +320\.0 KiB \(written back 0\.20x of it\)$'
expect_line '^errors: +0 store, 0 sync$'
expect_line '^uptime: '
expect_line '^image: +loaded from the backing store$'
if grep -q '^last error:' "$TMP/out"; then fail "a last error without errors"; fi

# Prometheus: well-formed exposition format, HELP and TYPE for every
# metric, and the values we set up.
run_rb 0 status --prometheus "$rb_ctl"
/usr/bin/python3 - "$TMP/out" "$rb_ctl" <<'EOP'
import re, sys
text = open (sys.argv[1]).read ()
sock = sys.argv[2]
assert text.endswith ("\n")
helps, types, values = {}, {}, {}
sample = re.compile (r'^([a-z_]+)\{socket="([^"]*)"(?:,([a-z_]+="[^"]*"(?:,[a-z_]+="[^"]*")*))?\} (-?[0-9.e+]+)$')
for line in text.splitlines ():
    if line.startswith ("# HELP "):
        name, h = line[7:].split (" ", 1)
        assert name not in helps and h, line
        helps[name] = h
    elif line.startswith ("# TYPE "):
        name, t = line[7:].split (" ")
        assert t in ("gauge", "counter"), line
        assert name in helps and name not in types, line
        types[name] = t
    else:
        m = sample.match (line)
        assert m, "bad sample line: %r" % line
        name, s, labels, v = m.groups ()
        assert s == sock, line
        assert name in types, "no TYPE before " + line
        if types[name] == "counter":
            assert name.endswith ("_total"), line
        float (v)
        values[(name, labels)] = v
def val (name, labels=None):
    return values[(name, labels)]
assert val ("ramback_up") == "1"
assert val ("ramback_writethrough") == "0"
assert val ("ramback_info", 'mode="writeback",fsync="ignore",store="file"') == "1"
assert val ("ramback_store_state", 'state="ok"') == "1"
assert val ("ramback_store_state", 'state="failing"') == "0"
assert val ("ramback_populated") == "1"
assert val ("ramback_size_bytes") == "4194304"
assert val ("ramback_chunks") == "64"
assert val ("ramback_dirty_chunks") == "4"
assert val ("ramback_dirty_bytes") == "262144"
assert val ("ramback_inflight_bytes") == "0"
assert val ("ramback_stored_bytes_total") == "65536"
assert val ("ramback_written_bytes_total") == "327680"
assert val ("ramback_flush_rate_limit_bytes_per_second") == "100"
assert val ("ramback_store_errors_total") == "0"
assert float (val ("ramback_drain_seconds")) >= 0
print ("prometheus: %d samples ok" % len (values))
EOP

# With the plugin gone, --prometheus still says so, in the same format.
stop_nbdkit "$rb_pid"
run_rb 2 status --prometheus "$rb_ctl"
grep -qx "ramback_up{socket=\"$rb_ctl\"} 0" "$TMP/out" ||
    fail "--prometheus without a plugin: no ramback_up 0"
[ "$(grep -vc '^#' "$TMP/out")" -eq 1 ] || fail "more than ramback_up 0"
