#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The terminal displays: "status --watch" under a pseudo-terminal
# (script(1)) redraws in place with a populate progress bar that
# advances while populate-rate= holds populate back; "wait-populated"
# and "sync" draw their progress bars; without a terminal --watch
# prints plain lines (or JSON lines), and ends cleanly on SIGTERM.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/cli/cli-functions.sh"
requires script
set -x

# 80 MiB of data at 8 MiB/s: about 10 s of populate.
/usr/bin/python3 -c '
import random, sys
open (sys.argv[1], "wb").write (random.Random (7).randbytes (80 << 20))' "$TMP/back.img"
start_ramback w back="$TMP/back.img" populate-rate=8M flush-rate=1M
cleanup_fn _kill_if_running "$w_pid"

# script -c CMD LOG: run CMD on a pseudo-terminal, its output in LOG.
on_tty () {
    local log=$1; shift
    timeout 120 script -qfec "$*" "$log" >/dev/null </dev/null
}

run_rb 7 wait-populated --timeout=0.5 "$w_ctl"
expect_err () { grep -Eq "$1" "$TMP/err" || fail "stderr: $(cat "$TMP/err")"; }
expect_err "wait-populated did not finish within 0\.5 s \([0-9.]+% in RAM"

on_tty "$TMP/watch.log" "$RAMBACK" status --watch --interval=0.5 --count=24 "$w_ctl"
/usr/bin/python3 - "$TMP/watch.log" <<'EOP'
import re, sys
text = open (sys.argv[1], encoding="utf-8", errors="replace", newline="").read ()
frames = text.split ("Every 0.5 s: ramback status ")[1:]
assert len (frames) == 24, "%d frames" % len (frames)
# Each redraw goes back up over the previous frame, by its height.
ups = [int (n) for n in re.findall (r"\r\x1b\[(\d+)A", text)]
assert len (ups) == 23, ups
seen = []
for f in frames:
    lines = f.replace ("\r", "").split ("\n")
    height = len ([l for l in lines if l.endswith ("\x1b[K")])
    pop = [i for i, l in enumerate (lines) if l.startswith ("populate:")]
    assert len (pop) == 1, lines
    line, bar = lines[pop[0]], lines[pop[0] + 1]
    m = re.match (r"populate: +(?:([0-9.]+)%|done)", line)
    assert m, line
    pct = float (m.group (1)) if m.group (1) else 100.0
    b = re.search (r"\[(#*)(-*)\] +([0-9.]+)%", bar)
    assert b, "no progress bar under: %r" % bar
    assert abs (float (b.group (3)) - pct) < 0.06, (line, bar)
    seen.append ((pct, len (b.group (1)), height))
    # The drain bar is there too.
    assert any (re.search (r"\[#*-*\] +[0-9.]+%", l) for l in
                lines[lines.index (next (l for l in lines
                                         if l.startswith ("time to drain:"))) + 1:]), f
print (seen)
pcts = [s[0] for s in seen]
assert pcts == sorted (pcts), "populate went backwards: %s" % pcts
assert pcts[0] < 100, "populated before the first frame: %s" % pcts
assert pcts[-1] > pcts[0], "the progress did not advance: %s" % pcts
assert seen[-1][1] > seen[0][1], "the bar did not grow: %s" % seen
assert ups == [s[2] for s in seen[:-1]], (ups, seen)
EOP

on_tty "$TMP/wait.log" "$RAMBACK" wait-populated --timeout=60 "$w_ctl"
tr '\r' '\n' < "$TMP/wait.log" > "$TMP/wait.lines"
grep -Eq '^populate \[#+\] 100\.0%  80\.0 MiB of 80\.0 MiB' "$TMP/wait.lines" ||
    fail "wait-populated: no full progress bar"
grep -Eq '^populated: 80\.0 MiB in RAM \(waited [0-9.]+ s\)' "$TMP/wait.lines" ||
    fail "wait-populated: no result line"
run_rb 0 status --json "$w_ctl"
expect_field "$TMP/out" populated true

# sync: 3 MiB at flush-rate=1M.
nbd_write "$w_uri" 0 3145728 66
on_tty "$TMP/sync.log" "$RAMBACK" sync --timeout=60 "$w_ctl"
/usr/bin/python3 - "$TMP/sync.log" <<'EOP'
import re, sys
text = open (sys.argv[1], encoding="utf-8", errors="replace", newline="").read ()
pcts = [float (p) for p in re.findall (r"sync +\[#*-*\] +([0-9.]+)%", text)]
print (pcts)
assert pcts == sorted (pcts), pcts
assert pcts[-1] == 100.0, pcts
assert len (set (p for p in pcts if p < 100)) >= 2, "no advance: %s" % pcts
assert re.search (r"synced: [0-9.]+ MiB written back in [0-9.]+ s", text), text
EOP
run_rb 0 status --json "$w_ctl"
expect_field "$TMP/out" dirty_chunks 0
# --no-progress, or no terminal: no bar.
on_tty "$TMP/sync2.log" "$RAMBACK" sync --no-progress "$w_ctl"
if grep -q '\[#' "$TMP/sync2.log"; then fail "--no-progress drew a bar"; fi
run_rb 0 sync "$w_ctl"
if grep -q '\[' "$TMP/out"; then fail "a bar without a terminal"; fi

# Not a terminal: one plain line per update, no escape sequences.
run_rb 0 status --watch --interval=0.2 --count=3 "$w_ctl"
[ "$(wc -l < "$TMP/out")" -eq 3 ] || fail "--watch --count=3: not 3 lines"
if grep -q $'\033' "$TMP/out"; then fail "escape sequences without a terminal"; fi
grep -Evq '^[0-9]{2}:[0-9]{2}:[0-9]{2} writeback populate 100\.0% dirty [0-9.]+ [KMG]?i?B in-flight [0-9.]+ [KMG]?i?B flush [0-9.]+ [KMG]?i?B/s drain [0-9.]+ s errors 0$' "$TMP/out" &&
    fail "--watch lines: $(cat "$TMP/out")"
run_rb 0 status --watch --interval=0.2 --count=2 --json "$w_ctl"
/usr/bin/python3 -c '
import json, sys
objs = [json.loads (l) for l in open (sys.argv[1])]
assert len (objs) == 2 and all (o["mode"] == "writeback" for o in objs), objs' "$TMP/out"

# --watch runs until a signal, then exits 0 ...
rm -f "$TMP/watch.out"
"$RAMBACK" status --watch --interval=0.2 "$w_ctl" >"$TMP/watch.out" 2>"$TMP/err" &
watch_pid=$!
for (( i=0; i<100; i++ )); do [ -s "$TMP/watch.out" ] && break; sleep 0.1; done
kill -TERM $watch_pid
rc=0; wait $watch_pid || rc=$?
[ "$rc" -eq 0 ] || fail "--watch after SIGTERM: exit status $rc"
# ... or until the plugin goes away: exit status 4.
rm -f "$TMP/watch.out"
"$RAMBACK" status --watch --interval=0.2 "$w_ctl" >"$TMP/watch.out" 2>"$TMP/err" &
watch_pid=$!
for (( i=0; i<100; i++ )); do [ -s "$TMP/watch.out" ] && break; sleep 0.1; done
kill -9 "$w_pid"
rc=0; wait $watch_pid || rc=$?
[ "$rc" -eq 4 ] || fail "--watch when nbdkit died: exit status $rc"
[ "$(wc -l < "$TMP/err")" -eq 1 ] || fail "--watch: not one error line"
