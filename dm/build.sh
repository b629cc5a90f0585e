#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# Build dm-ramback.ko against Debian's kernel headers for the QEMU
# guest's kernel (never the host's: the module is only ever loaded
# inside the guest).  dm/ and lib/ are copied into a scratch directory
# and built there, so no build output lands in the repository.
#
# Usage: dm/build.sh [-o OUTDIR] [KERNEL-VERSION]
#   KERNEL-VERSION  default: what linux-image-cloud-amd64 depends on
#                   (e.g. 6.1.0-57-cloud-amd64); its linux-headers-*
#                   package must be installed
#   -o OUTDIR       where dm-ramback.ko goes (default /tmp/dmbuild/out)
# Environment: RAMBACK_DM_BUILD (scratch dir, default /tmp/dmbuild),
#   W=1 etc. are passed to kbuild.
# Prints the path of the module on success.

set -euo pipefail
export PATH=/usr/bin:/bin:/usr/sbin:/sbin:$PATH LC_ALL=C

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/.." && pwd)
build=${RAMBACK_DM_BUILD:-/tmp/dmbuild}
out=$build/out
while getopts o: opt; do
  case $opt in
    o) out=$OPTARG ;;
    *) echo "usage: $0 [-o OUTDIR] [KERNEL-VERSION]" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))

kver=${1:-}
if [ -z "$kver" ]; then
  kver=$("$top/qemu-guest/mkinitramfs.sh" -K) || exit 1
  kver=${kver#linux-image-}
fi
kdir=/usr/src/linux-headers-$kver
if [ ! -f "$kdir/Makefile" ]; then
  echo "build.sh: $kdir is missing: apt-get install linux-headers-$kver" >&2
  exit 1
fi

mkdir -p "$build/dm" "$out"
# Only sources, with their timestamps (cp -p), so the scratch tree keeps
# its objects between runs and make rebuilds just what changed.
cp -p "$here"/Kbuild "$here"/*.[ch] "$build/dm/"
# lib/ keeps its layout (its layers are on dm/Kbuild's include path);
# the POSIX shim and the unit tests stay behind.
(cd "$top" && find lib -name '*.[ch]' ! -path 'lib/env/posix/*' ! -name 'test-*' \
     -exec cp -p --parents {} "$build/" \;)

make -s -C "$kdir" M="$build/dm" ${W:+W=$W} modules >&2
cp "$build/dm/dm-ramback.ko" "$out/"
echo "$out/dm-ramback.ko"
