/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The JSON result objects of the commands (--json): result_new starts
 * {"command":COMMAND,"socket":SOCKET, each result_* adds a field, and
 * result_print closes the object, prints it on one line and frees it.
 */

#ifndef RAMBACK_CLI_RESULT_H
#define RAMBACK_CLI_RESULT_H

#include <stdbool.h>
#include <stdint.h>

#include <glib.h>

extern GString *result_new (const char *command, const char *socket);
extern void result_key (GString *o, const char *key);
extern void result_str (GString *o, const char *key, const char *v);
extern void result_u64 (GString *o, const char *key, uint64_t v);
/* Durations with millisecond precision, never in exponent form. */
extern void result_seconds (GString *o, const char *key, double v);
extern void result_bool (GString *o, const char *key, bool v);
extern void result_print (GString *o);

#endif /* RAMBACK_CLI_RESULT_H */
