#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# The root filesystem of the booted guest (boot-scenario.sh): Debian 12
# from Debian's archive with mmdebstrap, systemd as PID 1, Debian's
# cloud kernel and its initramfs, and what the ramback packages need
# to install and run (nbdkit, nbd-client, e2fsprogs), but not the
# ramback packages themselves: each run installs the .deb files it is
# given.
#
# Cached in $RAMBACK_GUEST_CACHE (default /var/cache/ramback-guest),
# rebuilt only when this script or a package's candidate version
# changes.  On success the cache holds, in sysroot/:
#   root.img         ext4, the root filesystem (never written: each boot
#                    runs on a qcow2 overlay of it)
#   vmlinuz, initrd.img   the kernel and initramfs installed in it
#   stamp            the key it was built for
#
# Usage: sysroot-build.sh [-v]

set -euo pipefail
export PATH=/usr/bin:/bin:/usr/sbin:/sbin:$PATH LC_ALL=C

verbose=false
[ "${1:-}" = "-v" ] && verbose=true
say () { if $verbose; then echo "sysroot-build: $*" >&2; fi; }
die () { echo "sysroot-build: error: $*" >&2; exit 1; }

CACHE=${RAMBACK_GUEST_CACHE:-/var/cache/ramback-guest}
out=$CACHE/sysroot
mirror=${RAMBACK_GUEST_MIRROR:-http://deb.debian.org/debian}

# systemd and udev (nbd devices become ready on udev's "change" event),
# the kernel with its nbd module and an initramfs that finds a virtio
# root, and the ramback packages' dependencies.
packages=(systemd-sysv udev kmod procps linux-image-cloud-amd64
          initramfs-tools nbd-client nbdkit e2fsprogs libnbd0
          libglib2.0-0 libjson-glib-1.0-0)

for c in mmdebstrap mke2fs apt-cache sha256sum flock; do
  command -v "$c" >/dev/null || die "'$c' is missing: run scripts/deps.sh"
done
mkdir -p "$out"
exec 8>"$out/.lock"
flock 8

versions=$(apt-cache policy "${packages[@]}" |
           awk '/^[^ ]/ { p = $1 } /Candidate:/ { print p, $2 }')
key=$( { echo "$versions"; cat "$0" "$(dirname "$0")/guest/ramback-guest-test.service"; } | sha256sum | cut -c1-16)
if [ "$(cat "$out/stamp" 2>/dev/null)" = "$key" ] &&
   [ -f "$out/root.img" ] && [ -f "$out/vmlinuz" ] && [ -f "$out/initrd.img" ]; then
  say "cached ($key)"
  exit 0
fi

say "building the root filesystem with mmdebstrap ($mirror)"
t0=$SECONDS
work=$(mktemp -d "$out/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
root=$work/root
include=$(IFS=,; echo "${packages[*]}")
# The guest's console is its second serial port (the first one carries
# the test's results); it logs in nobody.  The root has no password.
mmdebstrap --variant=minbase --include="$include" \
  --customize-hook='chroot "$1" passwd -d root' \
  --customize-hook='echo ramback-guest >"$1/etc/hostname"' \
  --customize-hook='echo "LABEL=root / ext4 rw,errors=remount-ro 0 1" >"$1/etc/fstab"' \
  --customize-hook='rm -f "$1"/etc/machine-id "$1"/var/lib/dbus/machine-id; touch "$1/etc/machine-id"' \
  --customize-hook='mkdir -p "$1/etc/systemd/system"' \
  --customize-hook='cp "'"$(dirname "$0")"'/guest/ramback-guest-test.service" "$1/etc/systemd/system/"' \
  --customize-hook='chroot "$1" systemctl enable ramback-guest-test.service' \
  --customize-hook='chroot "$1" systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer fstrim.timer' \
  bookworm "$root" "$mirror" >"$work/mmdebstrap.log" 2>&1 ||
  { tail -40 "$work/mmdebstrap.log" >&2; die "mmdebstrap failed"; }
vmlinuz=$(ls "$root"/boot/vmlinuz-* | head -1)
initrd=$(ls "$root"/boot/initrd.img-* | head -1)
[ -f "$vmlinuz" ] && [ -f "$initrd" ] || die "no kernel or initramfs in the root"
cp "$vmlinuz" "$work/vmlinuz"
cp "$initrd" "$work/initrd.img"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
mke2fs -q -t ext4 -L root -d "$root" "$work/root.img" 2G >/dev/null ||
  die "mke2fs -d of the root failed"
for f in root.img vmlinuz initrd.img; do mv -f "$work/$f" "$out/$f"; done
echo "$key" >"$out/stamp"
say "built in $((SECONDS - t0)) s: $(du -sh --apparent-size "$out/root.img" | cut -f1) image"
