#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# A power cut in the middle of a journal replay: test-journal-crash.sh's
# rounds, each with a first recovery (ramback recover, or ramback's
# replay at open) held by a stall at one of its in-place writes or at
# its final FLUSH, then cut (the backing disk loses power, the process
# is killed).  Replaying again must still give the point-in-time image.
# JOURNAL_CRASH_ROUNDS=N rounds (default 4), SEED=N the first seed.
export JOURNAL_CRASH_REPLAY_CUT=1
export JOURNAL_CRASH_ROUNDS=${JOURNAL_CRASH_ROUNDS:-4}
export SEED=${SEED:-101}
exec "${BASH:-bash}" "$top_srcdir/tests/test-journal-crash.sh" "$@"
