#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The UPS path always gets through the control socket.  Against plugins
# whose write back is stalled (flush-rate=1K: a sync waits for minutes):
#   A. 24 idle clients (more than the 16 slots and the 4 reserved for
#      mode changes): "ramback mode writethrough", "ramback ups online"
#      and a one-shot "ramback status" still succeed; "ramback sync"
#      gets no reserved slot (EBUSY, exit 6).
#   B. 16 clients waiting in "sync": "ramback mode", "ramback ups
#      onbatt" succeed, "ramback ups lowbatt" switches and syncs (its
#      timeout expires: exit 7).
#   C. every slot busy (16 idle clients, 4 reserved ones waiting in
#      sync): "ramback mode" is refused, retries, and succeeds once an
#      idle client leaves.
#   D. nobody listening yet (connect refused): "ramback mode" retries
#      and succeeds once the socket listens (needs strace to see the
#      refused connect).
#   E. idle clients are disconnected after 30 s; one waiting in sync
#      (longer than that) is not; "status --watch --interval=31"
#      connects again and goes on.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/cli/cli-functions.sh"
set -x

expect_err () {
    grep -Eq -- "$1" "$TMP/err" || fail "stderr '$(cat "$TMP/err")' does not match '$1'"
}

# clients NAME SOCK KIND N: control-clients.py holding N connections in
# the background (NAME_pid); returns once they are all served.  Its
# events are in $TMP/NAME.events.
clients () {
    local name=$1 sock=$2 kind=$3 n=$4 i
    rm -f "$TMP/$name.events"
    /usr/bin/python3 "$top_srcdir/cli/control-clients.py" "$sock" "$kind" \
        "$n" "$TMP/$name.events" 2>"$TMP/$name.err" &
    eval "${name}_pid=\$!"
    cleanup_fn _kill_if_running $!
    for (( i=0; i<600; i++ )); do
        grep -q "^ready" "$TMP/$name.events" 2>/dev/null && return 0
        kill -0 $! 2>/dev/null || fail "clients $name: $(cat "$TMP/$name.err")"
        sleep 0.1
    done
    fail "clients $name: not ready after 60 s"
}

# stalled NAME: a plugin with 128 KiB that the write back holds back
# for minutes (the first chunk is stored at once, each later one waits
# 64 s at flush-rate=1K).
stalled () {
    local name=$1 uriv=${1}_uri ctlv=${1}_ctl
    start_rb "$name" back="$TMP/$name.img" size=4M chunk=64K flush-rate=1K
    nbd_write "${!uriv}" 0 65536 1
    nbd_write "${!uriv}" 131072 65536 2
    nbd_write "${!uriv}" 262144 65536 3
    wait_field "${!ctlv}" stored_bytes 65536
}

# --- A: idle clients everywhere, and E's clients (first, for the clock).
stalled a
# E too: a watch whose interval is longer than the idle timeout
# reconnects when the plugin has closed its connection.
"$RAMBACK" status --watch --interval=31 --count=2 "$a_ctl" \
    >"$TMP/watch.out" 2>"$TMP/watch.err" &
watch_pid=$!
for (( i=0; i<100; i++ )); do [ -s "$TMP/watch.out" ] && break; sleep 0.1; done
clients a_sync "$a_ctl" sync 1
clients a_idle1 "$a_ctl" idle 1
clients a_idle "$a_ctl" idle 22
run_rb 0 mode writethrough "$a_ctl"
grep -q "^mode: writethrough (was writeback)" "$TMP/out" || fail "A: $(cat "$TMP/out")"
run_rb 0 ups online --json "$a_ctl"
expect_field "$TMP/out" mode writeback
expect_field "$TMP/out" previous_mode writethrough
run_rb 0 status --json "$a_ctl"
expect_field "$TMP/out" mode writeback
run_rb 6 sync --timeout=1 "$a_ctl"
expect_err "reserved for mode changes .*\(EBUSY\)$"
# The last four idle clients each shed an idle one from a reserved slot,
# and "ramback mode" one more.
[ "$(grep -c ' eof$' "$TMP/a_idle.events")" -ge 5 ] ||
    fail "A: idle clients shed: $(cat "$TMP/a_idle.events")"

# --- B: sixteen clients waiting in sync.
stalled b
clients b_sync "$b_ctl" sync 16
run_rb 0 mode writethrough "$b_ctl"
run_rb 0 ups onbatt --json "$b_ctl"
expect_field "$TMP/out" event onbatt
expect_field "$TMP/out" mode writethrough
run_rb 0 mode writeback "$b_ctl"
run_rb 7 ups lowbatt --timeout=1 "$b_ctl"
expect_err "sync did not finish within 1\.0 s .*\(mode writethrough is set\)"
run_rb 0 status --json "$b_ctl"
expect_field "$TMP/out" mode writethrough
# The sixteen are still waiting.
[ "$(grep -vc '^ready' "$TMP/b_sync.events")" -eq 0 ] ||
    fail "B: the sync clients: $(cat "$TMP/b_sync.events")"

