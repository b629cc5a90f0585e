#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-or-later
# The booted guest's steps (boot-scenario.sh), run by
# ramback-guest-test.service as root under systemd, from /run/rt with the
# .deb files in /run/rt/debs; the step is ramback.step= on the kernel
# command line.  Reports on stdout (the first serial port):
# "RAMBACK-MARK: NAME " lines and a last "RAMBACK-RESULT: PASS" or
# "RAMBACK-RESULT: FAIL why".
#
# The disk "data": /etc/ramback/data.conf backs it by the README's
# /dev/disk/by-id/wwn-0x5000c500a1b2c3d4 (the disk of 256 MiB,
# /dev/sda in some boots and /dev/sdb in others), attached as /dev/nbd0 and mounted on /srv/data
# through /etc/fstab, by the README's Install section's commands as
# printed (README.md comes in /run/rt).
#
#   setup     install the packages; the README's commands (configure,
#             enable, mkfs, fstab, mount); write files (some fsynced),
#             then systemctl reboot
#   poweroff  mounted at boot?  every file intact?  the last boot's
#             journal lines of ramback; then systemctl poweroff while a
#             writer writes and fsyncs files
#   stop      mounted at boot, every file intact; a busy filesystem:
#             stopping ramback-nbd@data refuses and changes nothing; then
#             systemctl stop ramback@data with the filesystem mounted:
#             unmounted, disconnected, drained, the backing store's
#             e2fsck clean; the README's commands to remove it; then
#             poweroff
set -uo pipefail
export PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C
step=$(sed -n 's/.*ramback\.step=\([^ ]*\).*/\1/p' /proc/cmdline)
broken=$(sed -n 's/.*ramback\.broken=\([^ ]*\).*/\1/p' /proc/cmdline)
mnt=/srv/data
back=/dev/disk/by-id/wwn-0x5000c500a1b2c3d4

mark () { echo "RAMBACK-MARK: $* "; }
fail () {
  echo "RAMBACK-RESULT: FAIL $*"
  journalctl -b --no-pager -n 60 -u ramback@data -u ramback-nbd@data \
    -u srv-data.mount 2>&1 | sed 's/^/journal: /'
  systemctl --no-block --check-inhibitors=no poweroff
  exit 1
}
pass () { echo "RAMBACK-RESULT: PASS"; }

# The lines of the ramback units from boot $1 (0 this one, -1 the last),
# on the results port for the host's log.
show_journal () {
  journalctl -b "$1" --no-pager -o short-monotonic \
    -u ramback@data -u ramback-nbd@data -u srv-data.mount 2>&1 |
    sed "s/^/journal $1: /"
}

# Files whose write (and fsync, for fsynced ones) finished, with their
# sha256 in $mnt/NAME.sha256, itself fsynced after each line.
write_files () {   # write_files SET N FSYNC(yes|no)
  local set=$1 n=$2 sync=$3 i f
  for (( i = 1; i <= n; i++ )); do
    f=$set$i
    head -c $(( (RANDOM % 512 + 16) * 1024 )) /dev/urandom >"$mnt/$f" || return 1
    [ "$sync" = yes ] && { sync "$mnt/$f" || return 1; }
    (cd "$mnt" && sha256sum "./$f") >>"$mnt/$set.sha256" || return 1
    sync "$mnt/$set.sha256" || return 1
  done
}

check_files () {   # check_files SET...
  local set
  for set in "$@"; do
    [ -s "$mnt/$set.sha256" ] || fail "no $mnt/$set.sha256"
    (cd "$mnt" && sha256sum --quiet -c "$set.sha256") >/tmp/sums.log 2>&1 ||
      { head -5 /tmp/sums.log; fail "files of set $set differ"; }
    echo "files present: set $set, $(wc -l <"$mnt/$set.sha256") files intact"
  done
}

