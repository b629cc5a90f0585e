/* SPDX-License-Identifier: GPL-2.0-or-later */
/* A name server that stops answering, for tests (LD_PRELOAD).
 *
 * getaddrinfo of the name in $SLOWDNS_NAME answers 127.0.0.1 while the
 * file $SLOWDNS_HANG does not exist, and never returns once it does
 * (the way a lookup hangs on a name server that drops queries).  Other
 * names go to the C library.
 */

#define _GNU_SOURCE
#include <dlfcn.h>
#include <netdb.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

int
getaddrinfo (const char *node, const char *service,
             const struct addrinfo *hints, struct addrinfo **res)
{
  int (*next) (const char *, const char *, const struct addrinfo *,
               struct addrinfo **) = dlsym (RTLD_NEXT, "getaddrinfo");
  const char *name = getenv ("SLOWDNS_NAME");
  const char *hang = getenv ("SLOWDNS_HANG");

  if (node && name && strcmp (node, name) == 0) {
    while (hang && access (hang, F_OK) == 0)
      sleep (1);
    node = "127.0.0.1";
  }
  return next (node, service, hints, res);
}
