#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
# Install what ramback needs from Debian 12's archive:
#
#   scripts/deps.sh run     to build and run it (./run.sh)
#   scripts/deps.sh         that and everything the tests and the
#                           packages need (./check.sh)
#
# Does nothing for packages already installed; needs root (or sudo)
# only when something is missing.
set -euo pipefail

run_packages=(
    # build
    gcc make autoconf automake libtool pkg-config perl
    nbdkit nbdkit-plugin-dev libnbd-dev libglib2.0-dev libjson-glib-dev
    libsystemd-dev
    # run: nbdinfo and nbdcopy to try it
    libnbd-bin
)
test_packages=(
    # test
    python3-libnbd fio qemu-utils nbd-server
    socat jq e2fsprogs util-linux procps xz-utils tmux
    # the filter form's tests: nbdkit's ssh plugin against a local sshd
    openssh-server openssh-client
    # the control tests watch a command retry a refused connect
    strace
    # UPS integration test
    nut-server nut-client
    # the metrics through node_exporter's textfile collector; the
    # benchmarks' charts (bench/*.sh --plot)
    prometheus-node-exporter gnuplot-nox
    # QEMU guest (kernel nbd-client on ramback) and the dm target's
    # build (the headers of the guest's kernel, Debian's cloud kernel)
    qemu-system-x86 busybox-static nbd-client cpio binutils
    linux-headers-cloud-amd64
    # Debian packages: build, lint, install and test them
    # (scripts/check-packages.sh); dkms is what ramback-dkms depends on
    dpkg-dev debhelper dh-dkms dkms lintian man-db systemd
    # the RBD backing store (optional in the build, always in CI) and a
    # single-node Ceph cluster for its tests (tests/rbd/ceph-cluster.sh)
    librbd-dev ceph-mon ceph-mgr ceph-osd ceph-common
    # the booted guest: a Debian 12 root with systemd, built from the
    # archive (qemu-guest/sysroot-build.sh)
    mmdebstrap
)

case ${1:-all} in
    run) packages=("${run_packages[@]}") ;;
    all) packages=("${run_packages[@]}" "${test_packages[@]}") ;;
    *) echo "usage: scripts/deps.sh [run|all]" >&2; exit 2 ;;
esac

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q "ok installed" ||
        missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "deps: installing ${missing[*]}"
sudo=
[ "$(id -u)" -eq 0 ] || sudo=sudo
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -q
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
