#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Assemble the QEMU guest for the dm-ramback test from Debian packages
# only: the cloud kernel (the one dm/build.sh builds against), its
# virtio and device-mapper modules, busybox, and dmsetup with exactly
# the shared libraries it loads.
#
# Everything is cached in $RAMBACK_DM_CACHE (default
# /var/cache/ramback-guest/dm), outside the repository, and rebuilt only
# when an input changes (a package version or this script).  .deb files
# already downloaded by qemu-guest/guest-build.sh (in the parent
# directory's debs/) are reused.  On success the cache holds:
#   vmlinuz        the kernel
#   base.cpio.gz   busybox, dmsetup + libraries, modules + load-order
#   guest.env      GUEST_KERNEL_VERSION=... GUEST_PACKAGES='...'
#
# Usage: dm/guest-build.sh [-v]

set -euo pipefail
export PATH=/usr/bin:/bin:/usr/sbin:/sbin:$PATH LC_ALL=C

verbose=false
[ "${1:-}" = "-v" ] && verbose=true
say () { if $verbose; then echo "dm-guest-build: $*" >&2; fi; }
die () { echo "dm-guest-build: error: $*" >&2; exit 1; }

CACHE=${RAMBACK_DM_CACHE:-/var/cache/ramback-guest/dm}
mkdir -p "$CACHE/debs" || die "cannot create cache directory $CACHE"
shared_debs=$(dirname "$CACHE")/debs

for c in apt-get apt-cache dpkg-deb cpio gzip sha256sum readelf flock; do
  command -v "$c" >/dev/null ||
    die "'$c' is missing (packages: apt, dpkg, cpio, gzip, coreutils, binutils, util-linux)"
done

exec 9>"$CACHE/.lock"
flock 9

kpkg=${RAMBACK_GUEST_KERNEL:-}
if [ -z "$kpkg" ]; then
  kpkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null |
         sed -n 's/^ *Depends: \(linux-image-[0-9].*-cloud-amd64\)$/\1/p' | head -1)
  [ -n "$kpkg" ] || die "apt-cache knows no linux-image-cloud-amd64 (run apt-get update)"
