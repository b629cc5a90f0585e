#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# A failed sync loses every write not yet synced, not only those the
# failing sync was meant to cover.  Forced interleaving, against a
# backing server with a volatile write cache (faultdisk durable=):
#
#   1. writethrough write W1 reaches the server; the flusher's sync
#      (NBD FLUSH) is held at the server;
#   2. writethrough write W2 reaches the server and is acknowledged
#      while that FLUSH is held;
#   3. the FLUSH fails and the server's cache drops W1 and W2, the way
#      Linux drops pages whose write-back failed.
#
# ramback must write both again: after "sync" succeeds, the durable
# image equals what the client wrote.  Then the same with two
# concurrent FUA writes under fsync=wait: a FUA write that succeeded
# must be durable at once.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/remote-functions.sh"

M=$(( 1024 * 1024 ))
size=$(( 4 * M ))
head -c "$size" /dev/urandom >"$TMP/dur.img"
cp "$TMP/dur.img" "$TMP/model"
cp "$TMP/dur.img" "$TMP/img"

# write URI OFFSET BYTE [fua]: 64 KiB of BYTE, into the model too.  A
# write that fails may land or not: the model takes what ramback reads
# back (which must be the old or the new data), and the exit status is 1.
write () {
    /usr/bin/python3 - "$@" "$TMP/model" <<'EOP'
import sys, nbd
uri, off, byte = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fua = len(sys.argv) > 5 and sys.argv[4] == "fua"
data = bytes([byte]) * 65536
h = nbd.NBD(); h.connect_uri(uri)
with open(sys.argv[-1], "r+b") as f:
    f.seek(off); old = f.read(65536)
    rc = 0
    try:
        h.pwrite(data, off, nbd.CMD_FLAG_FUA if fua else 0)
    except nbd.Error as e:
        print("write at", off, "failed:", e, file=sys.stderr)
        got = h.pread(65536, off)
        assert got in (old, data), "a failed write left neither old nor new data"
        data, rc = got, 1
    f.seek(off); f.write(data)
h.shutdown()
sys.exit(rc)
EOP
}

sync_until_ok () {
    local i
    for (( i=0; i<60; i++ )); do
        ctl "$1" sync 10000 2>/dev/null && return 0
        sleep 0.2
    done
    fail "sync never succeeded"
}

start_faultdisk fd "$TMP/img" durable="$TMP/dur.img"
start_rb rb back="$fd_uri" connections=1
ctl "$rb_ctl" wait-populated 60000
ctl "$rb_ctl" mode writethrough

id=$(fd_cmd fd stall flush | sed -n 's/^id=//p')
write "$rb_uri" 0 17                  # W1
fd_wait fd held 1                     # the sync covering W1 is held
write "$rb_uri" $(( 2 * M )) 34       # W2, acknowledged meanwhile
fd_cmd fd release "$id" drop          # the sync fails, W1 and W2 lost
wait_status_ge "$rb_ctl" sync_errors 1
sync_until_ok "$rb_ctl"
cmp "$TMP/dur.img" "$TMP/model" ||
    fail "the durable image lost a write after a failed sync"
stop_rb rb
cmp "$TMP/dur.img" "$TMP/model" || fail "the durable image differs after stop"
kill_remote fd TERM 2>/dev/null || kill_remote fd

# Two FUA writes with fsync=wait, the second case of the rule: W3's
# sync is held; W4 is written while it is held.  W3's sync fails and
# the cache drops both; a sync that comes after (as a concurrent
# fdatasync does once the error has been reported to another) succeeds
# with nothing left to write.  W4 must not be acknowledged as durable
# unless it is.
start_faultdisk fd2 "$TMP/img" durable="$TMP/dur.img"
start_rb rb2 back="$fd2_uri" connections=1 fsync=wait
ctl "$rb2_ctl" wait-populated 60000
id=$(fd_cmd fd2 stall flush | sed -n 's/^id=//p')
fd_cmd fd2 stall flush >/dev/null         # and the next FLUSH sent meanwhile
write "$rb2_uri" $(( 1 * M )) 51 fua &   # W3
w3=$!
fd_wait fd2 held 1
write "$rb2_uri" $(( 3 * M )) 68 fua &   # W4
w4=$!
fd_wait fd2 writes 2
fd_cmd fd2 release "$id" drop
# A later FLUSH (W4's own, if it is sent) succeeds with nothing left to
# write, as a second fdatasync does once the error was reported.
for (( i=0; i<600; i++ )); do
    kill -0 "$w4" 2>/dev/null || break
    [ "$(fd_field fd2 held)" = 0 ] || fd_cmd fd2 release all apply >/dev/null
    sleep 0.05
done
fd_cmd fd2 release all >/dev/null
w3rc=0; wait "$w3" || w3rc=$?
w4rc=0; wait "$w4" || w4rc=$?
echo "FUA W3 exit $w3rc, W4 exit $w4rc"
[ "$w3rc" -ne 0 ] || fail "the FUA write whose sync failed succeeded"
if [ "$w4rc" -eq 0 ]; then
    # Acknowledged as durable: it must be in the durable image now.
    cmp -i $(( 3 * M )):$(( 3 * M )) -n 65536 "$TMP/dur.img" "$TMP/model" ||
        fail "a FUA write was acknowledged but is not durable"
fi
sync_until_ok "$rb2_ctl"
stop_rb rb2
cmp "$TMP/dur.img" "$TMP/model" || fail "the durable image differs after stop"
