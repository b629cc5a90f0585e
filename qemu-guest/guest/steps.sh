# SPDX-License-Identifier: GPL-2.0-or-later
# shellcheck shell=dash disable=SC2046
# What the guest does in one boot, selected by ramback.step=NAME.  The
# host chains boots into scenarios (see ../scenarios.sh).

# probe: the boot itself is the test (KVM detection, smoke test).
step_probe () { :; }

# A new filesystem on the attached device, every part untarred into it;
# sets the caller's t0 (when the untar began) and p.
untar_fresh () {
    attach
    make_fs
    mount_fs
    mark untar-start
    t0=$(now)
    for p in $(parts); do untar_part "$p"; done
}

# fresh: a new filesystem, the whole source untarred and synced, then
# checked from the device: e2fsck after unmount, checksums after remount.
step_fresh () {
    local t0 p
    untar_fresh
    sync
    timing untar+sync "$(elapsed "$t0")"
    mark synced
    umount_fs
    fsck_clean
    mount_fs ro
    verify_sums $(parts)
    umount_fs
    detach
}

# verify: an existing filesystem must be clean and hold every file of
# every part with the right contents.
step_verify () {
    attach
    fsck_clean
    mount_fs ro
    verify_sums $(parts)
    umount_fs
    detach
}

# powercut: part a untarred and synced, then part b untarred until the
# host pulls the plug.  During part b a loop syncs every 0.3 s and says
# how far the untar had got when each sync began: "bsync-I N" means the
# first N entries of part b's tar had been extracted before sync I, which
# has completed, so the recover step can demand them.  (tar -v names an
# entry before extracting it and its stdout is block buffered, so all
# but the last name awk has seen are complete: recover uses N - 1.)
# If part b completes first (a slow host polls late), the guest says so
# and keeps writing: it extracts part b again into a scratch directory,
# over and over, so that the cut still lands among writes and flushes.
step_powercut () {
    attach
    make_fs
    mount_fs
    mark untar-start
    untar_part a
    sync
    mark synced-a
    : >/tmp/blist
    (
        i=0
        while :; do
            n=$(wc -l </tmp/blist)
            sync
            i=$((i + 1))
            echo "RAMBACK-MARK: bsync-$i $(now) $n"
            sleep 0.3
        done
    ) &
    mark untar-b-start
    { tar -xvf "$(disk_of b)" -C "$MNT" || echo "TAR-FAILED"; } |
        awk '/^TAR-FAILED$/ { print "RAMBACK-RESULT: FAIL untar of part b"; exit }
             { print > "/tmp/blist"; fflush("/tmp/blist") }'
    mark untar-b-done
    k=0
    while [ $k -lt 1000 ]; do
        rm -rf "$MNT/again"
        mkdir "$MNT/again"
        tar -xf "$(disk_of b)" -C "$MNT/again" || fail "untar of part b again"
        k=$((k + 1))
    done
    fail "the host never cut the power"
}

# recover: after a power cut, replaying the journal must be all that is
# needed (e2fsck -E journal_only, then -fn finds nothing), part a must
# be intact, and so must the first ramback.bsynced - 1 entries of part b
# (see powercut).
step_recover () {
    local rc=0 n=$(( ${RB_BSYNCED:-1} - 1 ))
    attach
    e2fsck -y -E journal_only "$DEV" >/tmp/replay.log 2>&1 || rc=$?
    cat /tmp/replay.log
    # 0: nothing to do, 1: the journal was replayed.  More is damage.
    [ $rc -le 1 ] || fail "journal replay: e2fsck exit $rc"
    mark journal-replayed
    fsck_clean
    mount_fs ro
    verify_subset a
    if [ $n -gt 0 ]; then
        # The manifest lines of the regular files among those entries.
        tar -tf "$(disk_of b)" | head -n "$n" >/tmp/bnames
        awk 'NR == FNR { want["./" $0] = 1; next } ($2 in want)' \
            /tmp/bnames /src/b.sha256 >/src/bsynced.sha256
        echo "part b: $n entries synced before the cut, $(wc -l </src/bsynced.sha256) files"
        [ -s /src/bsynced.sha256 ] && verify_subset bsynced
    fi
    echo "files present after the cut: $(find "$MNT" -type f | wc -l)"
    umount_fs
    detach
}

