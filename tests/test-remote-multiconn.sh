#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# A multi-conn remote is used with several connections, visible in the
# status (store_connections, store_connections_up, the remote's own log)
# and with many requests in flight; the data is right on the remote.
# Without multi-conn one connection is used unless connections= asks.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/remote-functions.sh"
requires nbdcopy
set -x

size=$(( 48 * 1024 * 1024 ))
truncate -s "$size" "$TMP/model"

# A slow link: write back batches grow while it waits.
start_remote r --filter=delay memory "$size" delay-write=5ms
start_rb rb back="$r_uri" connections=4 inflight=8
[ "$(status_field "$rb_ctl" store_connections)" -eq 4 ]
[ "$(status_field "$rb_ctl" store_connections_up)" -eq 4 ]
[ "$(status_field "$rb_ctl" store_multi_conn)" = true ]
[ "$(status_field "$rb_ctl" store_inflight_limit)" -eq 8 ]
rio write "$rb_uri" "$TMP/model" 41 200 4194304
ctl "$rb_ctl" sync 60000
inflight=$(status_field "$rb_ctl" store_inflight_max)
[ "$inflight" -gt 4 ] || fail "store_inflight_max $inflight: no parallelism"
nbdcopy "$r_uri" "$TMP/copy1"
assert_same "$TMP/copy1" "$TMP/model"
stop_rb rb
# The remote saw 4 connections from ramback (and one from nbdcopy).
n=$(grep -c 'accepted connection' "$r_log")
[ "$n" -ge 5 ] || fail "the remote saw $n connections"
nbdcopy "$r_uri" "$TMP/copy2"
assert_same "$TMP/copy2" "$TMP/model"
kill_remote r TERM

# No multi-conn: one connection by default ...
start_remote s --filter=multi-conn memory "$size" multi-conn-mode=disable
start_rb rb2 back="$s_uri"
[ "$(status_field "$rb2_ctl" store_connections)" -eq 1 ]
[ "$(status_field "$rb2_ctl" store_multi_conn)" = false ]
stop_rb rb2
# ... and several if asked; each one is flushed.
start_rb rb3 back="$s_uri" connections=2
[ "$(status_field "$rb3_ctl" store_connections)" -eq 2 ]
truncate -s "$size" "$TMP/model2"
rio write "$rb3_uri" "$TMP/model2" 42 100 1048576
ctl "$rb3_ctl" sync 60000
nbdcopy "$s_uri" "$TMP/copy3"
assert_same "$TMP/copy3" "$TMP/model2"
stop_rb rb3
kill_remote s TERM
echo PASS
