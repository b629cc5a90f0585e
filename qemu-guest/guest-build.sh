#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# The QEMU guest of the nbd scenarios, as lists for mkinitramfs.sh: the
# cloud kernel with its nbd and virtio modules, and busybox, nbd-client
# and e2fsprogs with exactly the shared libraries they load.  Also
# repack a part of Debian's linux-source tarball into the plain tar files
# the scenarios untar, with their sha256 manifests.
#
# Everything is cached in $RAMBACK_GUEST_CACHE (default
# /var/cache/ramback-guest), outside the repository, and rebuilt only
# when an input changes (a package version, this script or
# mkinitramfs.sh).  Prints nothing but errors unless -v; on success the
# cache holds:
#   vmlinuz, base.cpio.gz, base.modules  the guest
#   src-a.tar, src-b.tar                 the tarballs (part a, part b)
#   src-a.sha256, src-b.sha256           "sha256  ./path" per file, sorted
#   src-quick.tar, src-quick.sha256      a small tarball for quick runs
#   guest.env                            shell assignments describing it
#
# Usage: guest-build.sh [-v]

set -euo pipefail
export PATH=/usr/bin:/bin:/usr/sbin:/sbin:$PATH LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
verbose=
[ "${1:-}" = "-v" ] && verbose=-v
say () { if [ -n "$verbose" ]; then echo "guest-build: $*" >&2; fi; }
die () { echo "guest-build: error: $*" >&2; exit 1; }

CACHE=${RAMBACK_GUEST_CACHE:-/var/cache/ramback-guest}
srcpkg=${RAMBACK_GUEST_SRCPKG:-linux-source-6.1}

# The library packages are exactly what ld.so loads for nbd-client
# (gnutls and netlink) and e2fsprogs; mkinitramfs.sh fails the build if
# this list ever falls short.
"$here/mkinitramfs.sh" $verbose -c "$CACHE" -n base \
  -p "busybox-static nbd-client e2fsprogs libc6
      libext2fs2 libcom-err2 libblkid1 libuuid1
      libgnutls30 libnl-3-200 libnl-genl-3-200 libp11-kit0 libidn2-0
      libunistring2 libtasn1-6 libnettle8 libhogweed6 libgmp10 libffi8
      xfsprogs libinih1 liburcu8" \
  -m "virtio_pci virtio_blk virtio_net nbd xfs" \
  -b "sbin/nbd-client sbin/mke2fs sbin/e2fsck sbin/mkfs.xfs sbin/xfs_repair" \
  -l "sbin/mkfs.ext4=mke2fs sbin/fsck.ext4=e2fsck" \
  -e "etc/gnutls/config"

# ---- the source tarballs -----------------------------------------------
# Part a: the core kernel directories; part b: fs/.  Together 3,500 real
# files (77 MB), small enough for a TCG guest to untar in a few minutes.
# Quick: kernel/ alone.  Re-packed as GNU tar (busybox tar reads it) with
# owner root and no xz, so the guest reads it straight off a virtio disk.
exec 9>"$CACHE/.src.lock"
flock 9
srcver=$(apt-cache policy "$srcpkg" 2>/dev/null | sed -n 's/^ *Candidate: //p')
[ -n "$srcver" ] && [ "$srcver" != "(none)" ] ||
  die "package $srcpkg is unknown to apt (run apt-get update)"
# Keyed on the package and on this section alone: another package list
# (two worktrees sharing the cache) must not remake the tarballs.
key=$( { echo "$srcpkg=$srcver"; sed -n '/^# ---- the source tarballs/,/^fi$/p' "$0"; } |
       sha256sum | cut -c1-16)
if [ "$(cat "$CACHE/src.stamp" 2>/dev/null)" != "$key" ]; then
  say "building the source tarballs from $srcpkg=$srcver"
  work=$(mktemp -d "$CACHE/.work.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  sx=$work/src
  mkdir -p "$sx"
  dpkg-deb -x "$("$here/mkinitramfs.sh" -F "$CACHE/debs" "$srcpkg")" "$sx/deb"
  txz=$(ls "$sx"/deb/usr/src/linux-source-*.tar.xz | head -1)
  [ -f "$txz" ] || die "$srcpkg ships no /usr/src/linux-source-*.tar.xz"
  top=$(basename "$txz" .tar.xz)
  parta=(kernel mm block ipc init lib)
  partb=(fs)
  mkdir -p "$sx/tree"
  xz -dc "$txz" | tar -x -C "$sx/tree" "${parta[@]/#/$top/}" "${partb[@]/#/$top/}"
  mkset () {   # mkset NAME DIR...
    local name=$1; shift
    (cd "$sx/tree/$top" &&
     tar --format=gnu --owner=0 --group=0 --numeric-owner --sort=name \
         -cf "$work/src-$name.tar" "$@" &&
     find "$@" -type f | LC_ALL=C sort | sed 's|^|./|' |
       xargs -d '\n' sha256sum >"$work/src-$name.sha256")
    [ -s "$work/src-$name.sha256" ] || die "empty manifest for $name"
  }
  mkset a "${parta[@]}"
  mkset b "${partb[@]}"
  mkset quick kernel
  for f in src-a.tar src-b.tar src-quick.tar \
           src-a.sha256 src-b.sha256 src-quick.sha256; do
    mv -f "$work/$f" "$CACHE/$f"
  done
  echo "$key" >"$CACHE/src.stamp"
fi

{
  cat "$CACHE/base.env"
  echo "GUEST_SOURCE_PACKAGE=$srcpkg"
  echo "GUEST_FILES_A=$(wc -l <"$CACHE/src-a.sha256")"
  echo "GUEST_FILES_B=$(wc -l <"$CACHE/src-b.sha256")"
  echo "GUEST_FILES_QUICK=$(wc -l <"$CACHE/src-quick.sha256")"
} >"$CACHE/guest.env.new"
mv -f "$CACHE/guest.env.new" "$CACHE/guest.env"
say "done: $(tr '\n' ' ' <"$CACHE/guest.env")"
