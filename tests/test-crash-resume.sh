#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# kill -9 of nbdkit, many times, at random moments (flusher mid-batch
# under flush-rate=, syncs with fsync=wait, populate under
# populate-rate=, writethrough mode), each followed by a restart on the
# same ram= (a tmpfs) and back=: every acknowledged write reads back,
# a request in flight at the kill reads back old or new, and after the
# final clean stop the backing file equals the model.  Chunk sizes 4K
# and 64K, a device size that is not a multiple of either; then 64K
# with ram-size= a quarter of the device (evicted chunks are holes in
# the ram= file at the kills), for 3/8 of the time.
# crash-resume.py is the driver; the model is tests/model.py.  This is
# the file backing store; test-crash-resume-nbd.sh is the same through
# an NBD one.
#
# CRASH_SECONDS (default 40) is the time spent per chunk size; set it
# higher for a long run.  SEED replays one.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
crash_ramdir

for chunk in 4096 65536; do
    crash_resume $chunk
done
crash_resume 65536 RAM_SIZE=1M SECONDS_BUDGET=$(( ${CRASH_SECONDS:-40} * 3 / 8 ))