# --- C: every slot busy; the command retries until one frees.
stalled c
clients c_idle "$c_ctl" idle 16
clients c_busy "$c_ctl" modesync 4
"$RAMBACK" mode writethrough "$c_ctl" >"$TMP/out" 2>"$TMP/err" &
mode_pid=$!
for (( i=0; i<300; i++ )); do
    grep -q "control: refused a connection" "$c_log" && break
    kill -0 $mode_pid 2>/dev/null || break
    sleep 0.1
done
grep -q "control: refused a connection" "$c_log" ||
    fail "C: no connection was refused: $(cat "$TMP/err")"
kill -USR1 "$c_idle_pid"            # one idle client leaves
rc=0; wait $mode_pid || rc=$?
[ "$rc" -eq 0 ] || fail "C: ramback mode exited $rc: $(cat "$TMP/err")"
[ ! -s "$TMP/err" ] || fail "C: stderr: $(cat "$TMP/err")"
grep -q "^mode: writethrough (was writeback)" "$TMP/out" || fail "C: $(cat "$TMP/out")"

# --- D: connect refused until the socket listens.
if command -v strace >/dev/null && strace -o /dev/null true 2>/dev/null; then
    # A socket that is bound but does not listen yet (connect: refused);
    # once $TMP/late.go exists it listens, passing each connection on to
    # plugin b's control socket.
    rm -f "$TMP/late.ctl" "$TMP/late.go"
    /usr/bin/python3 - "$TMP/late.ctl" "$TMP/late.go" "$b_ctl" <<'EOP' &
import os, socket, sys, threading, time
path, go, target = sys.argv[1:4]
s = socket.socket (socket.AF_UNIX, socket.SOCK_STREAM)
s.bind (path)
while not os.path.exists (go):
    time.sleep (0.01)
s.listen (8)
def pipe (a, b):
    while True:
        d = a.recv (65536)
        if not d:
            b.shutdown (socket.SHUT_WR)
            return
        b.sendall (d)
while True:
    c, _ = s.accept ()
    t = socket.socket (socket.AF_UNIX, socket.SOCK_STREAM)
    t.connect (target)
    threading.Thread (target=pipe, args=(c, t), daemon=True).start ()
    threading.Thread (target=pipe, args=(t, c), daemon=True).start ()
EOP
    cleanup_fn _kill_if_running $!
    for (( i=0; i<100; i++ )); do [ -S "$TMP/late.ctl" ] && break; sleep 0.1; done
    rm -f "$TMP/strace.out"
    # (LeakSanitizer cannot run under ptrace: off for this one.)
    ASAN_OPTIONS="detect_leaks=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
        strace -f -e trace=connect -o "$TMP/strace.out" \
        "$RAMBACK" mode writeback "$TMP/late.ctl" >"$TMP/out" 2>"$TMP/err" &
    mode_pid=$!
    for (( i=0; i<300; i++ )); do
        grep -q ECONNREFUSED "$TMP/strace.out" 2>/dev/null && break
        kill -0 $mode_pid 2>/dev/null || break
        sleep 0.05
    done
    touch "$TMP/late.go"
    rc=0; wait $mode_pid || rc=$?
    grep ECONNREFUSED "$TMP/strace.out" || fail "D: no refused connect"
    [ "$rc" -eq 0 ] || fail "D: ramback mode exited $rc: $(cat "$TMP/err")"
    grep -q "^mode: writeback (was writethrough)" "$TMP/out" || fail "D: $(cat "$TMP/out")"
else
    echo "strace does not work here: D skipped"
fi

# --- E: the idle client of A is disconnected; A's sync client, which
# has waited longer, is not.
for (( i=0; i<1200; i++ )); do
    grep -q "^0 eof" "$TMP/a_idle1.events" && break
    sleep 0.1
done
grep -q "^0 eof" "$TMP/a_idle1.events" ||
    fail "E: an idle client was not disconnected in 120 s"
[ "$(grep -vc '^ready' "$TMP/a_sync.events")" -eq 0 ] ||
    fail "E: the client waiting in sync: $(cat "$TMP/a_sync.events")"
grep -q "control: closing a connection idle for 30 s" "$a_log" ||
    fail "E: no idle message in the log"
rc=0; wait $watch_pid || rc=$?
[ "$rc" -eq 0 ] && [ ! -s "$TMP/watch.err" ] ||
    fail "E: the watch exited $rc: $(cat "$TMP/watch.err")"
[ "$(wc -l < "$TMP/watch.out")" -eq 2 ] || fail "E: the watch: $(cat "$TMP/watch.out")"

stop_rb a
stop_rb b
stop_rb c
# The waiting syncs were answered by the final drain, each before its
# connection was closed.
for (( i=0; i<100; i++ )); do
    grep -q "^0 eof" "$TMP/a_sync.events" &&
        [ "$(grep -c " eof$" "$TMP/b_sync.events")" -eq 16 ] && break
    sleep 0.1
done
grep -q "^0 reply OK" "$TMP/a_sync.events" || fail "A's sync: $(cat "$TMP/a_sync.events")"
[ "$(grep -c " reply OK$" "$TMP/b_sync.events")" -eq 16 ] ||
    fail "B's syncs: $(cat "$TMP/b_sync.events")"
