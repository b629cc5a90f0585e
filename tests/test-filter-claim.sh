#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# One writer per backing file in the filter form, as in the plugin form
# (test-lock.sh): the file plugin's file is claimed (locked) by the
# filter.
#
#  1. A second filter on the file a running filter serves, and the
#     plugin form on it, are refused, naming the running one's pid; the
#     running one keeps serving, its data intact.
#  2. The filter on the file that the plugin form serves: refused too.
#  3. ram= naming the plugin's file: refused.
# (A file the filter cannot open for writing gets a read lock and is
# served read-only: test-bad-input.sh.)

RAMBACK_FORM=filter
source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"

back="$TMP/back.img"
py -c '
import random, sys
open (sys.argv[1], "wb").write (random.Random (3).randbytes (4 << 20))' "$back"
inuse='in use'
f=(--filter="$FILTER")

# 1.
start_rb a -- back="$back"
nbdsh -u "$a_uri" -c 'h.pwrite (b"claimed!" * 512, 8192)' -c 'h.flush ()'
ctl "$a_ctl" sync >/dev/null
protect "$back"
expect_fail_cmd "the filter twice on one file" "$inuse.*pid $a_pid" \
    "${f[@]}" file "$back"
expect_fail_cmd "the plugin form on the filter's file" "$inuse.*pid $a_pid" \
    "$PLUGIN" back="$back"
protect_clear
nbdsh -u "$a_uri" -c 'assert h.pread (4096, 8192) == b"claimed!" * 512'
stop_rb a
echo "ok: the running filter kept serving"

# 2.
RAMBACK_FORM=plugin
start_rb p -- back="$back"
RAMBACK_FORM=filter
protect "$back"
expect_fail_cmd "the filter on the plugin form's file" "$inuse.*pid $p_pid" \
    "${f[@]}" file "$back"
protect_clear
stop_rb p

# The filter given twice in one nbdkit: said as such, not as another
# process holding the file.
protect "$back"
expect_fail_cmd "the filter given twice" \
    "ramback filter is given 2 times.*give --filter=ramback once" \
    "${f[@]}" "${f[@]}" file "$back"
protect_clear

# 3.
protect "$back"
expect_fail_cmd "ram= is the plugin's file" "backing store itself" \
    "${f[@]}" file "$back" ram="$back"
protect_clear

echo "$ncases refusals"
