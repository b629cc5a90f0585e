#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# An nbdkit sh-plugin script: a disk with a volatile write cache that
# loses it when a FLUSH fails, the way Linux drops dirty pages after a
# failed fsync ("fsyncgate").  Used by test-error-backing.sh as the NBD
# backing store of ramback.
#
#   VOLATILE_IMG   what reads see: durable data plus unflushed writes
#   DURABLE_IMG    what survives: updated only by a successful FLUSH
#   VOLATILE_LIST  "offset count" of each write since the last FLUSH
#   VOLATILE_FAIL  while this file exists, every FLUSH fails with EIO
#                  and the writes since the last good FLUSH are lost
#
# nbdkit's sh plugin serializes all requests by default, so no locking.

set -e
method=$1

copy_range () {    # copy_range FROM TO OFFSET COUNT
    dd if="$1" of="$2" bs=64K iflag=skip_bytes,count_bytes oflag=seek_bytes \
       conv=notrunc skip="$3" seek="$3" count="$4" status=none
}

case "$method" in
    open) echo handle ;;
    get_size) stat -L -c %s "$VOLATILE_IMG" ;;
    can_write|can_flush) exit 0 ;;
    can_fua) echo none ;;
    can_multi_conn) exit 3 ;;
    pread)
        dd if="$VOLATILE_IMG" bs=64K iflag=skip_bytes,count_bytes \
           skip="$4" count="$3" status=none
        ;;
    pwrite)
        dd of="$VOLATILE_IMG" bs=64K iflag=fullblock oflag=seek_bytes \
           conv=notrunc seek="$4" status=none
        echo "$4 $3" >> "$VOLATILE_LIST"
        ;;
    flush)
        if [ -e "$VOLATILE_FAIL" ]; then
            while read -r off count; do
                copy_range "$DURABLE_IMG" "$VOLATILE_IMG" "$off" "$count"
            done < "$VOLATILE_LIST"
            : > "$VOLATILE_LIST"
            echo "EIO injected flush failure: unflushed writes are lost" >&2
            exit 1
        fi
        while read -r off count; do
            copy_range "$VOLATILE_IMG" "$DURABLE_IMG" "$off" "$count"
        done < "$VOLATILE_LIST"
        : > "$VOLATILE_LIST"
        sync "$DURABLE_IMG"
        ;;
    *) exit 2 ;;
esac
