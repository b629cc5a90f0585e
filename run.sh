#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Set up and run ramback on a local backing image:
#
#   ./run.sh [PLUGIN-PARAMETERS...]
#
# Installs what building and running need (scripts/deps.sh run), builds,
# and serves a RAM disk backed by _demo/backing.img on the Unix socket
# _demo/nbd.sock, with the control socket _demo/control.sock.  The
# backing file is created sparse on first run, 1 GiB unless size= is
# given (./run.sh size=2G); later runs serve it at its size.  Ctrl-C
# (or SIGTERM) is a clean stop: everything dirty is written back first.
# Extra arguments are plugin parameters, e.g. ./run.sh mode=writethrough
set -euo pipefail
cd "$(dirname "$0")"
export PATH="/usr/bin:/bin:/usr/sbin:/sbin:$PATH"
top=$(pwd)

scripts/deps.sh run
scripts/build.sh _build

demo="$top/_demo"
mkdir -p "$demo"
back=${RAMBACK_BACK:-$demo/backing.img}
# The default size only for a new backing file, and only if the
# arguments give none (the plugin takes size= once).
size=(size="${RAMBACK_SIZE:-1G}")
[ -e "$back" ] && size=()
for a in "$@"; do
    case $a in size=*) size=() ;; esac
done
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
