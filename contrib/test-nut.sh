#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# End to end with the real NUT, run as Debian runs it: the driver and
# upsd as user "nut", upsmon started as root and running NOTIFYCMD (and
# so upssched and the hook) as its RUN_AS_USER "nut".  dummy-ups reads
# the UPS status from a .dev file, upsd serves it on 127.0.0.1 (a free
# port), upsmon polls it with the shipped ramback-ups-hook as NOTIFYCMD.
# ramback runs as ramback@.service runs it, with the socket directory
# permissions the unit sets, and the hook finds it with its default
# pattern.  Changing the dummy UPS from OL to OB must switch ramback to
# writethrough (and its dirty data must still drain), back to OL to
# writeback; asserted with "ramback status --json".  Then the same with
# upssched between upsmon and the hook, configured from the shipped
# sample.  Then a low battery: the hook syncs, and on line is ignored
# until a reset.  Every daemon is started and stopped here.  Every wait is for
# the next state on the way (upsd's status, upsmon's log line, the
# hook's log line, the mode); the bound is only for a hung test.  Skips
# (77) if NUT is not installed and cannot be, or if not run as root.

# upsmon keeps its pid file in /run/nut (NUT_ALTPIDPATH does not move
# it) and will not start while the pid in it is alive: another run of
# this test, or any process that got that number since.  So the test
# runs in its own mount namespace with a private /run/nut, if it can.
if [ -z "${RAMBACK_NUT_NS:-}" ] && [ "$(id -u)" -eq 0 ] &&
   unshare --mount --propagation private true 2>/dev/null; then
    RAMBACK_NUT_NS=1 exec unshare --mount --propagation private \
        "$BASH" "$0" "$@"
fi

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/cli/cli-functions.sh"
source "$top_srcdir/contrib/contrib-functions.sh"
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
if [ "$(id -u)" -ne 0 ]; then
    echo "$0: SKIP: runs NUT as user $hook_user and ramback as root: needs root"
    exit 77
fi
# NUT's packages create the user "nut"; without it, another one.
user=$hook_user group=$hook_group

if [ -n "${RAMBACK_NUT_NS:-}" ]; then
    mkdir -p /run/nut
    mount -t tmpfs -o mode=0770 ramback-test-nut /run/nut
    chgrp "$group" /run/nut
else
    echo "no mount namespace: NUT's /run/nut is shared with the system"
fi

HOOK="$top_builddir/contrib/ramback-ups-hook"
[ -x "$HOOK" ] || fail "$HOOK is not built"
chmod 0711 "$TMP"           # the daemons pass through, as nut

# ramback as ramback@rb.service runs it, control socket and all.
cat > "$TMP/rb.conf" <<EOC
RAMBACK_ARGS="back=$TMP/back.img size=8M flush-rate=1M"
EOC
[ "$user" = nut ] || echo "RAMBACK_CONTROL_GROUP=$group" >> "$TMP/rb.conf"
unit_load rb "$TMP/rb.conf"
rb_start
cleanup_fn rb_stop
ls -la "$rb_dir"
rb_uri="nbd+unix:///?socket=$rb_nbd"

