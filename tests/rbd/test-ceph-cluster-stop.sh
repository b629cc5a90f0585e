#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# ceph-cluster.sh stop ends every daemon of its cluster, also one it
# has no pid file for: a start interrupted (Ctrl-C, a wait that gave
# up) after a daemon forked but before it wrote its pid file, or a
# start-osd interrupted after kill-osd removed the old one's.  Such a
# daemon outlived the benchmark or test that started it, and its
# directory, and weighed on every timing after it.
#
# Stand-ins run as the daemons do (argv[0] ceph-osd or ceph-mon,
# "-c DIR/ceph.conf"), detached, without pid files: stop must end those
# of its directory and leave alone the same stand-in of another
# directory.  No Ceph needed.

source "$top_builddir/tests/functions.sh"
requires python3

ceph_cluster_sh="$top_srcdir/tests/rbd/ceph-cluster.sh"
mine=$TMP/cluster other=$TMP/other
mkdir -p "$mine/run" "$other/run"
: > "$mine/ceph.conf"
: > "$other/ceph.conf"

# A stand-in daemon NAME of cluster DIR, detached like the real ones
# (so it is not our child, and nothing of ours waits for it); its pid
# in $TMP/NAME.DIRNAME.pid, for the checks and for cleanup.
standin () {
    local name=$1 dir=$2 pidf=$TMP/$1.${2##*/}.pid
    ( { exec -a "$name" python3 -c 'import time; time.sleep (300)' \
          -c "$dir/ceph.conf" -i 0 </dev/null >/dev/null 2>&1; } &
      echo $! > "$pidf" )
    cleanup_fn eval 'kill -9 "$(cat '"$pidf"')" 2>/dev/null || :'
    # Running as the daemon, argv and all, before stop looks.
    for (( i = 0; i < 500; i++ )); do
        tr '\0' ' ' < "/proc/$(cat "$pidf")/cmdline" 2>/dev/null |
            grep -q "^$name .*-c $dir/ceph.conf" && return 0
        sleep 0.01
    done
    fail "stand-in $name of $dir did not start"
}
alive () { kill -0 "$(cat "$TMP/$1.$2.pid")" 2>/dev/null; }

standin ceph-mon "$mine"
standin ceph-osd "$mine"
standin ceph-osd "$other"

"$ceph_cluster_sh" stop "$mine" || fail "ceph-cluster.sh stop failed"
! alive ceph-mon cluster || fail "stop left the monitor that had no pid file running"
! alive ceph-osd cluster || fail "stop left the OSD that had no pid file running"
alive ceph-osd other || fail "stop ended a daemon of another cluster directory"
echo "ok: stop ended the daemons without pid files, and only those of its cluster"
