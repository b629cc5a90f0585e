#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Build a QEMU guest's initramfs from Debian packages only, the way
# mkinitramfs does from an installed system: the packages are fetched
# with apt-get download and unpacked with dpkg-deb -x, never installed,
# and nothing of the host's own /lib goes in.  The one guest builder of
# both test guests (qemu-guest/guest-build.sh, dm/guest-build.sh): each
# is a list for this script.
#
# Usage:
#   mkinitramfs.sh [-v] -c CACHE [-n NAME] [-D DEBS] [-p PACKAGES]
#                  [-m MODULES] [-b BINARIES] [-l LINKS] [-e FILES]
#     -c CACHE     output directory (created); the result is
#                  CACHE/NAME.cpio.gz and CACHE/NAME.env, and with -m also
#                  CACHE/vmlinuz and CACHE/NAME.modules (the load order)
#     -n NAME      output name (default base)
#     -D DEBS      where the .deb files are kept (default CACHE/debs)
#     -p PACKAGES  packages to unpack: the binaries' packages and every
#                  library package they load (the closure is checked:
#                  a missing one is an error naming the soname)
#     -m MODULES   kernel modules, with their dependencies, in load order
#                  in /lib/modules/load-order; the kernel package is
#                  added (the one linux-image-cloud-amd64 depends on, or
#                  RAMBACK_GUEST_KERNEL)
#     -b BINARIES  paths as packaged, usr/ dropped (sbin/dmsetup,
#                  bin/fio); each lands at that path with its libraries
#     -l LINKS     symlinks NAME=TARGET (sbin/mkfs.ext4=mke2fs)
#     -e FILES     empty files to create (etc/gnutls/config)
#   busybox-static in PACKAGES puts /bin/busybox in the image.  Lists are
#   separated by blanks.  The build is skipped when CACHE/NAME.stamp
#   matches: the key is every package's candidate version, this script
#   and the arguments.
#
#   mkinitramfs.sh -K            print the guest kernel package
#   mkinitramfs.sh -F DEBS PKG...  fetch the candidate versions into DEBS,
#                                print the .deb paths
#
# NAME.env holds GUEST_KERNEL_VERSION, GUEST_KERNEL_PACKAGE (with -m) and
# GUEST_PACKAGES ('pkg=version ...').

set -euo pipefail
export PATH=/usr/bin:/bin:/usr/sbin:/sbin:$PATH LC_ALL=C

verbose=false
say () { if $verbose; then echo "mkinitramfs: $*" >&2; fi; }
die () { echo "mkinitramfs: error: $*" >&2; exit 1; }

for c in apt-get apt-cache dpkg-deb cpio gzip xz sha256sum readelf flock; do
  command -v "$c" >/dev/null ||
    die "'$c' is missing (packages: apt, dpkg, cpio, gzip, xz-utils, coreutils, binutils, util-linux)"
done

# The kernel: whatever linux-image-cloud-amd64 currently depends on,
# unless pinned with RAMBACK_GUEST_KERNEL (linux-image-6.1.0-57-cloud-amd64).
kernel_package () {
  local k=${RAMBACK_GUEST_KERNEL:-}
  if [ -z "$k" ]; then
    k=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null |
        sed -n 's/^ *Depends: \(linux-image-[0-9].*-cloud-amd64\)$/\1/p' | head -1)
    [ -n "$k" ] || die "apt-cache knows no linux-image-cloud-amd64 (run apt-get update)"
  fi
  echo "$k"
}

