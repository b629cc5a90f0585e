#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# The QEMU guest of the dm-ramback test, as lists for
# qemu-guest/mkinitramfs.sh: the cloud kernel (the one dm/build.sh builds
# against), its virtio, device-mapper and filesystem modules, busybox,
# dmsetup, e2fsprogs and xfsprogs with exactly the shared libraries they
# load; and, in a second initramfs appended only when a phase needs it,
# fio with its libraries (84 MB: Debian's fio links every engine).
#
# Everything is cached in $RAMBACK_DM_CACHE (default
# /var/cache/ramback-guest/dm), outside the repository, and rebuilt only
# when an input changes.  .deb files are shared with qemu-guest's guest
# (the parent directory's debs/).  On success the cache holds:
#   vmlinuz        the kernel
#   base.cpio.gz   busybox, dmsetup, mkfs/fsck + libraries, modules
#   fio.cpio.gz    fio + libraries
#   guest.env      GUEST_KERNEL_VERSION=... GUEST_PACKAGES='...'
#
# Usage: dm/guest-build.sh [-v]

set -euo pipefail
export PATH=/usr/bin:/bin:/usr/sbin:/sbin:$PATH LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mk=$here/../qemu-guest/mkinitramfs.sh
verbose=
[ "${1:-}" = "-v" ] && verbose=-v
CACHE=${RAMBACK_DM_CACHE:-/var/cache/ramback-guest/dm}
mkdir -p "$CACHE"
debs=$(cd "$CACHE/.." && pwd)/debs

# The virtio PCI transport and disks, device-mapper itself, dm-delay (a
# slow backing device, to hold write back in flight while the test races
# writes and populate against it; the error target is part of dm-mod),
# the filesystems the fs phases make, and brd (the benchmark's RAM disk;
# the guests load it themselves, sized).
"$mk" $verbose -c "$CACHE" -D "$debs" -n base \
  -p "busybox-static dmsetup libdevmapper1.02.1 libc6 libselinux1
      libudev1 libpcre2-8-0 e2fsprogs libext2fs2 libcom-err2 libblkid1
      libuuid1 xfsprogs libinih1 liburcu8" \
  -m "virtio_pci virtio_blk dm-mod dm-delay ext4 xfs brd" \
  -b "sbin/dmsetup sbin/mke2fs sbin/e2fsck sbin/mkfs.xfs sbin/xfs_repair" \
  -l "sbin/mkfs.ext4=mke2fs"

"$mk" $verbose -c "$CACHE" -D "$debs" -n fio \
  -p "fio libc6 libaio1 libnuma1 zlib1g libgfapi0 libnbd0 libibverbs1
      librdmacm1 librados2 librbd1 libpmemblk1 libpmem1
      libacl1 libargon2-1 libblkid1 libboost-iostreams1.74.0
      libboost-thread1.74.0 libbz2-1.0 libcom-err2 libcryptsetup12
      libdaxctl1 libdevmapper1.02.1 libffi8 libfmt9 libgcc-s1 libgfrpc0
      libgfxdr0 libglusterfs0 libgmp10 libgnutls30 libgssapi-krb5-2
      libhogweed6 libicu72 libidn2-0 libjson-c5 libk5crypto3 libkeyutils1
      libkmod2 libkrb5-3 libkrb5support0 liblzma5 libndctl6 libnettle8
      libnl-3-200 libnl-route-3-200 libp11-kit0 libpcre2-8-0 libselinux1
      libssl3 libstdc++6 libtasn1-6 libtirpc3 libudev1 libunistring2
      libuuid1 libxml2 libzstd1" \
  -b "bin/fio"

cp "$CACHE/base.env" "$CACHE/guest.env.new"
mv -f "$CACHE/guest.env.new" "$CACHE/guest.env"