# A free port on the loopback, not NUT's 3493.
port=$(/usr/bin/python3 -c '
import socket
s = socket.socket ()
s.bind (("127.0.0.1", 0))
print (s.getsockname ()[1])')

# As Debian has them: the configuration root:nut 0640, the state
# directory root:nut 0770.
nut="$TMP/nut"
mkdir -p "$nut/state"
chgrp "$group" "$nut" "$nut/state"
chmod 0750 "$nut"
chmod 0770 "$nut/state"
cat > "$nut/ups.conf" <<EOC
[dummy]
    driver = dummy-ups
    port = dummy.dev
    desc = "ramback test UPS"
EOC
# A new file (rename) so that dummy-ups sees a new mtime, which it
# compares in whole seconds: so each file gets its own, one second
# after the last, whenever it is written.
status_mtime=1000000000
set_ups_status () {
    printf 'ups.status: %s\nbattery.charge: 90\n' "$1" > "$nut/dummy.dev.new"
    status_mtime=$((status_mtime + 1))
    touch -d "@$status_mtime" "$nut/dummy.dev.new"
    mv "$nut/dummy.dev.new" "$nut/dummy.dev"
}
set_ups_status OL
# Data goes stale (and upsmon reports COMMBAD) only if the driver is
# silent for MAXAGE seconds: not under load, here.
cat > "$nut/upsd.conf" <<EOC
LISTEN 127.0.0.1 $port
MAXAGE 600
EOC
cat > "$nut/upsd.users" <<EOC
[monuser]
    password = ramback-test
    upsmon primary
EOC
# The upsmon.conf lines are the shipped sample's, with the hook from
# the build tree; SHUTDOWNCMD must never shut anything down.  SYSLOG
# (on standard error with -F) lets the test see upsmon's notifications.
sed -n 's|^NOTIFYCMD .*|NOTIFYCMD '"$HOOK"'|p; /^NOTIFYFLAG /p' \
    "$top_builddir/contrib/nut/upsmon.conf.sample" > "$nut/upsmon.conf"
grep -q '^NOTIFYFLAG ONBATT .*EXEC' "$nut/upsmon.conf" || fail "sample: ONBATT"
grep -q '^NOTIFYFLAG ONLINE .*EXEC' "$nut/upsmon.conf" || fail "sample: ONLINE"
if grep -q '^RUN_AS_USER' "$top_builddir/contrib/nut/upsmon.conf.sample"; then
    fail "the sample changes upsmon's user: the hook must work as nut"
fi
cat >> "$nut/upsmon.conf" <<EOC
MONITOR dummy@127.0.0.1:$port 1 monuser ramback-test primary
MINSUPPLIES 1
SHUTDOWNCMD "/bin/true"
POWERDOWNFLAG $nut/killpower
POLLFREQ 1
POLLFREQALERT 1
DEADTIME 600
EOC
# Debian's upsmon runs NOTIFYCMD as "nut" (its built-in RUN_AS_USER).
[ "$user" = nut ] || echo "RUN_AS_USER $user" >> "$nut/upsmon.conf"
sed -i 's/SYSLOG+WALL+EXEC/SYSLOG+EXEC/' "$nut/upsmon.conf"   # no wall(1) here
chgrp "$group" "$nut"/*.conf "$nut/upsd.users"
chmod 0640 "$nut"/*.conf "$nut/upsd.users"
cat "$nut/upsmon.conf"

export NUT_CONFPATH="$nut" NUT_STATEPATH="$nut/state" NUT_ALTPIDPATH="$nut/state"
# What the hook needs, inherited through upsmon: the default pattern
# (/run/ramback/*/control.sock) in the test's /run.
export RAMBACK RAMBACK_SOCKETS="$TMP/run/ramback/*/control.sock"
export RAMBACK_UPS_CONF="$TMP/no-such.conf"

