#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# mode, trace, sync, wait-populated and ups, each in its human and its
# --json form, checked against the plugin's own status and, for sync,
# against the bytes in the backing file.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/cli/cli-functions.sh"
set -x

back="$TMP/back.img"
start_ramback rb back="$back" size=4M chunk=64K flush-rate=4M
cleanup_fn stop_nbdkit "$rb_pid"

# The backing file holds LEN bytes of BYTE at OFFSET.
expect_back () {
    /usr/bin/python3 - "$back" "$@" <<'EOP'
import sys
path, off, n, byte = sys.argv[1], *map (int, sys.argv[2:])
with open (path, "rb") as f:
    f.seek (off)
    data = f.read (n)
if data != bytes ([byte]) * n:
    bad = next (i for i in range (n) if i >= len (data) or data[i] != byte)
    sys.exit ("backing file: byte %d is not %d" % (off + bad, byte))
EOP
}

# mode
run_rb 0 mode writethrough "$rb_ctl"
grep -qx 'mode: writethrough (was writeback)' "$TMP/out" || fail "mode output"
wait_field "$rb_ctl" mode writethrough
run_rb 0 mode --json writeback "$rb_ctl"
cp "$TMP/out" "$TMP/r.json"
expect_field "$TMP/r.json" command mode
expect_field "$TMP/r.json" socket "$rb_ctl"
expect_field "$TMP/r.json" previous_mode writethrough
expect_field "$TMP/r.json" mode writeback
expect_field "$TMP/r.json" pending_bytes 0
wait_field "$rb_ctl" mode writeback

# trace
run_rb 0 trace on "$rb_ctl"
grep -qx 'trace: on (was off)' "$TMP/out" || fail "trace output"
wait_field "$rb_ctl" trace true
run_rb 0 trace off --json "$rb_ctl"
cp "$TMP/out" "$TMP/r.json"
expect_field "$TMP/r.json" command trace
expect_field "$TMP/r.json" previous_trace true
expect_field "$TMP/r.json" trace false
wait_field "$rb_ctl" trace false

# sync: 2 MiB dirty at 4 MiB/s, so sync has work to wait for.
nbd_write "$rb_uri" 0 2097152 171
run_rb 0 sync --json "$rb_ctl"
cp "$TMP/out" "$TMP/r.json"
cat "$TMP/r.json"
expect_field "$TMP/r.json" command sync
expect_field "$TMP/r.json" socket "$rb_ctl"
expect_field "$TMP/r.json" dirty_bytes 0
/usr/bin/python3 - "$TMP/r.json" <<'EOP'
import json, sys
r = json.load (open (sys.argv[1]))
assert r["seconds"] >= 0, r
# What sync found pending was written back while it ran, no more than
# the 2 MiB written, and it was all of it unless the flusher had begun.
assert 0 <= r["pending_bytes"] <= r["stored_bytes"] + 65536, r
assert r["stored_bytes"] <= 2097152, r
EOP
expect_back 0 2097152 171
run_rb 0 status --json "$rb_ctl"
expect_field "$TMP/out" dirty_chunks 0
expect_field "$TMP/out" stored_bytes 2097152

nbd_write "$rb_uri" 2097152 1048576 172
run_rb 0 sync "$rb_ctl"
grep -Eqx 'synced: [0-9.]+ ([KMG]iB|B) written back in [0-9.]+ s' "$TMP/out" ||
    fail "sync output: $(cat "$TMP/out")"
expect_back 2097152 1048576 172

# wait-populated (a new backing file is populated at once).
run_rb 0 wait-populated "$rb_ctl"
grep -Eqx 'populated: 4\.0 MiB in RAM \(waited [0-9.]+ s\)' "$TMP/out" ||
    fail "wait-populated output: $(cat "$TMP/out")"
run_rb 0 wait-populated --json --timeout=5 "$rb_ctl"
cp "$TMP/out" "$TMP/r.json"
expect_field "$TMP/r.json" command wait-populated
expect_field "$TMP/r.json" populated true
expect_field "$TMP/r.json" size 4194304
expect_field "$TMP/r.json" loaded_chunks 64

