#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The filter in front of a plugin that holds a write back
# (tests/faultdisk-plugin.c loaded below ramback, in the same nbdkit).
# The filter's store lists every call into the plugin as the NBD and RBD
# stores list their requests: while the plugin holds the write, status
# shows it in flight and its age grows (store_inflight,
# store_oldest_request_ms), and after 10 s store_state says offline;
# once released, the state is ok and both are back to 0, the counters
# add up, and the backing image ends equal to what was written.

RAMBACK_FORM=filter
source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/remote-functions.sh"

[ -f "$FAULTDISK" ] || fail "$FAULTDISK not built"
size=$(( 8 * 1024 * 1024 ))
truncate -s "$size" "$TMP/r.img"
cp "$TMP/r.img" "$TMP/model"
mkdir -p "$TMP/r.fd"
r_fd=$TMP/r.fd

RB_PLUGIN=("$FAULTDISK" file="$TMP/r.img" dir="$r_fd")
start_rb s
RB_PLUGIN=()
ctl "$s_ctl" wait-populated 60000
[ "$(status_field "$s_ctl" store_inflight)" = 0 ] ||
    fail "store_inflight is not 0 when idle: $(status_field "$s_ctl" store_inflight)"

fd_cmd r stall write offset=2097152 | grep -qx 'id=1' || fail "stall not armed"
# 64 KiB of 0xab at 2 MiB, through NBD and into the model.
nbdsh -u "$s_uri" -c 'h.pwrite(b"\xab" * 65536, 2097152)'
head -c 65536 /dev/zero | tr '\0' '\253' |
    dd of="$TMP/model" bs=64k seek=32 conv=notrunc status=none
fd_wait r held 1
# Held: the call is in flight, its age grows, and once it is older
# than 10 s the store shows as offline (nothing fails for being slow).
wait_status_ge "$s_ctl" store_oldest_request_ms 1500 60 ||
    fail "the held write's age is not shown"
[ "$(status_field "$s_ctl" store_inflight)" -ge 1 ] ||
    fail "the held write is not counted in flight"
[ "$(status_field "$s_ctl" store_state)" = ok ] ||
    fail "the store is not ok while the write is young"
wait_status "$s_ctl" store_state offline 60 ||
    fail "a write held for over 10 s does not show the store offline"
fd_cmd r release 1 apply >/dev/null
fd_wait r held 0
ctl "$s_ctl" sync 30000
wait_status "$s_ctl" store_inflight 0 30
wait_status "$s_ctl" store_state ok 30 ||
    fail "the store is not ok again once the held write completed"
[ "$(status_field "$s_ctl" store_oldest_request_ms)" = 0 ] ||
    fail "store_oldest_request_ms is not 0 when idle"
req=$(status_field "$s_ctl" store_requests)
[ "$req" -ge 2 ] || fail "store_requests is $req (a write and a flush at least)"
[ "$(status_field "$s_ctl" store_failed_requests)" = 0 ] ||
    fail "store_failed_requests is not 0"
[ "$(status_field "$s_ctl" store_inflight_max)" -ge 1 ] ||
    fail "store_inflight_max is not at least 1"
rio check "$s_uri" "$TMP/model"
stop_rb s
cmp "$TMP/r.img" "$TMP/model" || fail "the backing image differs after the stop"
