#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The monitoring glue: ramback-textfile (and its service and timer)
# feeding a real node_exporter's textfile collector from two running
# rambacks and a dead control socket, and the Grafana dashboard
# (grafana/ramback.json), checked as JSON and as a dashboard (no Grafana
# in Debian to load it): its panels, its variables, and every metric it
# queries one that "ramback status --prometheus" writes.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/cli/cli-functions.sh"
set -x

TEXTFILE="$top_builddir/contrib/ramback-textfile"
[ -x "$TEXTFILE" ] || fail "$TEXTFILE is not built"
NODE_EXPORTER=$(command -v prometheus-node-exporter) ||
    fail "prometheus-node-exporter is missing: run scripts/deps.sh"

# a: dirty data held back (flush-rate) under a UPS window; b: idle;
# dead: a control socket whose nbdkit was killed.
start_ramback a back="$TMP/a.img" size=4M chunk=64K flush-rate=1K \
    flush-delay=0 ups-window=60
cleanup_fn stop_nbdkit "$a_pid"
start_ramback b back="$TMP/b.img" size=8M
cleanup_fn stop_nbdkit "$b_pid"
start_ramback dead back="$TMP/dead.img" size=1M
kill -9 "$dead_pid"
wait_for_exit () { while kill -0 "$1" 2>/dev/null; do sleep 0.1; done; }
wait_for_exit "$dead_pid"
[ -S "$dead_ctl" ] || fail "the killed nbdkit's control socket is gone"
for i in 0 2 4; do nbd_write "$a_uri" $(( i * 65536 )) 65536 $(( 1 + i )); done
wait_field "$a_ctl" stored_bytes 65536

# --- ramback-textfile into a real node_exporter ---------------------------
mkdir "$TMP/textfile"
RAMBACK_SOCKETS="$a_ctl $b_ctl $dead_ctl $TMP/none/*.ctl" \
RAMBACK_TEXTFILE_DIR="$TMP/textfile" RAMBACK="$RAMBACK" "$TEXTFILE" ||
    fail "ramback-textfile failed"
ls -la "$TMP/textfile"
[ "$(ls -A "$TMP/textfile")" = ramback.prom ] ||
    fail "ramback-textfile left other files than ramback.prom"
cat "$TMP/textfile/ramback.prom"

