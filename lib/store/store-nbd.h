/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ramback: the NBD store's private header, shared by its files:
 *
 *   store-nbd.c        the store operations and open (the design notes)
 *   store-nbd-queue.c  pieces: cutting, queueing, issuing, completing
 *   store-nbd-conn.c   the connection threads: connect, the I/O loop
 *   store-nbd-loss.c   a lost connection: suspect writes, reconnect
 *
 * Locking, beside the state below: st->lock (the store lock) protects
 * the queues, the in-flight lists, the fields of struct conn marked
 * "store lock" and everything in struct nbd_store after it; a
 * connection's libnbd handle and the fields marked "connection thread"
 * belong to that connection's thread alone once threads run; a batch
 * has its own lock for its count and error.  No lock is held across
 * network I/O.  Functions named nbdstore_* are shared between these
 * files and nothing else; each says which locks it expects.
 */

#ifndef RAMBACK_STORE_NBD_H
#define RAMBACK_STORE_NBD_H

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <libnbd.h>

#include "ramback.h"
#include "store.h"
#include "error.h"
#include "env.h"
#include "cleanup.h"
#include "json.h"
#include "backoff.h"
#include "inflight.h"

#define MAX_CONNECTIONS 64          /* as glue/params.c allows */
#define AUTO_CONNECTIONS 4          /* when the server offers multi-conn */
#define DEFAULT_INFLIGHT 16         /* bulk pieces in flight per connection */
#define MAX_INFLIGHT 1024
#define MAX_REQUEST (1024 * 1024)   /* piece size for reads and writes */
#define MAX_ZERO_REQUEST (32 * 1024 * 1024)
#define URGENT_BYTES (1024 * 1024)  /* batches up to this size jump the queue */
#define BLOCK_STATUS_SPAN (1024 * 1024 * 1024)
#define OPEN_CONNECT_TIMEOUT_MS 15000
#define CONNECT_TIMEOUT_MS 5000
#define DISCONNECT_TIMEOUT_MS 1000
/* TCP keepalive: a peer that answers nothing for about KEEPALIVE_S
 * seconds (a probe after IDLE s of silence, then every INTVL s, CNT
 * times; the same bound for data never acknowledged) is gone.
 */
#define KEEPALIVE_IDLE_S 10
#define KEEPALIVE_INTVL_S 5
#define KEEPALIVE_CNT 6
#define KEEPALIVE_S (KEEPALIVE_IDLE_S + KEEPALIVE_INTVL_S * KEEPALIVE_CNT)
#define MAX_DRAINS 16               /* lost connections watched per conn */
#define DRAIN_BUF 16384

enum piece_op { P_READ, P_WRITE, P_ZERO, P_FLUSH, P_EXTENTS };

/* What the caller of submit() waits for: all of its pieces. */
struct batch {
  rb_mutex lock;
  rb_cond cond;
  size_t pending;             /* pieces not yet finalized */
  int err;                    /* first error, 0 if none */
  char msg[200];              /* says what the first error was */
};

/* Result of a block status piece, filled in by the extent callback. */
struct extents {
  uint64_t covered;           /* bytes described from the piece's offset */
  uint64_t data_start;        /* first data byte, UINT64_MAX: none */
  uint64_t data_end;          /* end of the data run from data_start */
};

struct conn;

struct piece {
  struct piece *next;         /* queue link (store lock) */
  struct batch *batch;
  struct rb_io *io;           /* NULL for flush and block status */
  struct conn *conn;
  enum piece_op op;
  void *buf;
  uint64_t count;
  uint64_t offset;
  struct extents *ext;
  bool urgent;
  uint64_t epoch;             /* FLUSH: the handle it is for, 0: any */
  /* Owned by the connection's thread once dequeued. */
  bool issued;                /* counted in conn->inflight */
  bool issuing;               /* inside the nbd_aio_* call */
  bool sent;                  /* handed to libnbd: may reach the server */
  bool completed;             /* completion callback ran */
  bool freed;                 /* .free ran */
  int err;
  uint64_t gen;               /* FLUSH: conn->write_gen when issued */
  /* On the connection's in-flight list while issued (store lock). */
  struct rb_inflight_req ireq;
};

