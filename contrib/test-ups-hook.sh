#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The shipped glue without a UPS daemon: ramback-ups-hook called the way
# upsmon (NOTIFYCMD, $NOTIFYTYPE), upssched (CMDSCRIPT, argument) and
# apcupsd (/etc/apcupsd/EVENT, by name) call it, against real plugins;
# and ramback@.service's own command lines: start, drain on stop.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/cli/cli-functions.sh"
set -x

HOOK="$top_builddir/contrib/ramback-ups-hook"
[ -x "$HOOK" ] || fail "$HOOK is not built"
export RAMBACK
export RAMBACK_UPS_CONF="$TMP/no-such.conf"

start_ramback a back="$TMP/a.img" size=4M flush-rate=4M
cleanup_fn stop_nbdkit "$a_pid"
start_ramback b back="$TMP/b.img" size=4M
cleanup_fn stop_nbdkit "$b_pid"
export RAMBACK_SOCKETS="$a_ctl"

mode_is () {
    run_rb 0 status --json "$1"
    expect_field "$TMP/out" mode "$2"
}
hook () {
    local want=$1 rc=0
    shift
    "$@" >"$TMP/hook.out" 2>"$TMP/hook.err" || rc=$?
    cat "$TMP/hook.err"
    [ "$rc" -eq "$want" ] || fail "$*: exit status $rc, expected $want"
}

# upsmon: NOTIFYCMD gets the message; the event is in $NOTIFYTYPE.
NOTIFYTYPE=ONBATT hook 0 "$HOOK" "UPS dummy@localhost on battery"
mode_is "$a_ctl" writethrough
grep -q "^ramback-ups-hook: $a_ctl: onbatt: mode writethrough (was writeback)" \
    "$TMP/hook.err" || fail "no log line for onbatt"
NOTIFYTYPE=ONLINE hook 0 "$HOOK" "UPS dummy@localhost on line power"
mode_is "$a_ctl" writeback
# Events that are none of ours change nothing and are not errors.
NOTIFYTYPE=ONBATT hook 0 "$HOOK" "UPS dummy@localhost on battery"
for t in COMMBAD COMMOK REPLBATT NOCOMM; do
    NOTIFYTYPE=$t hook 0 "$HOOK" "UPS dummy@localhost: $t"
    mode_is "$a_ctl" writethrough
done
NOTIFYTYPE=LOWBATT hook 0 "$HOOK" "UPS dummy@localhost battery is low"
mode_is "$a_ctl" writethrough
NOTIFYTYPE=ONLINE hook 0 "$HOOK" "UPS dummy@localhost on line power"
mode_is "$a_ctl" writeback

# upssched: CMDSCRIPT gets the timer name, which wins over the
# NOTIFYTYPE that upssched passes on.
hook 0 "$HOOK" onbatt
mode_is "$a_ctl" writethrough
NOTIFYTYPE=ONBATT hook 0 "$HOOK" online
mode_is "$a_ctl" writeback

# apcupsd: /etc/apcupsd/EVENT UPSNAME SLAVES CONNECTED, and never 99
# (that would cancel apcupsd's own action).
mkdir "$TMP/apcupsd"
for e in onbattery offbattery doshutdown; do
    ln -s "$HOOK" "$TMP/apcupsd/$e"
done
hook 0 "$TMP/apcupsd/onbattery" myups 1 1
mode_is "$a_ctl" writethrough
hook 0 "$TMP/apcupsd/offbattery" myups 1 1
mode_is "$a_ctl" writeback
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

# Several sockets, as a pattern: all of them switch.
RAMBACK_SOCKETS="$TMP/*.ctl" hook 0 "$HOOK" onbatt
mode_is "$a_ctl" writethrough
mode_is "$b_ctl" writethrough
[ "$(grep -c ': onbatt: mode writethrough' "$TMP/hook.err")" -eq 2 ] ||
    fail "not one log line per socket"
RAMBACK_SOCKETS="$a_ctl $b_ctl" hook 0 "$HOOK" online
mode_is "$a_ctl" writeback
mode_is "$b_ctl" writeback

# The configuration file, when RAMBACK_SOCKETS is not set.
echo "RAMBACK_SOCKETS=\"$b_ctl\"" > "$TMP/hook.conf"
RAMBACK_SOCKETS= RAMBACK_UPS_CONF="$TMP/hook.conf" hook 0 "$HOOK" onbatt
mode_is "$a_ctl" writeback
mode_is "$b_ctl" writethrough
RAMBACK_SOCKETS= RAMBACK_UPS_CONF="$TMP/hook.conf" hook 0 "$HOOK" online
mode_is "$b_ctl" writeback