# versions PKG...: "pkg=candidate" lines; every package must be known.
# apt-cache has been seen to leave a known package out once, where the
# next call found it: a package missing is asked for again (three
# times in all) before it is an error, which shows what apt-cache said.
versions () {
  local v p missing err try
  for try in 1 2 3; do
    err=$(mktemp)
    v=$(apt-cache policy "$@" 2>"$err" |
        awk '/^[^ ].*:$/ { p = substr($0, 1, length($0) - 1) }
             /^  Candidate: / && $2 != "(none)" { print p "=" $2 }')
    missing=
    for p in "$@"; do
      echo "$v" | grep -q "^$p=" || { missing=$p; break; }
    done
    [ -z "$missing" ] && { rm -f "$err"; echo "$v"; return 0; }
    if [ "$try" -lt 3 ]; then
      echo "mkinitramfs: apt-cache policy gave no candidate for $missing" \
           "(try $try of 3): $(head -3 "$err" | tr '\n' ' ')" >&2
      rm -f "$err"
      sleep 2
    fi
  done
  die "package $missing is unknown to apt (run apt-get update); apt-cache policy said: $(head -3 "$err" | tr '\n' ' '); apt-cache policy $missing says: $(apt-cache policy "$missing" 2>&1 | head -3 | tr '\n' ' ')"
}

# fetch PKG...: the .deb of each candidate version, downloaded into $DEBS
# unless it is there already (apt-get download names it
# package_version_arch.deb).  One download at a time per DEBS.
fetch () {
  local p v f
  for p in "$@"; do
    v=$(echo "$VERSIONS" | sed -n "s/^$p=//p" | head -1)
    f=$(ls "$DEBS/${p}_${v/:/%3a}_"*.deb 2>/dev/null | head -1 || true)
    if [ -z "$f" ]; then
      say "apt-get download $p=$v"
      (cd "$DEBS" && flock .lock apt-get download -qq "$p=$v" 2>&1 |
         grep -v 'unsandboxed' >&2 || true)
      f=$(ls "$DEBS/${p}_${v/:/%3a}_"*.deb 2>/dev/null | head -1 || true)
      [ -n "$f" ] || die "apt-get download $p=$v failed"
    fi
    echo "$f"
  done
}

CACHE='' NAME=base DEBS='' PKGS='' MODS='' BINS='' LINKS='' EMPTY=''
while getopts vc:n:D:p:m:b:l:e:KF: opt; do
  case $opt in
    v) verbose=true ;;
    c) CACHE=$OPTARG ;;
    n) NAME=$OPTARG ;;
    D) DEBS=$OPTARG ;;
    p) PKGS=$OPTARG ;;
    m) MODS=$OPTARG ;;
    b) BINS=$OPTARG ;;
    l) LINKS=$OPTARG ;;
    e) EMPTY=$OPTARG ;;
    K) kernel_package; exit 0 ;;
    F) DEBS=$OPTARG
       shift $((OPTIND - 1))
       mkdir -p "$DEBS"
       VERSIONS=$(versions "$@")
       fetch "$@"
       exit 0 ;;
    *) sed -n 's/^#   \{0,1\}//p' "$0" | sed -n '/^Usage:/,/^NAME.env/p' >&2; exit 2 ;;
  esac
done
[ -n "$CACHE" ] || die "no cache directory (-c)"
: "${DEBS:=$CACHE/debs}"
mkdir -p "$CACHE" "$DEBS" || die "cannot create $CACHE or $DEBS"

# One builder at a time per cache: two concurrent test runs share it.
exec 9>"$CACHE/.lock"
flock 9

kpkg='' kver=''
if [ -n "$MODS" ]; then
  kpkg=$(kernel_package)
  kver=${kpkg#linux-image-}
fi
# shellcheck disable=SC2086
VERSIONS=$(versions $kpkg $PKGS)
key=$( { echo "$VERSIONS"; printf '%s\n' "$NAME" "$PKGS" "$MODS" "$BINS" "$LINKS" "$EMPTY"
         cat "$0"; } | sha256sum | cut -c1-16)
if [ -f "$CACHE/$NAME.stamp" ] && [ "$(cat "$CACHE/$NAME.stamp")" = "$key" ] &&
   [ -f "$CACHE/$NAME.cpio.gz" ] && [ -f "$CACHE/$NAME.env" ]; then
  say "$CACHE/$NAME is up to date${kver:+ ($kver)}"
  exit 0
fi
say "building $CACHE/$NAME.cpio.gz${kver:+ ($kver)}, key $key"

work=$(mktemp -d "$CACHE/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root ux=$work/userland
mkdir -p "$root"/{bin,sbin,dev,proc,sys,tmp,mnt,etc,lib/modules,lib64} \
         "$root/lib/x86_64-linux-gnu" "$ux"
# shellcheck disable=SC2086
for f in $(fetch $PKGS); do dpkg-deb -x "$f" "$ux"; done
[ ! -x "$ux/bin/busybox" ] || cp "$ux/bin/busybox" "$root/bin/busybox"

# ---- kernel and modules ---------------------------------------------------
if [ -n "$MODS" ]; then
  kx=$work/kernel
  mkdir -p "$kx"
  dpkg-deb -x "$(fetch "$kpkg")" "$kx"
  [ -f "$kx/boot/vmlinuz-$kver" ] || die "$kpkg has no /boot/vmlinuz-$kver"
  mdir=$kx/lib/modules/$kver
  # The package ships no modules.dep (depmod runs at install time): make
  # one with busybox's depmod, from busybox-static's .deb.
  if [ ! -f "$mdir/modules.dep" ]; then
    bbx=$work/busybox
    mkdir -p "$bbx"
    echo "$VERSIONS" | grep -q '^busybox-static=' ||
      VERSIONS="$VERSIONS
$(versions busybox-static)"
    dpkg-deb -x "$(fetch busybox-static)" "$bbx"
    "$bbx/bin/busybox" depmod -b "$kx" "$kver"
  fi
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
  for m in $MODS; do
    if grep -q "/$m\.ko$" "$mdir/modules.builtin"; then
      say "module $m is built in"
      continue
    fi
    rel=$(grep -o "^[^:]*/$m\.ko\(\.[gx]z\|\.zst\)\?:" "$mdir/modules.dep" | tr -d : || true)
    [ -n "$rel" ] || die "module $m is neither built in nor in $kpkg"
    visit "$rel"
  done
  : >"$root/lib/modules/load-order"
  for rel in "${order[@]}"; do
    ko=$(basename "$rel"); ko=${ko%.[gx]z}; ko=${ko%.zst}
    case $rel in
      *.ko) cp "$mdir/$rel" "$root/lib/modules/$ko" ;;
      *.ko.xz) xz -dc "$mdir/$rel" >"$root/lib/modules/$ko" ;;
      *.ko.gz) gzip -dc "$mdir/$rel" >"$root/lib/modules/$ko" ;;
      *.ko.zst) zstd -qdc "$mdir/$rel" >"$root/lib/modules/$ko" ;;
    esac
    echo "$ko" >>"$root/lib/modules/load-order"
  done
