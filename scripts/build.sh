#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# scripts/build.sh DIR [configure options]: configure and build out of
# tree in DIR (relative to the source tree), regenerating the build
# system first if needed.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
dir=$1; shift
cd "$top"
[ -x configure ] && [ configure -nt configure.ac ] || autoreconf -fi >/dev/null
mkdir -p "$dir"
cd "$dir"
if [ ! -f Makefile ] || [ "$top/configure" -nt config.status ]; then
    "$top/configure" --enable-werror "$@" >configure.out 2>&1 ||
        { cat configure.out; exit 1; }
fi
make -j"$(nproc)" >make.out 2>&1 || { tail -50 make.out; exit 1; }
