#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The shipped glue without a UPS daemon: ramback-ups-hook called the way
# upsmon (NOTIFYCMD, $NOTIFYTYPE), upssched (CMDSCRIPT, argument) and
# apcupsd (/etc/apcupsd/EVENT, by name) call it, against real plugins;
# power flapping (on line again after low battery is ignored, also
# when hook runs overlap); every way of not reaching a ramback is an
# error, logged at error priority; and ramback@.service's own command
# lines: start, the control socket for the UPS daemon's user (NUT's
# "nut"), drain on stop.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/cli/cli-functions.sh"
source "$top_srcdir/contrib/contrib-functions.sh"
set -x

HOOK="$top_builddir/contrib/ramback-ups-hook"
[ -x "$HOOK" ] || fail "$HOOK is not built"
export RAMBACK
export RAMBACK_UPS_CONF="$TMP/no-such.conf"

# The hook also runs as an unprivileged user below: it may pass through
# $TMP (but not list it) and write the log of a logger(1) that records
# each message with its priority.
chmod 0711 "$TMP"
mkdir -m 0755 "$TMP/bin"
cat > "$TMP/bin/logger" <<'EOF'
#!/bin/sh
printf '%s\n' "$*" >> "$LOGGER_LOG"
EOF
chmod 0755 "$TMP/bin/logger"
export LOGGER_LOG="$TMP/logger.log" PATH="$TMP/bin:$PATH"
: > "$LOGGER_LOG"
chmod 0666 "$LOGGER_LOG"
logged () {             # logged PRIORITY REGEX: a message since the last hook run
    grep -E -- "-p $1 -- .*$2" "$LOGGER_LOG"
}

start_ramback a back="$TMP/a.img" size=4M flush-rate=4M
cleanup_fn stop_nbdkit "$a_pid"
start_ramback b back="$TMP/b.img" size=4M
cleanup_fn stop_nbdkit "$b_pid"
export RAMBACK_SOCKETS="$a_ctl"

hook () {
    local want=$1 rc=0
    shift
    : > "$LOGGER_LOG"
    "$@" >"$TMP/hook.out" 2>"$TMP/hook.err" || rc=$?
    cat "$TMP/hook.err" "$LOGGER_LOG"
    [ "$rc" -eq "$want" ] || fail "$*: exit status $rc, expected $want"
}

# upsmon: NOTIFYCMD gets the message; the event is in $NOTIFYTYPE.
NOTIFYTYPE=ONBATT hook 0 "$HOOK" "UPS dummy@localhost on battery"
expect_mode "$a_ctl" writethrough
grep -q "^ramback-ups-hook: $a_ctl: onbatt: mode writethrough (was writeback)" \
    "$TMP/hook.err" || fail "no log line for onbatt"
logged daemon.notice "onbatt: mode writethrough" || fail "not logged"
NOTIFYTYPE=ONLINE hook 0 "$HOOK" "UPS dummy@localhost on line power"
expect_mode "$a_ctl" writeback
# Events that are none of ours change nothing and are not errors.
NOTIFYTYPE=ONBATT hook 0 "$HOOK" "UPS dummy@localhost on battery"
for t in COMMBAD COMMOK REPLBATT NOCOMM; do
    NOTIFYTYPE=$t hook 0 "$HOOK" "UPS dummy@localhost: $t"
    expect_mode "$a_ctl" writethrough
done
# An unknown event name (a typo in upssched.conf, by hand) or none at
# all is an error, logged at daemon.err, and changes nothing.
for args in onbat "onbatt-typo" ""; do
    hook 1 "$HOOK" $args
    expect_mode "$a_ctl" writethrough
    logged daemon.err "unknown event '$args'|no event: give one" ||
        fail "ramback-ups-hook '$args': not logged at daemon.err"
    grep -Eq "unknown event '$args'|no event" "$TMP/hook.err" ||
        fail "ramback-ups-hook '$args': no message"
done
NOTIFYTYPE=ONLINE hook 1 "$HOOK" onlnie
expect_mode "$a_ctl" writethrough

# Power flapping.  Once the battery was low, a shutdown is under way:
# back on line must not switch to writeback (new dirty data the
# shutdown would have to drain) until the hook is reset or the ramback
# restarts.  Each step as upsmon sends it, and the mode after it.
step () {
    NOTIFYTYPE=$1 hook 0 "$HOOK" "UPS dummy@localhost: $1"
    expect_mode "$a_ctl" "$2"
}
step LOWBATT writethrough
step ONLINE writethrough
grep -q "$a_ctl: online ignored: low battery" "$TMP/hook.err" ||
    fail "no log line for the ignored online"
logged daemon.warning "online ignored" || fail "not logged as a warning"
step ONLINE writethrough
# onbatt -> lowbatt -> online, after an explicit reset.
hook 0 "$HOOK" reset
grep -q "$a_ctl: reset: on line events switch to writeback again" \
    "$TMP/hook.err" || fail "no log line for reset"
