#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Every documented exit status of ramback(1), each with its one line on
# stderr: 1 usage, 2 cannot connect, 3 permission denied, 4 connection
# lost, 5 reply not understood, 6 request failed, 7 timed out, 130
# interrupted.  The real plugin for all of them except the replies it
# never sends (fake-control-server.py).

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/cli/cli-functions.sh"
set -x

expect_err () {
    grep -Eq -- "$1" "$TMP/err" || fail "stderr '$(cat "$TMP/err")' does not match '$1'"
}
expect_err_text () {
    grep -Fq -- "$1" "$TMP/err" || fail "stderr '$(cat "$TMP/err")' does not contain '$1'"
}

# A plugin that is slow to write back (flush-rate=100: after the first
# chunk, the next one waits 11 minutes; at 1K the 64 s wait ran out
# before the timeout checks below on a loaded machine under ASan), with
# dirty data.
start_ramback rb back="$TMP/back.img" size=4M chunk=64K flush-rate=100
nbd_write "$rb_uri" 0 65536 1
nbd_write "$rb_uri" 131072 65536 2
nbd_write "$rb_uri" 262144 65536 3
wait_field "$rb_ctl" stored_bytes 65536

# 1: usage.
run_rb 1
run_rb 1 frobnicate "$rb_ctl"
expect_err "unknown command 'frobnicate'"
run_rb 1 status
run_rb 1 status "$rb_ctl" extra
run_rb 1 status --bogus "$rb_ctl"
run_rb 1 status --prometheus --json "$rb_ctl"
run_rb 1 status --prometheus --watch "$rb_ctl"
run_rb 1 status --count=3 "$rb_ctl"
run_rb 1 status --watch=0 "$rb_ctl"
run_rb 1 status --watch=1 "$rb_ctl"
expect_err "--watch takes no value; give the period with --interval=SECONDS"
run_rb 1 status --interval=1 "$rb_ctl"
expect_err "--interval needs --watch"
run_rb 1 status --watch --interval=0.01 "$rb_ctl"
expect_err "at least 0\.05 s"
run_rb 1 status --watch --interval=+1 "$rb_ctl"
run_rb 1 mode "$rb_ctl"
run_rb 1 mode writearound "$rb_ctl"
expect_err "writeback or writethrough"
run_rb 1 trace maybe "$rb_ctl"
run_rb 1 ups "$rb_ctl"
run_rb 1 ups COMMBAD "$rb_ctl"
expect_err "unknown power event 'COMMBAD'"
run_rb 1 sync --timeout=soon "$rb_ctl"
run_rb 1 sync --timeout=-1 "$rb_ctl"
run_rb 1 wait-populated --timeout= "$rb_ctl"
# Numbers in one form only: digits, for seconds with a fraction.
for v in -0 +5 ' 5' '5 ' 5s 0x5 0x1p3 1e3 inf nan 05 5. .5 '' -; do
    run_rb 1 sync --timeout="$v" "$rb_ctl"
    expect_err_text "'$v' is not a number of seconds (digits with an optional fraction, e.g. 30 or 0.5)"
done
run_rb 1 ups lowbatt --timeout=+1 "$rb_ctl"
for v in 0 -3 +3 ' 3' 3x 0x3 03 3.0; do
    run_rb 1 status --watch --count="$v" "$rb_ctl"
    expect_err_text "'$v' is not a whole number of updates (1 or more, e.g. 10)"
done
# None of that changed anything.
run_rb 0 status --json "$rb_ctl"
expect_field "$TMP/out" mode writeback

# 2: cannot connect.
run_rb 2 status "$TMP/nonexistent.ctl"
expect_err "no such socket"
: > "$TMP/regular-file"
run_rb 2 status "$TMP/regular-file"
expect_err "not a socket"
run_rb 2 status "$TMP/regular-file/x.ctl"
expect_err "not a socket"
/usr/bin/python3 -c '
import socket, sys
s = socket.socket (socket.AF_UNIX)
s.bind (sys.argv[1])' "$TMP/stale.ctl"
run_rb 2 mode writethrough "$TMP/stale.ctl"
expect_err "nobody is listening"
run_rb 2 sync "$TMP/$(printf 'x%.0s' {1..120}).ctl"
expect_err "too long"
# The NBD socket instead of the control socket: named as such.
run_rb 2 status "$rb_sock"
expect_err_text "$rb_sock: this is an NBD socket (nbdkit -U); give the control= socket"
run_rb 2 mode writethrough "$rb_sock"
expect_err_text "this is an NBD socket"

