#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# A throwaway single-node Ceph cluster for the RBD tests and benchmarks:
# one monitor, one manager, one OSD (BlueStore on a sparse file), pool
# "rbd" with one replica, no cephx, everything in one directory, no
# systemd.  Debian 12's ceph-mon, ceph-mgr, ceph-osd and ceph-common.
#
#   ceph-cluster.sh start DIR      start it in DIR (made if missing),
#                                  print DIR/ceph.conf once it serves I/O
#   ceph-cluster.sh stop DIR       stop every daemon of DIR, wait for them
#                                  (also those without a pid file)
#   ceph-cluster.sh kill-osd DIR   SIGKILL the OSD (no clean shutdown)
#   ceph-cluster.sh start-osd DIR  start the OSD again, wait until it is up
#   ceph-cluster.sh run CMD...     start one in a temporary directory, run
#                                  CMD with CEPH_CONF set, stop and remove
#                                  it at exit (also on failure or signal)
#
# The monitor listens on 127.0.0.1 at a free port (msgr2 only), the OSD
# on 127.0.0.1 at ports the kernel picks.  Daemons run as the caller (root
# in CI: they keep the caller's user, no --setuser).  Memory is kept
# small (BlueStore cache 64 MiB, osd_memory_target 1 GiB, one op shard)
# because the tests run beside others on a small machine.  The watch
# timeout is short (10 s instead of 30 s): a client killed with SIGKILL
# holds an image's exclusive lock until its watch times out, and the
# crash tests start the next client at once.
set -euo pipefail

die () { echo "ceph-cluster: $*" >&2; exit 1; }

need () {
    local p
    for p in ceph-mon ceph-mgr ceph-osd ceph monmaptool rbd; do
        command -v "$p" >/dev/null ||
            die "$p not found: install ceph-mon ceph-mgr ceph-osd ceph-common (scripts/deps.sh)"
    done
}

free_port () {
    python3 -c 'import socket; s = socket.socket (); s.bind (("127.0.0.1", 0)); print (s.getsockname ()[1])'
}

# Wait up to $1 seconds for a command to succeed.
wait_for () {
    local secs=$1 i; shift
    for (( i = 0; i < secs * 5; i++ )); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    return 1
}

cephc () { timeout 30 ceph -c "$dir/ceph.conf" "$@"; }

daemon_pid () { cat "$dir/run/$1.pid" 2>/dev/null || true; }

alive () { local p; p=$(daemon_pid "$1"); [ -n "$p" ] && kill -0 "$p" 2>/dev/null; }

# The daemon itself says it is active (after a restart the monitor may
# still show the killed one as up for a while).
osd_active () {
    timeout 10 ceph --admin-daemon "$dir/run/osd.0.asok" status 2>/dev/null |
        grep -q '"state": "active"'
}

pgs_active () {
    local s
    s=$(cephc pg stat 2>/dev/null) || return 1
    # "8 pgs: 8 active+clean; ..." and nothing else
    [[ $s =~ ^([0-9]+)\ pgs:\ ([0-9]+)\ active\+clean\; ]] &&
        [ "${BASH_REMATCH[1]}" = "${BASH_REMATCH[2]}" ]
}

write_conf () {
    local port=$1 fsid=$2
    cat > "$dir/ceph.conf" <<EOF
[global]
fsid = $fsid
mon_host = v2:127.0.0.1:$port
mon_initial_members = a
auth_cluster_required = none
auth_service_required = none
auth_client_required = none
ms_bind_msgr1 = false
ms_bind_ipv6 = false
public_addr = 127.0.0.1
run_dir = $dir/run
pid_file = $dir/run/\$name.pid
admin_socket = $dir/run/\$name.asok
log_file = $dir/log/\$name.log
keyring = $dir/keyring
mon_data = $dir/mon.\$id
mgr_data = $dir/mgr.\$id
osd_data = $dir/osd.\$id
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
mon_allow_pool_size_one = true
mon_allow_pool_delete = true
mon_warn_on_pool_no_redundancy = false
mon_data_avail_warn = 1
osd_crush_chooseleaf_type = 0
osd_objectstore = bluestore
bluestore_block_create = true
bluestore_block_size = 8589934592
bluestore_fsck_on_mkfs = false
bluestore_cache_autotune = false
bluestore_cache_size = 67108864
osd_memory_target = 1073741824
osd_op_num_shards = 1
osd_op_num_threads_per_shard = 2
osd_client_watch_timeout = 10
objecter_tick_interval = 2
mon_osd_down_out_interval = 0
osd_heartbeat_grace = 10
debug_ms = 0
mgr_initial_modules =
[client]
log_file = /dev/null
admin_socket =
EOF
    : > "$dir/keyring"
}

