#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The filter form's clean stop above filters that sleep.  Once nbdkit
# has begun to shut down, nbdkit_nanosleep fails (ESHUTDOWN) for every
# filter below ramback that sleeps (delay, rate, retry), so a write
# back left for .cleanup could never finish: the stop looped for ever
# and kill -9 then lost acknowledged writes.
#
#  1. For delay and rate below ramback: 4 MiB written and held dirty
#     (flush-delay=60), SIGTERM: nbdkit writes everything back before it
#     begins to shut down, exits 0, and the file holds the data.
#  1b. flush-rate= is lifted for that drain, as the man page says.
#  2. rate below ramback at a rate that would take minutes, ram= kept:
#     SIGTERM, then a second SIGTERM ("stop now"): nbdkit exits within
#     seconds, says loudly that data was not written back, and keeps the
#     RAM image; the next start on it resumes it and writes it back.

RAMBACK_FORM=filter
source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
requires timeout

size=$(( 16 * 1024 * 1024 ))
head -c $(( 4 * 1024 * 1024 )) /dev/urandom >"$TMP/data"

write_data () {
    py - "$1" "$TMP/data" <<'EOF'
import sys, nbd
h = nbd.NBD ()
h.connect_uri (sys.argv[1])
d = open (sys.argv[2], "rb").read ()
for off in range (0, len (d), 1 << 20):
    h.pwrite (d[off:off + (1 << 20)], off)
h.shutdown ()
EOF
}

# Wait up to $2 seconds for pid $1 to exit; 1 if it is still running.
wait_exit () {
    local i
    for (( i=0; i<$2*10; i++ )); do
        kill -0 "$1" 2>/dev/null || return 0
        sleep 0.1
    done
    return 1
}

# stop_holds_data NAME SECS WHAT TIMEOUT-MSG: SIGTERM the ramback NAME
# (started by start_rb); it must exit 0 within SECS and leave $img
# holding the data.
stop_holds_data () {
    local pid=${1}_pid log=${1}_log job=${1}_job rc=0
    kill -TERM "${!pid}"
    if ! wait_exit "${!pid}" "$2"; then
        tail -5 "${!log}" >&2
        fail "$3: $4"
    fi
    wait "${!job}" || rc=$?
    [ "$rc" = 0 ] || { tail -20 "${!log}" >&2; fail "$3: exit status $rc"; }
    cmp -n $(( 4 * 1024 * 1024 )) "$img" "$TMP/data" ||
        fail "$3: the file does not hold the data"
}

for below in "delay delay-write=20ms" "rate rate=64M"; do
    name=${below%% *}
    img="$TMP/$name.img"
    truncate -s "$size" "$img"
    read -r -a filt <<<"$below"
    RB_PLUGIN=(--filter="${filt[0]}" file "$img" "${filt[@]:1}")
    start_rb s flush-delay=60
    write_data "$s_uri"
    [ "$(status_field "$s_ctl" dirty_chunks)" -gt 0 ] ||
        fail "$name: nothing dirty before the stop"
    stop_holds_data s 60 "$name below ramback" \
        "no clean stop 60 s after SIGTERM"
    grep -q "safe to power off" "$s_log" ||
        fail "$name: no 'safe to power off' line"
    echo "ok: $name below ramback: written back before nbdkit shut down"
done

# 1b. flush-rate= is lifted for the drain of a clean stop, as in the
# plugin form: 4 MiB at 64 KiB/s would take over a minute.
img="$TMP/capped.img"
truncate -s "$size" "$img"
RB_PLUGIN=(file "$img")
start_rb c flush-delay=60 flush-rate=64K
write_data "$c_uri"
stop_holds_data c 30 "flush-rate=64K" \
    "the stop drained at the cap (not done 30 s after SIGTERM)"
echo "ok: flush-rate= lifted for the drain of a clean stop"

# 2. A second signal stops at once; ram= keeps what was not written.
ramdir=/dev/shm
[ "$(stat -f -c %T "$ramdir" 2>/dev/null)" = tmpfs ] || ramdir=$TMP
ram="$ramdir/ramback-filter-stop-$$.img"
cleanup_fn rm -f "$ram"
img="$TMP/slow.img"
truncate -s "$size" "$img"
# rate-file= lets the next start, on the same command line (the RAM
# image belongs to it), write back at full speed.
echo 1M >"$TMP/rate"
RB_PLUGIN=(--filter=rate file "$img" rate=1M rate-file="$TMP/rate")
start_rb t ram="$ram" flush-delay=60
write_data "$t_uri"
kill -TERM "$t_pid"
for (( i=0; i<100; i++ )); do
    grep -q "writing back before" "$t_log" && break
    sleep 0.1
done
grep -q "writing back before" "$t_log" || fail "no drain logged after SIGTERM"
kill -TERM "$t_pid"
if ! wait_exit "$t_pid" 30; then
    tail -5 "$t_log" >&2
    fail "a second SIGTERM did not stop nbdkit within 30 s"
fi
wait "$t_job" || true
grep -q "DATA WAS NOT WRITTEN BACK" "$t_log" ||
    { tail -20 "$t_log" >&2; fail "the stop did not say data was not written back"; }
[ -s "$ram" ] || fail "the RAM image was not kept"
echo 1G >"$TMP/rate"
start_rb u ram="$ram"
[ "$(status_field "$u_ctl" image_source)" = resumed-crash ] ||
    fail "image_source $(status_field "$u_ctl" image_source), not resumed-crash"
stop_rb u
cmp -n $(( 4 * 1024 * 1024 )) "$img" "$TMP/data" ||
    fail "the resumed image did not write the data back"
echo "ok: a second SIGTERM stops at once; ram= resumes what was left"