fi

# ---- binaries and their libraries ---------------------------------------
# Follow DT_NEEDED through the unpacked packages only (never the host's
# /lib), so the guest holds Debian's files and a missing package is an
# error here rather than a mystery in the guest.  Libraries in the
# multiarch directories go to /lib/x86_64-linux-gnu; one found through a
# RUNPATH keeps its path.
libdirs=("$ux/lib/x86_64-linux-gnu" "$ux/usr/lib/x86_64-linux-gnu")
declare -A have=()
need_libs () {   # ELF-IN-ROOT ELF-IN-UX
  local so p found rp dirs
  dirs=("${libdirs[@]}")
  rp=$(readelf -d "$2" | sed -n 's/.*(\(RUNPATH\|RPATH\)).*\[\(.*\)\]/\2/p')
  for p in ${rp//:/ }; do dirs+=("$ux$p"); done
  for so in $(readelf -d "$2" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [ -n "${have[$so]:-}" ] && continue
    found=
    for p in "${dirs[@]}"; do
      if [ -e "$p/$so" ]; then found=$p/$so; break; fi
    done
    [ -n "$found" ] || die "$(basename "$1") needs $so, which no package in the list ships (add it to the packages)"
    have[$so]=1
    case ${found%/*} in
      "${libdirs[0]}"|"${libdirs[1]}") p=$root/lib/x86_64-linux-gnu ;;
      *) p=$root${found#"$ux"}; p=${p%/*} ;;
    esac
    mkdir -p "$p"
    cp -L "$found" "$p/$so"
    need_libs "$p/$so" "$found"
  done
}
interp=
for b in $BINS; do
  src=$ux/usr/$b
  [ -x "$src" ] || src=$ux/$b
  [ -x "$src" ] || die "no $b in the unpacked packages"
  mkdir -p "$root/$(dirname "$b")"
  cp "$src" "$root/$b"
  need_libs "$root/$b" "$src"
  i=$(readelf -l "$src" | sed -n 's/.*interpreter: \(.*\)\]/\1/p')
  [ -z "$i" ] || interp=$i
done
if [ -n "$interp" ]; then
  [ "$interp" = /lib64/ld-linux-x86-64.so.2 ] || die "unexpected ELF interpreter $interp"
  cp -L "$ux/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" "$root/lib64/"
fi
for l in $LINKS; do
  mkdir -p "$root/$(dirname "${l%%=*}")"
  ln -sf "${l#*=}" "$root/${l%%=*}"
done
for e in $EMPTY; do
  mkdir -p "$root/$(dirname "$e")"
  : >"$root/$e"
done

(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) |
  gzip -6 >"$work/$NAME.cpio.gz"
mv -f "$work/$NAME.cpio.gz" "$CACHE/$NAME.cpio.gz"
if [ -n "$MODS" ]; then
  cp "$kx/boot/vmlinuz-$kver" "$CACHE/vmlinuz"
  cp "$root/lib/modules/load-order" "$CACHE/$NAME.modules"
fi
{
  if [ -n "$kver" ]; then
    echo "GUEST_KERNEL_VERSION=$kver"
    echo "GUEST_KERNEL_PACKAGE=$kpkg"
  fi
  echo "GUEST_PACKAGES='$(echo $VERSIONS)'"
} >"$work/$NAME.env"
mv -f "$work/$NAME.env" "$CACHE/$NAME.env"
echo "$key" >"$CACHE/$NAME.stamp"
say "done: $CACHE/$NAME.cpio.gz, $(du -k "$CACHE/$NAME.cpio.gz" | cut -f1) KiB"