expect_mode "$a_ctl" writethrough
step ONLINE writeback
step ONBATT writethrough
step LOWBATT writethrough
step ONLINE writethrough
hook 0 "$HOOK" reset
# onbatt -> online -> lowbatt -> online.
step ONLINE writeback
step ONBATT writethrough
step ONLINE writeback
step LOWBATT writethrough
step ONLINE writethrough
step FSD writethrough
step ONLINE writethrough
# The low battery was this nbdkit's: a restarted one on the same socket
# starts in writeback and takes on line events again.
stop_nbdkit "$a_pid"
start_ramback a back="$TMP/a.img" size=4M flush-rate=4M
cleanup_fn stop_nbdkit "$a_pid"
step ONBATT writethrough
step ONLINE writeback

# Overlapping hook runs (upsmon does not wait for one NOTIFYCMD before
# it starts the next): an on line run holds at a gate in "ramback" just
# before it switches to writeback, a low battery run starts meanwhile.
# Whatever they overlap in, low battery wins: the mode ends writethrough.
cat > "$TMP/gated-ramback" <<EOF
#!/bin/sh
case " \$* " in
    *" online "*)
        : > "$TMP/gate.reached"
        while [ ! -e "$TMP/gate.open" ]; do sleep 0.05; done ;;
esac
exec "$RAMBACK" "\$@"
EOF
chmod +x "$TMP/gated-ramback"
step ONBATT writethrough
( RAMBACK="$TMP/gated-ramback" NOTIFYTYPE=ONLINE "$HOOK" "UPS on line power" \
      > "$TMP/online.err" 2>&1
  echo $? > "$TMP/online.rc" ) &
wait_for "the on line run at the gate" test -e "$TMP/gate.reached"
( NOTIFYTYPE=LOWBATT "$HOOK" "UPS battery is low" > "$TMP/lowbatt.err" 2>&1
  echo $? > "$TMP/lowbatt.rc" ) &
# The low battery run is done, or waiting for the on line run to finish.
lock_waiter () {
    local ino
    ino=$(stat -c %i "$TMP/ups-hook/a.ctl.lock" 2>/dev/null) &&
        grep -q -- "-> FLOCK .*:$ino " /proc/locks
}
wait_for "the low battery run to finish or wait" \
    eval 'test -s "$TMP/lowbatt.rc" || lock_waiter'
touch "$TMP/gate.open"
wait_for "both runs to finish" \
    eval 'test -s "$TMP/lowbatt.rc" && test -s "$TMP/online.rc"'
cat "$TMP/online.err" "$TMP/lowbatt.err"
[ "$(cat "$TMP/online.rc") $(cat "$TMP/lowbatt.rc")" = "0 0" ] ||
    fail "overlapping runs: exit status $(cat "$TMP/online.rc") (online)" \
         "$(cat "$TMP/lowbatt.rc") (lowbatt)"
expect_mode "$a_ctl" writethrough
step ONLINE writethrough
hook 0 "$HOOK" reset
step ONLINE writeback

# upssched: CMDSCRIPT gets the timer name, which wins over the
# NOTIFYTYPE that upssched passes on.
hook 0 "$HOOK" onbatt
expect_mode "$a_ctl" writethrough
NOTIFYTYPE=ONBATT hook 0 "$HOOK" online
expect_mode "$a_ctl" writeback

# apcupsd: /etc/apcupsd/EVENT UPSNAME SLAVES CONNECTED, and never 99
# (that would cancel apcupsd's own action).
mkdir "$TMP/apcupsd"
for e in onbattery offbattery doshutdown; do
    ln -s "$HOOK" "$TMP/apcupsd/$e"
done
hook 0 "$TMP/apcupsd/onbattery" myups 1 1
expect_mode "$a_ctl" writethrough
hook 0 "$TMP/apcupsd/offbattery" myups 1 1
expect_mode "$a_ctl" writeback
# doshutdown is low battery: writethrough and sync.
nbd_write "$a_uri" 0 2097152 77
hook 0 "$TMP/apcupsd/doshutdown" myups 1 1
run_rb 0 status --json "$a_ctl"
expect_field "$TMP/out" mode writethrough
expect_field "$TMP/out" dirty_chunks 0
/usr/bin/python3 -c '
import sys
d = open (sys.argv[1], "rb").read (2097152)
assert d == bytes ([77]) * 2097152, "doshutdown: not on the backing store"' "$TMP/a.img"
hook 0 "$TMP/apcupsd/offbattery" myups 1 1
expect_mode "$a_ctl" writethrough
hook 0 "$HOOK" reset

