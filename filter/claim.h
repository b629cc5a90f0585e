/* SPDX-License-Identifier: GPL-2.0-or-later */
/* nbdkit-ramback-filter: one writer per backing file, as in the plugin
 * form (claim.c).
 *
 *   claim_add      remember a file= parameter going down to the plugin
 *   claim_all      claim each that is a regular file (lock) or a block
 *                  device (O_EXCL); -1 with the error logged if one is
 *                  in use
 *   claim_find     the file= parameter naming the same file or device
 *                  as path, or NULL
 *   claim_release  close them all (.unload)
 */

#ifndef RAMBACK_FILTER_CLAIM_H
#define RAMBACK_FILTER_CLAIM_H

extern int claim_add (const char *path);
extern int claim_all (void);
extern const char *claim_find (const char *path);
extern void claim_release (void);

#endif /* RAMBACK_FILTER_CLAIM_H */
