#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# written_bytes counts exactly the bytes of client WRITE requests that
# succeeded, in writeback and writethrough mode and with FUA, and
# nothing else (reads, zeroes, trims, failed writes), so that
# stored_bytes / written_bytes is the write amplification.

source "$top_builddir/tests/functions.sh"

size=$(( 16 * 1024 * 1024 ))
start_rb rb back="$TMP/back.img" size="$size" fsync=wait
ctl "$rb_ctl" wait-populated 60000
[ "$(status_field "$rb_ctl" written_bytes)" = 0 ] ||
    fail "written_bytes is not 0 before any write"

# writes URI: sends a fixed list of requests, prints the bytes written.
writes () {
    /usr/bin/python3 - "$1" <<'EOP'
import sys, nbd
h = nbd.NBD(); h.connect_uri(sys.argv[1])
n = 0
for off, length, flags in ((7, 1, 0), (4096, 4096, 0),
                           (3 * 65536 + 5, 1048576 + 13, 0),
                           (2 * 1048576 + 512, 512, nbd.CMD_FLAG_FUA),
                           (h.get_size() - 3, 3, 0)):
    h.pwrite(b"\x5a" * length, off, flags)
    n += length
# Neither of these is a client write of data.
h.zero(65536, 4 * 1048576)
h.trim(65536, 5 * 1048576)
h.pread(1048576, 0)
# A write past the end fails and is not counted.
try:
    h.pwrite(b"x" * 4096, h.get_size() - 1024)
    sys.exit("a write past the end succeeded")
except nbd.Error:
    pass
h.flush()
print(n)
EOP
}

n1=$(writes "$rb_uri")
got=$(status_field "$rb_ctl" written_bytes)
[ "$got" = "$n1" ] ||
    fail "after $n1 bytes written in writeback mode, written_bytes is $got"

ctl "$rb_ctl" mode writethrough
n2=$(writes "$rb_uri")
got=$(status_field "$rb_ctl" written_bytes)
[ "$got" = $((n1 + n2)) ] ||
    fail "after $n1 + $n2 bytes written, written_bytes is $got"

# The text form has the same field.
ctl "$rb_ctl" status | grep -qx "written_bytes: $((n1 + n2))" ||
    fail "text status lacks written_bytes: $((n1 + n2))"
stop_rb rb

# Zeroes and trims reach the store as zero requests: counted apart
# (zeroed_bytes), not as data written back (stored_bytes), so that the
# amplification is of data: a trim of the whole device and one 4 KiB
# write store 4 KiB of data, not the device.
start_rb z back="$TMP/z.img" size="$size" chunk=64K
ctl "$z_ctl" wait-populated 60000
/usr/bin/python3 - "$z_uri" <<'EOP'
import sys, nbd
h = nbd.NBD(); h.connect_uri(sys.argv[1])
h.trim(h.get_size(), 0)
h.pwrite(b"\x5a" * 4096, 65536 * 3)
h.flush()
EOP
ctl "$z_ctl" sync
ctl "$z_ctl" status json >"$TMP/z.json"
/usr/bin/python3 - "$TMP/z.json" "$size" <<'EOP'
import json, sys
st = json.loads(open(sys.argv[1]).read().splitlines()[0])
size = int(sys.argv[2])
print("stored_bytes %s zeroed_bytes %s written_bytes %s" %
      (st["stored_bytes"], st.get("zeroed_bytes"), st["written_bytes"]))
if "zeroed_bytes" not in st:
    sys.exit("FAIL: no zeroed_bytes in status")
if st["written_bytes"] != 4096:
    sys.exit("FAIL: written_bytes %d, expected 4096" % st["written_bytes"])
# The chunk around the write goes back whole at most.
if not 4096 <= st["stored_bytes"] <= 65536:
    sys.exit("FAIL: stored_bytes %d for one 4 KiB write after a trim"
             % st["stored_bytes"])
if st["zeroed_bytes"] < size - 65536:
    sys.exit("FAIL: zeroed_bytes %d after a trim of %d" %
             (st["zeroed_bytes"], size))
EOP
[ $? = 0 ] || fail "zeroes counted as written back"
ramback status "$z_ctl" | tee "$TMP/z.txt"
grep -Eq '^ *written back: +[0-9.]+ KiB, zeroed 1[56][.0-9]* MiB' "$TMP/z.txt" ||
    fail "status text does not show the zeroed bytes apart"
grep -Eq 'written back (1|4|16)\.00x of it' "$TMP/z.txt" ||
    fail "status text: the amplification is not of data"
ramback status --prometheus "$z_ctl" | grep -q '^ramback_zeroed_bytes_total' ||
    fail "no ramback_zeroed_bytes_total metric"
stop_rb z