# Several sockets, as a pattern: all of them switch.
RAMBACK_SOCKETS="$TMP/*.ctl" hook 0 "$HOOK" onbatt
expect_mode "$a_ctl" writethrough
expect_mode "$b_ctl" writethrough
[ "$(grep -c ': onbatt: mode writethrough' "$TMP/hook.err")" -eq 2 ] ||
    fail "not one log line per socket"
RAMBACK_SOCKETS="$a_ctl $b_ctl" hook 0 "$HOOK" online
expect_mode "$a_ctl" writeback
expect_mode "$b_ctl" writeback
# The latch is per socket.
RAMBACK_SOCKETS="$b_ctl" hook 0 "$HOOK" lowbatt
RAMBACK_SOCKETS="$TMP/*.ctl" hook 0 "$HOOK" onbatt
RAMBACK_SOCKETS="$TMP/*.ctl" hook 0 "$HOOK" online
expect_mode "$a_ctl" writeback
expect_mode "$b_ctl" writethrough
RAMBACK_SOCKETS="$TMP/*.ctl" hook 0 "$HOOK" reset
RAMBACK_SOCKETS="$b_ctl" hook 0 "$HOOK" online
expect_mode "$b_ctl" writeback

# The configuration file, when RAMBACK_SOCKETS is not set.
echo "RAMBACK_SOCKETS=\"$b_ctl\"" > "$TMP/hook.conf"
RAMBACK_SOCKETS= RAMBACK_UPS_CONF="$TMP/hook.conf" hook 0 "$HOOK" onbatt
expect_mode "$a_ctl" writeback
expect_mode "$b_ctl" writethrough
RAMBACK_SOCKETS= RAMBACK_UPS_CONF="$TMP/hook.conf" hook 0 "$HOOK" online
expect_mode "$b_ctl" writeback

# Failures, each on standard error and logged at error priority: a
# socket nobody listens on gives ramback's exit status, and the others
# are still told.
/usr/bin/python3 -c '
import socket, sys
socket.socket (socket.AF_UNIX).bind (sys.argv[1])' "$TMP/stale.sock"
RAMBACK_SOCKETS="$TMP/stale.sock $a_ctl" hook 2 "$HOOK" onbatt
grep -q "stale.sock: onbatt failed (exit status 2)" "$TMP/hook.err" ||
    fail "no log line for the failure"
logged daemon.err "stale.sock: onbatt failed" || fail "not logged as an error"
expect_mode "$a_ctl" writethrough
hook 0 "$HOOK" online
# No socket at all: no ramback takes the event, so that is an error
# too (exit status 2, as for "ramback" without a socket), on every event.
for e in onbatt lowbatt online; do
    RAMBACK_SOCKETS="$TMP/none/*.ctl" hook 2 "$HOOK" $e
    grep -q "$e: no ramback control socket" "$TMP/hook.err" || fail "no message"
    logged daemon.err "no ramback control socket" || fail "not logged as an error"
done
RAMBACK_SOCKETS="$TMP/none.ctl $a_ctl" hook 2 "$HOOK" onbatt
expect_mode "$a_ctl" writethrough
logged daemon.err "$TMP/none.ctl: no ramback control socket" ||
    fail "a missing socket among others is not an error"
hook 0 "$HOOK" online

# ramback@.service.
unit="$top_builddir/contrib/systemd/ramback@.service"
grep -qx 'SendSIGKILL=no' "$unit" || fail "the unit may SIGKILL"
if command -v systemd-analyze >/dev/null; then
    mkdir "$TMP/units"
    # The build tree's ExecStartPost, as it is not installed.
    sed "s|=[^ ]*/ramback-control-group |=$top_builddir/contrib/ramback-control-group |" \
        "$unit" > "$TMP/units/ramback@.service"
    # verify loads the unit as systemd would, and checks that ExecStart
    # and ExecStartPost exist.
    ( cd "$TMP/units" &&
      timeout 60 systemd-analyze verify --man=no ./ramback@test.service ) ||
        fail "systemd-analyze verify rejects the unit"
fi
# Its command lines as systemd would run them for ramback@t1 (with the
# build tree's programs and a private /run): ExecStart forks nbdkit and
# writes the pid file, ExecStartPost opens the control socket to the
# group of the UPS daemon's user (by default NUT's group "nut" if there
# is one), ExecStop drains, then SIGTERM.
cat > "$TMP/t1.conf" <<EOC
RAMBACK_ARGS="back=$TMP/t1.img size=4M flush-rate=2M"
NBDKIT_ARGS="--threads=4"
EOC
[ "$hook_user" = nut ] ||
    echo "RAMBACK_CONTROL_GROUP=$hook_group" >> "$TMP/t1.conf"
unit_load t1 "$TMP/t1.conf"
[ -x "$t1_nbdkit" ] || fail "the unit runs $t1_nbdkit, which is not there"
t1_start
expect_mode "$t1_ctl" writeback
ls -la "$t1_dir"

