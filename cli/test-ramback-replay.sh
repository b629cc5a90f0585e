#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# How the command reads a status reply, to the byte.  A real plugin's
# "status json" line, served again by fake-control-server.py (so that
# nothing moves between two requests), comes out of "status --json"
# unchanged, and the Prometheus samples carry the plugin's own text.
# Then replies no plugin sends today: fields of a newer plugin (nested,
# null), escapes in strings, white space, whole numbers written as
# fractions, a negative counter.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/cli/cli-functions.sh"
set -x

start_ramback rb back="$TMP/back.img" size=4M chunk=64K flush-rate=1K \
    flush-delay=0
cleanup_fn stop_nbdkit "$rb_pid"
nbd_write "$rb_uri" 0 65536 7
nbd_write "$rb_uri" 131072 65536 8
wait_field "$rb_ctl" stored_bytes 65536
ctl "$rb_ctl" status json > "$TMP/plugin.json"
[ "$(wc -l < "$TMP/plugin.json")" -eq 1 ] || fail "status json: not one line"
stop_nbdkit "$rb_pid"

fake replay "$TMP/plugin.json"
run_rb 0 status --json "$TMP/plugin.ctl"
cmp "$TMP/plugin.json" "$TMP/out" ||
    fail "status --json is not the plugin's line, byte for byte"

# Each sample's value is its field's text in the reply: integers,
# booleans as 0/1, fractions with the plugin's three decimals.
run_rb 0 status --prometheus "$TMP/plugin.ctl"
/usr/bin/python3 - "$TMP/plugin.json" "$TMP/out" <<'EOP'
import re, sys
raw = open (sys.argv[1]).read ()
prom = open (sys.argv[2]).read ()
fields = {
    "populated": "ramback_populated",
    "progress": "ramback_populate_progress_ratio",
    "size": "ramback_size_bytes",
    "chunks": "ramback_chunks",
    "stored_bytes": "ramback_stored_bytes_total",
    "written_bytes": "ramback_written_bytes_total",
    "dirty_bytes": "ramback_dirty_bytes",
    "flush_rate": "ramback_flush_rate_limit_bytes_per_second",
    "uptime": "ramback_uptime_seconds",
}
for field, metric in fields.items ():
    m = re.search (r'"%s":(true|false|-?[0-9.eE+-]+)[,}]' % field, raw)
    assert m, "no %s in %s" % (field, raw)
    want = {"true": "1", "false": "0"}.get (m.group (1), m.group (1))
    s = re.search (r'^%s\{socket="[^"]*"\} (\S+)$' % metric, prom, re.M)
    assert s, "no sample of %s" % metric
    assert s.group (1) == want, (metric, s.group (1), want)
    print ("%s %s = %s" % (field, metric, want))
assert "." in re.search (r'"uptime":([^,}]*)', raw).group (1), raw
EOP

# A newer plugin's reply, sent with white space.
printf '%s\n' '{ "mode" : "writeback", "populated": true, "progress": 1.0,
 "size": 4.194304e6, "chunk_size": 65536, "chunks": 64, "dirty_bytes": -5,
 "future": {"a": [1, {"b": null}]}, "nothing": null,
 "last_errno": "EIO", "last_error": "disk \"sdb\" \u00e9crit\\x",
 "store_errors": 3 }' | tr -d '\n' > "$TMP/newer.json"
echo >> "$TMP/newer.json"
fake replay "$TMP/newer.json"
run_rb 0 status --json "$TMP/newer.ctl"
cmp "$TMP/newer.json" "$TMP/out" || fail "status --json changed a newer reply"
run_rb 0 status "$TMP/newer.ctl"
cat "$TMP/out"
grep -Eq '^size: +4\.0 MiB \(64 chunks of 64\.0 KiB\)$' "$TMP/out" ||
    fail "4.194304e6 is not read as a size of 4 MiB"
grep -Eq '^dirty: +0 B \(0 chunks\)$' "$TMP/out" ||
    fail "a negative dirty_bytes is not read as absent"
grep -Eq '^last error: +EIO: disk "sdb" écrit\\x$' "$TMP/out" ||
    fail "last_error's escapes are not decoded"
grep -Eq '^errors: +3 store, 0 sync$' "$TMP/out" ||
    fail "store_errors is not 3"
run_rb 0 status --prometheus "$TMP/newer.ctl"
grep -Eq '^ramback_size_bytes\{socket="[^"]*"\} 4194304\.000$' "$TMP/out" ||
    fail "no ramback_size_bytes 4194304.000 (4.194304e6 in the reply)"
grep -Fq 'ramback_dirty_bytes{' "$TMP/out" &&
    fail "a negative dirty_bytes became a sample"
grep -Eq '^ramback_store_errors_total\{socket="[^"]*"\} 3$' "$TMP/out" ||
    fail "no ramback_store_errors_total 3"
grep -q 'future\|nothing' "$TMP/out" && fail "unknown fields became samples"
echo "replay: ok"