/* Ranges of the store whose last write has an unknown outcome.  If one
 * cannot be remembered on its own (no memory), the catch-all 'wide'
 * range grows to cover it: writing too much again is safe, forgetting
 * is not.
 */
struct ranges {
  struct rb_store_range *v;
  size_t len, cap;
  uint64_t bytes;
  bool wide;
  uint64_t wide_lo, wide_hi;
};

/* A lost connection whose server may still be executing writes of it.
 * Created and freed by its connection's thread; the list and the
 * ranges are changed under the store lock (status reads them).
 */
struct drain {
  struct drain *next;
  int fd;                     /* our duplicate of its socket, -1: none */
  bool unknown;               /* its end cannot be seen: hand the ranges
                                 over at the next reconnect */
  struct ranges r;
};

struct nbd_store;

struct conn {
  struct nbd_store *st;
  int idx;
  /* Only the connection's thread touches the handle once threads run. */
  struct nbd_handle *nbd;
  int sockdup;                /* duplicate of the handle's socket, -1 */
  int wakefd;                 /* eventfd: queue changed or quit */
  rb_thread thread;
  uint64_t last_progress_ns;  /* request-timeout=, connection thread */
  /* Connection thread: when the handle came up.  A handshake, or even
   * requests answered, are not health: a server that accepts and then
   * drops every connection within moments (its unflushed writes with
   * it) must meet a growing back-off, not a reconnect per loss.
   */
  uint64_t up_since_ns;
  bool proven;                /* up for HEALTHY_NS since (store-nbd-loss.c) */
  bool drains_full_logged;    /* connection thread */
  /* Writes completed on this connection, and how many of them the last
   * successful FLUSH covered (connection thread only).
   */
  uint64_t write_gen;
  uint64_t flushed_gen;
  /* Protected by the store lock. */
  bool up;
  uint64_t epoch;             /* of the current handle, unique per store */
  bool want_reconnect;        /* a sibling is back: try now */
  struct rb_inflight_list inflight; /* issued pieces, oldest first */
  struct ranges susp;         /* writes of the current handle without
                                 a reply when they ended */
  struct drain *drains;       /* lost handles not known to be over */
  unsigned ndrains;
  uint64_t failures;          /* reconnect attempts failed in a row */
  struct piece *u_head, *u_tail;   /* urgent queue */
  struct piece *q_head, *q_tail;   /* bulk queue */
  unsigned queued;
};

struct nbd_store {
  struct rb_store s;
  char *uri;
  char *tls_certificates;
  char *tls_psk_file;
  char *tls_username;
  int tls_verify_peer;
  bool want_tls;

  /* Export properties, fixed at open (a reconnect must match size). */
  bool multi_conn;
  bool can_flush;
  bool can_trim;
  bool block_status;
  uint64_t max_request;
  void *zero_buf;             /* emulates ZERO when the server cannot */

  int nconns;
  unsigned max_inflight;
  uint64_t request_timeout_ns;  /* 0: never give up on a live connection */
  struct conn conns[MAX_CONNECTIONS];

  rb_mutex lock;              /* protects everything below and the queues */
  bool threads_started;
  pid_t threads_pid;
  bool quit;
  bool abandon_reads;         /* a stop: reads are no longer needed */
  bool failing;               /* the last piece failed with a server error */
  /* Connections lost with acknowledged but unflushed writes, and how
   * many of those losses a flush() has reported by returning EIO.  A
   * flush() that begins while losses > losses_reported fails.
   */
  uint64_t losses, losses_reported;
  uint64_t epochs;            /* last handle epoch given out */
  struct ranges ready;        /* suspects handed to the core next */
  uint64_t next_attempt_ns;   /* when a reconnect may next be tried */
  uint64_t backoff_ns;
  uint64_t reconnects;
  uint64_t disconnects;
  struct rb_inflight_counts counts;   /* of every connection's list */
};

