#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# direct-io=: the file store writes back with O_DIRECT where the file
# system supports it, and through the page cache where it does not or
# where a request cannot be aligned.  The same writes (unaligned,
# chunk crossing, zeroes, writethrough from the client's buffer, the
# unaligned end of the device) must leave byte-identical backing
# files on every path: direct on a disk file system (chunk=64K, and
# chunk=512 where only runs of whole pages go direct), the fallback on
# tmpfs (no direct I/O alignment reported), and direct-io=false; and
# a restart must read it all back (populate).

source "$top_builddir/tests/functions.sh"
requires fincore

# Not a multiple of the page size: the device's last bytes cannot go
# direct.
size=$(( 8 * 1024 * 1024 + 1234 ))

# workload URI MODEL: the writes, mirrored into the file MODEL.
workload () {
    /usr/bin/python3 - "$@" <<'EOP'
import sys, nbd, random
uri, model = sys.argv[1], sys.argv[2]
h = nbd.NBD(); h.connect_uri(uri)
size = h.get_size()
m = open(model, "r+b")
rnd = random.Random(1234)
def write(off, n, flags=0):
    data = bytes(rnd.getrandbits(8) for _ in range(min(n, 4096))) * (n // 4096 + 1)
    data = data[:n]
    h.pwrite(data, off, flags)
    m.seek(off); m.write(data)
def zero(off, n):
    h.zero(n, off)
    m.seek(off); m.write(bytes(n))
for off, n in ((7, 1000), (65536 - 100, 300), (1048576, 1048576),
               (3 * 1048576 + 4095, 200000), (5 * 1048576, 4096),
               (size - 5000, 5000), (size - 1, 1)):
    write(off, n)
zero(1048576 + 65536, 131072)
zero(6 * 1048576 + 123, 70000)
h.flush()
# Writethrough (FUA with fsync=wait): from the client's buffer.
write(2 * 1048576 + 33, 70000, nbd.CMD_FLAG_FUA)
write(7 * 1048576, 65536, nbd.CMD_FLAG_FUA)
m.close()
EOP
}

fs_of () { stat -f -c %T "$1"; }

# run NAME DIR ARGS...: a fresh sparse backing file in DIR, the
# workload, a clean stop; prints the store_direct_io it reported.
run () {
    local name=$1 dir=$2 img; shift 2
    img=$dir/$name.img
    rm -f "$img" "$TMP/$name.model"
    truncate -s "$size" "$img" "$TMP/$name.model"
    start_rb "$name" back="$img" fsync=wait "$@"
    local ctlv=${name}_ctl urlv=${name}_uri
    ctl "${!ctlv}" wait-populated 60000
    workload "${!urlv}" "$TMP/$name.model"
    ctl "${!ctlv}" sync
    status_field "${!ctlv}" store_direct_io > "$TMP/$name.direct"
    # Resident page cache pages of the backing file after write back.
    fincore -b -n -o RES "$img" > "$TMP/$name.res"
    stop_rb "$name"
    cmp "$img" "$TMP/$name.model" ||
        fail "$name ($*, $(fs_of "$img")): the backing file differs from what was written"
}

run buffered "$TMP" direct-io=false
[ "$(cat "$TMP/buffered.direct")" = false ] ||
    fail "direct-io=false reports store_direct_io $(cat "$TMP/buffered.direct")"

run direct "$TMP"
if [ "$(cat "$TMP/direct.direct")" != true ]; then
    echo "$0: SKIP: $TMP is on $(fs_of "$TMP"), which does not do direct I/O"
    exit 77
fi
run direct512 "$TMP" chunk=512
[ "$(cat "$TMP/direct512.direct")" = true ] ||
    fail "chunk=512: direct I/O was turned off (refused at run time?)"
cmp "$TMP/direct.img" "$TMP/buffered.img" ||
    fail "direct and buffered write back differ"
cmp "$TMP/direct512.img" "$TMP/buffered.img" ||
    fail "direct (chunk=512) and buffered write back differ"
# Write back really bypassed the page cache: the buffered run leaves
# the data it wrote there, the direct run (nearly) none of it.
res_b=$(cat "$TMP/buffered.res") res_d=$(cat "$TMP/direct.res")
echo "page cache after write back: buffered $res_b bytes, direct $res_d bytes"
[ "$res_b" -ge $(( 1024 * 1024 )) ] && [ "$res_d" -le $(( res_b / 4 )) ] ||
    fail "direct I/O left $res_d bytes in the page cache (buffered: $res_b)"

# Populate reads it back (through the direct path where it is on).
start_rb again back="$TMP/direct.img"
ctl "$again_ctl" wait-populated 60000
nbdcopy "$again_uri" "$TMP/readback"
stop_rb again
cmp "$TMP/readback" "$TMP/direct.model" ||
    fail "populate read back something else than was written"

# tmpfs reports no direct I/O alignment: the fallback.
if [ "$(fs_of /dev/shm)" = tmpfs ]; then
    shm=$(mktemp -d /dev/shm/ramback-test.XXXXXX)
    cleanup_fn rm -rf "$shm"
    run tmpfs "$shm"
    [ "$(cat "$TMP/tmpfs.direct")" = false ] ||
        fail "tmpfs: store_direct_io is $(cat "$TMP/tmpfs.direct"), expected the fallback"
    cmp "$shm/tmpfs.img" "$TMP/buffered.img" ||
        fail "the tmpfs fallback and buffered write back differ"
else
    echo "/dev/shm is not a tmpfs: fallback case not run"
fi

expect_fail "direct-io=maybe" "direct-io=maybe: expected auto, true or false" \
    back="$TMP/buffered.img" direct-io=maybe
