#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# lib/store/store-nbd.c on its own (tests/test-store-nbd.c), against fresh
# servers: batched writes and reads checked against a model, zero,
# block status, 8 threads at once, status fields; connections chosen
# from multi-conn, or forced; WRITE_ZEROES and block status missing; the
# server killed and restarted (EIO while offline, reconnect, flush that
# reports lost unflushed writes; with tests/faultdisk-plugin.c: a FLUSH
# queued for a connection lost before it was sent, and two flushes
# after a loss); qemu-nbd and nbd-server.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/remote-functions.sh"
set -x

prog="$top_builddir/tests/test-store-nbd"
[ -x "$prog" ] || fail "$prog not built"
size=$(( 64 * 1024 * 1024 ))

# multi-conn, zero, extents: 4 connections by default.
start_remote m1 memory "$size"
EXPECT_CONNECTIONS=4 "$prog" "$m1_uri" "$size"
kill_remote m1

# No multi-conn, no WRITE_ZEROES, no holes reported: 1 connection, zero
# emulated by writes.
filters=(--filter=multi-conn --filter=nozero --filter=noextents)
start_remote m2 "${filters[@]}" memory "$size" \
    multi-conn-mode=disable zeromode=none
EXPECT_CONNECTIONS=1 EXPECT_ZERO=0 EXPECT_EXTENTS=0 "$prog" "$m2_uri" "$size"
kill_remote m2

# connections= forced without multi-conn.
start_remote m3 "${filters[@]}" memory "$size" \
    multi-conn-mode=disable zeromode=none
CONNECTIONS=3 EXPECT_CONNECTIONS=3 EXPECT_ZERO=0 EXPECT_EXTENTS=0 \
    "$prog" "$m3_uri" "$size"
kill_remote m3

# A file-backed server (faultdisk, which writes straight to its file)
# killed with SIGKILL and restarted on the same socket: the data
# survives in the file, the store reconnects.
truncate -s "$size" "$TMP/f.img"
start_faultdisk f "$TMP/f.img"
# The test program runs these two with system(3).
cat >"$TMP/kill.sh" <<KILL
#!/bin/bash
pid=\$(cat $TMP/f.rpid)
kill -9 \$pid
# Gone, or a zombie that the container's init does not reap.
while [ -r /proc/\$pid/stat ] &&
      [ "\$(sed 's/^.*) //' /proc/\$pid/stat | cut -d' ' -f1)" != Z ]; do
    sleep 0.05
done
rm -f $TMP/f.rsock
KILL
envq=
[ ${#nbdkit_env[@]} -eq 0 ] || envq=$(printf '%q ' "${nbdkit_env[@]}")
cat >"$TMP/start.sh" <<START
#!/bin/bash
$envq nbdkit -U $TMP/f.rsock -P $TMP/f.rpid \\
    $FAULTDISK file=$TMP/f.img dir=$f_fd
while [ ! -S $TMP/f.rsock ]; do sleep 0.05; done
START
chmod +x "$TMP/kill.sh" "$TMP/start.sh"
# A restarted server daemonizes: stop it even if the test fails.
cleanup_fn bash -c 'kill -9 "$(cat "$1")" 2>/dev/null; true' _ "$TMP/f.rpid"
# faultdisk reports no holes.
EXPECT_EXTENTS=0 KILL_CMD="$TMP/kill.sh" START_CMD="$TMP/start.sh" FAULTDISK_DIR="$f_fd" \
    "$prog" "$f_uri" "$size"
# The restarted server daemonized itself: stop it by its pid file.
kill "$(cat "$TMP/f.rpid")" 2>/dev/null || true
remote_log_clean f

if command -v qemu-nbd >/dev/null; then
    truncate -s "$size" "$TMP/q.img"
    start_qemu_nbd q "$TMP/q.img"
    EXPECT_CONNECTIONS=4 "$prog" "$q_uri" "$size"
    kill_remote q TERM
else
    echo "qemu-nbd not installed: that case skipped"
fi

if command -v nbd-server >/dev/null; then
    truncate -s "$size" "$TMP/n.img"
    start_nbd_server n "$TMP/n.img"
    # nbd-server 3.24 offers no base:allocation.
    EXPECT_EXTENTS=0 "$prog" "$n_uri" "$size"
    kill_remote n TERM
else
    echo "nbd-server not installed: that case skipped"
fi
echo PASS