/* store-nbd-loss.c: the connection has stayed up long enough? Returns
 * the poll timeout to use (timeout_ms, or less to look again then).
 */
int nbdstore_conn_proven (struct conn *c, int timeout_ms);

/* store-nbd-queue.c */
/* Called with the store lock held. */
void nbdstore_update_state (struct nbd_store *st);
int nbdstore_count_up (struct nbd_store *st);
void nbdstore_wake (struct conn *c);

/* Append all of 'from' to 'to' and empty 'from'. */
void nbdstore_ranges_move (struct ranges *to, struct ranges *from);
bool nbdstore_ranges_empty (const struct ranges *r);

/* Finish one piece: tell its batch, account for it.  Runs on the
 * connection's thread (or in submit for pieces never queued).
 */
void nbdstore_finalize (struct piece *p, const char *cause);

/* Copy libnbd's message for this thread into why, without the
 * trailing ": <strerror>" that rb_set_error() appends again.
 */
void nbdstore_nbd_reason (char *why, size_t whylen, int err);

/* Issue one piece on the connection's handle.  Connection thread only. */
void nbdstore_issue (struct conn *c, struct piece *p);

/* Take pieces off the queues: every urgent one, and bulk ones while
 * there are in-flight slots.  Store lock held.
 */
struct piece *nbdstore_dequeue (struct conn *c, bool for_issue);
void nbdstore_fail_list (struct piece *list, const char *cause);

/* Queue the pieces (on piece->conn if set, else on the least loaded
 * connection) and wait for all of them.  Returns 0 or -1 with the
 * error recorded.  If every connection is down and no reconnect attempt
 * is due yet, fails at once with EIO.
 */
int nbdstore_run_pieces (struct nbd_store *st, struct piece *pieces, size_t n);

/* store-nbd-conn.c */
/* Bounded wait on a handle until 'done' or the deadline. */
int nbdstore_poll_until (struct nbd_handle *h,
                         int (*done) (struct nbd_handle *), uint64_t deadline);

/* Open one connection, bounded by timeout_ms.  On failure returns NULL
 * and describes the reason in 'why' (with errno set).
 */
struct nbd_handle *nbdstore_connect_one (struct nbd_store *st, int idx,
                                         int timeout_ms,
                                         char *why, size_t whylen);

/* A reconnected export must still be the same disk. */
int nbdstore_check_same_export (struct nbd_store *st, struct nbd_handle *h,
                                char *why, size_t whylen);

/* The socket under a new handle.  TCP: keepalive and a user timeout,
 * so that a peer that is really gone (host down, link cut) is noticed
 * within about KEEPALIVE_S seconds even while we only wait for replies,
 * whereas a live server that is merely slow answers the probes and is
 * waited for.  Returns a duplicate of the socket (see "Writes of a lost
 * connection" at the top), or -1 if none could be made.
 */
int nbdstore_sock_setup (struct nbd_store *st, struct nbd_handle *h);

/* Start the connection threads on first use, and again in a child of
 * fork (the threads do not exist there).
 */
int nbdstore_ensure_threads (struct nbd_store *st);

/* store-nbd-loss.c */
/* Connection thread: bring the connection back. */
void nbdstore_reconnect (struct conn *c);

/* Connection thread: the handle died, or we give up on it (give_up:
 * request-timeout=).  Closing it runs .free for every command still in
 * flight, which fails those pieces and notes the writes among them as
 * suspect (finalize); they move to a drain that watches for the server
 * to close its end.
 */
void nbdstore_conn_lost (struct conn *c, const char *why, bool give_up);

/* Connection thread: read and drop what servers still send on lost
 * connections; end-of-file (or a reset) means the server has closed
 * its end, so its requests are over.  fds[i] belongs to dv[i].
 */
void nbdstore_drain_events (struct conn *c, const struct pollfd *fds,
                            struct drain **dv, size_t n);

/* The drains' sockets to poll; returns how many (at most MAX_DRAINS). */
size_t nbdstore_drain_fds (struct conn *c, struct pollfd *fds,
                           struct drain **dv);

#endif /* RAMBACK_STORE_NBD_H */
