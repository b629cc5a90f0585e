#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# An nbdkit sh-plugin script: a disk with a volatile write cache that
# loses it when a FLUSH fails, the way Linux drops dirty pages after a
# failed fsync ("fsyncgate"), or when the power is cut.  Used as the NBD
# backing store of ramback by test-error-backing.sh and
# test-acked-durable.sh.
#
#   VOLATILE_IMG   what reads see: durable data plus unflushed writes
#   DURABLE_IMG    what survives: updated only by a successful FLUSH
#   VOLATILE_LIST  "offset count" of each write since the last FLUSH
#   VOLATILE_FAIL  while this file exists, every FLUSH fails with EIO
#                  and the writes since the last good FLUSH are lost
#   VOLATILE_GATE  optional: while this file exists and holds "OFFSET
#                  COUNT", a write overlapping that range waits until
#                  the file is removed (a test holds a write in flight);
#                  "$VOLATILE_GATE.held" exists from the moment it is
#                  held until it is done
#   VOLATILE_PARALLEL=1  requests run in parallel (needed with a gate,
#                  or the held write stalls every other request);
#                  default: nbdkit serializes them
#
# Not called by nbdkit, but by a test while no nbdkit serves the files:
#   volatile-disk.sh power_cut   drop every unflushed write
#
# The list is updated under flock(1), so parallel requests are safe.

set -e
method=$1

source "${BASH_SOURCE[0]%/*}/sh-disk.sh"

lock_list () { exec 9>>"$VOLATILE_LIST.lock"; flock 9; }

# gate OFFSET COUNT: wait while the gate covers this write; sets held.
held=
gate () {
    local goff gcount
    [ -n "${VOLATILE_GATE:-}" ] && [ -e "$VOLATILE_GATE" ] || return 0
    read -r goff gcount < "$VOLATILE_GATE" 2>/dev/null || return 0
    [ -n "$goff" ] && [ -n "$gcount" ] || return 0
    (( $1 < goff + gcount && goff < $1 + $2 )) || return 0
    held=1
    : > "$VOLATILE_GATE.held"
    while [ -e "$VOLATILE_GATE" ]; do sleep 0.01; done
}

case "$method" in
    open) echo handle ;;
    get_size) stat -L -c %s "$VOLATILE_IMG" ;;
    thread_model)
        if [ "${VOLATILE_PARALLEL:-}" = 1 ]; then
            echo parallel
        else
            echo serialize_all_requests
        fi
        ;;
    can_write|can_flush) exit 0 ;;
    can_fua) echo none ;;
    can_multi_conn) exit 3 ;;
    pread)
        disk_pread "$VOLATILE_IMG" "$3" "$4"
        ;;
    pwrite)
        gate "$4" "$3"
        disk_pwrite "$VOLATILE_IMG" "$4"
        lock_list
        echo "$4 $3" >> "$VOLATILE_LIST"
        [ -z "$held" ] || rm -f "$VOLATILE_GATE.held"
        ;;
    flush)
        lock_list
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
    power_cut)
        lock_list
        cp "$DURABLE_IMG" "$VOLATILE_IMG"
        : > "$VOLATILE_LIST"
        ;;
    *) exit 2 ;;
esac
