#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The crash-resume test (tests/crash-resume.py: kill -9 of nbdkit at
# random moments, restarts on the same ram=, every acknowledged write
# reads back, the store equals the model after clean stops) with the
# backing store an RBD image.  Each restart after a kill takes over
# the image's exclusive lock from the dead client once its watch has
# expired (the test cluster's osd_client_watch_timeout, 10 s).
#
# CRASH_SECONDS (default 30) is the time spent; SEED replays one.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
source "$top_srcdir/tests/rbd/rbd-functions.sh"

rbd_cluster
ramdir=/dev/shm
[ "$(stat -f -c %T "$ramdir" 2>/dev/null)" = tmpfs ] || ramdir="$TMP"
cleanup_fn rbdc rm --no-progress rbd/crash

PLUGIN="$PLUGIN" NBDKIT="$NBDKIT" NBDKIT_PRELOAD="$SANITIZER_PRELOAD" \
    TMP="$TMP" RAMDIR="$ramdir" CHUNK=4096 RBD_IMAGE=rbd/crash \
    SECONDS_BUDGET="${CRASH_SECONDS:-30}" \
    py "$top_srcdir/tests/crash-resume.py"
