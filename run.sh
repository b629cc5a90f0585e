#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Set up and run ramback on a local backing image:
#
#   ./run.sh [PLUGIN-PARAMETERS...]
#
# Installs the dependencies, builds, and serves a 1 GiB RAM disk backed
# by _demo/backing.img (created sparse on first run) on the Unix socket
# _demo/nbd.sock, with the control socket _demo/control.sock.  Ctrl-C
# (or SIGTERM) is a clean stop: everything dirty is written back first.
# Extra arguments are plugin parameters, e.g. ./run.sh mode=writethrough
set -euo pipefail
cd "$(dirname "$0")"
export PATH="/usr/bin:/bin:/usr/sbin:/sbin:$PATH"
top=$(pwd)

scripts/deps.sh
scripts/build.sh _build

demo="$top/_demo"
mkdir -p "$demo"
back=${RAMBACK_BACK:-$demo/backing.img}
size=()
[ -e "$back" ] || size=(size="${RAMBACK_SIZE:-1G}")
rm -f "$demo/nbd.sock"

cat <<EOM

ramback: serving $back from RAM.
  NBD:      nbd+unix:///?socket=$demo/nbd.sock
  try:      nbdinfo 'nbd+unix:///?socket=$demo/nbd.sock'
            $top/_build/cli/ramback status --watch $demo/control.sock
  stop:     Ctrl-C (writes everything back, then exits)

EOM
exec nbdkit -f -U "$demo/nbd.sock" \
    "$top/_build/plugin/.libs/nbdkit-ramback-plugin.so" \
    back="$back" "${size[@]}" control="$demo/control.sock" "$@"
