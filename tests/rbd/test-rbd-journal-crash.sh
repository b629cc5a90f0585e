#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The journal's point-in-time check (tests/test-journal-crash.sh: a
# client writing in order with FLUSHes and FUA, ramback killed at a
# seeded moment, the journal's disk losing power, recovery, then the
# image must be the device at one point in time holding every write a
# FLUSH promised) with the journal local and the backing store an RBD
# image.  Two rounds: one connection, fsync=wait, recovered offline by
# "ramback recover" (twice); two connections, the last transaction
# torn, recovered by ramback at open.  Each recovery first waits for
# the dead ramback's lock to expire (osd_client_watch_timeout, 10 s in
# the test cluster).
exec env JOURNAL_CRASH_RBD=1 JOURNAL_CRASH_ROUNDS="${JOURNAL_CRASH_ROUNDS:-2}" \
    /bin/bash "$top_srcdir/tests/test-journal-crash.sh"