# bench: untar + sync of every part on a fresh filesystem, timed, and
# nothing else (the benchmark checks the backing store on the host).
step_bench () {
    local t0 t1 p
    untar_fresh
    t1=$(now)
    sync
    timing untar+sync "$(elapsed "$t0")"
    timing sync "$(elapsed "$t1")"
    mark synced
    umount_fs
    detach
}

# jfile I: the content of fsync'd file I (4 KiB to 64 KiB, made from I,
# so the recover step can rebuild it without a manifest).
jfile () { yes "jcut file $1" | head -c $(( ($1 % 16 + 1) * 4096 )); }

# The file system of jcut: ramback.fs=ext4 (default) or xfs.
jfs_make () {
    if [ "${RB_FS:-ext4}" = xfs ]; then
        # -K: no discard of the whole device.  The backing server of
        # jcut (faultdisk, flush-rate=4M) counts zeroed bytes as written
        # ones, so a 512 MB discard makes its next FLUSH take two
        # minutes, past nbd-client's timeout; a discard is not what
        # this scenario cuts, and mke2fs's discard is left out too.
        mkfs.xfs -K -q -f "$DEV" || fail "mkfs.xfs failed"
        mkdir -p "$MNT"
        mount -t xfs "$DEV" "$MNT" || fail "mount xfs failed"
    else
        make_fs
        mount_fs
    fi
}

# jcut: a new filesystem; the quick part is untarred in the background
# while files f1, f2, ... are written and fsync'd one after the other
# (the file, then its directory); "jsync-I" is printed once file I's
# fsync has returned.  The host kills everything at a random moment.
step_jcut () {
    local i=0 f
    attach
    jfs_make
    mkdir "$MNT/fs" || fail "mkdir"
    sync
    mark untar-start
    ( tar -xf "$(disk_of quick)" -C "$MNT" 2>/dev/null; mark untar-done ) &
    while :; do
        i=$((i + 1))
        f=$MNT/fs/f$i
        jfile $i >"$f" || fail "write $f"
        sync "$f" || fail "fsync $f"
        sync "$MNT/fs" || fail "fsync $MNT/fs"
        echo "RAMBACK-MARK: jsync-$i $(now)"
    done
}

# jrecover: after the cut and the recovery on the host: the file
# system's own log replay is all the repair needed (ext4: e2fsck -E
# journal_only, then e2fsck -fn clean; XFS: mount, which replays the
# log, umount, then xfs_repair -n clean), and files f1 ..
# f<ramback.jsynced> are there, whole.
step_jrecover () {
    local rc=0 n=${RB_JSYNCED:-0} i bad=0
    attach
    if [ "${RB_FS:-ext4}" = xfs ]; then
        mkdir -p "$MNT"
        mount -t xfs "$DEV" "$MNT" || fail "mount xfs (log replay) failed"
        umount_fs
        xfs_repair -n "$DEV" >/tmp/fsck.log 2>&1 || rc=$?
        [ $rc -eq 0 ] || { tail -30 /tmp/fsck.log; fail "xfs_repair -n exit $rc"; }
        echo "xfs_repair -n: clean"
        mount -t xfs -o ro "$DEV" "$MNT" || fail "mount xfs ro failed"
    else
        e2fsck -y -E journal_only "$DEV" >/tmp/replay.log 2>&1 || rc=$?
        cat /tmp/replay.log
        [ $rc -le 1 ] || fail "ext4 journal replay: e2fsck exit $rc"
        fsck_clean
        mount_fs ro
    fi
    i=1
    while [ $i -le "$n" ]; do
        if ! jfile $i | cmp -s - "$MNT/fs/f$i"; then
            echo "fsync'd file f$i: missing or damaged"
            bad=$((bad + 1))
        fi
        i=$((i + 1))
    done
    [ $bad -eq 0 ] || fail "$bad of $n fsync'd files missing or damaged"
    echo "checksums: all $n fsync'd files match; files present after the cut: $(find "$MNT" -type f | wc -l)"
    umount_fs
    detach
}
