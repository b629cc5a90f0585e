#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Round trip and restart/populate with Debian's nbd-server as the remote,
# over TCP on 127.0.0.1 (it offers no block status: populate reads all).

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/remote-functions.sh"
requires nbd-server nbdinfo
set -x

size=$(( 40 * 1024 * 1024 + 12288 ))
rio init "$TMP/n.img" "$size" 4 12
start_nbd_server n "$TMP/n.img"
roundtrip n "$n_uri" "$TMP/n.img"
kill_remote n TERM
echo PASS
