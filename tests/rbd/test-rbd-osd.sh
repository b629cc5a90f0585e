#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The only OSD killed (SIGKILL) while write back runs, and started again
# later: the device keeps serving from RAM, the data stays dirty while
# the OSD is away (nothing is counted as written back), status shows
# the stall, and after the OSD is back the write back drains by itself;
# after a clean stop the image equals what was written.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
source "$top_srcdir/tests/remote-functions.sh"
source "$top_srcdir/tests/rbd/rbd-functions.sh"

rbd_cluster
size=$(( 48 * 1024 * 1024 ))
rbd_image osd "$size"
head -c "$size" /dev/urandom > "$TMP/data"

# A slow write back, so that the OSD dies in the middle of it.
start_rb rb -- back=rbd:rbd/osd rbd-conf="$CEPH_CONF" flush-rate=4M \
    flush-delay=0
nbdcopy "$TMP/data" "$rb_uri"
wait_status_ge "$rb_ctl" stored_bytes 1 30
kill_osd
echo "osd.0 killed with $(status_field "$rb_ctl" dirty_bytes) bytes dirty"

# The device serves everything from RAM meanwhile.  (Not its block
# status: that asks the store about chunks being written back, and waits
# for them like the write back does.)
nbdcopy --no-extents "$rb_uri" "$TMP/read1"
assert_same "$TMP/read1" "$TMP/data"

# Write back stalls on the OSD: requests wait, nothing is counted.
wait_status_ge "$rb_ctl" store_oldest_request_ms 3000 60
# Not yet written back: dirty, or in a write back batch that waits.
pending () {
    echo $(( $(status_field "$rb_ctl" dirty_bytes) +
             $(status_field "$rb_ctl" inflight_bytes) ))
}
dirty=$(pending)
stored=$(status_field "$rb_ctl" stored_bytes)
[ "$dirty" -gt 0 ] || fail "nothing dirty with the only OSD down"
sleep 2
[ "$(status_field "$rb_ctl" stored_bytes)" = "$stored" ] ||
    fail "stored_bytes grew while the only OSD was down"
[ "$(pending)" -ge "$dirty" ] ||
    fail "dirty data shrank while the only OSD was down"
echo "stalled: dirty $dirty, stored $stored, oldest request $(status_field "$rb_ctl" store_oldest_request_ms) ms"

start_osd
wait_status "$rb_ctl" dirty_bytes 0 120
wait_status "$rb_ctl" inflight_bytes 0 60
wait_status "$rb_ctl" store_state ok 30
echo "drained after the OSD came back: $(status_field "$rb_ctl" stored_bytes) bytes stored"
stop_rb_same rb rbd:rbd/osd "$TMP/data"
echo "image == data after the clean stop"
