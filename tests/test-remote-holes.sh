#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Populate from a sparse remote skips its holes (NBD block status): of
# a 256 MiB export with 3 MiB of data, only about that much is read,
# and the device reads back right.  Without block status (noextents
# filter) everything is read.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/remote-functions.sh"
requires nbdcopy
set -x

M=$(( 1024 * 1024 ))
size=$(( 256 * M ))
truncate -s "$size" "$TMP/model"

start_remote r memory "$size"
# Three 1 MiB extents of data written straight to the remote.
/usr/bin/python3 - "$r_uri" "$TMP/model" <<'EOP'
import os, random, sys, nbd
h = nbd.NBD (); h.connect_uri (sys.argv[1])
rng = random.Random (51)
with open (sys.argv[2], "r+b") as f:
    for off in (0, 100 << 20, (256 << 20) - (1 << 20)):
        data = rng.randbytes (1 << 20)
        h.pwrite (data, off)
        f.seek (off); f.write (data)
h.shutdown ()
EOP

start_rb rb back="$r_uri"
ctl "$rb_ctl" wait-populated 60000
[ "$(status_field "$rb_ctl" store_block_status)" = true ]
loaded=$(status_field "$rb_ctl" loaded_bytes)
echo "loaded $loaded of $size bytes"
[ "$loaded" -ge $(( 3 * M )) ] || fail "loaded only $loaded bytes"
[ "$loaded" -le $(( 4 * M )) ] || fail "loaded $loaded bytes: holes were read"
rio check "$rb_uri" "$TMP/model"
stop_rb rb

start_remote n --filter=noextents memory "$size"
nbdcopy "$TMP/model" "$n_uri"
start_rb rb2 back="$n_uri"
ctl "$rb2_ctl" wait-populated 60000
[ "$(status_field "$rb2_ctl" loaded_bytes)" -eq "$size" ] ||
    fail "without holes reported, everything must be read"
rio check "$rb2_uri" "$TMP/model"
stop_rb rb2
kill_remote n TERM
kill_remote r TERM
echo PASS
