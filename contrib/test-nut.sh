#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# End to end with the real NUT: dummy-ups reads the UPS status from a
# .dev file, upsd serves it on 127.0.0.1 (a free port), upsmon polls it
# with the shipped ramback-ups-hook as NOTIFYCMD.  Changing the dummy
# UPS from OL to OB must switch a running ramback to writethrough (and
# its dirty data must still drain), back to OL to writeback; asserted
# with "ramback status --json".  Then the same with upssched between
# upsmon and the hook, configured from the shipped sample.  Every
# daemon is started and stopped here.  Skips (77) only if NUT is not
# installed and cannot be.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/cli/cli-functions.sh"
set -x

NUTDIR=/lib/nut
if [ ! -x $NUTDIR/upsd ] || [ ! -x $NUTDIR/upsmon ] ||
   [ ! -x $NUTDIR/dummy-ups ] || ! command -v upsc >/dev/null; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
        DEBIAN_FRONTEND=noninteractive timeout 300 \
            apt-get install -y --no-install-recommends nut-server nut-client ||
            true
    fi
fi
for p in $NUTDIR/upsd $NUTDIR/upsmon $NUTDIR/dummy-ups; do
    if [ ! -x "$p" ]; then
        echo "$0: SKIP: NUT is not installed (nut-server, nut-client)"
        exit 77
    fi
done
requires upsc

HOOK="$top_builddir/contrib/ramback-ups-hook"
[ -x "$HOOK" ] || fail "$HOOK is not built"

start_ramback rb back="$TMP/back.img" size=8M flush-rate=1M
cleanup_fn stop_nbdkit "$rb_pid"

