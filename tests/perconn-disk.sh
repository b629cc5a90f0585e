#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# An nbdkit sh-plugin script: a disk whose write cache is per
# connection, so a FLUSH makes durable only the writes made on its own
# connection, and which says so by not advertising multi-conn.  Used by
# test-filter-caps.sh right below the ramback filter: the filter must
# flush every context it wrote through.
#
#   PERCONN_IMG      what reads see, whichever connection wrote it
#   PERCONN_DURABLE  what survives: a FLUSH copies the ranges written on
#                    its own connection since its last FLUSH from
#                    PERCONN_IMG to here, and syncs
#   PERCONN_DIR      one list of unflushed "offset count" per connection
#                    (its handle), and "writers": the handle of every write
#   PERCONN_NOFLUSH  if set, the disk cannot flush at all (can_flush false)
#
# Thread model serialize_requests: connections run in parallel, each one
# request at a time, so a connection's list needs no locking.  Zeroes
# and trims (a trim zeroes here) are cached and flushed like writes, and
# their handles go to "zeroers".

set -e
method=$1

source "${BASH_SOURCE[0]%/*}/sh-disk.sh"

case "$method" in
    thread_model) echo serialize_requests ;;
    open)
        h=$(mktemp "$PERCONN_DIR/conn.XXXXXX")
        echo "${h##*/}"
        ;;
    close) rm -f "$PERCONN_DIR/$2" ;;
    get_size) stat -L -c %s "$PERCONN_IMG" ;;
    can_write) exit 0 ;;
    can_flush) [ -z "$PERCONN_NOFLUSH" ] || exit 3 ;;
    can_fua) echo none ;;
    can_zero|can_trim) exit 0 ;;
    can_multi_conn) exit 3 ;;
    pread)
        disk_pread "$PERCONN_IMG" "$3" "$4"
        ;;
    pwrite)
        disk_pwrite "$PERCONN_IMG" "$4"
        echo "$4 $3" >> "$PERCONN_DIR/$2"
        echo "$2" >> "$PERCONN_DIR/writers"
        ;;
    zero|trim)
        disk_zero "$PERCONN_IMG" "$3" "$4"
        echo "$4 $3" >> "$PERCONN_DIR/$2"
        echo "$2" >> "$PERCONN_DIR/zeroers"
        ;;
    flush)
        while read -r off count; do
            copy_range "$PERCONN_IMG" "$PERCONN_DURABLE" "$off" "$count"
        done < "$PERCONN_DIR/$2"
        : > "$PERCONN_DIR/$2"
        sync "$PERCONN_DURABLE"
        ;;
    *) exit 2 ;;
esac
