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