# readme_block TEXT: the shell block of the README's Install section
# that holds TEXT, as printed.
readme_block () {
  awk -v want="$1" '
    /^## / { inst = ($0 == "## Install") }
    inst && /^```sh$/ { inb = 1; blk = ""; next }
    inb && /^```$/ { inb = 0; if (index(blk, want)) { printf "%s", blk; found = 1 }; next }
    inb { blk = blk $0 "\n" }
    END { exit !found }' /run/rt/README.md
}

# stop_order WHAT BOOT [SINCE]: the journal of boot BOOT (0 this one,
# -1 the last), from monotonic time SINCE on, shows the stop WHAT in the
# one safe order: unmounted, then detached, then the clean stop's "safe
# to power off".
stop_order () {
  local what=$1 boot=$2 since=${3:-0} u d c
  at () {   # at ERE: the monotonic time of the first line matching ERE
    journalctl -b "$boot" --no-pager -o short-monotonic |
      awk -v since="$since" -v re="$1" '
        { t = substr($2, 1, length($2) - 1) + 0 }
        t >= since && $0 ~ re { print t; exit }'
  }
  u=$(at 'Unmounted srv-data.mount')
  d=$(at 'ramback-nbd: data: detached /dev/nbd0')
  c=$(at 'clean stop: wrote back .* safe to power off')
  [ -n "$u" ] && [ -n "$d" ] && [ -n "$c" ] ||
    fail "$what: journal lines missing (unmounted '$u', detached '$d', clean stop '$c')"
  awk -v u="$u" -v d="$d" -v c="$c" 'BEGIN { exit !(u < d && d < c) }' ||
    fail "$what: out of order: unmounted at $u, detached at $d, clean stop at $c"
  echo "order at $what: unmounted at $u s, detached at $d s, clean stop at $c s"
}

mounted_at_boot () {
  local src
  src=$(findmnt -rn -o SOURCE "$mnt") || fail "$mnt is not mounted after boot"
  [ "$src" = /dev/nbd0 ] || fail "$mnt is mounted from $src, not /dev/nbd0"
  systemctl is-active -q ramback@data ramback-nbd@data ||
    fail "ramback@data or ramback-nbd@data not active after boot"
  echo "mounted at boot: /dev/nbd0 on $mnt, backed by $(readlink -f "$back")"
}

case $step in
setup)
  dpkg -i /run/rt/debs/nbdkit-plugin-ramback_*.deb /run/rt/debs/ramback_*.deb \
    >/tmp/dpkg.log 2>&1 || { cat /tmp/dpkg.log; fail "dpkg -i of the packages failed"; }
  echo "installed: $(dpkg-query -W -f='${Package} ${Version}, ' nbdkit-plugin-ramback ramback)"
  # The backing disk is the one of 256 MiB (the scratch disk has 1 MiB).
  [ -b "$back" ] && [ "$(blockdev --getsize64 "$back")" = 268435456 ] ||
    fail "the README's backing disk $back is not the 256 MiB disk: $(ls -l /dev/disk/by-id/ | tr '\n' ' ')"
  # The README's Install section, as printed.
  readme_block 'mkdir -p /etc/ramback' >/tmp/install.sh ||
    fail "no install block in the README"
  bash -ex /tmp/install.sh >/tmp/install.log 2>&1 ||
    { tail -30 /tmp/install.log; fail "the README's install commands failed"; }
  echo "README install block: $(grep -c . /tmp/install.sh) commands ran, backing disk $(readlink -f "$back")"
  findmnt -rn -o SOURCE "$mnt" | grep -qx /dev/nbd0 || fail "$mnt not mounted after the README's commands"
  if [ "$broken" = order ]; then
    # The contrast: no ordering between the mount, the attach and
    # ramback (the attach unit without After=/BindsTo=, the mount
    # without x-systemd.requires=).
    sed -e '/^BindsTo=/d' -e '/^After=/d' /lib/systemd/system/ramback-nbd@.service \
      >/etc/systemd/system/ramback-nbd@.service
    sed -i 's/_netdev,x-systemd.requires=ramback-nbd@data.service/_netdev/' /etc/fstab
    systemctl daemon-reload
    echo "broken: no ordering"
  fi
  write_files a 20 yes || fail "writing set a failed"
  write_files b 20 no || fail "writing set b failed"
  mark written
  pass
  systemctl --no-block --check-inhibitors=no reboot
  ;;