# A free port on the loopback, not NUT's 3493.
port=$(/usr/bin/python3 -c '
import socket
s = socket.socket ()
s.bind (("127.0.0.1", 0))
print (s.getsockname ()[1])')

nut="$TMP/nut"
mkdir -p "$nut/state"
chmod 700 "$nut/state"
cat > "$nut/ups.conf" <<EOC
[dummy]
    driver = dummy-ups
    port = dummy.dev
    desc = "ramback test UPS"
EOC
set_ups_status () {
    # A new file (rename) so that dummy-ups sees a new mtime.
    printf 'ups.status: %s\nbattery.charge: 90\n' "$1" > "$nut/dummy.dev.new"
    mv "$nut/dummy.dev.new" "$nut/dummy.dev"
}
set_ups_status OL
cat > "$nut/upsd.conf" <<EOC
LISTEN 127.0.0.1 $port
EOC
cat > "$nut/upsd.users" <<EOC
[monuser]
    password = ramback-test
    upsmon primary
EOC
# The upsmon.conf lines are the shipped sample's, with the hook from
# the build tree; SHUTDOWNCMD must never shut anything down.
sed -n 's|^NOTIFYCMD .*|NOTIFYCMD '"$HOOK"'|p; /^NOTIFYFLAG /p' \
    "$top_builddir/contrib/nut/upsmon.conf.sample" > "$nut/upsmon.conf"
grep -q '^NOTIFYFLAG ONBATT .*EXEC' "$nut/upsmon.conf" || fail "sample: ONBATT"
grep -q '^NOTIFYFLAG ONLINE .*EXEC' "$nut/upsmon.conf" || fail "sample: ONLINE"
cat >> "$nut/upsmon.conf" <<EOC
MONITOR dummy@127.0.0.1:$port 1 monuser ramback-test primary
MINSUPPLIES 1
SHUTDOWNCMD "/bin/true"
POWERDOWNFLAG $nut/killpower
POLLFREQ 1
POLLFREQALERT 1
DEADTIME 30
RUN_AS_USER root
EOC
chmod 600 "$nut/upsd.users" "$nut/upsmon.conf"
sed -i 's/SYSLOG+WALL+EXEC/EXEC/' "$nut/upsmon.conf"   # no wall(1) here
cat "$nut/upsmon.conf"

export NUT_CONFPATH="$nut" NUT_STATEPATH="$nut/state" NUT_ALTPIDPATH="$nut/state"
# What the hook needs, inherited through upsmon.
export RAMBACK RAMBACK_SOCKETS="$rb_ctl" RAMBACK_UPS_CONF="$TMP/no-such.conf"

# Each daemon in its own session so that it and whatever it forks
# (upsmon runs as two processes) can be stopped as a group.
start_daemon () {
    local name=$1; shift
    setsid "$@" -u root -F > "$nut/$name.log" 2>&1 &
    eval "${name}_pid=\$!"
    cleanup_fn stop_daemon "$name" "$!"
}
stop_daemon () {
    local name=$1 pid=$2 i
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || return 0
    for (( i=0; i<100; i++ )); do
        kill -0 -- "-$pid" 2>/dev/null || return 0
        sleep 0.1
    done
    kill -KILL -- "-$pid" 2>/dev/null
    echo "NUT $name did not stop on SIGTERM" >&2
}
ups_status () { upsc "dummy@127.0.0.1:$port" ups.status 2>/dev/null; }
wait_for () {
    local what=$1 i; shift
    for (( i=0; i<300; i++ )); do
        "$@" && return 0
        sleep 0.1
    done
    for f in "$nut"/*.log; do echo "== $f"; tail -20 "$f"; done >&2
    fail "timed out after 30 s waiting for: $what"
}
status_is () { [ "$(ups_status)" = "$1" ]; }

start_daemon driver $NUTDIR/dummy-ups -a dummy
wait_for "the driver's socket" test -S "$nut/state/dummy-ups-dummy"
start_daemon upsd $NUTDIR/upsd
wait_for "upsd to report OL" status_is OL
start_daemon upsmon $NUTDIR/upsmon
wait_for "upsmon to log in" grep -q 'logged into UPS' "$nut/upsd.log"

# Dirty data, draining at 1 MiB/s.
nbd_write "$rb_uri" 0 4194304 99
run_rb 0 status --json "$rb_ctl"
expect_field "$TMP/out" mode writeback

mode_is () {
    "$RAMBACK" status --json "$rb_ctl" > "$TMP/st.json" &&
        [ "$(jfield "$TMP/st.json" mode)" = "$1" ]
}

set_ups_status OB
wait_for "upsd to report OB" status_is OB
wait_for "ramback to switch to writethrough" mode_is writethrough
grep -q "onbatt: mode writethrough (was writeback)" "$nut/upsmon.log" ||
    fail "the hook did not log the switch"
# On battery the dirty data keeps draining, to the backing store.
run_rb 0 sync --timeout=60 "$rb_ctl"
/usr/bin/python3 -c '
import sys
d = open (sys.argv[1], "rb").read (4194304)
assert d == bytes ([99]) * 4194304, "not drained to the backing file"' "$TMP/back.img"

set_ups_status OL
wait_for "upsd to report OL" status_is OL
wait_for "ramback to switch to writeback" mode_is writeback
grep -q "online: mode writeback (was writethrough)" "$nut/upsmon.log" ||
    fail "the hook did not log the switch back"

# Once more, so that it is not a one-off.
set_ups_status OB
wait_for "ramback to switch to writethrough again" mode_is writethrough
set_ups_status OL
wait_for "ramback to switch to writeback again" mode_is writeback

stop_daemon upsmon "$upsmon_pid"
cat "$nut/upsmon.log"

# The same through upssched, configured with the shipped sample (with
# its pipe and lock in the test directory): upsmon runs upssched, which
# runs the hook with the event as its argument.
upssched=$(command -v upssched || echo /sbin/upssched)
if [ -x "$upssched" ]; then
    sed -e "s|^CMDSCRIPT .*|CMDSCRIPT $HOOK|" \
        -e "s|/run/nut/upssched/|$nut/state/|" \
        "$top_builddir/contrib/nut/upssched.conf.sample" > "$nut/upssched.conf"
    grep -q '^AT ONBATT \* EXECUTE onbatt$' "$nut/upssched.conf" ||
        fail "upssched sample: no ONBATT"
    sed -i "s|^NOTIFYCMD .*|NOTIFYCMD $upssched|" "$nut/upsmon.conf"
    # A new log, so that only what upssched did is in it.
    start_daemon upsmon2 $NUTDIR/upsmon
    logins () { [ "$(grep -c 'logged into UPS' "$nut/upsd.log")" -ge "$1" ]; }
    wait_for "upsmon to log in again" logins 2
    set_ups_status OB
    wait_for "upssched: ramback to switch to writethrough" mode_is writethrough
    grep -q "onbatt: mode writethrough (was writeback)" "$nut/upsmon2.log" ||
        fail "upssched did not run the hook for ONBATT"
    set_ups_status OL
    wait_for "upssched: ramback to switch to writeback" mode_is writeback
    grep -q "online: mode writeback (was writethrough)" "$nut/upsmon2.log" ||
        fail "upssched did not run the hook for ONLINE"
    stop_daemon upsmon2 "$upsmon2_pid"
    cat "$nut/upsmon2.log"
else
    echo "upssched is not installed: only upsmon's NOTIFYCMD tested"
fi

stop_daemon upsd "$upsd_pid"
stop_daemon driver "$driver_pid"