# 3: permission denied.  The plugin makes its socket 0600; root ignores
# that, so as root the command runs as nobody.
[ "$(stat -c %a "$rb_ctl")" = 600 ] || fail "the control socket is not 0600"
if [ "$(id -u)" -eq 0 ] && command -v setpriv >/dev/null; then
    bindir=$(mktemp -d)
    cleanup_fn rm -rf "$bindir"
    chmod 755 "$bindir"
    cp "$RAMBACK" "$bindir/ramback"
    chmod 711 "$TMP"
    rc=0
    setpriv --reuid=65534 --regid=65534 --clear-groups \
        "$bindir/ramback" status "$rb_ctl" >"$TMP/out" 2>"$TMP/err" || rc=$?
    chmod 700 "$TMP"
    [ "$rc" -eq 3 ] || fail "as nobody: exit status $rc, expected 3"
    [ "$(wc -l < "$TMP/err")" -eq 1 ] || fail "as nobody: not one line"
    expect_err "permission denied"
else
    chmod 000 "$rb_ctl"
    run_rb 3 status "$rb_ctl"
    chmod 600 "$rb_ctl"
    expect_err "permission denied"
fi

# 7: timed out.  The cap holds two chunks back for far longer.
# --timeout=0 checks without waiting: there is dirty data.
run_rb 7 sync --timeout=0 "$rb_ctl"
expect_err "sync did not finish within 0\.0 s \(128\.0 KiB still dirty"
run_rb 7 sync --timeout=0.5 "$rb_ctl"
expect_err "sync did not finish within 0\.5 s \(128\.0 KiB still dirty"
run_rb 7 ups lowbatt --timeout=0.2 "$rb_ctl"
expect_err "did not finish within 0\.2 s"
# ... which still switched the mode (the drain goes on).
run_rb 0 status --json "$rb_ctl"
expect_field "$TMP/out" mode writethrough
expect_field "$TMP/out" dirty_chunks 2

# A "ramback sync" in the background (sync_pid), waiting once it holds
# a socket connection (bounded).
start_sync () {
    "$RAMBACK" sync "$rb_ctl" >"$TMP/out" 2>"$TMP/err" &
    sync_pid=$!
    for (( i=0; i<100; i++ )); do
        ls -l /proc/$sync_pid/fd 2>/dev/null | grep -q 'socket:' && break
        sleep 0.1
    done
}

# 130: interrupted while waiting (sync without a timeout).
start_sync
sleep 0.3
kill -INT $sync_pid
rc=0; wait $sync_pid || rc=$?
[ "$rc" -eq 130 ] || fail "interrupted sync: exit status $rc, expected 130"
expect_err "interrupted"

# 4: the plugin is killed in the middle of a sync.
start_sync
kill -9 "$rb_pid"
rc=0; wait $sync_pid || rc=$?
[ "$rc" -eq 4 ] || { cat "$TMP/err"; fail "sync when nbdkit died: exit status $rc, expected 4"; }
[ "$(wc -l < "$TMP/err")" -eq 1 ] || fail "not one line: $(cat "$TMP/err")"
expect_err "connection lost"
# And afterwards, its socket is stale.
run_rb 2 status "$rb_ctl"

# 6: the plugin answers ERR.
start_ramback lazy back="$TMP/lazy.img" size=1M populate=false
cleanup_fn stop_nbdkit "$lazy_pid"
# Nothing is dirty there: once a sync has run (the write back is idle
# after it), sync --timeout=0 succeeds at once.
run_rb 0 sync "$lazy_ctl"
run_rb 0 sync --timeout=0 --json "$lazy_ctl"
expect_field "$TMP/out" dirty_bytes 0
run_rb 6 wait-populated --timeout=5 "$lazy_ctl"
expect_err "\(EINVAL\)$"
# A refused request must not keep nbdkit from stopping.
stop_nbdkit "$lazy_pid" || fail "nbdkit did not stop after an ERR reply"
# ... and a backing store that fails every write (ENOSPC).
nbdkit -U "$TMP/full.sock" -P "$TMP/full.pid" full 4M
cleanup_fn _kill_pidfile "$TMP/full.pid"
start_ramback onfull back="nbd+unix:///?socket=$TMP/full.sock"
nbd_write "$onfull_uri" 0 65536 9
run_rb 6 sync --timeout=30 "$onfull_ctl"
expect_err "\(ENOSPC\)$"
run_rb 0 status --json "$onfull_ctl"
expect_field "$TMP/out" last_errno ENOSPC
kill -9 "$onfull_pid"     # it could never drain

# 5 (and 4, 7): replies the plugin never sends.
for b in badjson nomode badfinal binary errname; do
    fake $b
    run_rb 5 status "$TMP/$b.ctl"
    expect_err "not understood"
    run_rb 5 status --json "$TMP/$b.ctl"
    [ ! -s "$TMP/out" ] || fail "output on stdout after an error"
done
run_rb 5 mode writeback "$TMP/badfinal.ctl"
fake hangup
run_rb 4 status "$TMP/hangup.ctl"
expect_err "connection lost"
# A plugin that never answers sync: the --timeout is the plugin's to
# keep, ramback gives up 10 s after it.
fake nosync
run_rb 7 sync --timeout=0 "$TMP/nosync.ctl"
expect_err "no reply to 'sync 0' within 10\.0 s"
