#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# flush-delay=SECONDS: a block rewritten many times within the delay is
# written back once; the delay runs out by itself; and nothing that
# wants the data on the store waits for it: control sync, FLUSH with
# fsync=wait, writethrough mode, a clean stop, the dirty limit.  With journal= it is an
# error, as is a delay over 60 s.

source "$top_builddir/tests/functions.sh"

size=$(( 16 * 1024 * 1024 ))
back=$TMP/back.img

# rewrite URI OFFSET N [flush]: N writes of 4 KiB at OFFSET, different
# data each time, then a FLUSH if asked; prints the seconds the FLUSH
# took.
rewrite () {
    /usr/bin/python3 - "$@" <<'EOP'
import sys, nbd, time
uri, off, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
h = nbd.NBD(); h.connect_uri(uri)
for i in range(n):
    h.pwrite(bytes([i % 251 + 1]) * 4096, off)
t = time.monotonic()
if len(sys.argv) > 4:
    h.flush()
print("%.2f" % (time.monotonic() - t))
EOP
}

stored () { status_field "$rb_ctl" stored_bytes; }
dirty () { status_field "$rb_ctl" dirty_bytes; }

# 1. A long delay: nothing goes out by itself during the test.
start_rb rb back="$back" size="$size" fsync=wait flush-delay=30
ctl "$rb_ctl" wait-populated 60000
[ "$(status_field "$rb_ctl" flush_delay_ms)" = 30000 ] ||
    fail "status json: flush_delay_ms is not 30000"
s0=$(stored)
rewrite "$rb_uri" 65536 200 >/dev/null
sleep 1
[ "$(stored)" = "$s0" ] ||
    fail "data was written back within the delay ($(( $(stored) - s0 )) bytes)"
[ "$(dirty)" != 0 ] || fail "nothing dirty after the writes"

# control sync drains at once, and the 200 rewrites cost one write.
t0=$(date +%s%N)
ctl "$rb_ctl" sync >/dev/null
t=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$t" -lt 10000 ] || fail "sync waited for the delay ($t ms)"
[ "$(dirty)" = 0 ] || fail "dirty data left after sync"
grew=$(( $(stored) - s0 ))
echo "200 rewrites of one block: $grew bytes written back"
[ "$grew" = 4096 ] || fail "200 rewrites of one block cost $grew bytes, not 4096"

# FLUSH with fsync=wait drains at once.
s0=$(stored)
t=$(rewrite "$rb_uri" $((3 * 65536)) 50 flush)
echo "FLUSH took $t s"
[ "$(stored)" -gt "$s0" ] || fail "FLUSH did not write back"
/usr/bin/python3 -c "import sys; sys.exit(float(sys.argv[1]) >= 10)" "$t" ||
    fail "FLUSH waited for the delay ($t s)"

# Writethrough mode drains at once.
rewrite "$rb_uri" $((5 * 65536)) 10 >/dev/null
[ "$(dirty)" != 0 ] || fail "nothing dirty before writethrough"
ctl "$rb_ctl" mode writethrough
for (( i = 0; i < 100; i++ )); do
    [ "$(dirty)" = 0 ] && break
    sleep 0.1
done
[ "$(dirty)" = 0 ] || fail "writethrough mode did not drain within 10 s"
ctl "$rb_ctl" mode writeback

# A clean stop drains at once (it does not wait 30 s).
rewrite "$rb_uri" $((7 * 65536)) 10 >/dev/null
nbdcopy "$rb_uri" "$TMP/ram.img"
t0=$(date +%s)
stop_rb rb
(( $(date +%s) - t0 < 20 )) || fail "the clean stop waited for the delay"
assert_same "$back" "$TMP/ram.img" || fail "stop: the backing file is not RAM"

# 2. A short delay, in fractions of a second, runs out by itself.
start_rb rb back="$back" flush-delay=0.5
ctl "$rb_ctl" wait-populated 60000
[ "$(status_field "$rb_ctl" flush_delay_ms)" = 500 ] ||
    fail "status json: flush_delay_ms is not 500"
s0=$(stored)
rewrite "$rb_uri" 65536 100 >/dev/null
for (( i = 0; i < 100; i++ )); do
    [ "$(dirty)" = 0 ] && break
    sleep 0.1
done
[ "$(dirty)" = 0 ] || fail "flush-delay=0.5: still dirty after 10 s"
grew=$(( $(stored) - s0 ))
echo "flush-delay=0.5, 100 rewrites of one block: $grew bytes written back"
[ "$grew" -le $((2 * 4096)) ] || fail "100 rewrites cost $grew bytes"
stop_rb rb

# The default: 1 s, and none with journal= (it commits on its own).
start_rb rb back="$back"
[ "$(status_field "$rb_ctl" flush_delay_ms)" = 1000 ] ||
    fail "the default flush_delay_ms is not 1000"
stop_rb rb
truncate -s 1M "$TMP/jd.img"
start_rb rb back="$back" journal="$TMP/jd.img" chunk=64K
[ "$(status_field "$rb_ctl" flush_delay_ms)" = 0 ] ||
    fail "with journal=, flush_delay_ms is not 0"
stop_rb rb

# 3. The dirty limit: 8 MiB through a 1 MiB dirty-max= must not wait
# for a 30 s delay.
start_rb rb back="$back" flush-delay=30 dirty-max=1M
ctl "$rb_ctl" wait-populated 60000
t0=$(date +%s)
/usr/bin/python3 - "$rb_uri" <<'EOP'
import sys, nbd
h = nbd.NBD(); h.connect_uri(sys.argv[1])
for i in range(128):
    h.pwrite(bytes([i + 1]) * 65536, i * 65536)
EOP
t=$(( $(date +%s) - t0 ))
echo "8 MiB through dirty-max=1M with flush-delay=30: $t s"
[ "$t" -lt 20 ] || fail "writers at the dirty limit waited for the delay ($t s)"
stop_rb rb

# 4. Bad values.
expect_fail "flush-delay=61" "from 0 to 60" back="$back" flush-delay=61
expect_fail "flush-delay=-1" "from 0 to 60" back="$back" flush-delay=-1
expect_fail "flush-delay=1s" "from 0 to 60" back="$back" flush-delay=1s
expect_fail "flush-delay with journal=" "flush-delay= does not apply with journal=" \
    back="$back" journal="$TMP/j.img" flush-delay=5
