#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Round trip and restart/populate against nbdkit remotes: a file export
# behind the delay filter (a slow link; checked by comparing the file),
# and a memory export (checked by nbdcopy of the remote).

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/remote-functions.sh"
requires nbdcopy
set -x

# Not a whole number of 64K chunks: the last chunk is partial.
size=$(( 40 * 1024 * 1024 + 12288 ))

rio init "$TMP/f.img" "$size" 1 12
start_remote f --filter=delay file "$TMP/f.img" delay-read=2ms delay-write=2ms
roundtrip f "$f_uri" "$TMP/f.img"
kill_remote f TERM

# memory: fill the remote through NBD, then the same round trip; the
# "backing file" is an nbdcopy of the remote, taken after each stop.
start_remote m memory "$size"
rio init "$TMP/m.init" "$size" 2 12
nbdcopy "$TMP/m.init" "$m_uri"
model="$TMP/m.model"
cp "$TMP/m.init" "$model"
start_rb ma back="$m_uri"
ctl "$ma_ctl" wait-populated 60000
rio check "$ma_uri" "$model"
rio write "$ma_uri" "$model" 5 300
stop_rb ma
nbdcopy "$m_uri" "$TMP/m.copy"
assert_same "$TMP/m.copy" "$model"
start_rb mb back="$m_uri"
ctl "$mb_ctl" wait-populated 60000
rio check "$mb_uri" "$model"
stop_rb mb
kill_remote m TERM
echo PASS