# node_exporter on a free loopback port, only its textfile collector.
for (( try=0; try<5; try++ )); do
    port=$(/usr/bin/python3 -c 'import socket; s = socket.socket ()
s.bind (("127.0.0.1", 0)); print (s.getsockname ()[1])')
    "$NODE_EXPORTER" --web.listen-address="127.0.0.1:$port" \
        --collector.disable-defaults --collector.textfile \
        --collector.textfile.directory="$TMP/textfile" \
        >"$TMP/node-exporter.log" 2>&1 &
    ne_pid=$!
    cleanup_fn kill_if_running "$ne_pid"
    for (( i=0; i<100; i++ )); do
        /usr/bin/python3 - "$port" "$TMP/scrape.txt" <<'EOP' && break 2
import sys, urllib.request
with urllib.request.urlopen ("http://127.0.0.1:%s/metrics" % sys.argv[1],
                             timeout=5) as r:
    open (sys.argv[2], "wb").write (r.read ())
EOP
        kill -0 "$ne_pid" 2>/dev/null || break      # the port was taken
        sleep 0.1
    done
    cat "$TMP/node-exporter.log"
done
[ -s "$TMP/scrape.txt" ] || fail "no scrape of node_exporter"
/usr/bin/python3 - "$TMP/scrape.txt" "$a_ctl" "$b_ctl" "$dead_ctl" <<'EOP'
import re, sys
text = open (sys.argv[1]).read ()
a, b, dead = sys.argv[2:]
def val (name, sock, extra=""):
    # node_exporter writes the labels in name order.
    m = re.search (r'^%s\{socket="%s"%s\} (\S+)$' % (name, re.escape (sock), extra),
                   text, re.M)
    assert m, "no %s for %s in the scrape" % (name, sock)
    return float (m.group (1))
assert re.search (r'^node_textfile_scrape_error 0$', text, re.M), \
    "node_exporter could not read ramback.prom"
assert val ("ramback_up", a) == 1 and val ("ramback_up", b) == 1
assert val ("ramback_up", dead) == 0
assert val ("ramback_size_bytes", a) == 4 << 20
assert val ("ramback_size_bytes", b) == 8 << 20
assert val ("ramback_dirty_bytes", a) == 2 * 65536, val ("ramback_dirty_bytes", a)
assert val ("ramback_ups_window_seconds", a) == 60
assert val ("ramback_stored_bytes_total", a) == 65536
assert val ("ramback_store_state", b, ',state="ok"') == 1
assert not re.search (r'^ramback_size_bytes\{socket="%s"' % re.escape (dead),
                      text, re.M)
print ("node_exporter: ramback.prom read, samples of a, b and dead ok")
EOP

# The file is replaced whole: a run with no socket leaves it empty.
RAMBACK_SOCKETS="$TMP/none/*.ctl" RAMBACK_TEXTFILE_DIR="$TMP/textfile" \
    RAMBACK="$RAMBACK" "$TEXTFILE" || fail "ramback-textfile failed"
[ -f "$TMP/textfile/ramback.prom" ] && [ ! -s "$TMP/textfile/ramback.prom" ] ||
    fail "with no socket, ramback.prom is not empty"
# A directory it cannot write: exit 1 and a message saying which.
rc=0
RAMBACK_SOCKETS="$a_ctl" RAMBACK_TEXTFILE_DIR="$TMP/no-such-dir" \
    RAMBACK="$RAMBACK" "$TEXTFILE" 2>"$TMP/err" || rc=$?
[ "$rc" -eq 1 ] || fail "no such directory: exit status $rc, expected 1"
grep -q "cannot write in $TMP/no-such-dir" "$TMP/err" || fail "no message"

# The service and the timer: what systemd says of them, and the service
# runs the script that was just tested.
svc="$top_builddir/contrib/systemd/ramback-textfile.service"
timer="$top_srcdir/contrib/systemd/ramback-textfile.timer"
# Installed beside ramback-control-group, which ramback@.service runs.
pkgdatadir=$(sed -n 's|^ExecStartPost=\(.*\)/ramback-control-group .*|\1|p' \
    "$top_builddir/contrib/systemd/ramback@.service")
[ -n "$pkgdatadir" ] || fail "no ExecStartPost in ramback@.service"
grep -qx "ExecStart=$pkgdatadir/ramback-textfile" "$svc" ||
    fail "the service does not run the installed ramback-textfile"
mkdir "$TMP/units"
sed "s|^ExecStart=.*|ExecStart=$TEXTFILE|" "$svc" > "$TMP/units/ramback-textfile.service"
cp "$timer" "$TMP/units/"
if command -v systemd-analyze >/dev/null; then
    systemd-analyze verify --man=no "$TMP/units/ramback-textfile.service" \
        "$TMP/units/ramback-textfile.timer" >"$TMP/verify" 2>&1 ||
        { cat "$TMP/verify"; fail "systemd-analyze verify failed"; }
    [ ! -s "$TMP/verify" ] || { cat "$TMP/verify"; fail "systemd-analyze warns"; }
else
    echo "systemd-analyze not found: units not verified"
fi

# --- the Grafana dashboard -------------------------------------------------
"$RAMBACK" status --prometheus "$a_ctl" > "$TMP/a.prom" || fail "status --prometheus"
/usr/bin/python3 - "$top_srcdir/contrib/grafana/ramback.json" "$TMP/a.prom" <<'EOP'
import json, re, sys
dash = json.load (open (sys.argv[1]))
names = set (re.findall (r'^# TYPE (\S+) ', open (sys.argv[2]).read (), re.M))
assert "ramback_up" in names and len (names) > 20, names
assert dash["title"] and dash["uid"] and isinstance (dash["schemaVersion"], int)
variables = {v["name"]: v for v in dash["templating"]["list"]}
assert variables["datasource"]["type"] == "datasource"
assert variables["datasource"]["query"] == "prometheus"
exprs = [v["definition"] for v in variables.values () if "definition" in v]
ids, cells, titles = set (), {}, set ()
for p in dash["panels"]:
    assert p["id"] not in ids, "panel id %s twice" % p["id"]
    ids.add (p["id"])
    assert p["title"] and p["title"] not in titles, p["title"]
    titles.add (p["title"])
    assert p["type"] in ("stat", "gauge", "timeseries"), p["type"]
    assert p["datasource"]["uid"] == "${datasource}", p["title"]
    g = p["gridPos"]
    assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, p["title"]
    for x in range (g["x"], g["x"] + g["w"]):
        for y in range (g["y"], g["y"] + g["h"]):
            assert (x, y) not in cells, "%s overlaps %s" % (p["title"], cells[x, y])
            cells[x, y] = p["title"]
    refs = [t["refId"] for t in p["targets"]]
    assert p["targets"] and len (refs) == len (set (refs)), p["title"]
    exprs += [t["expr"] for t in p["targets"]]
used = set ()
for e in exprs:
    assert e.count ("(") == e.count (")") and e.count ("{") == e.count ("}"), e
    for v in re.findall (r'\$\{?(\w+)', e):
        assert v in variables or v.startswith ("__"), "undefined $%s in %s" % (v, e)
    used |= set (re.findall (r'\b(ramback_[a-z_]+)', e))
missing = used - names
assert not missing, "the dashboard queries metrics ramback does not write: %s" % missing
for want in ("ramback_dirty_bytes", "ramback_drain_seconds",
             "ramback_ups_window_seconds", "ramback_stored_bytes_total",
             "ramback_store_errors_total", "ramback_sync_errors_total",
             "ramback_populate_progress_ratio"):
    assert want in used, "no panel shows " + want
print ("dashboard: %d panels, %d metrics, all written by ramback" %
       (len (dash["panels"]), len (used)))
EOP
echo "metrics: ok"
