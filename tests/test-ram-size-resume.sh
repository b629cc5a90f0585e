#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# ram-size= across a kill -9 and a resume from the ram= image, with
# ram-size= changed between the two starts (a 4 MiB device of 64 KiB
# chunks, ram-size=1M):
#   1. killed without ram-size=, the whole device dirty in RAM; resumed
#      with ram-size=1M: once written back (a control "sync"), what is
#      resident comes down to ram-size= with no request at all (nothing
#      misses, so no request would evict), and the device reads as
#      written;
#   2. killed with ram-size=1M in the middle of a copy of new data (its
#      evicted chunks are holes in the ram= file); resumed without it:
#      the device reads as written.
# After each, a clean stop: the backing file holds what was written.
# test-crash-resume.sh kills at random moments with ram-size= as well.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
requires nbdcopy
crash_ramdir

back="$TMP/back.img"
ram="$ramdir/ramback-ram-size-resume-$$.img"
cleanup_fn rm -f "$ram"
random_file "$back" $(( 4 << 20 )) 1
random_file "$TMP/one.img" $(( 4 << 20 )) 2
random_file "$TMP/two.img" $(( 4 << 20 )) 3
args=(back="$back" ram="$ram" chunk=64K)

# kill9 NAME: kill -9 ramback NAME, as a crash would.
kill9 () {
    local pid=${1}_pid job=${1}_job
    kill -9 "${!pid}"
    wait "${!job}" || true
}

echo "=== 1: killed with the device dirty, resumed with ram-size=1M"
# flush-delay= keeps the copy dirty in RAM until the kill.
start_rb rb -- "${args[@]}" flush-delay=60
nbdcopy "$TMP/one.img" "$rb_uri"
dirty=$(status_field "$rb_ctl" dirty_chunks)
[ "$dirty" -ge 60 ] || fail "only $dirty of 64 chunks dirty before the kill"
kill9 rb
start_rb rb -- "${args[@]}" ram-size=1M
[ "$(status_field "$rb_ctl" image_source)" = resumed-crash ] ||
    fail "not resumed: $(status_field "$rb_ctl" image_source)"
ctl "$rb_ctl" sync >/dev/null
resident=$(status_field "$rb_ctl" resident_bytes)
[ "$resident" -le $(( 1 << 20 )) ] ||
    fail "$resident bytes resident after write back, ram-size=1M"
[ "$(status_field "$rb_ctl" evictions)" -gt 0 ] || fail "no eviction"
check_device "$rb_uri" "$TMP/one.img" "device resumed with ram-size=1M"
stop_rb_same rb "$back" "$TMP/one.img"
echo "resident after write back: $resident bytes; backing file == data"

echo "=== 2: killed with ram-size=1M in a copy, resumed without it"
start_rb rb -- "${args[@]}" ram-size=1M flush-delay=60
nbdcopy "$TMP/two.img" "$rb_uri"
[ "$(status_field "$rb_ctl" evictions)" -gt 0 ] || fail "no eviction"
kill9 rb
start_rb rb -- "${args[@]}"
[ "$(status_field "$rb_ctl" image_source)" = resumed-crash ] ||
    fail "not resumed: $(status_field "$rb_ctl" image_source)"
check_device "$rb_uri" "$TMP/two.img" "device resumed without ram-size="
stop_rb_same rb "$back" "$TMP/two.img"
echo "backing file == data"