if [ "$(id -u)" -eq 0 ]; then
    # The UPS daemon's user ($hook_user, as NUT runs upsmon and upssched
    # on Debian) reaches the control socket through the default pattern,
    # and only the control socket: not the NBD socket (the data).
    [ "$(stat -c %G "$t1_ctl")" = "$hook_group" ] ||
        fail "$t1_ctl is not in group $hook_group"
    export RAMBACK_SOCKETS="$TMP/run/ramback/*/control.sock"
    as_hook_user "$RAMBACK" status "$t1_ctl" ||
        fail "$hook_user cannot use $t1_ctl"
    if as_hook_user /usr/bin/python3 -c '
import socket, sys
socket.socket (socket.AF_UNIX).connect (sys.argv[1])' "$t1_nbd"; then
        fail "$hook_user can connect to the NBD socket $t1_nbd"
    fi
    hook 0 as_hook_user "$HOOK" onbatt
    expect_mode "$t1_ctl" writethrough
    hook 0 as_hook_user "$HOOK" online
    expect_mode "$t1_ctl" writeback
    # The latch works across users: set by the one (apcupsd runs as
    # root), seen and reset by the other.
    hook 0 as_hook_user "$HOOK" lowbatt
    hook 0 "$HOOK" online
    expect_mode "$t1_ctl" writethrough
    hook 0 "$HOOK" reset
    hook 0 "$HOOK" lowbatt
    hook 0 as_hook_user "$HOOK" online
    expect_mode "$t1_ctl" writethrough
    hook 0 as_hook_user "$HOOK" reset
    hook 0 as_hook_user "$HOOK" online
    expect_mode "$t1_ctl" writeback

    # A ramback whose control socket is for root only (the unit with
    # RAMBACK_CONTROL_GROUP empty): the hook as the UPS daemon's user
    # still tells t1, but fails with ramback's "permission denied" (3)
    # and says so at error priority, naming the directory in the way.
    cat > "$TMP/t2.conf" <<EOC
RAMBACK_ARGS="back=$TMP/t2.img size=4M"
RAMBACK_CONTROL_GROUP=
EOC
    unit_load t2 "$TMP/t2.conf"
    t2_start
    cleanup_fn t2_stop
    for e in onbatt online lowbatt; do
        hook 3 as_hook_user "$HOOK" $e
        logged daemon.err "$e: permission denied: $t2_dir" ||
            fail "$e: no error for $t2_dir"
    done
    expect_mode "$t1_ctl" writethrough
    expect_mode "$t2_ctl" writeback
    # ... and the same with only t2 there.
    RAMBACK_SOCKETS="$TMP/run/ramback/t2/control.sock" \
        hook 3 as_hook_user "$HOOK" onbatt
    logged daemon.err "permission denied: $t2_dir" || fail "no error"
    # A group that does not exist fails the start, saying what to do.
    cat > "$TMP/t3.conf" <<EOC
RAMBACK_ARGS="back=$TMP/t3.img size=4M"
RAMBACK_CONTROL_GROUP=no-such-group
EOC
    unit_load t3 "$TMP/t3.conf"
    if t3_start 2> "$TMP/t3.err"; then
        fail "the unit started with a group that does not exist"
    fi
    cat "$TMP/t3.err"
    grep -q "RAMBACK_CONTROL_GROUP" "$TMP/t3.err" || fail "no hint"
    t3_stop
    hook 0 "$HOOK" reset
    RAMBACK_SOCKETS="$t1_ctl" hook 0 "$HOOK" online
else
    echo "not root: the hook as another user is not tested"
fi

# Stop drains; a low battery latch ends with the unit (systemd removes
# the runtime directory).
RAMBACK_SOCKETS="$t1_ctl" hook 0 "$HOOK" lowbatt
expect_mode "$t1_ctl" writethrough
"$RAMBACK" mode writeback "$t1_ctl"
nbd_write "nbd+unix:///?socket=$t1_nbd" 0 4194304 88
t1_stop > "$TMP/stop.out"
cat "$TMP/stop.out"
grep -q '^mode: writethrough (was writeback)' "$TMP/stop.out" || fail "ExecStop mode"
grep -q '^synced: ' "$TMP/stop.out" || fail "ExecStop sync"
/usr/bin/python3 -c '
import sys
d = open (sys.argv[1], "rb").read ()
assert d == bytes ([88]) * 4194304, "the unit did not drain to the backing file"' "$TMP/t1.img"
t1_start
RAMBACK_SOCKETS="$t1_ctl" hook 0 "$HOOK" onbatt
RAMBACK_SOCKETS="$t1_ctl" hook 0 "$HOOK" online
expect_mode "$t1_ctl" writeback
t1_stop
