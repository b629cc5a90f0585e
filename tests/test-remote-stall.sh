#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# A write back that the server holds (tests/faultdisk-plugin.c).
#
# 1. Slow is not lost: with the default settings ramback waits for a
#    held write however long it takes, shows its age in status
#    (store_oldest_request_ms) and keeps the connection.
# 2. With request-timeout=2 ramback gives the connection up while the
#    server still holds write A; the range is rewritten with newer data
#    B on a new connection and synced; then the server applies A late,
#    over B (what a slow server thread does).  ramback must notice when
#    the old connection is finished (the server closes it), rewrite the
#    range again, and the backing image must end up equal to RAM, also
#    after a clean stop.
# 3. The same with a writethrough write: it fails with EIO when its
#    connection is given up, is written again, and the old one lands
#    late.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/remote-functions.sh"
set -x

size=$(( 16 * 1024 * 1024 ))
truncate -s "$size" "$TMP/r.img"
cp "$TMP/r.img" "$TMP/model"
start_faultdisk r "$TMP/r.img"

# put URI OFFSET LENGTH SEED [EXPECT]: write a pattern through ramback
# and into the model; EXPECT=EIO: the write must fail with EIO (RAM has
# the data all the same).
put () {
    /usr/bin/python3 - "$1" "$TMP/model" "$2" "$3" "$4" "${5:-ok}" <<'EOF'
import nbd, random, sys
uri, model = sys.argv[1], sys.argv[2]
off, n, seed = map(int, sys.argv[3:6])
expect = sys.argv[6]
data = random.Random(seed).randbytes(n)
h = nbd.NBD()
h.connect_uri(uri)
try:
    h.pwrite(data, off)
    got = "ok"
except nbd.Error as e:
    got = e.errno
h.shutdown()
with open(model, "r+b") as f:
    f.seek(off)
    f.write(data)
if got != expect:
    sys.exit("write at %d: %s, expected %s" % (off, got, expect))
EOF
}

# sync_until_same RB-CTL: sync until the backing image equals the model
# (a bounded wait: a rewrite may still be on its way); prints where they
# differ if they never do.
sync_until_same () {
    local i
    for (( i=0; i<60; i++ )); do
        ctl "$1" sync 30000 || true
        cmp -s "$TMP/r.img" "$TMP/model" && return 0
        sleep 0.5
    done
    cmp "$TMP/r.img" "$TMP/model" || true
    return 1
}

# ---- 1. slow is not lost ----
start_rb s back="$r_uri" connections=1
ctl "$s_ctl" wait-populated 60000
fd_cmd r stall write offset=2097152 | grep -qx 'id=1'
put "$s_uri" 2097152 65536 1
fd_wait r held 1
# Held for a while: the age is shown, the connection is kept.
wait_status_ge "$s_ctl" store_oldest_request_ms 3000 60
[ "$(status_field "$s_ctl" store_disconnects)" = 0 ] ||
    fail "a slow server was taken for a lost one"
[ "$(status_field "$s_ctl" store_state)" = ok ] || fail "store not ok"
fd_cmd r release 1 apply
fd_wait r held 0
sync_until_same "$s_ctl" || fail "the held write did not complete"
[ "$(status_field "$s_ctl" store_oldest_request_ms)" = 0 ] ||
    fail "store_oldest_request_ms not 0 when idle"
stop_rb s
cmp "$TMP/r.img" "$TMP/model" || fail "after stop (1)"
fd_wait r connections 0

# ---- 2. an abandoned write lands late ----
start_rb rb back="$r_uri" connections=1 request-timeout=2
ctl "$rb_ctl" wait-populated 60000
fd_cmd r stall write offset=1048576 | grep -qx 'id=2'
put "$rb_uri" 1048576 65536 2             # A: held by the server
fd_wait r held 1
cp "$TMP/model" "$TMP/model.A"
wait_status_ge "$rb_ctl" store_disconnects 1 60
# B, newer, over the same range; written back on a new connection.
put "$rb_uri" 1048576 65536 3
sync_until_same "$rb_ctl" || fail "B was not written back"
# The server still runs the old connection (its held write).
[ "$(fd_field r held)" = 1 ] || fail "the held write is gone"
suspect=$(status_field "$rb_ctl" store_suspect_bytes 2>/dev/null) ||
    suspect=missing
# Now the server applies A, late, over B, and closes the old connection.
fd_cmd r release 2 apply
fd_wait r held 0
fd_wait r connections 1
cmp -s -n 65536 -i 1048576:1048576 "$TMP/r.img" "$TMP/model.A" &&
    echo "A landed over B on the backing image, as intended"
# ramback must repair it.
sync_until_same "$rb_ctl" ||
    fail "the backing image holds the abandoned write's old data"
[ "$suspect" != missing ] && [ "$suspect" -ge 65536 ] ||
    fail "store_suspect_bytes was '$suspect' while the old write was held"
wait_status "$rb_ctl" store_suspect_bytes 0 30
rio check "$rb_uri" "$TMP/model"
grep -E 'nbd: connection' "$rb_log" || true
stop_rb rb
cmp "$TMP/r.img" "$TMP/model" || fail "after the clean stop"
fd_wait r connections 0

# ---- 3. the same in writethrough mode ----
start_rb w back="$r_uri" connections=1 request-timeout=2
ctl "$w_ctl" wait-populated 60000        # populate pauses in writethrough
ctl "$w_ctl" mode writethrough
fd_cmd r stall write offset=3145728 | grep -qx 'id=3'
# A: held; the writethrough fails when the connection is given up.
put "$w_uri" 3145728 65536 4 EIO
[ "$(fd_field r held)" = 1 ] || fail "the held write is gone"
put "$w_uri" 3145728 65536 5             # B, on the new connection
sync_until_same "$w_ctl" || fail "B was not written back"
suspect=$(status_field "$w_ctl" store_suspect_bytes 2>/dev/null) ||
    suspect=missing
fd_cmd r release 3 apply
fd_wait r held 0
fd_wait r connections 1
sync_until_same "$w_ctl" ||
    fail "the backing image holds the failed writethrough's old data"
[ "$suspect" != missing ] && [ "$suspect" -ge 65536 ] ||
    fail "store_suspect_bytes was '$suspect' while the old write was held"
wait_status "$w_ctl" store_suspect_bytes 0 30
rio check "$w_uri" "$TMP/model"
stop_rb w
cmp "$TMP/r.img" "$TMP/model" || fail "after the clean stop (3)"
kill_remote r
echo PASS
