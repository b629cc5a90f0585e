#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Round trip and restart/populate with qemu-nbd as the remote (a raw
# file shared by 8 clients; qemu-nbd then offers multi-conn).

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/remote-functions.sh"
requires qemu-nbd
set -x

size=$(( 40 * 1024 * 1024 + 12288 ))
rio init "$TMP/q.img" "$size" 3 12
start_qemu_nbd q "$TMP/q.img"
roundtrip q "$q_uri" "$TMP/q.img"
kill_remote q TERM
echo PASS
