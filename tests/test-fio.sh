#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# fio --ioengine=nbd, two jobs (two NBD connections, disjoint 8 MiB
# areas) doing randwrite with verify=crc32c at iodepth 16:
#  A. writeback, bs=8k;
#  B. a new nbdkit with mode=writethrough on the same backing file, bs=4k
#     (different block size, so a block left over from A fails verify);
#  C. the backing file itself passes fio verify_only (psync, no nbdkit);
#  D. a third nbdkit with populate-rate=16M: verify_only through NBD,
#     sequential (--rw=read) and replaying B's writes, while populating;
#     the backing file is unchanged by all that reading.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
requires fio

size=$(( 32 * 1024 * 1024 + 12345 ))
back="$TMP/back.img"
common=(--offset=0 --size=8M --offset_increment=8M --numjobs=2
        --verify=crc32c --verify_fatal=1 --group_reporting)
phase_a=(--rw=randwrite --bs=8k --randseed=1 "${common[@]}")
phase_b=(--rw=randwrite --bs=4k --randseed=2 "${common[@]}")

run_fio () {
    local what=$1; shift
    if ! fio --name="$what" "$@" --output="$TMP/fio.out"; then
        cat "$TMP/fio.out"
        fail "fio $what"
    fi
    grep -E 'IOPS|err=' "$TMP/fio.out" | sed "s/^/  $what: /"
}

rm -f "$back"
echo "=== A: writeback"
start_rb rb -- back="$back" size="$size"
run_fio A --ioengine=nbd --uri="$rb_uri" --iodepth=16 "${phase_a[@]}"
stop_rb rb

echo "=== B: writethrough"
start_rb rb -- back="$back" mode=writethrough
[ "$(status_field "$rb_ctl" mode)" = writethrough ] || fail "mode is not writethrough"
run_fio B --ioengine=nbd --uri="$rb_uri" --iodepth=16 "${phase_b[@]}"
stop_rb rb

echo "=== C: verify the backing file directly"
run_fio C-read --ioengine=psync --filename="$back" --verify_only \
    "${phase_b[@]}" --rw=read
run_fio C-replay --ioengine=psync --filename="$back" --verify_only "${phase_b[@]}"
sum=$(sha "$back")

echo "=== D: verify through NBD during populate"
start_rb rb -- back="$back" populate-rate=16M
echo "populated at start: $(status_field "$rb_ctl" populated)"
run_fio D-read --ioengine=nbd --uri="$rb_uri" --iodepth=16 --verify_only \
    "${phase_b[@]}" --rw=read
run_fio D-replay --ioengine=nbd --uri="$rb_uri" --iodepth=16 --verify_only \
    "${phase_b[@]}"
ctl "$rb_ctl" wait-populated 30000
stop_rb rb
[ "$(sha "$back")" = "$sum" ] || fail "reading changed the backing file"
echo "backing file unchanged by verify-only runs"
