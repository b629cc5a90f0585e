/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: exclusive use of a file or a block device, and who else
 * holds one.
 *
 * A backing file and a ram= file are locked with an open file
 * description lock (fcntl F_OFD_SETLK) on the whole file: it belongs to
 * the open file, not to the process, so it stays held when nbdkit forks
 * into the background and the parent exits, and it is released only
 * when the last descriptor of that open file is closed (a clean stop, or
 * the process dying).  It conflicts with POSIX record locks (lockf(3),
 * F_SETLK) and with other OFD locks (qemu's image locking), not with
 * flock(2).  A block device is opened with O_EXCL instead (store-file.c):
 * the kernel then refuses it while it is mounted, part of a device
 * mapper or RAID device, or opened with O_EXCL by anyone else.
 *
 * The describe functions only build text for an error message: they
 * scan /proc and /sys, best effort, and never fail.
 */

#ifndef RAMBACK_EXCLUSIVE_H
#define RAMBACK_EXCLUSIVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Lock the whole file open as fd, without waiting: a write lock, or a
 * read lock if !write (fd then need not be writable).  Returns 0 when
 * locked, 1 when someone else holds a conflicting lock, -1 with errno
 * set when the file cannot be locked at all (ENOLCK on some network
 * file systems).
 */
extern int rb_lock_file (int fd, bool write);

/* Who holds a lock on the file open as fd, other than this process:
 * "pid 1234 (nbdkit)", "pids 1234 (nbdkit), 1240 (qemu-kvm)", or
 * "another process" when /proc cannot tell.
 */
extern void rb_describe_lock_holders (int fd, char *buf, size_t len);

/* Who uses block device rdev (st_rdev), other than this process:
 * "mounted on /mnt; held by dm-0; open in pid 1234 (nbdkit)", or "" when
 * nothing can be found.
 */
extern void rb_describe_device_users (uint64_t rdev, char *buf, size_t len);

/* Open block device path (rdev: its st_rdev) with flags | O_CLOEXEC |
 * O_EXCL.  Returns the descriptor, or -1 with the error set: for EBUSY
 * "KEY=PATH is in use (its users): ...", else "KEY=PATH: open with
 * O_EXCL" (key: the parameter that named it).
 */
extern int rb_open_block_excl (const char *key, const char *path,
                               int flags, uint64_t rdev);

#endif /* RAMBACK_EXCLUSIVE_H */
