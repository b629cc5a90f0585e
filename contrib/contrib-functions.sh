# SPDX-License-Identifier: GPL-2.0-or-later
# Helpers of the contrib tests, sourced after tests/functions.sh and
# cli/cli-functions.sh:
#
#   wait_for WHAT CMD...      wait until CMD succeeds; fails naming WHAT
#                             only after $WAIT_LIMIT s (default 300), a
#                             bound for a hung test, not a time that
#                             must be long enough
#   mode_is SOCK MODE         status --json has mode MODE (no output)
#   expect_mode SOCK MODE     fail unless status --json has mode MODE
#   hook_user, hook_group     the unprivileged user that UPS daemons run
#                             hooks as: NUT's "nut" as on Debian, else
#                             "nobody"; and its group
#   as_hook_user CMD...       run CMD as hook_user (needs root)
#   unit_load NAME CONF       ramback@.service for instance NAME with
#                             EnvironmentFile CONF, run as systemd would
#                             but with the build tree's programs and
#                             $TMP/run for /run; defines:
#     NAME_start              the runtime directory (mode as in the
#                             unit), ExecStart, ExecStartPost; sets
#                             NAME_pid
#     NAME_stop               ExecStop, SIGTERM, wait for nbdkit to exit
#     NAME_dir NAME_ctl NAME_nbd   runtime directory, control and NBD
#                             sockets
#     NAME_nbdkit             the nbdkit the unit runs

: "${WAIT_LIMIT:=300}"

wait_for () {
    local what=$1 i; shift
    for (( i=0; i<WAIT_LIMIT*10; i++ )); do
        "$@" && return 0
        sleep 0.1
    done
    fail "not reached after $WAIT_LIMIT s: $what"
}

mode_is () {
    "$RAMBACK" status --json "$1" > "$TMP/mode-is.json" 2>/dev/null &&
        [ "$(jfield "$TMP/mode-is.json" mode)" = "$2" ]
}

expect_mode () {
    run_rb 0 status --json "$1"
    expect_field "$TMP/out" mode "$2"
}

if getent passwd nut >/dev/null; then
    hook_user=nut
else
    hook_user=nobody
fi
hook_group=$(id -gn "$hook_user")
as_hook_user () {
    setpriv --reuid="$hook_user" --regid="$hook_group" --init-groups -- "$@"
}

unit_load () {
    local name=$1 conf=$2
    local unit="$top_builddir/contrib/systemd/ramback@.service"
    /usr/bin/python3 - "$unit" "$name" "$conf" "$TMP" "$PLUGIN" \
        "$RAMBACK" "$top_builddir/contrib" > "$TMP/unit-$name.sh" <<'EOP'
import os, re, shlex, sys
unit, name, conf, tmp, plugin, ramback, contrib = sys.argv[1:]
text = re.sub (r"\\\n\s*", " ", open (unit).read ())
q = shlex.quote
def subst (v):
    v = v.replace ("%i", name).replace ("/run/", tmp + "/run/")
    return v
def local (v):
    # The installed programs are the build tree's.
    v = re.sub (r"\S*/ramback (?=\S)", ramback + " ", v, count=1)
    v = v.replace (" ramback control=", " %s control=" % plugin)
    w = v.split (" ", 1)
    if os.path.isfile (os.path.join (contrib, os.path.basename (w[0]))):
        w[0] = os.path.join (contrib, os.path.basename (w[0]))
    return " ".join (w)
start, posts, stops, mode, rundir = None, [], [], "0755", None
svctype, pidfile = "simple", None
for line in text.splitlines ():
    k, _, v = line.partition ("=")
    v = subst (v)
    if k in ("ExecStart", "ExecStartPost", "ExecStop"):
        # "-": a failure does not count.  Our test runs count them all.
        v = local (v.lstrip ("-"))
        if k == "ExecStart":
            # nbdkit as the tests run it (with a sanitizer runtime
            # preloaded if the plugin is built with one).
            exe, start = v.split (" ", 1)
            start = "run_nbdkit " + start
        elif k == "ExecStartPost":
            posts.append (v)
        else:
            stops.append (v)
    elif k == "PIDFile":
        pidfile = v
    elif k == "Type":
        svctype = v
    elif k == "RuntimeDirectory":
        rundir = tmp + "/run/" + v
    elif k == "RuntimeDirectoryMode":
        mode = v
    elif k == "EnvironmentFile":
        # Ours instead of @sysconfdir@/ramback/NAME.conf.
        envfile = v.endswith ("/ramback/%s.conf" % name)
if svctype == "notify":
    # systemd runs nbdkit -f as the main process and waits for READY=1
    # (the plugin's sd_notify, after the sockets are made); here it runs
    # in the background, and a pid file made after the sockets stands
    # for READY=1.
    assert " -f " in start and not pidfile, "Type=notify: nbdkit -f, no PIDFile"
    pidfile = rundir + "/.test-nbdkit.pid"
    start = start.replace (" -f ", " -f -P %s " % q (pidfile), 1) + " &"
assert start and rundir and pidfile and envfile, "unit not understood"
print ("%s_dir=%s" % (name, q (rundir)))
print ("%s_ctl=%s" % (name, q (rundir + "/control.sock")))
print ("%s_nbd=%s" % (name, q (rundir + "/nbd.sock")))
print ("%s_nbdkit=%s" % (name, q (exe)))
print ("%s_pidfile=%s" % (name, q (pidfile)))
# systemd makes the parents 0755 and the directory itself with
# RuntimeDirectoryMode=; every command gets the EnvironmentFile.
print ("%s_env () { ( set -a; . %s; set +a; \"$@\" ); }" % (name, q (conf)))
print ("%s_start () {" % name)
print ("  mkdir -p -m 0755 %s && mkdir -m %s %s || return" %
       (q (os.path.dirname (rundir)), mode, q (rundir)))
print ("  %s_env eval %s || return" % (name, q (start)))
print ("  _unit_pid %s" % name)
for p in posts:
    print ("  %s_env eval %s || return" % (name, q (p)))
print ("}")
print ("%s_stop () {" % name)
for s in stops:
    print ("  %s_env eval %s" % (name, q (s)))
print ("  _unit_term %s" % name)
print ("}")
EOP
    source "$TMP/unit-$name.sh"
}
_unit_pid () {
    local pidfile=${1}_pidfile
    wait_for "$1: the pid file ${!pidfile}" test -s "${!pidfile}"
    eval "${1}_pid=\$(cat \"\${!pidfile}\")"
    cleanup_fn _kill_if_running "$(cat "${!pidfile}")"
}
_unit_term () {
    local pid=${1}_pid
    kill -TERM "${!pid}"
    wait_for "$1: nbdkit to exit on SIGTERM" eval "! kill -0 ${!pid} 2>/dev/null"
    # systemd removes the runtime directory when the unit stops.
    local dir=${1}_dir
    rm -rf "${!dir}"
}