# ups: every spelling of every event, alternating so that each one has
# to change the mode.
ups_case () {
    local event=$1 canon=$2 mode=$3 prev=$4
    run_rb 0 ups --json "$event" "$rb_ctl"
    cp "$TMP/out" "$TMP/r.json"
    expect_field "$TMP/r.json" command ups
    expect_field "$TMP/r.json" event "$canon"
    expect_field "$TMP/r.json" previous_mode "$prev"
    expect_field "$TMP/r.json" mode "$mode"
    expect_field "$TMP/r.json" synced "$( [ "$canon" = lowbatt ] && echo true || echo false)"
    wait_field "$rb_ctl" mode "$mode"
}
ups_case onbatt onbatt writethrough writeback
ups_case ONLINE online writeback writethrough
ups_case onbattery onbatt writethrough writeback
ups_case offbattery online writeback writethrough
ups_case ONBATT onbatt writethrough writeback
ups_case mainsback online writeback writethrough
ups_case powerout onbatt writethrough writeback
ups_case online online writeback writethrough
ups_case FSD lowbatt writethrough writeback
ups_case Online online writeback writethrough
ups_case doshutdown lowbatt writethrough writeback
ups_case online online writeback writethrough

# Human forms, and what they do: onbatt leaves draining to the plugin,
# lowbatt has synced everything when it returns.
nbd_write "$rb_uri" 0 1048576 173
run_rb 0 ups onbatt "$rb_ctl"
grep -Eq '^onbatt: mode writethrough \(was writeback\)' "$TMP/out" ||
    fail "ups onbatt output: $(cat "$TMP/out")"
run_rb 0 ups online "$rb_ctl"
grep -Eq '^online: mode writeback \(was writethrough\)' "$TMP/out" ||
    fail "ups online output: $(cat "$TMP/out")"
nbd_write "$rb_uri" 1048576 1048576 174
run_rb 0 ups LOWBATT --timeout=30 "$rb_ctl"
grep -Eqx 'lowbatt: mode writethrough \(was writeback\); synced, [0-9.]+ ([KMG]iB|B) written back in [0-9.]+ s' "$TMP/out" ||
    fail "ups lowbatt output: $(cat "$TMP/out")"
expect_back 0 1048576 173
expect_back 1048576 1048576 174
run_rb 0 status --json "$rb_ctl"
expect_field "$TMP/out" dirty_chunks 0
expect_field "$TMP/out" mode writethrough

# lowbatt --json reports the sync.
run_rb 0 ups online "$rb_ctl"
nbd_write "$rb_uri" 0 1048576 175
run_rb 0 ups lowbatt --json "$rb_ctl"
cp "$TMP/out" "$TMP/r.json"
expect_field "$TMP/r.json" synced true
expect_field "$TMP/r.json" pending_bytes 0
/usr/bin/python3 -c '
import json, sys
r = json.load (open (sys.argv[1]))
assert r["sync_seconds"] >= 0 and r["stored_bytes"] <= 1048576, r' "$TMP/r.json"
expect_back 0 1048576 175

# --help of every command, and --version.
for c in status mode sync wait-populated trace ups; do
    run_rb 0 $c --help
    grep -q "^  ramback $c " "$TMP/out" || fail "$c --help: no usage line"
done
run_rb 0 --help
for c in status mode sync wait-populated trace ups; do
    grep -q "^  $c " "$TMP/out" || fail "--help does not list $c"
done
run_rb 0 --version
grep -Eqx 'ramback [0-9]+\.[0-9]+\.[0-9]+' "$TMP/out" || fail "--version"

# wait-populated while populate is paused (writethrough mode): an error
# at once that says why and what resumes it, not a silent wait.
head -c 64M /dev/urandom > "$TMP/big.img"   # data: populate must read it
start_ramback wt back="$TMP/big.img" mode=writethrough populate-rate=1M
cleanup_fn stop_nbdkit "$wt_pid"
start=$(date +%s)
run_rb 6 wait-populated --timeout=20 "$wt_ctl"
(( $(date +%s) - start < 10 )) || fail "wait-populated waited for a paused populate"
grep -q "paused in writethrough mode.*ramback mode writeback.*(EAGAIN)" "$TMP/err" ||
    fail "wait-populated in writethrough mode: $(cat "$TMP/err")"
# The same when the mode changes to writethrough during the wait.
run_rb 0 mode writeback "$wt_ctl"
rc=0
"$RAMBACK" wait-populated --timeout=20 "$wt_ctl" >"$TMP/out2" 2>"$TMP/err2" &
waiter=$!
sleep 1
run_rb 0 mode writethrough "$wt_ctl"
start=$(date +%s)
wait "$waiter" || rc=$?
[ "$rc" -eq 6 ] || fail "wait-populated across a switch to writethrough: exit $rc, $(cat "$TMP/err2")"
(( $(date +%s) - start < 10 )) || fail "wait-populated went on after populate paused"
grep -q "paused in writethrough mode" "$TMP/err2" || fail "$(cat "$TMP/err2")"