poweroff)
  mounted_at_boot
  check_files a b
  show_journal -1
  stop_order reboot -1
  mark writing
  ( write_files c 100000 yes ) &
  # Some files written, then the power off with the writer running.
  while [ "$(cat "$mnt/c.sha256" 2>/dev/null | wc -l)" -lt 5 ]; do sleep 0.2; done
  echo "status: $(systemctl show -P StatusText ramback@data)"
  pass
  systemctl --no-block --check-inhibitors=no poweroff
  ;;
stop)
  mounted_at_boot
  check_files a b c
  show_journal -1
  stop_order poweroff -1
  # Busy: stopping the attach unit refuses, and nothing changes.
  (cd "$mnt" && exec sleep 600) &
  busy=$!
  sleep 0.5
  # (systemctl stop itself returns 0: a stop job is done even when the
  # unit's ExecStop= fails; the unit is left "failed".)
  systemctl stop ramback-nbd@data
  systemctl is-failed -q ramback-nbd@data ||
    fail "ramback-nbd@data not failed after a refused stop: $(systemctl is-active ramback-nbd@data)"
  findmnt -rn "$mnt" >/dev/null || fail "$mnt unmounted by a refused stop"
  [ -e /sys/block/nbd0/pid ] || fail "nbd0 disconnected under a busy $mnt"
  journalctl -b --no-pager -u ramback-nbd@data | grep -q 'not disconnecting /dev/nbd0' ||
    fail "no 'not disconnecting' line in the journal"
  echo "busy: stop of ramback-nbd@data refused: $(journalctl -b --no-pager -o cat -u ramback-nbd@data | grep 'not disconnecting' | tail -1)"
  kill "$busy"; wait "$busy" 2>/dev/null
  systemctl start ramback-nbd@data srv-data.mount 2>/dev/null
  findmnt -rn "$mnt" >/dev/null || mount "$mnt" || fail "mount $mnt again failed"
  write_files d 20 no || fail "writing set d failed"
  mark stopping
  since=$(awk '{ print $1 }' /proc/uptime)
  systemctl stop ramback@data || fail "systemctl stop ramback@data failed"
  stop_order "stop of ramback@data" 0 "$since"
  findmnt -rn "$mnt" >/dev/null && fail "$mnt still mounted after stopping ramback@data"
  [ -e /sys/block/nbd0/pid ] && fail "nbd0 still connected after stopping ramback@data"
  systemctl is-active -q ramback@data && fail "ramback@data still active"
  e2fsck -fn "$back" >/tmp/fsck.log 2>&1 || { cat /tmp/fsck.log; fail "e2fsck -fn of the backing store after the stop"; }
  dumpe2fs -h "$back" 2>/dev/null | grep -q needs_recovery &&
    fail "the backing store's ext4 needs journal recovery after the stop"
  echo "e2fsck after stop: clean, no journal recovery needed"
  show_journal 0
  # The README's commands to remove it, as printed.
  readme_block 'apt-get purge' >/tmp/remove.sh || fail "no removal block in the README"
  bash -ex /tmp/remove.sh >/tmp/remove.log 2>&1 ||
    { tail -30 /tmp/remove.log; fail "the README's removal commands failed"; }
  grep -q nbd0 /etc/fstab && fail "the fstab line is still there"
  dpkg-query -W -f='${Status}\n' ramback 2>/dev/null | grep -q 'ok installed' &&
    fail "ramback still installed"
  echo "README removal block: $(grep -c . /tmp/remove.sh) commands ran"
  pass
  systemctl --no-block --check-inhibitors=no poweroff
  ;;
*)
  fail "unknown step '$step'"
  ;;
esac