# Failures: a socket nobody listens on gives ramback's exit status, and
# the others are still told.
/usr/bin/python3 -c '
import socket, sys
socket.socket (socket.AF_UNIX).bind (sys.argv[1])' "$TMP/stale.sock"
RAMBACK_SOCKETS="$TMP/stale.sock $a_ctl" hook 2 "$HOOK" onbatt
grep -q "stale.sock: onbatt failed (exit status 2)" "$TMP/hook.err" ||
    fail "no log line for the failure"
mode_is "$a_ctl" writethrough
hook 0 "$HOOK" online
# No socket at all: nothing to do.
RAMBACK_SOCKETS="$TMP/none/*.ctl" hook 0 "$HOOK" onbatt
grep -q "no ramback control socket" "$TMP/hook.err" || fail "no message"

# ramback@.service.
unit="$top_builddir/contrib/systemd/ramback@.service"
grep -qx 'SendSIGKILL=no' "$unit" || fail "the unit may SIGKILL"
if command -v systemd-analyze >/dev/null; then
    mkdir "$TMP/units"
    cp "$unit" "$TMP/units/"
    # verify loads the unit as systemd would, and checks ExecStart exists.
    ( cd "$TMP/units" &&
      timeout 60 systemd-analyze verify --man=no ./ramback@test.service ) ||
        fail "systemd-analyze verify rejects the unit"
fi
# Run its command lines as systemd would for ramback@t1 (but with the
# build tree's plugin and a private /run): ExecStart forks nbdkit and
# writes the pid file, ExecStop drains, then SIGTERM.
mkdir -p "$TMP/run/ramback/t1"
cat > "$TMP/t1.conf" <<EOC
RAMBACK_ARGS="back=$TMP/t1.img size=4M flush-rate=2M"
NBDKIT_ARGS="--threads=4"
EOC
/usr/bin/python3 - "$unit" "$TMP" "$PLUGIN" "$RAMBACK" > "$TMP/unit.sh" <<'EOP'
import re, shlex, sys
unit, tmp, plugin, ramback = sys.argv[1:]
text = re.sub (r"\\\n\s*", " ", open (unit).read ())
start, stops = None, []
for line in text.splitlines ():
    k, _, v = line.partition ("=")
    if k in ("ExecStart", "ExecStop"):
        v = v.lstrip ("-").replace ("%i", "t1")
        v = v.replace ("/run/", tmp + "/run/")
        v = re.sub (r"\S*/ramback (?=\S)", ramback + " ", v, count=1)
        v = v.replace (" ramback control=", " %s control=" % plugin)
        if k == "ExecStart":
            # nbdkit as the tests run it (with a sanitizer runtime
            # preloaded if the plugin is built with one).
            exe, start = v.split (" ", 1)
            start = "run_nbdkit " + start
        else:
            stops.append (v)
    if k == "PIDFile":
        pidfile = v.replace ("%i", "t1").replace ("/run/", tmp + "/run/")
print ("set -a; . %s/t1.conf; set +a" % tmp)
print ("start () { %s; }" % start)
print ("stop () { %s; }" % "; ".join (stops))
print ("pidfile=%s" % shlex.quote (pidfile))
print ("nbdkit_exe=%s" % shlex.quote (exe))
EOP
cat "$TMP/unit.sh"
source "$TMP/unit.sh"
[ -x "$nbdkit_exe" ] || fail "the unit runs $nbdkit_exe, which is not there"
start
for (( i=0; i<100; i++ )); do [ -s "$pidfile" ] && break; sleep 0.1; done
t1_pid=$(cat "$pidfile")
cleanup_fn _kill_if_running "$t1_pid"
t1_ctl="$TMP/run/ramback/t1/control.sock"
mode_is "$t1_ctl" writeback
nbd_write "nbd+unix:///?socket=$TMP/run/ramback/t1/nbd.sock" 0 4194304 88
stop > "$TMP/stop.out"
cat "$TMP/stop.out"
grep -q '^mode: writethrough (was writeback)' "$TMP/stop.out" || fail "ExecStop mode"
grep -q '^synced: ' "$TMP/stop.out" || fail "ExecStop sync"
kill -TERM "$t1_pid"
for (( i=0; i<300; i++ )); do kill -0 "$t1_pid" 2>/dev/null || break; sleep 0.1; done
kill -0 "$t1_pid" 2>/dev/null && fail "nbdkit did not exit on SIGTERM"
/usr/bin/python3 -c '
import sys
d = open (sys.argv[1], "rb").read ()
assert d == bytes ([88]) * 4194304, "the unit did not drain to the backing file"' "$TMP/t1.img"
