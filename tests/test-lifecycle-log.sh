#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The device's life at nbdkit's normal log level (no -v), and what
# systemd hears (sd_notify, with NOTIFY_SOCKET as under Type=notify):
#
#  1. a 16 MiB backing file full of data, populate-rate=4M: READY=1 comes
#     once the NBD socket is there; the start line names the size, the
#     store, the mode, the journal and where the image comes from; a
#     STATUS= line says "populating N %"; "populated: ... after T s" once
#     done;
#  2. a mode switch over the control socket is logged; a client that
#     stays connected is counted in STATUS=;
#  3. 8 MiB written with flush-rate=1M (dirty: STATUS= says so); SIGTERM:
#     STOPPING=1 and "draining" in STATUS=, then "clean stop: wrote back
#     N bytes in T s, store synced: safe to power off" with N at
#     least what the stop found dirty, and the backing file holds the data.

source "$top_builddir/tests/functions.sh"
requires python3 nbdcopy

back=$TMP/back.img
log=$TMP/nbdkit.log
notes=$TMP/notify.txt
sock=$TMP/nbd.sock
ctlsock=$TMP/ctl.sock
head -c 16M /dev/urandom >"$back"

# systemd's side of NOTIFY_SOCKET: each datagram is one line of $notes
# ("READY=1", "STATUS=...", newlines inside one as " | "), and whether
# the NBD socket existed when it came.
/usr/bin/python3 - "$TMP/notify.sock" "$notes" "$sock" <<'EOF' &
import os, socket, sys
path, out, nbd = sys.argv[1:]
s = socket.socket (socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind (path)
with open (out, "a", buffering=1) as f:
    f.write ("listening\n")
    while True:
        msg = s.recv (4096).decode ().strip ().replace ("\n", " | ")
        f.write ("%s%s\n" % (msg, " (socket there)" if os.path.exists (nbd) else ""))
EOF
listener=$!
cleanup_fn kill "$listener"
for i in $(seq 100); do grep -q listening "$notes" 2>/dev/null && break; sleep 0.1; done

rb_cmdline back="$back" populate-rate=4M flush-rate=1M control="$ctlsock"
NOTIFY_SOCKET=$TMP/notify.sock serve_bg "$sock" "$TMP/pid" "$log" \
    run_nbdkit -f -U "$sock" -P "$TMP/pid" "${RB_CMD[@]}"
pid=$SERVE_PID job=$SERVE_JOB
uri="nbd+unix:///?socket=$sock"

wait_for () {   # wait_for FILE ERE WHAT
    local i
    for (( i = 0; i < 600; i++ )); do
        grep -Eq -- "$2" "$1" && return 0
        sleep 0.1
    done
    echo "--- $1:"; cat "$1"
    fail "no $3 (/$2/) in $1"
}

wait_for "$notes" '^READY=1 \(socket there\)$' "READY=1 once serving"
wait_for "$log" '^ramback: started: 16\.0 MiB, backing store (.*back\.img.*|the plugin below the filter \(plugin\)), writeback, fsync=ignore, no journal; image populating from the backing store$' "start line"
wait_for "$notes" '^STATUS=writeback, populating [0-9]+ % \(' "populating STATUS="
wait_for "$log" '^ramback: populated: the whole image is in RAM after [0-9.]+ s, 16\.0 MiB read from the backing store \([0-9.]+ MiB/s\)$' "populate line"

ctl "$ctlsock" "mode writethrough" >/dev/null
wait_for "$log" '^ramback: mode: writethrough$' "mode line"
ctl "$ctlsock" "mode writeback" >/dev/null
wait_for "$log" '^ramback: mode: writeback$' "mode line"

# A client that stays shows in the status line (a stop waits for it).
/usr/bin/python3 -c '
import nbd, sys, time
h = nbd.NBD (); h.connect_uri (sys.argv[1]); time.sleep (600)' "$uri" &
client=$!
cleanup_fn kill "$client"
wait_for "$notes" '^STATUS=writeback, dirty .*, 1 client connected' "1 client in STATUS="
kill "$client"; wait "$client" 2>/dev/null || :
wait_for "$notes" '^STATUS=writeback, dirty .*, 0 clients connected' "0 clients in STATUS="

head -c 8M /dev/urandom >"$TMP/data"
nbdcopy "$TMP/data" "$uri"
dirty=$(status_field "$ctlsock" dirty_bytes)
[ "$dirty" -ge $(( 4 * 1024 * 1024 )) ] ||
    fail "only $dirty bytes dirty: flush-rate=1M is not holding the flusher back"
wait_for "$notes" '^STATUS=writeback, dirty [0-9.]+ MiB' "dirty STATUS="

kill -TERM "$pid"
wait "$job" || fail "nbdkit exited $? after SIGTERM"
grep -E '^STOPPING=1 \| STATUS=stopping: draining, [0-9.]+ MiB left' "$notes" ||
    { cat "$notes"; fail "no STOPPING=1 with the amount left"; }
line=$(grep '^ramback: clean stop: wrote back' "$log") ||
    { cat "$log"; fail "no 'clean stop: wrote back' line"; }
echo "$line"
echo "$line" | grep -Eq '^ramback: clean stop: wrote back [0-9]+ bytes in [0-9.]+ s, store synced: safe to power off$' ||
    fail "the clean stop line reads: $line"
n=$(echo "$line" | sed 's/.*wrote back \([0-9]*\) bytes.*/\1/')
# The flusher goes on at flush-rate= between the status read above and
# SIGTERM, so the stop has at most $dirty bytes left to write back: what
# its "writing back" line says (in MiB to one decimal), and it wrote
# back at least that.
left=$(sed -n 's/^ramback: clean stop: writing back \([0-9.]*\) MiB$/\1/p' "$log" | head -1)
[ -n "$left" ] || { cat "$log"; fail "no 'clean stop: writing back N MiB' line"; }
awk -v n="$n" -v left="$left" -v dirty="$dirty" 'BEGIN {
        m = 1048576; exit !(left >= 1 && (left - 0.05) * m <= dirty && n >= (left - 0.05) * m) }' ||
    fail "wrote back $n bytes, but $left MiB were left at the stop ($dirty bytes dirty before)"
grep -q '^STATUS=stopped: everything written back, store synced' "$notes" ||
    fail "no final STATUS="
cmp -n $(( 8 * 1024 * 1024 )) "$TMP/data" "$back" ||
    fail "the backing file does not hold the data written"
echo "--- the log at normal level:"
grep '^ramback:' "$log"
