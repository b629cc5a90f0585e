#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The remote nbdkit is killed (SIGKILL) in the middle of a flush and
# restarted while writes continue.  Status must show the store offline;
# reads keep being served from RAM; after the restart everything drains:
# the remote's file == the model, and the reconnect is counted.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/remote-functions.sh"
set -x

size=$(( 32 * 1024 * 1024 ))
truncate -s "$size" "$TMP/r.img"
cp "$TMP/r.img" "$TMP/model"

start_remote r file "$TMP/r.img"
# flush-rate keeps the flush in progress while the remote is killed.
start_rb rb back="$r_uri" flush-rate=4M
ctl "$rb_ctl" wait-populated 60000

rio write "$rb_uri" "$TMP/model" 21 60 1048576
[ "$(status_field "$rb_ctl" dirty_bytes)" -gt 0 ] ||
    fail "nothing dirty: the flush is not in progress"

kill_remote r
rio writer "$rb_uri" "$TMP/model" 22 "$TMP/stop" 262144 &
writer=$!
cleanup_fn touch "$TMP/stop"
wait_status "$rb_ctl" store_state offline 30
status_field "$rb_ctl" last_error

# While offline: writes go on, nothing is lost, status says why.
sleep 1
[ "$(status_field "$rb_ctl" store_errors)" -gt 0 ] ||
    fail "no store errors counted while offline"

start_remote r file "$TMP/r.img"
sleep 1
touch "$TMP/stop"
wait "$writer"

# Everything RAM holds is readable and right.
rio check "$rb_uri" "$TMP/model"

# Drain: the sync fails until the flusher's retry succeeds once (the
# first sync after a lost connection also fails on purpose, see
# store-nbd.c), so retry it a bounded number of times.
ok=
for i in $(seq 1 20); do
    if ctl "$rb_ctl" sync 30000; then ok=1; break; fi
    sleep 0.5
done
[ -n "$ok" ] || fail "sync never succeeded after the remote came back"
[ "$(status_field "$rb_ctl" dirty_bytes)" -eq 0 ] || fail "still dirty"
[ "$(status_field "$rb_ctl" store_state)" = ok ] || fail "store not ok"
[ "$(status_field "$rb_ctl" store_reconnects)" -ge 1 ] ||
    fail "no reconnect counted"
assert_same "$TMP/r.img" "$TMP/model"

# What the store saw, for the log of this test.
grep -E 'nbd: |flush|sync' "$rb_log" | tail -40 || true
stop_rb_same rb "$TMP/r.img" "$TMP/model"
kill_remote r TERM
echo PASS
