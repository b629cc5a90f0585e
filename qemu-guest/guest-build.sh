#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Assemble the QEMU guest from Debian packages only: the cloud kernel,
# its nbd and virtio modules, and a base initramfs holding busybox,
# nbd-client and e2fsprogs with exactly the shared libraries they load.
# Also repack a part of Debian's linux-source tarball into the plain tar
# files the scenarios untar, with their sha256 manifests.
#
# Everything is cached in $RAMBACK_GUEST_CACHE (default
# /var/cache/ramback-guest), outside the repository, and rebuilt only
# when an input changes (the kernel version, the package set or this
# script).  Prints nothing but errors unless -v; on success the cache
# holds:
#   vmlinuz, base.cpio.gz, modules.list  the guest
#   src-a.tar, src-b.tar                 the tarballs (part a, part b)
#   src-a.sha256, src-b.sha256           "sha256  ./path" per file, sorted
#   src-quick.tar, src-quick.sha256      a small tarball for quick runs
#   guest.env                            shell assignments describing it
#
# Usage: guest-build.sh [-v]

set -euo pipefail
export PATH=/usr/bin:/bin:/usr/sbin:/sbin:$PATH LC_ALL=C

verbose=false
[ "${1:-}" = "-v" ] && verbose=true
say () { if $verbose; then echo "guest-build: $*" >&2; fi; }
die () { echo "guest-build: error: $*" >&2; exit 1; }

CACHE=${RAMBACK_GUEST_CACHE:-/var/cache/ramback-guest}
mkdir -p "$CACHE/debs" || die "cannot create cache directory $CACHE"

for c in apt-get apt-cache dpkg-deb cpio gzip xz tar sha256sum readelf flock; do
  command -v "$c" >/dev/null || die "'$c' is missing (packages: apt, dpkg, cpio, gzip, xz-utils, tar, coreutils, binutils, util-linux)"
done

# One builder at a time: two concurrent 'make check-guest' share the cache.
exec 9>"$CACHE/.lock"
flock 9

# The kernel: whatever linux-image-cloud-amd64 currently depends on, unless
# pinned with RAMBACK_GUEST_KERNEL (e.g. linux-image-6.1.0-57-cloud-amd64).
kpkg=${RAMBACK_GUEST_KERNEL:-}
if [ -z "$kpkg" ]; then
  kpkg=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null |
         sed -n 's/^ *Depends: \(linux-image-[0-9].*-cloud-amd64\)$/\1/p' | head -1)
  [ -n "$kpkg" ] || die "apt-cache knows no linux-image-cloud-amd64 (run apt-get update)"
fi
kver=${kpkg#linux-image-}
srcpkg=${RAMBACK_GUEST_SRCPKG:-linux-source-6.1}

# Userland packages for the initramfs.  The library packages are exactly
# what ld.so loads for nbd-client (gnutls and netlink) and e2fsprogs; the
# closure check below fails the build if this list ever falls short.
userpkgs=(busybox-static nbd-client e2fsprogs libc6
          libext2fs2 libcom-err2 libblkid1 libuuid1
          libgnutls30 libnl-3-200 libnl-genl-3-200 libp11-kit0 libidn2-0
          libunistring2 libtasn1-6 libnettle8 libhogweed6 libgmp10 libffi8)

# Candidate versions make the cache key: a point release or security update
# of any package rebuilds the guest.
all=("$kpkg" "$srcpkg" "${userpkgs[@]}")
versions=$(apt-cache policy "${all[@]}" 2>/dev/null |
           awk '/^[^ ].*:$/ { p = substr($0, 1, length($0) - 1) }
                /^  Candidate: / && $2 != "(none)" { print p "=" $2 }')
for p in "${all[@]}"; do
  echo "$versions" | grep -q "^$p=" ||
    die "package $p is unknown to apt (run apt-get update)"
done
key=$( { echo "$versions"; cat "$0"; } | sha256sum | cut -c1-16)
if [ -f "$CACHE/stamp" ] && [ "$(cat "$CACHE/stamp")" = "$key" ] &&
   [ -f "$CACHE/guest.env" ]; then
  say "cache $CACHE is up to date ($kver)"
  exit 0
fi
say "building into $CACHE ($kver, key $key)"

# apt-get download writes into the current directory; a file already
# there under the exact name (package_version_arch.deb) is reused.
fetch () {
  local p v f
  for p in "$@"; do
    v=$(echo "$versions" | sed -n "s/^$p=//p")
    f=$(ls "$CACHE/debs/${p}_${v/:/%3a}_"*.deb 2>/dev/null | head -1 || true)
    if [ -z "$f" ]; then
      say "apt-get download $p=$v"
      (cd "$CACHE/debs" && apt-get download -qq "$p=$v" 2>&1 |
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
# The package ships no modules.dep (depmod runs at install time), so make
# one with busybox's depmod and resolve the closure of what the guest
# needs: virtio PCI transport, the disks, the network card, nbd.
bbx=$work/busybox
mkdir -p "$bbx"
dpkg-deb -x "$(fetch busybox-static)" "$bbx"
BB=$bbx/bin/busybox
[ -x "$BB" ] || die "busybox-static has no /bin/busybox"
"$BB" depmod -b "$kx" "$kver"
mdir=$kx/lib/modules/$kver
wanted=(virtio_pci virtio_blk virtio_net nbd)
declare -A seen=()
order=()
# Depth-first: a module's dependencies load before it.
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
  rel=$(grep -o "^[^:]*/$m\.ko\(\.[gx]z\|\.zst\)\?:" "$mdir/modules.dep" | tr -d : || true)
  [ -n "$rel" ] || die "module $m is neither built in nor in $kpkg"
  visit "$rel"
done

# ---- userland ----------------------------------------------------------
root=$work/root
ux=$work/userland
mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,mnt,src,lib/modules,etc} "$ux"
for f in $(fetch "${userpkgs[@]}"); do dpkg-deb -x "$f" "$ux"; done
cp "$ux/bin/busybox" "$root/bin/busybox"
: >"$CACHE/.modules.list.new"
for rel in "${order[@]}"; do
  case $rel in
    *.ko) cp "$mdir/$rel" "$root/lib/modules/" ;;
    *.ko.xz) xz -dc "$mdir/$rel" >"$root/lib/modules/$(basename "${rel%.xz}")" ;;
    *) die "cannot unpack module $rel" ;;
  esac
  basename "${rel%.xz}" >>"$CACHE/.modules.list.new"