start () {
    need
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    [ ! -e "$dir/ceph.conf" ] || die "$dir already holds a cluster (stop it first)"
    mkdir -p "$dir/run" "$dir/log" "$dir/mon.a" "$dir/mgr.x" "$dir/osd.0"
    local fsid port uuid id
    fsid=$(python3 -c "import uuid; print (uuid.uuid4 ())")
    port=$(free_port)
    write_conf "$port" "$fsid"

    monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$port]" \
        "$dir/monmap" >/dev/null
    ceph-mon -c "$dir/ceph.conf" -i a --mkfs --monmap "$dir/monmap" \
        >"$dir/log/mkfs-mon.log" 2>&1 || die "mon mkfs failed: $(tail -3 "$dir/log/mkfs-mon.log")"
    ceph-mon -c "$dir/ceph.conf" -i a || die "ceph-mon did not start ($dir/log/mon.a.log)"
    wait_for 30 cephc mon stat || die "the monitor does not answer ($dir/log/mon.a.log)"
    ceph-mgr -c "$dir/ceph.conf" -i x || die "ceph-mgr did not start ($dir/log/mgr.x.log)"

    uuid=$(python3 -c "import uuid; print (uuid.uuid4 ())")
    id=$(cephc osd new "$uuid") || die "ceph osd new failed"
    [ "$id" = 0 ] || die "osd new gave id $id, expected 0"
    ceph-osd -c "$dir/ceph.conf" -i 0 --mkfs --osd-uuid "$uuid" \
        >"$dir/log/mkfs-osd.log" 2>&1 || die "osd mkfs failed: $(tail -3 "$dir/log/mkfs-osd.log")"
    start_osd
    cephc osd pool create rbd 8 8 >/dev/null 2>&1 || die "pool create failed"
    cephc osd pool application enable rbd rbd >/dev/null 2>&1 ||
        die "pool application enable failed"
    wait_for 60 pgs_active || die "placement groups not active+clean: $(cephc pg stat 2>&1)"
    echo "$dir/ceph.conf"
}

start_osd () {
    ceph-osd -c "$dir/ceph.conf" -i 0 2>>"$dir/log/osd.0.stderr" || die "ceph-osd did not start ($dir/log/osd.0.log)"
    wait_for 60 osd_active || die "osd.0 is not up ($dir/log/osd.0.log)"
}

kill_osd () {
    local p
    p=$(daemon_pid osd.0)
    [ -n "$p" ] || die "no osd.0 pid in $dir/run"
    kill -9 "$p" 2>/dev/null || true
    wait_for 30 eval '! kill -0 '"$p" || die "osd.0 ($p) did not die"
    rm -f "$dir/run/osd.0.pid"
}

# Every daemon of this cluster: the pid files', and any other process
# that runs as ceph-mon, ceph-mgr or ceph-osd with "-c DIR/ceph.conf"
# (one that had not written its pid file yet when a start was
# interrupted, or an OSD whose pid file kill-osd removed).
cluster_pids () {
    local n
    for n in osd.0 mgr.x mon.a; do daemon_pid "$n"; done
    python3 - "$dir/ceph.conf" <<'PY'
import os, sys
conf = os.fsencode (sys.argv[1])
for p in os.listdir ("/proc"):
    if not p.isdigit ():
        continue
    try:
        with open ("/proc/%s/cmdline" % p, "rb") as f:
            argv = f.read ().split (b"\0")
    except OSError:
        continue
    if os.path.basename (argv[0]) in (b"ceph-mon", b"ceph-mgr", b"ceph-osd") \
       and any (a == b"-c" and b == conf for a, b in zip (argv, argv[1:])):
        print (p)
PY
}

stop () {
    local p pids=()
    [ -d "$dir" ] && dir=$(cd "$dir" && pwd)
    for p in $(cluster_pids | sort -un); do
        kill "$p" 2>/dev/null && pids+=("$p")
    done
    for p in "${pids[@]}"; do
        wait_for 20 eval '! kill -0 '"$p" || { kill -9 "$p" 2>/dev/null || true; }
    done
    for p in "${pids[@]}"; do
        wait_for 10 eval '! kill -0 '"$p" || die "daemon $p did not go away"
    done
    rm -f "$dir"/run/*.pid
}

case ${1:-} in
    start) dir=${2:?usage: ceph-cluster.sh start DIR}; start ;;
    stop) dir=${2:?usage: ceph-cluster.sh stop DIR}; stop ;;
    kill-osd) dir=${2:?}; kill_osd ;;
    start-osd) dir=${2:?}; start_osd ;;
    run)
        shift
        [ $# -gt 0 ] || die "usage: ceph-cluster.sh run CMD..."
        dir=$(mktemp -d /tmp/ceph-cluster.XXXXXX)
        trap 'stop; rm -rf "$dir"' EXIT
        trap 'exit 130' INT TERM
        start >/dev/null || exit 1
        CEPH_CONF="$dir/ceph.conf" "$@"
        ;;
    *) die "usage: ceph-cluster.sh start|stop|kill-osd|start-osd DIR, or run CMD..." ;;
esac
