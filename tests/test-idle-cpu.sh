#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Idle is idle: once populate and write back are done, a ramback with
# a client connected and nothing to do uses no CPU and does not wake up
# (no polling loop), over a file store and over an NBD store.  Measured
# from /proc: the process's CPU time in clock ticks and its threads'
# context switches over a few idle seconds, both bounded (no timing of
# any operation).  And the write-back thread runs at background CPU
# and I/O priority.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/remote-functions.sh"
requires ionice

size=$(( 32 * 1024 * 1024 ))
/usr/bin/python3 -c '
import sys
with open(sys.argv[1], "wb") as f:
    f.truncate(int(sys.argv[2]))
    f.seek(1 << 20); f.write(b"\x11" * (4 << 20))' "$TMP/back.img" "$size"
start_remote r memory "$size"
start_rb file back="$TMP/back.img"
start_rb nbd back="$r_uri"

# Populate, write, write back, sync: then nothing is left to do.
for s in file nbd; do
    ctlv=${s}_ctl urlv=${s}_uri
    ctl "${!ctlv}" wait-populated 60000
    nbdsh -u "${!urlv}" -c 'h.pwrite(b"\x22" * (2 << 20), 3 << 20)'
    ctl "${!ctlv}" sync
    [ "$(status_field "${!ctlv}" dirty_bytes)" = 0 ] &&
        [ "$(status_field "${!ctlv}" populated)" = true ] ||
        fail "$s: not populated and clean after sync"
done

# A connected client that sends nothing, one per server, until we are
# done measuring: it exits when the FIFO it reads is closed (fd 3).
mkfifo "$TMP/hold"
exec 3<>"$TMP/hold"
clients=()
for s in file nbd; do
    urlv=${s}_uri
    /usr/bin/python3 -c '
import sys, nbd
h = nbd.NBD(); h.connect_uri(sys.argv[1]); h.pread(512, 0)
open(sys.argv[2], "w").close()
sys.stdin.read()' "${!urlv}" "$TMP/client-$s.ready" < "$TMP/hold" 3>&- &
    clients+=($!)
done
for (( i = 0; i < 300; i++ )); do
    [ -e "$TMP/client-file.ready" ] && [ -e "$TMP/client-nbd.ready" ] && break
    sleep 0.1
done

# snap PID: "ticks wakeups" summed over the process's threads.
snap () {
    local t ticks=0 sw=0 v n
    for t in /proc/"$1"/task/*; do
        read -r -a v < <(sed 's/^.*) //' "$t/stat" 2>/dev/null) || continue
        ticks=$(( ticks + v[11] + v[12] ))      # utime, stime
        while read -r k n; do
            case $k in *ctxt_switches:) sw=$(( sw + n )) ;; esac
        done < <(cat "$t/status" 2>/dev/null)
    done
    echo "$ticks $sw"
}
# Give the just-finished requests a moment to settle, then measure.
sleep 1
read -r f_t0 f_s0 < <(snap "$file_pid")
read -r n_t0 n_s0 < <(snap "$nbd_pid")
sleep 3
read -r f_t1 f_s1 < <(snap "$file_pid")
read -r n_t1 n_s1 < <(snap "$nbd_pid")
echo "idle 3 s: file store $((f_t1 - f_t0)) ticks, $((f_s1 - f_s0)) context switches;" \
     "nbd store $((n_t1 - n_t0)) ticks, $((n_s1 - n_s0)) context switches" \
     "(clock tick $(getconf CLK_TCK) Hz)"
for s in f n; do
    t0=${s}_t0 t1=${s}_t1 s0=${s}_s0 s1=${s}_s1
    [ $(( ${!t1} - ${!t0} )) -le 2 ] ||
        fail "$s: $(( ${!t1} - ${!t0} )) clock ticks of CPU while idle"
    # A sanitizer runtime has a background thread of its own that
    # wakes up periodically: count wake-ups only without one.
    if [ -z "$SANITIZER_PRELOAD" ] && [ $(( ${!s1} - ${!s0} )) -gt 2 ]; then
        fail "$s: $(( ${!s1} - ${!s0} )) context switches while idle (a polling loop?)"
    fi
done

exec 3>&-
wait "${clients[@]}"

# The write-back thread (populate is done) runs 5 nice levels below
# the server, whatever nice the server was started at, and at the
# lowest best-effort I/O priority.
read -r -a v < <(sed 's/^.*) //' "/proc/$file_pid/stat")
base=${v[16]}
bgnice=$(( base + 5 > 19 ? 19 : base + 5 ))
[ "$bgnice" -gt "$base" ] || { echo "server runs at nice $base: no lower CPU priority to check"; bgnice=; }
bg=()
for t in /proc/"$file_pid"/task/*; do
    read -r -a v < <(sed 's/^.*) //' "$t/stat" 2>/dev/null) || continue
    [ "${v[16]}" = "${bgnice:-x}" ] && bg+=("${t##*/}")
done
[ -z "$bgnice" ] || [ "${#bg[@]}" -ge 1 ] ||
    fail "no thread runs at nice $bgnice (the server runs at nice $base)"
for tid in "${bg[@]}"; do
    io=$(ionice -p "$tid")
    [ "$io" = "best-effort: prio 7" ] ||
        fail "thread $tid at nice $bgnice has I/O priority '$io', expected best-effort: prio 7"
done

stop_rb file
stop_rb nbd