fi
kver=${kpkg#linux-image-}

# dmsetup's library closure; checked against DT_NEEDED below.
userpkgs=(busybox-static dmsetup libdevmapper1.02.1 libc6 libselinux1
          libudev1 libpcre2-8-0)

versions=$(for p in "$kpkg" "${userpkgs[@]}"; do
             v=$(apt-cache policy "$p" 2>/dev/null | sed -n 's/^ *Candidate: //p')
             [ -n "$v" ] && [ "$v" != "(none)" ] ||
               die "package $p is unknown to apt (run apt-get update)"
             echo "$p=$v"
           done)
key=$( { echo "$versions"; cat "$0"; } | sha256sum | cut -c1-16)
if [ -f "$CACHE/stamp" ] && [ "$(cat "$CACHE/stamp")" = "$key" ] &&
   [ -f "$CACHE/guest.env" ]; then
  say "cache $CACHE is up to date ($kver)"
  exit 0
fi
say "building into $CACHE ($kver, key $key)"

fetch () {
  local p v f d
  for p in "$@"; do
    v=$(echo "$versions" | sed -n "s/^$p=//p")
    f=
    for d in "$CACHE/debs" "$shared_debs"; do
      f=$(ls "$d/${p}_${v/:/%3a}_"*.deb 2>/dev/null | head -1 || true)
      [ -n "$f" ] && break
    done
    if [ -z "$f" ]; then
      say "apt-get download $p=$v"
      (cd "$CACHE/debs" && apt-get download -q "$p=$v" 2>&1 |
         grep -v 'unsandboxed' >&2 || true)
      f=$(ls "$CACHE/debs/${p}_${v/:/%3a}_"*.deb 2>/dev/null | head -1 || true)
      [ -n "$f" ] || die "apt-get download $p=$v failed"
    fi
    echo "$f"
  done
}

work=$(mktemp -d "$CACHE/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT

# ---- kernel and modules ----------------------------------------------
kx=$work/kernel
mkdir -p "$kx"
dpkg-deb -x "$(fetch "$kpkg")" "$kx"
[ -f "$kx/boot/vmlinuz-$kver" ] || die "$kpkg has no /boot/vmlinuz-$kver"
ux=$work/userland
mkdir -p "$ux"
for f in $(fetch "${userpkgs[@]}"); do dpkg-deb -x "$f" "$ux"; done
BB=$ux/bin/busybox
[ -x "$BB" ] || die "busybox-static has no /bin/busybox"
mdir=$kx/lib/modules/$kver
[ -f "$mdir/modules.dep" ] || "$BB" depmod -b "$kx" "$kver"

# The virtio PCI transport and disks, device-mapper itself, and
# dm-delay (a slow backing device, to hold write back in flight while
# the test races writes and populate against it).  The error target
# (to fail the backing device on purpose) is part of dm-mod.
wanted=(virtio_pci virtio_blk dm-mod dm-delay)
declare -A seen=()
order=()
visit () {
  local rel=$1 dep deps
  [ -n "${seen[$rel]:-}" ] && return 0
  seen[$rel]=1
  deps=$(sed -n "s|^$rel: *||p" "$mdir/modules.dep")
  for dep in $deps; do visit "$dep"; done
  order+=("$rel")
}
for m in "${wanted[@]}"; do
  if grep -q "/$m\.ko$" "$mdir/modules.builtin"; then
    say "module $m is built in"
    continue
  fi
  rel=$(grep -o "^[^:]*/$m\.ko\(\.xz\)\?:" "$mdir/modules.dep" | tr -d : || true)
  [ -n "$rel" ] || die "module $m is neither built in nor in $kpkg"
  visit "$rel"
done

root=$work/root
mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,etc,lib/modules,lib64} \
         "$root/lib/x86_64-linux-gnu"
cp "$BB" "$root/bin/busybox"
: >"$root/lib/modules/load-order"
for rel in "${order[@]}"; do
  case $rel in
    *.ko) cp "$mdir/$rel" "$root/lib/modules/" ;;
    *.ko.xz) xz -dc "$mdir/$rel" >"$root/lib/modules/$(basename "${rel%.xz}")" ;;
    *) die "cannot unpack module $rel" ;;
  esac
  basename "${rel%.xz}" >>"$root/lib/modules/load-order"
done

src=$ux/sbin/dmsetup
[ -x "$src" ] || src=$ux/usr/sbin/dmsetup
[ -x "$src" ] || die "no dmsetup in the dmsetup package"
cp "$src" "$root/sbin/dmsetup"

# Follow DT_NEEDED through the extracted packages only, never the host's
# /lib: a package missing from userpkgs is an error here, not in the guest.
libdirs=("$ux/lib/x86_64-linux-gnu" "$ux/usr/lib/x86_64-linux-gnu")
declare -A have=()
need_libs () {
  local so p found
  for so in $(readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [ -n "${have[$so]:-}" ] && continue
    found=
    for p in "${libdirs[@]}"; do
      if [ -e "$p/$so" ]; then found=$p/$so; break; fi
    done
    [ -n "$found" ] || die "$(basename "$1") needs $so, which no package in the list ships (add it to userpkgs)"
    have[$so]=1
    cp -L "$found" "$root/lib/x86_64-linux-gnu/$so"
    need_libs "$found"
  done
}
need_libs "$root/sbin/dmsetup"
interp=$(readelf -l "$root/sbin/dmsetup" | sed -n 's/.*interpreter: \(.*\)\]/\1/p')
[ "$interp" = /lib64/ld-linux-x86-64.so.2 ] || die "unexpected ELF interpreter $interp"
cp -L "$ux/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" "$root/lib64/"

(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) |
  gzip -9 >"$work/base.cpio.gz"
mv -f "$work/base.cpio.gz" "$CACHE/base.cpio.gz"
cp "$kx/boot/vmlinuz-$kver" "$CACHE/vmlinuz"
{
  echo "GUEST_KERNEL_VERSION=$kver"
  echo "GUEST_KERNEL_PACKAGE=$kpkg"
  echo "GUEST_PACKAGES='$(echo $versions)'"
} >"$CACHE/guest.env"
echo "$key" >"$CACHE/stamp"
say "done: $(tr '\n' ' ' <"$CACHE/guest.env")"
