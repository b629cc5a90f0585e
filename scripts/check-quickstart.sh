#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# scripts/check-quickstart.sh: the README's quick start as printed, on a
# fresh Debian 12: a chroot made by mmdebstrap (--variant=apt: apt and
# nothing else) holding the committed tree (git archive HEAD), in which
#
#   ./run.sh size=2G   installs what it needs, builds, serves 2 GiB on
#                      _demo/nbd.sock (nbdinfo --size); Ctrl-C (SIGINT)
#                      exits 0
#   ./run.sh           serves the same backing file again
#
# and then none of the test-only packages is installed (QEMU, lintian,
# dkms, NUT, ...: ./check.sh installs those).  Needs root and Debian's
# archive; the chroot is removed at the end.
set -euo pipefail
export PATH="/usr/bin:/bin:/usr/sbin:/sbin:$PATH" LC_ALL=C.UTF-8
top=$(cd "$(dirname "$0")/.." && pwd)
mirror=${RAMBACK_GUEST_MIRROR:-http://deb.debian.org/debian}

die () { echo "check-quickstart: FAIL: $*" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] || die "must run as root (mmdebstrap, chroot)"
command -v mmdebstrap >/dev/null || die "mmdebstrap is missing: run scripts/deps.sh"

tmp=$(mktemp -d /var/tmp/ramback-quickstart.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/src"
git -C "$top" archive HEAD | tar -x -C "$tmp/src"

cat >"$tmp/inside.sh" <<'EOF'
set -u
cd /root/ramback
fail () { echo "FAIL: $*"; exit 1; }
serve () {   # serve ARGS...: ./run.sh ARGS in the background until served
  rm -f _demo/nbd.sock
  ./run.sh "$@" >/tmp/run.out 2>&1 &
  pid=$!
  for _ in $(seq 900); do
    [ -S _demo/nbd.sock ] && return 0
    kill -0 $pid 2>/dev/null || { tail -30 /tmp/run.out; fail "./run.sh $* exited"; }
    sleep 1
  done
  fail "./run.sh $* did not serve in 900 s"
}
stop () {
  kill -INT $pid
  wait $pid || { tail -20 /tmp/run.out; fail "./run.sh exited $? on SIGINT"; }
}
uri='nbd+unix:///?socket=_demo/nbd.sock'
serve size=2G
size=$(nbdinfo --size "$uri") || fail "nbdinfo $uri"
[ "$size" = 2147483648 ] || fail "./run.sh size=2G serves $size bytes"
stop
echo "./run.sh size=2G: $size bytes, stopped cleanly"
serve
size=$(nbdinfo --size "$uri") || fail "nbdinfo $uri"
[ "$size" = 2147483648 ] || fail "./run.sh serves $size bytes of the 2 GiB file"
stop
echo "./run.sh: the same file again, stopped cleanly"
for p in qemu-system-x86 lintian dkms debhelper openssh-server nut-server \
         linux-headers-cloud-amd64 fio mmdebstrap; do
  if dpkg-query -W -f='${Status}\n' $p 2>/dev/null | grep -q 'ok installed'; then
    fail "./run.sh installed $p, which only the tests need"
  fi
done
echo "PASS ($(dpkg-query -W -f='${Package}\n' | wc -l) packages installed)"
EOF

echo "check-quickstart: mmdebstrap --variant=apt bookworm, then ./run.sh size=2G and ./run.sh in it"
if ! mmdebstrap --variant=apt --include=ca-certificates \
       --customize-hook="mkdir -p \"\$1/root/ramback\" && tar -C $tmp/src -c . | tar -C \"\$1/root/ramback\" -x" \
       --customize-hook="cp $tmp/inside.sh \"\$1/root/\"" \
       --customize-hook='chroot "$1" /bin/bash /root/inside.sh' \
       bookworm "$tmp/root" "$mirror" >"$tmp/log" 2>&1; then
  grep -v '^I: ' "$tmp/log" | tail -40
  die "the quick start failed in a fresh Debian 12 (above)"
fi
grep -E '^(\./run\.sh|PASS)' "$tmp/log" | sed 's/^/check-quickstart: /'
