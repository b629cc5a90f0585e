#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# One writer per RBD image, and the RBD store's bad input.
#
#  - parameters that do not fit an rbd: store, and rbd: names that are
#    not an image, are refused with what to write instead;
#  - a missing image and a pool that does not exist are named;
#  - an image without the exclusive-lock feature is refused (one
#    writer could not be ensured) with the command that enables it;
#  - a ramback holds the image's exclusive lock (status, rbd lock ls);
#    a second ramback on the same image is refused at once, naming the
#    holder; another librbd client cannot take the lock from it;
#  - after a clean stop the image holds what was written and the next
#    ramback starts on it and reads it back.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
source "$top_srcdir/tests/remote-functions.sh"
source "$top_srcdir/tests/rbd/rbd-functions.sh"

rbd_cluster
size=$(( 16 * 1024 * 1024 ))
conf=rbd-conf="$CEPH_CONF"

# ---- bad input (refused while the parameters are checked) ----------
expect_fail "rbd: without an image" "expected rbd:POOL/IMAGE" \
    back=rbd:rbd "$conf"
expect_fail "QEMU's option syntax" "rbd-conf=FILE, rbd-id=NAME" \
    back=rbd:rbd/x:conf=/etc/ceph/ceph.conf
expect_fail "size= with an image" "RBD image has its own size" \
    back=rbd:rbd/x size=1G "$conf"
expect_fail "rbd-conf= with a file" "rbd-conf= only applies to an RBD" \
    back="$TMP/file.img" size=1M "$conf"
expect_fail "an NBD option with an image" "connections= only applies to an NBD.*an RBD image" \
    back=rbd:rbd/x connections=2 "$conf"
expect_fail "a missing image" "opening image nosuch: No such file" \
    back=rbd:rbd/nosuch "$conf"
expect_fail "a missing pool" "pool nopool: No such file" \
    back=rbd:nopool/x "$conf"
rbdc create --size 16M --image-feature layering rbd/nolock
cleanup_fn rbdc rm --no-progress rbd/nolock
expect_fail "an image without exclusive-lock" \
    "no exclusive-lock feature.*rbd feature enable rbd/nolock exclusive-lock" \
    back=rbd:rbd/nolock "$conf"
echo "bad input refused"

# ---- one writer ----------------------------------------------------------
rbd_image lock "$size"
start_rb a -- back=rbd:rbd/lock "$conf"
[ "$(status_field "$a_ctl" store_rbd_lock)" = exclusive ] ||
    fail "status: store_rbd_lock is not exclusive: $(ctl "$a_ctl" status)"
client=$(status_field "$a_ctl" store_rbd_client)
rbdc lock ls rbd/lock | grep -q "client\.$client " ||
    fail "rbd lock ls does not show client.$client: $(rbdc lock ls rbd/lock)"

head -c "$size" /dev/urandom > "$TMP/data"
nbdcopy "$TMP/data" "$a_uri"
ctl "$a_ctl" sync >/dev/null

SECONDS=0
expect_fail "a second ramback on the image" \
    "rbd:rbd/lock: the image is in use: its exclusive lock is held by client\.$client at 127\.0\.0\.1" \
    back=rbd:rbd/lock "$conf"
[ "$SECONDS" -lt 10 ] || fail "the refusal took $SECONDS s"
grep "in use" "$TMP/bad.out"

# Another librbd writer is refused the lock too (the holder says no).
if rbdc bench --io-type write --io-size 4K --io-total 4K rbd/lock \
        >"$TMP/bench.out" 2>&1; then
    cat "$TMP/bench.out"
    fail "rbd bench wrote to an image that ramback holds"
fi
echo "rbd bench refused: $(tail -1 "$TMP/bench.out")"

stop_rb_same a rbd:rbd/lock "$TMP/data"
rbdc lock ls rbd/lock | grep -q . &&
    fail "the lock is still held after a clean stop: $(rbdc lock ls rbd/lock)"

start_rb b -- back=rbd:rbd/lock "$conf"
nbdcopy "$b_uri" "$TMP/read"
assert_same "$TMP/read" "$TMP/data"
stop_rb b
echo "one writer per image: ok"

# ---- a ramback whose lock is broken ---------------------------------
# rbd lock rm breaks it and blocklists ramback's client: its requests
# fail, the data stays dirty, and it connects again as a new client,
# takes the (now free) lock again and writes everything back.
start_rb c -- back=rbd:rbd/lock "$conf" flush-delay=0
client=$(status_field "$c_ctl" store_rbd_client)
locker=$(rbdc lock ls rbd/lock | awk -v c="client.$client" '$1 == c { print $2 " " $3 }')
[ -n "$locker" ] || fail "no lock of client.$client: $(rbdc lock ls rbd/lock)"
rbdc lock rm rbd/lock "$locker" "client.$client"
head -c "$size" /dev/urandom > "$TMP/data2"
nbdcopy "$TMP/data2" "$c_uri"
wait_status "$c_ctl" dirty_bytes 0 120
wait_status "$c_ctl" inflight_bytes 0 60
ctl "$c_ctl" sync >/dev/null
[ "$(status_field "$c_ctl" store_rbd_client)" != "$client" ] ||
    fail "still client.$client after its lock was broken: $(ctl "$c_ctl" status)"
[ "$(status_field "$c_ctl" store_rbd_lock)" = exclusive ] ||
    fail "the lock was not taken again: $(ctl "$c_ctl" status)"
echo "after the break: $(status_field "$c_ctl" store_failed_requests) failed requests, $(status_field "$c_ctl" store_connects) connects, now client.$(status_field "$c_ctl" store_rbd_client)"
stop_rb_same c rbd:rbd/lock "$TMP/data2"
echo "a broken lock: data written back by a new client"