done
cp "$CACHE/.modules.list.new" "$root/lib/modules/load-order"

bins=(sbin/nbd-client sbin/mke2fs sbin/e2fsck)
for b in "${bins[@]}"; do
  [ -x "$ux/usr/$b" ] && src=$ux/usr/$b || src=$ux/$b
  [ -x "$src" ] || die "no $b in the extracted packages"
  cp "$src" "$root/$b"
done
ln -s mke2fs "$root/sbin/mkfs.ext4"
ln -s e2fsck "$root/sbin/fsck.ext4"

# Libraries: follow DT_NEEDED through the extracted packages only (never
# the host's own /lib), so the guest holds Debian's files and a missing
# package is an error here rather than a mystery in the guest.
libdirs=("$ux/lib/x86_64-linux-gnu" "$ux/usr/lib/x86_64-linux-gnu")
mkdir -p "$root/lib/x86_64-linux-gnu" "$root/lib64"
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
for b in "${bins[@]}"; do need_libs "$root/$b"; done
interp=$(readelf -l "$root/sbin/nbd-client" | sed -n 's/.*interpreter: \(.*\)\]/\1/p')
[ "$interp" = /lib64/ld-linux-x86-64.so.2 ] || die "unexpected ELF interpreter $interp"
cp -L "$ux/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" "$root/lib64/"
# gnutls wants its configuration to exist; an empty one is its default.
mkdir -p "$root/etc/gnutls"
: >"$root/etc/gnutls/config"

(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) |
  gzip -9 >"$work/base.cpio.gz"

# ---- the source tarballs -----------------------------------------------
# Part a: the core kernel directories; part b: fs/.  Together 3,500 real
# files (77 MB), small enough for a TCG guest to untar in a few minutes.
# Quick: kernel/ alone.  Re-packed as GNU tar (busybox tar reads it) with
# owner root and no xz, so the guest reads it straight off a virtio disk.
sx=$work/src
mkdir -p "$sx"
dpkg-deb -x "$(fetch "$srcpkg")" "$sx/deb"
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

for f in base.cpio.gz src-a.tar src-b.tar src-quick.tar \
         src-a.sha256 src-b.sha256 src-quick.sha256; do
  mv -f "$work/$f" "$CACHE/$f"
done
cp "$kx/boot/vmlinuz-$kver" "$CACHE/vmlinuz"
mv -f "$CACHE/.modules.list.new" "$CACHE/modules.list"
{
  echo "GUEST_KERNEL_VERSION=$kver"
  echo "GUEST_KERNEL_PACKAGE=$kpkg"
  echo "GUEST_SOURCE_PACKAGE=$srcpkg"
  echo "GUEST_FILES_A=$(wc -l <"$CACHE/src-a.sha256")"
  echo "GUEST_FILES_B=$(wc -l <"$CACHE/src-b.sha256")"
  echo "GUEST_FILES_QUICK=$(wc -l <"$CACHE/src-quick.sha256")"
  echo "GUEST_PACKAGES='$(echo $versions)'"
} >"$CACHE/guest.env"
echo "$key" >"$CACHE/stamp"
say "done: $(cat "$CACHE/guest.env" | tr '\n' ' ')"
