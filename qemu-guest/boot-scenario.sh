#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-or-later
#
# boot-scenario.sh DEB-DIR: the packages on a booted Debian 12, systemd
# as PID 1 (sysroot-build.sh's root), the way an administrator runs
# them: a disk "data" on a SCSI disk, attached as /dev/nbd0 and
# mounted from /etc/fstab (guest/boot-steps.sh).  Four boots of one
# root (a qcow2 overlay of the cached image) and one backing disk:
#
#   setup     install the .deb files of DEB-DIR; the README's Install
#             commands as printed (configure the disk by its WWN, enable, mkfs,
#             fstab, mount); write files (some fsynced); systemctl reboot
#   poweroff  mounted at boot, files intact; systemctl poweroff while a
#             writer writes and fsyncs
#   stop      mounted at boot, files intact; stopping the attach unit
#             under a busy filesystem refuses; systemctl stop
#             ramback@data with the filesystem mounted unmounts,
#             disconnects and drains; the README's commands to remove
#             it; poweroff
#
# After each boot, on the host: the backing disk's e2fsck -fn is clean
# and its ext4 needs no journal recovery (the shutdown unmounted it
# before ramback stopped, and ramback wrote everything back), and every
# file the guest recorded is in it (debugfs).  The guest's journal lines
# of the ramback units are shown.
#
# RAMBACK_BOOT_BROKEN=order: the same without the ordering (the attach
# unit without After=/BindsTo=, the fstab line without
# x-systemd.requires=): the contrast, expected to fail.
# Environment as scenario.sh's (RAMBACK_GUEST_CACHE, RAMBACK_GUEST_KEEP).

debdir=${1:?usage: boot-scenario.sh DEB-DIR (the .deb files, from scripts/check-packages.sh)}
debdir=$(cd "$debdir" && pwd)
. "$(dirname "$0")/guest-lib.sh"

need mmdebstrap qemu-img tar dumpe2fs
for p in nbdkit-plugin-ramback ramback; do
  ls "$debdir/${p}"_*.deb >/dev/null 2>&1 ||
    die "no ${p}_*.deb in $debdir: run scripts/check-packages.sh (it leaves them in _build-deb)"
done
"$guest_srcdir/sysroot-build.sh" ${RAMBACK_GUEST_VERBOSE:+-v} ||
  die "building the guest root failed"
root=$CACHE/sysroot

qemu-img create -q -f qcow2 -F raw -b "$root/root.img" "$T/root.qcow2"
back=$T/back.img
truncate -s 256M "$back"
# The backing disk has the README's WWN.  A scratch disk comes before it
# on the SCSI bus in one boot and after it in the next, so that its
# kernel name (/dev/sda, /dev/sdb) changes between boots while its
# stable name, which the README's configuration uses, does not.
truncate -s 1M "$T/scratch.img"
wwn=0x5000c500a1b2c3d4
order=0
mkdir -p "$T/rt/debs"
cp "$debdir"/nbdkit-plugin-ramback_*.deb "$debdir"/ramback_*.deb "$T/rt/debs/"
cp "$guest_srcdir/guest/boot-steps.sh" "$guest_srcdir/../README.md" "$T/rt/"
tar -C "$T/rt" -cf "$T/rt.tar" .

# The console shows systemd's progress with RAMBACK_GUEST_VERBOSE=1.
console_opts=quiet
[ -z "${RAMBACK_GUEST_VERBOSE:-}" ] || console_opts=systemd.show_status=1

boot () {   # boot STEP
  local step=$1 id_scratch id_back
  order=$((1 - order))
  id_scratch=$((1 - order)) id_back=$order
  _g_machine "$step"
  g_qemu "$step" "${_g_argv[@]}" \
    -serial "file:$T/$step.console" \
    -kernel "$root/vmlinuz" -initrd "$root/initrd.img" \
    -drive "file=$T/root.qcow2,if=none,id=root,format=qcow2" \
    -device virtio-blk-pci,drive=root,serial=root \
    -device virtio-scsi-pci,id=scsi \
    -drive "file=$T/scratch.img,if=none,id=scratch,format=raw" \
    -device scsi-hd,drive=scratch,bus=scsi.0,scsi-id=$id_scratch,lun=0,serial=scratch \
    -drive "file=$back,if=none,id=rback,format=raw" \
    -device scsi-hd,drive=rback,bus=scsi.0,scsi-id=$id_back,lun=0,serial=rback,wwn=$wwn \
    -drive "file=$T/rt.tar,if=none,id=rtest,format=raw,readonly=on" \
    -device virtio-blk-pci,drive=rtest,serial=rtest \
    -append "console=ttyS1 root=LABEL=root rw panic=-1 no_timer_check $console_opts ramback.step=$step${RAMBACK_BOOT_BROKEN:+ ramback.broken=$RAMBACK_BOOT_BROKEN}"
  say "guest $step ($GUEST_ACCEL${RAMBACK_BOOT_BROKEN:+, broken: $RAMBACK_BOOT_BROKEN})"
  g_wait_guest "$step"
  grep -a -E '^(installed|README|broken|mounted at boot|files present|order at|status|busy|e2fsck after)' "$T/$step.serial" |
    tr -d '\r' | sed "s/^/  $step: /" || true
  grep -a '^journal ' "$T/$step.serial" | tr -d '\r' | sed "s/^/  $step: /" || true
}

# The backing disk after a shutdown: clean, no journal replay, and the
# sets of files the guest recorded all there.
check_back () {   # check_back WHEN SET...
  local when=$1 d=$T/dump set; shift
  dumpe2fs -h "$back" 2>/dev/null | grep -q '^Filesystem features:.*needs_recovery' &&
    die "after $when: the backing disk's ext4 needs journal recovery (not unmounted before ramback stopped)"
  e2fsck -fn "$back" >"$T/host-fsck.log" 2>&1 ||
    { cat "$T/host-fsck.log" >&2; die "after $when: e2fsck -fn of the backing disk is not clean"; }
  rm -rf "$d"; mkdir -p "$d"
  debugfs -R "rdump / $d" "$back" >"$T/debugfs.log" 2>&1 ||
    { cat "$T/debugfs.log" >&2; die "debugfs rdump failed"; }
  for set in "$@"; do
    [ -s "$d/$set.sha256" ] || die "after $when: no $set.sha256 on the backing disk"
    (cd "$d" && sha256sum --quiet -c "$set.sha256") >"$T/host-sums.log" 2>&1 ||
      { head "$T/host-sums.log" >&2; die "after $when: files of set $set differ on the backing disk"; }
  done
  say "after $when: backing disk e2fsck clean, no journal recovery," \
      "$(for set in "$@"; do cat "$d/$set.sha256"; done | wc -l) files intact"
}

boot setup
check_back reboot a b
boot poweroff
check_back poweroff a b c
boot stop
check_back "stop of ramback@data" a b c d
say "boot scenario: pass"
