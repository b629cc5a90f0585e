# SPDX-License-Identifier: GPL-2.0-or-later
# shellcheck shell=dash disable=SC2046
# Guest-side helpers, sourced by /init (busybox sh).

NBD_HOST=10.0.2.100
NBD_PORT=10809
DEV=/dev/nbd0
MNT=/mnt/t

# mark, timing, pass, fail: /guest/console.sh, which init sources first.

# attach [CONNS]: connect /dev/nbd0 to the host's nbdkit.  Netlink (the
# default) sets the device up with all connections at once.
attach () {
    local conns=${1:-${RB_CONNS:-1}} i
    nbd-client "$NBD_HOST" "$NBD_PORT" "$DEV" -N "" -b 4096 -C "$conns" \
        -t 120 || fail "nbd-client attach (-C $conns) failed"
    for i in $(seq 1 100); do
        [ "$(cat /sys/block/nbd0/size)" != 0 ] && break
        sleep 0.1
    done
    [ "$(cat /sys/block/nbd0/size)" != 0 ] || fail "nbd0 has no size after attach"
    echo "attached $DEV: $(( $(cat /sys/block/nbd0/size) / 2048 )) MiB, $conns connection(s)"
    mark attached
}
detach () {
    nbd-client -d "$DEV" || fail "nbd-client -d failed"
    mark detached
}

# The filesystem is made with its inode tables and journal written out
# now, so no lazy-init thread writes behind the measurements.
make_fs () {
    mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0,nodiscard \
        "$DEV" || fail "mkfs.ext4 failed"
    mark mkfs-done
}
mount_fs () {
    mkdir -p "$MNT"
    mount -t ext4 ${1:+-o "$1"} "$DEV" "$MNT" || fail "mount ${1:-rw} failed"
}
umount_fs () { umount "$MNT" || fail "umount failed"; }

# fsck_clean: e2fsck -fn must find nothing at all.
fsck_clean () {
    local rc=0
    e2fsck -fn "$DEV" >/tmp/fsck.log 2>&1 || rc=$?
    if [ $rc -ne 0 ]; then
        head -40 /tmp/fsck.log
        fail "e2fsck -fn exit $rc"
    fi
    echo "e2fsck -fn: clean ($(tail -1 /tmp/fsck.log))"
    mark fsck-clean
}

# Part P of the source lives on its own virtio disk, in the order the
# host listed the parts (ramback.parts=a,b -> a on vda, b on vdb).
disk_of () {
    local i=0 p
    for p in $(echo "$RB_PARTS" | tr , ' '); do
        if [ "$p" = "$1" ]; then
            echo "/dev/vd$(echo abcdefgh | cut -c$((i + 1)))"
            return
        fi
        i=$((i + 1))
    done
    fail "no disk for part $1"
}
parts () { echo "$RB_PARTS" | tr , ' '; }

untar_part () {
    mark "untar-$1-start"
    tar -xf "$(disk_of "$1")" -C "$MNT" || fail "untar of part $1 failed"
    mark "untar-$1-done"
}

# verify_sums PART...: sha256 of every regular file under $MNT must be
# exactly the host's manifests of those parts: same files, same sums,
# nothing missing, nothing extra.  Read after a remount or a fresh
# attach, so the data comes off the device, not the page cache.
verify_sums () {
    local p n
    for p in "$@"; do cat "/src/$p.sha256"; done | sort >/tmp/want
    (cd "$MNT" && find . -type f -exec sha256sum {} +) | sort >/tmp/got
    n=$(wc -l </tmp/want)
    if ! cmp -s /tmp/want /tmp/got; then
        echo "checksum mismatch: want $n files, got $(wc -l </tmp/got)"
        diff /tmp/want /tmp/got | head -20
        fail "checksums of part(s) $* differ"
    fi
    echo "checksums: all $n files of part(s) $* match"
    mark "sums-ok"
}

# verify_subset PART...: every file of those parts is present and its
# sha256 matches; other files may exist (the power-cut case).
verify_subset () {
    local p n bad
    for p in "$@"; do cat "/src/$p.sha256"; done >/tmp/want
    n=$(wc -l </tmp/want)
    bad=$(cd "$MNT" && sha256sum -c /tmp/want 2>&1 | grep -v ': OK$' | head -20)
    if [ -n "$bad" ]; then
        echo "$bad"
        fail "synced files of part(s) $* are damaged or missing"
    fi
    echo "checksums: all $n synced files of part(s) $* match"
    mark "sums-ok"
}
