# SPDX-License-Identifier: GPL-2.0-or-later
# Helpers of the RBD backing store tests, sourced after functions.sh.
# They run against the cluster of $CEPH_CONF when it is set (make
# check-rbd starts one for all of them), else start one of their own in
# $TMP/ceph (ceph-cluster.sh), stopped at exit.  Without Ceph installed
# they skip (exit 77).
#
#   rbd_cluster               make sure a cluster is up; sets CEPH_CONF
#                             and ceph_dir
#   rbd_image NAME SIZE|FILE  a new image rbd/NAME (any old one removed):
#                             empty of SIZE bytes, or a copy of FILE
#   rbdc ARGS...              rbd with the cluster's conf
#   kill_osd, start_osd       SIGKILL the only OSD; start it again and
#                             wait until it serves

RAMBACK_FORM=plugin
ceph_cluster_sh="$top_srcdir/tests/rbd/ceph-cluster.sh"

rbdc () { timeout 120 rbd -c "$CEPH_CONF" "$@"; }

rbd_cluster () {
    local p
    for p in ceph-mon ceph-osd ceph-mgr rbd; do
        command -v "$p" >/dev/null ||
            { echo "$0: SKIP: $p not installed (ceph-mon ceph-mgr ceph-osd ceph-common)"; exit 77; }
    done
    grep -q '^#define HAVE_LIBRBD 1' "$top_builddir/config.h" ||
        fail "ramback was built without librbd, and Ceph is installed: configure --with-rbd"
    if [ -n "${CEPH_CONF:-}" ] && [ -f "$CEPH_CONF" ]; then
        ceph_dir=$(dirname "$CEPH_CONF")
        return 0
    fi
    ceph_dir="$TMP/ceph"
    cleanup_fn "$ceph_cluster_sh" stop "$ceph_dir"
    CEPH_CONF=$("$ceph_cluster_sh" start "$ceph_dir") ||
        fail "the test cluster did not start (logs in $ceph_dir/log)"
    export CEPH_CONF
}

rbd_image () {
    local name=$1 what=$2
    rbdc rm --no-progress "rbd/$name" >/dev/null 2>&1 || :
    if [ -f "$what" ]; then
        rbdc import --no-progress "$what" "rbd/$name" >/dev/null
    else
        rbdc create --size "${what}B" "rbd/$name"
    fi
    cleanup_fn rbdc rm --no-progress "rbd/$name"
}

kill_osd () { "$ceph_cluster_sh" kill-osd "$ceph_dir"; }
start_osd () { "$ceph_cluster_sh" start-osd "$ceph_dir"; }
