#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# test-crash-resume.sh (kill -9 at random moments, restart on the same
# ram=, every acknowledged write kept) through an NBD backing store: the
# faultdisk test plugin, which holds a sync or a write back write of
# ours on command, so that most kills land exactly while one is in
# flight.  Then 64K with ram-size= a quarter of the device, for an
# eighth of the time: a kill held in a sync or a write back with
# chunks evicted (holes in ram=).  CRASH_SECONDS and SEED as there.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
crash_ramdir

for chunk in 4096 65536; do
    crash_resume $chunk \
        FAULTDISK="$top_builddir/tests/.libs/nbdkit-faultdisk-plugin.so"
done
crash_resume 65536 RAM_SIZE=1M SECONDS_BUDGET=$(( ${CRASH_SECONDS:-40} / 8 )) \
    FAULTDISK="$top_builddir/tests/.libs/nbdkit-faultdisk-plugin.so"
