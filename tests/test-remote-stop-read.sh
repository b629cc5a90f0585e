#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# A clean stop waits for data it must write back, never for a read it
# no longer needs.  The server holds populate's first read and never
# answers it; nothing is dirty.  SIGTERM must end nbdkit promptly (with
# no request-timeout=), and a write made before the stop, which the
# stop must write back, still reaches the server.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
source "$top_srcdir/tests/remote-functions.sh"

size=$(( 16 * 1024 * 1024 ))
head -c "$size" /dev/urandom >"$TMP/back.img"
start_faultdisk bk "$TMP/back.img"

# 1. Nothing dirty: the stop does not wait for the held read.
fd_cmd bk stall read >/dev/null
start_rb rb back="$bk_uri"
fd_wait bk held 1
kill -TERM "$rb_pid"
for (( i=0; i<200; i++ )); do
    kill -0 "$rb_pid" 2>/dev/null || break
    sleep 0.1
done
if kill -0 "$rb_pid" 2>/dev/null; then
    tail -5 "$rb_log" >&2
    fail "no clean stop 20 s after SIGTERM while the server holds a read"
fi
rc=0; wait "$rb_job" || rc=$?
[ "$rc" = 0 ] || { tail -20 "$rb_log" >&2; fail "exit status $rc"; }
fd_cmd bk release all fail >/dev/null
echo "ok: a held read does not hold up a clean stop"

# 2. A write to write back, and a held read: the write reaches the
#    server, the read is abandoned.  Populate is slow (small batches),
#    so the write is not queued behind the read that will be held; the
#    stall is armed after it.
start_rb rb2 back="$bk_uri" flush-delay=60 populate-rate=2M
head -c 65536 /dev/urandom >"$TMP/w"
py - "$rb2_uri" "$TMP/w" <<'PY'
import sys, nbd
h = nbd.NBD ()
h.connect_uri (sys.argv[1])
h.pwrite (open (sys.argv[2], "rb").read (), 65536)
h.shutdown ()
PY
fd_cmd bk stall read offset=$(( 4 * 1024 * 1024 )) >/dev/null
fd_wait bk held 1
[ "$(status_field "$rb2_ctl" dirty_chunks)" -gt 0 ] ||
    fail "the write is not dirty before the stop"
stop_rb rb2
fd_cmd bk release all fail >/dev/null
kill_remote bk
cmp -n 65536 -i 65536:0 "$TMP/back.img" "$TMP/w" ||
    fail "the write made before the stop is not on the server"
echo "ok: the stop wrote back and abandoned the held read"
