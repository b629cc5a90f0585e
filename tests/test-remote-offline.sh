#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Reads while the remote is away: chunks already in RAM are served,
# chunks not yet loaded fail with EIO at once (they do not hang), and
# both work again once the remote is back.  Then a populate interrupted
# by the remote's death resumes after its restart and completes.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/remote-functions.sh"
set -x

M=$(( 1024 * 1024 ))
size=$(( 32 * M ))
rio init "$TMP/r.img" "$size" 7 40
cp "$TMP/r.img" "$TMP/model"

start_remote r file "$TMP/r.img"
start_rb rb back="$r_uri" populate=false
rio read "$rb_uri" "$TMP/model" 0 "$M"          # demand-loads 1 MiB
kill_remote r
rio read "$rb_uri" "$TMP/model" 0 "$M"          # from RAM
wait_status "$rb_ctl" store_state offline 30
# bounded by the harness: a hang here is a failure too
timeout 30 /usr/bin/python3 "$top_srcdir/tests/remote-io.py" \
    read-eio "$rb_uri" $(( 20 * M )) 65536
rio read "$rb_uri" "$TMP/model" 0 "$M"
[ "$(status_field "$rb_ctl" populated)" = false ]

start_remote r file "$TMP/r.img"
wait_status "$rb_ctl" store_state ok 30
rio read "$rb_uri" "$TMP/model" $(( 20 * M )) 65536
rio check "$rb_uri" "$TMP/model"
stop_rb_same rb "$TMP/r.img" "$TMP/model"

# Populate at 8 MiB/s (4 s for 32 MiB); the remote dies after ~1 s.
start_rb rb2 back="$r_uri" populate-rate=8M
sleep 1
kill_remote r
wait_status "$rb2_ctl" store_state offline 30
[ "$(status_field "$rb2_ctl" populated)" = false ] ||
    fail "populate finished before the remote was killed"
sleep 1
start_remote r file "$TMP/r.img"
ctl "$rb2_ctl" wait-populated 60000
rio check "$rb2_uri" "$TMP/model"
[ "$(status_field "$rb2_ctl" store_reconnects)" -ge 1 ]
stop_rb_same rb2 "$TMP/r.img" "$TMP/model"
kill_remote r TERM
echo PASS
