#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# With journal=, a crash at any moment leaves backing + journal
# recoverable to a point in time: the device's exact content after some
# prefix of the writes, a prefix that holds every write acknowledged
# before the last acknowledged FLUSH; with two connections, a prefix of
# each that is consistent with the order of acknowledgements.
#
# Backing store and journal are each a faultdisk server with a volatile
# write cache (durable=: only a FLUSH makes writes durable).  A client
# writes in order with FLUSHes (journal-crash.py); at a seeded moment
# ramback is killed (-9) and both disks lose power (powercut: a random
# subset of the unflushed writes survives, some torn).  Then recovery:
# odd rounds start ramback again on what survived (recovery at open)
# and stop it; even rounds run "ramback recover" offline, twice (it must
# be idempotent).  The backing image alone must then pass the checker.
# Some writes carry FUA: with fsync=wait an acknowledged one must survive.
# One round in three (TORN_ROUNDS) holds the journal's sync before the
# kill, so the last transaction is written and unsynced when the power
# goes: most of its writes are torn (its commit block may survive while
# its data does not), and recovery must end the journal before it.
#
# Two rounds in four run with ram-size= an eighth of the device.
#
# JOURNAL_CRASH_ROUNDS=N rounds (default 6), SEED=N the first seed.
# JOURNAL_CRASH_REPLAY_CUT=1 (test-journal-replay-cut.sh): before that
# recovery, a first one is cut in the middle of its replay: a stall
# holds the backing store's Nth write (or the FLUSH that ends the
# replay) of "ramback recover" (even rounds) or of ramback's own replay
# at open (odd rounds); then the backing disk loses power (the replay's
# unflushed writes kept, torn or lost) and the recovering process is
# killed.  The second recovery must still give the point in time.
# JOURNAL_CRASH_PLAIN=1 runs the same cuts without journal= (and without
# recovery): the checker must catch the mixed image that leaves.
# JOURNAL_CRASH_RBD=1 (tests/rbd/test-rbd-journal-crash.sh): the backing
# store is an RBD image (a write RADOS acknowledged is durable: only the
# journal loses power); the recovery takes over the dead ramback's lock
# once its watch has expired, and the image is exported for the checker.

source "$top_builddir/tests/functions.sh"
source "$top_srcdir/tests/core-functions.sh"
source "$top_srcdir/tests/remote-functions.sh"

size=$(( 4 * 1024 * 1024 ))
jsize=$(( 2 * 1024 * 1024 ))
rounds=${JOURNAL_CRASH_ROUNDS:-6}
seed0=${SEED:-1}
plain=${JOURNAL_CRASH_PLAIN:-}
replaycut=${JOURNAL_CRASH_REPLAY_CUT:-}
crash="$top_srcdir/tests/journal-crash.py"
rbd=${JOURNAL_CRASH_RBD:-}
if [ -n "$rbd" ]; then
    [ -z "$plain$replaycut" ] ||
        fail "JOURNAL_CRASH_RBD runs neither JOURNAL_CRASH_PLAIN nor _REPLAY_CUT"
    source "$top_srcdir/tests/rbd/rbd-functions.sh"
    rbd_cluster
fi

# The backing store of a round: a faultdisk server on bk.img with the
# volatile cache bk.dur, or the RBD image (its own durability).
start_back () {
    if [ -n "$rbd" ]; then
        bk_uri=rbd:rbd/jcrash
    else
        start_faultdisk bk "$TMP/bk.img" durable="$TMP/bk.dur" "$@"
    fi
}
stop_back () { [ -n "$rbd" ] || kill_remote bk; }

