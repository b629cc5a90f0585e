# SPDX-License-Identifier: GPL-2.0-or-later
# Sourced by the tests' nbdkit sh-plugin disks (volatile-disk.sh,
# perconn-disk.sh): reads, writes and copies of ranges of image files.

# disk_pread IMG COUNT OFFSET: the sh plugin's pread, to stdout.
disk_pread () {
    dd if="$1" bs=64K iflag=skip_bytes,count_bytes \
       skip="$3" count="$2" status=none
}

# disk_pwrite IMG OFFSET: the sh plugin's pwrite, from stdin.
disk_pwrite () {
    dd of="$1" bs=64K iflag=fullblock oflag=seek_bytes \
       conv=notrunc seek="$2" status=none
}

# disk_zero IMG COUNT OFFSET: the sh plugin's zero (and trim): zeroes.
disk_zero () {
    dd if=/dev/zero of="$1" bs=64K iflag=count_bytes oflag=seek_bytes \
       conv=notrunc seek="$3" count="$2" status=none
}

# copy_range FROM TO OFFSET COUNT: the range, to the same offset.
copy_range () {
    dd if="$1" of="$2" bs=64K iflag=skip_bytes,count_bytes oflag=seek_bytes \
       conv=notrunc skip="$3" seek="$3" count="$4" status=none
}