# Each daemon in its own session so that it and whatever it forks
# (upsmon runs as two processes) can be stopped as a group.
start_daemon () {
    local name=$1; shift
    setsid "$@" -F > "$nut/$name.log" 2>&1 &
    eval "${name}_pid=\$!"
    cleanup_fn stop_daemon "$name" "$!"
}
stop_daemon () {
    local name=$1 pid=$2
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || return 0
    wait_for "NUT $name to stop on SIGTERM" eval "! kill -0 -- -$pid 2>/dev/null"
}
# while_up NAME CMD...: CMD's status; but if NUT's NAME has exited, that
# will not change: fail at once with its log.  (The process started as
# NAME is the daemon: setsid did not fork, the daemon runs in the
# foreground; a zombie has exited.)
while_up () {
    local name=$1 pidv=${1}_pid st
    shift
    "$@" && return 0
    st=$(ps -o stat= -p "${!pidv}") || st=Z
    if [ "${st#Z}" != "$st" ]; then
        tail -20 "$nut/$name.log" >&2
        fail "NUT $name has exited"
    fi
    return 1
}
ups_status () { upsc "dummy@127.0.0.1:$port" ups.status 2>/dev/null; }
status_is () { [ "$(ups_status)" = "$1" ]; }
# log_has FILE N PATTERN: PATTERN is on N lines of FILE (or more)
log_has () { [ "$(grep -c -- "$3" "$1")" -ge "$2" ]; }
show_logs () {
    local f
    for f in "$nut"/*.log; do echo "== $f"; cat "$f"; done
}
cleanup_fn show_logs

start_daemon driver $NUTDIR/dummy-ups -u "$user" -a dummy
wait_for "the driver's socket" while_up driver test -S "$nut/state/dummy-ups-dummy"
start_daemon upsd $NUTDIR/upsd -u "$user"
wait_for "upsd to report OL" while_up upsd status_is OL
start_daemon upsmon $NUTDIR/upsmon
wait_for "upsmon to log in" while_up upsmon log_has "$nut/upsd.log" 1 'logged into UPS'
# The process that runs NOTIFYCMD is the unprivileged one.
ps -o user=,pid=,args= -s "$upsmon_pid"
ps -o user= -s "$upsmon_pid" | grep -qx "$user" ||
    fail "no upsmon process runs as $user"

# Dirty data, draining at 1 MiB/s.
nbd_write "$rb_uri" 0 4194304 99
expect_mode "$rb_ctl" writeback

# power STATUS N: set the dummy UPS to STATUS and wait for each state on
# the way to the hook's Nth switch to it: upsd, upsmon, the hook, the mode.
power () {
    local log=$nut/$1.log st=$2 n=$3 note event mode was
    case $st in
        OB) note="on battery" event=onbatt mode=writethrough was=writeback ;;
        OL) note="on line power" event=online mode=writeback was=writethrough ;;
    esac
    set_ups_status "$st"
    wait_for "upsd to report $st" while_up upsd status_is "$st"
    wait_for "upsmon to notify $note ($n)" \
        while_up "$1" log_has "$log" "$n" "$note"
    if [ "$1" = upsmon2 ]; then
        wait_for "upssched to run the hook for $event ($n)" \
            while_up "$1" log_has "$log" "$n" "Executing command: $event\$"
    fi
    wait_for "the hook to switch to $mode ($n)" \
        while_up "$1" log_has "$log" "$n" "$rb_ctl: $event: mode $mode (was $was)"
    expect_mode "$rb_ctl" "$mode"
}

power upsmon OB 1
# On battery the dirty data keeps draining, to the backing store.
run_rb 0 sync --timeout=60 "$rb_ctl"
/usr/bin/python3 -c '
import sys
d = open (sys.argv[1], "rb").read (4194304)
assert d == bytes ([99]) * 4194304, "not drained to the backing file"' "$TMP/back.img"
power upsmon OL 1
# Once more, so that it is not a one-off.
power upsmon OB 2
power upsmon OL 2
stop_daemon upsmon "$upsmon_pid"
grep "ramback-ups-hook: .*\(failed\|no ramback\|denied\)" "$nut/upsmon.log" &&
    fail "the hook failed under upsmon"

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
    chgrp "$group" "$nut/upssched.conf"
    chmod 0640 "$nut/upssched.conf"
    sed -i "s|^NOTIFYCMD .*|NOTIFYCMD $upssched|" "$nut/upsmon.conf"
    # A new log, so that only what upssched did is in it.
    start_daemon upsmon2 $NUTDIR/upsmon
    wait_for "upsmon to log in again" while_up upsmon2 log_has "$nut/upsd.log" 2 'logged into UPS'
    power upsmon2 OB 1
    power upsmon2 OL 1
    stop_daemon upsmon2 "$upsmon2_pid"
    grep "ramback-ups-hook: .*\(failed\|no ramback\|denied\)" "$nut/upsmon2.log" &&
        fail "the hook failed under upssched"
else
    echo "upssched is not installed: only upsmon's NOTIFYCMD tested"
fi

# Low battery straight from on line, as a UPS may report a sudden
# failure: upsmon runs the hook for ONBATT and LOWBATT at once
# (overlapping runs), then shuts down (SHUTDOWNCMD is /bin/true),
# running it again for SHUTDOWN.  As nut, the hook syncs the dirty data
# to the backing store and latches the low battery: on line is then
# ignored, until a reset.
sed -i "s|^NOTIFYCMD .*|NOTIFYCMD $HOOK|" "$nut/upsmon.conf"
echo "FINALDELAY 0" >> "$nut/upsmon.conf"
nbd_write "$rb_uri" 0 4194304 111
expect_mode "$rb_ctl" writeback
start_daemon upsmon3 $NUTDIR/upsmon
wait_for "upsmon to log in a third time" while_up upsmon3 log_has "$nut/upsd.log" 3 'logged into UPS'
status_has () { case " $(ups_status) " in *" $1 "*) ;; *) return 1 ;; esac; }
set_ups_status "OB LB"
wait_for "upsd to report LB" while_up upsd status_has LB
wait_for "upsmon to notify the low battery" \
    log_has "$nut/upsmon3.log" 1 "battery is low"
wait_for "the hook to sync" log_has "$nut/upsmon3.log" 1 \
    "$rb_ctl: lowbatt: mode writethrough (was [a-z]*); synced"
expect_mode "$rb_ctl" writethrough
/usr/bin/python3 -c '
import sys
d = open (sys.argv[1], "rb").read (4194304)
assert d == bytes ([111]) * 4194304, "low battery: not on the backing file"' "$TMP/back.img"
latch="$rb_dir/ups-hook/control.sock.lowbatt"
[ "$(stat -c %U "$latch")" = "$user" ] || fail "$latch is not written by $user"
wait_for "upsmon to shut down" eval "! kill -0 -- -$upsmon3_pid 2>/dev/null"
grep "ramback-ups-hook: .*\(failed\|no ramback\|denied\)" "$nut/upsmon3.log" &&
    fail "the hook failed on low battery"
as_hook_user "$HOOK" online 2> "$TMP/online.err"
cat "$TMP/online.err"
grep -q "$rb_ctl: online ignored: low battery" "$TMP/online.err" ||
    fail "online not ignored after the low battery"
expect_mode "$rb_ctl" writethrough
as_hook_user "$HOOK" reset
as_hook_user "$HOOK" online
expect_mode "$rb_ctl" writeback

stop_daemon upsd "$upsd_pid"
stop_daemon driver "$driver_pid"