for (( round=0; round<rounds; round++ )); do
    seed=$(( seed0 + round ))
    RANDOM=$seed
    cut=$(( 20 + RANDOM % 300 ))
    echo "=== round $round: seed $seed, cut after $cut acknowledgements"
    rm -f "$TMP"/bk.img "$TMP"/bk.dur "$TMP"/jr.img "$TMP"/jr.dur "$TMP"/acks*
    truncate -s "$size" "$TMP/bk.dur" "$TMP/bk.img"
    [ -z "$rbd" ] || rbd_image jcrash "$TMP/bk.dur"
    truncate -s "$jsize" "$TMP/jr.dur" "$TMP/jr.img"
    # Every fourth round two connections write, each to its own half.
    nparts=1
    (( round % 4 != 1 )) || nparts=2
    acks=()
    for (( p=0; p<nparts; p++ )); do
        : >"$TMP/acks$p"
        acks+=("$TMP/acks$p")
    done
    # Every other round the backing store's FLUSH is slow: the journal
    # runs ahead of the in-place writes (which then merge transactions),
    # fills and wraps around, and cuts land in the middle of applying.
    slow=()
    (( round % 2 )) || slow=(flush-rate=4M)
    start_back "${slow[@]}"
    start_faultdisk jr "$TMP/jr.img" durable="$TMP/jr.dur"
    # Every third round: fsync=ignore (a FLUSH only asks for a commit
    # point and does not wait, so the capture runs while the client
    # writes on: copy on write) and commits every 50 ms; the image must
    # still be a point in time, but no FLUSH promised anything.
    fsync=wait interval=1
    if (( round % 3 == 2 )); then fsync=ignore interval=0.05; fi
    jargs=(journal="$jr_uri" commit-interval=$interval)
    # Rounds 0, 3, 4, 7, ...: ram-size= an eighth of the device (32
    # chunks, dirty-max= half of that): chunks are evicted and loaded
    # again all the time, and one of a transaction not yet in place
    # would come back stale from the backing store (round 0 and 4 with
    # the slow backing store, which the journal runs ahead of).
    (( round % 4 != 0 && round % 4 != 3 )) || jargs+=(ram-size=512K)
    [ -z "$plain" ] || jargs=()
    [ -z "$rbd" ] || jargs+=(rbd-conf="$CEPH_CONF")
    start_rb rb back="$bk_uri" "${jargs[@]}" fsync=$fsync chunk=16K

    clients=()
    for (( p=0; p<nparts; p++ )); do
        py "$crash" client "$rb_uri" "$seed" "$size" "$TMP/acks$p" \
            $p $nparts &
        clients+=($!)
    done
    # Every client connected before any can reach the cut (a client
    # still connecting when ramback is killed would fail, not the test).
    for (( p=0; p<nparts; p++ )); do
        for (( i=0; i<600; i++ )); do
            [ -e "$TMP/acks$p.connected" ] && break
            kill -0 "${clients[p]}" 2>/dev/null ||
                fail "client $p exited before it connected"
            sleep 0.05
        done
        [ -e "$TMP/acks$p.connected" ] || fail "client $p did not connect"
    done
    for (( i=0; i<600; i++ )); do
        [ "$(cat "${acks[@]}" | wc -l)" -ge "$cut" ] && break
        sleep 0.05
    done
    [ "$(cat "${acks[@]}" | wc -l)" -ge "$cut" ] || fail "the client stalled"

    jcut=()
    if [ -z "$plain" ] && (( round % 3 == 1 )); then
        # Hold the next journal sync (a FLUSH on each connection of the
        # NBD store): the commit that the client's next FLUSH asks for
        # (or the commit interval's) is then written, and not durable.
        fd_cmd jr stall flush times=8 >/dev/null
        for (( i=0; i<600; i++ )); do
            [ "$(fd_field jr held)" -ge 1 ] && break
            sleep 0.05
        done
        [ "$(fd_field jr held)" -ge 1 ] ||
            fail "no journal sync came to be held"
        echo "journal sync held with $(fd_field jr unflushed_writes)" \
             "unflushed writes"
        jcut=(keep=0 torn=100 tear=one)
    fi
    kill -9 "$rb_pid"
    wait "$rb_job" 2>/dev/null || true
    [ -n "$rbd" ] || fd_cmd bk powercut seed="$seed" >/dev/null
    echo "journal power cut:" \
         $(fd_cmd jr powercut seed="$(( seed + 1000 ))" "${jcut[@]}")
    wait "${clients[@]}"
    stop_back
    kill_remote jr
    echo "acknowledged: $(cat "${acks[@]}" | grep -c '^[wu]') writes" \
         "on $nparts connection(s)"

    if [ -n "$replaycut" ]; then
        start_faultdisk bk "$TMP/bk.img" durable="$TMP/bk.dur"
        start_faultdisk jr "$TMP/jr.img" durable="$TMP/jr.dur"
        # Hold the replay at its Nth in-place write, or (one round in
        # three) at the FLUSH that ends it: a FLUSH on each connection
        # of the NBD store, so all of them are held (one unheld FLUSH
        # would make every write durable).
        stall="write nth=$(( 1 + RANDOM % 24 ))"
        (( RANDOM % 3 )) || stall="flush times=8"
        fd_cmd bk stall $stall >/dev/null
        if (( round % 2 )); then
            rb_cmdline back="$bk_uri" journal="$jr_uri" \
                control="$TMP/cut.ctl"
            "${nbdkit_env[@]}" "$NBDKIT" -f -v -U "$TMP/cut.sock" \
                "${RB_CMD[@]}" >"$TMP/cut.log" 2>&1 &
            what="ramback's replay at open"
        else
            ramback recover "$bk_uri" "$jr_uri" >"$TMP/cut.log" 2>&1 &
            what="ramback recover"
        fi
        cutpid=$!
        cleanup_fn _kill_if_running "$cutpid"
        # Until the stall holds the replay, or the replay has ended
        # without reaching it (a journal with fewer writes): the
        # recovering process has exited, or ramback says it replayed.
        held=
        for (( i=0; i<600; i++ )); do
            [ "$(fd_field bk held)" -ge 1 ] && { held=held; break; }
            kill -0 "$cutpid" 2>/dev/null || break
            grep -qE 'journal: (replayed|recovered|empty)' "$TMP/cut.log" &&
                break
            sleep 0.05
        done
        echo "cut $what at its $stall (${held:-not reached}):" \
             "$(fd_field bk writes) writes reached the backing store," \
             $(fd_cmd bk powercut seed="$(( seed + 2000 ))")
        kill -9 "$cutpid" 2>/dev/null || true
        wait "$cutpid" 2>/dev/null || true
        grep -E 'journal: (replayed|recovered|empty)|error' "$TMP/cut.log" ||
            true
        rm -f "$TMP/cut.sock" "$TMP/cut.ctl"
        kill_remote bk
        kill_remote jr
    fi

    if [ -z "$plain" ]; then
        start_back
        start_faultdisk jr "$TMP/jr.img" durable="$TMP/jr.dur"
        if (( round % 2 )); then
            start_rb rb back="$bk_uri" journal="$jr_uri" \
                ${rbd:+rbd-conf="$CEPH_CONF"}
            grep -E 'journal: (replayed|recovered|empty)' "$rb_log" || true
            stop_rb rb
        else
            # Idempotent: replaying the same journal again over what the
            # first replay wrote (a crash during replay) changes nothing.
            cp "$TMP/jr.dur" "$TMP/jr.copy"
            ramback recover "$bk_uri" "$jr_uri" | tee "$TMP/rec1"
            kill_remote jr
            cp "$TMP/jr.copy" "$TMP/jr.dur"
            start_faultdisk jr "$TMP/jr.img" durable="$TMP/jr.dur"
            ramback recover "$bk_uri" "$jr_uri" >"$TMP/rec2"
            cmp "$TMP/rec1" "$TMP/rec2" ||
                fail "replaying the journal again did something else"
        fi
        stop_back
        kill_remote jr
    fi
    if [ -n "$rbd" ]; then
        rm -f "$TMP/bk.dur"
        rbdc export --no-progress rbd/jcrash "$TMP/bk.dur" >/dev/null
    fi
    py "$crash" check "$TMP/bk.dur" "$seed" "$size" $fsync "${acks[@]}"
done
echo PASS
