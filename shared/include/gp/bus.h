/* gp/bus.h -- NATS for one libev loop.
 *
 * cnats keeps its own socket threads (read loop, flusher); everything it
 * hands us (messages, replies, JetStream acks and fetched messages,
 * connection events) is queued and delivered on the loop thread through
 * one ev_async.  So: every gp_bus function must be called on the loop
 * thread, and every callback runs on the loop thread.  Requests use one
 * wildcard inbox and a deadline timer; JetStream calls that block in cnats
 * (stream management, Fetch) run on a worker thread.
 *
 * Lanes.  A subscription belongs to a lane: CONTROL (requests, replies,
 * connection events; the default) or BULK (telemetry such as heartbeats).
 * Each lane has its own bounded inbox between cnats threads and the loop
 * (GP_MAX_INBOX, GP_MAX_INBOX_BULK messages; GP_MAX_INBOX_BYTES,
 * GP_MAX_INBOX_BULK_BYTES of bodies); past either, that lane's messages
 * are dropped and counted (gp_bus_stats.dropped_lane, dropped_bytes).  The loop drains the
 * control lane first and gives bulk what is left of each batch (at least a
 * small share, so bulk is never starved either): a heartbeat flood fills
 * and sheds only the bulk lane while requests keep being served.
 *
 * Publishing is NOT free of blocking, and this is measured rather than
 * hidden: cnats writes each publish on the calling (loop) thread (we set
 * SendAsap, which halves a round trip), and when the socket buffer is full
 * (server stopped or too slow) that write waits.  A write deadline of
 * GP_BUS_WRITE_DEADLINE_MS bounds the wait: past it cnats drops the
 * connection and reconnects, publishes meanwhile go into its 8 MiB
 * reconnect buffer (no socket write) and, when that is full, fail
 * (gp_bus_stats.publish_errors).  But each reconnect attempt to a hung
 * server (TCP accepted, no INFO) holds cnats' connection lock for the
 * connect timeout (GP_BUS_CONNECT_TIMEOUT_MS), and a publish waits for it:
 * measured by bus_test's test_pub_stall under a SIGSTOPped nats-server,
 * the loop stalls 0.5 s once (write deadline), then about 1 s per
 * reconnect attempt (attempts back off from 100 ms to 5 s).  A server that
 * is down (connection refused) costs no stall.  `make bench` (pub_bench)
 * puts the same figures next to a publish on an idle connection (well
 * under 10 us), against a fake server that stops reading.  Handing
 * publishes to a thread would remove these stalls at the price of a
 * hand-off and a copy on every reply; not done. */
#ifndef GP_BUS_H
#define GP_BUS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp/err.h"

struct ev_loop;

typedef struct gp_bus     gp_bus;
typedef struct gp_bus_sub gp_bus_sub;
typedef struct gp_bus_pull gp_bus_pull;
typedef struct gp_jsmsg   gp_jsmsg;

typedef struct gp_bus_opts {
    const char *url;               /* "nats://127.0.0.1:4222[,nats://...]" */
    const char *name;              /* connection name, shown by the server */
    const char *user;              /* optional */
    const char *password;          /* optional */
    const char *token;             /* optional */
    /* Prefix of the reply inbox (default "_INBOX"): replies to our requests
     * come on "<prefix>.<nuid>.<token>".  An agent sets its own subtree
     * ("gp.node.<site>.<node>._reply") so its NATS identity needs no
     * subscribe rights outside it, a tenant's gpctl gp.api.<t>._reply;
     * cnats' own inboxes (JetStream calls and fetches) get it too.  A
     * subject without wildcards. */
    const char *inbox_prefix;
    bool        jetstream;         /* open a JetStream context */
    /* Requests outstanding at once, at most (TOOBIG past it); 0 =
     * GP_MAX_PENDING_REQ.  The simulator, whose one connection carries
     * every simulated agent's requests, sizes it to its fleet. */
    size_t      max_pending;
} gp_bus_opts;

/* The lane of a subscription (see the top of this file). */
typedef enum gp_bus_lane {
    GP_LANE_CONTROL = 0,
    GP_LANE_BULK = 1
} gp_bus_lane;
#define GP_BUS_LANES 2

/* How long one socket write on the loop thread may wait for a server that
 * does not read before cnats gives the connection up (see the top). */
#ifndef GP_BUS_WRITE_DEADLINE_MS
# define GP_BUS_WRITE_DEADLINE_MS 500
#endif
/* Connect timeout of one (re)connect attempt; while a hung server is being
 * retried, each attempt can hold a publish on the loop this long. */
#ifndef GP_BUS_CONNECT_TIMEOUT_MS
# define GP_BUS_CONNECT_TIMEOUT_MS 1000
#endif

/* A message as seen by a subscriber: valid only during the callback. */
typedef struct gp_bus_msg {
    const char *subject;
    const char *reply;             /* NULL when none */
    const char *data;
    size_t      len;
} gp_bus_msg;

typedef void gp_bus_msg_cb(void *arg, const gp_bus_msg *m);

/* Called once per request: err OK with the reply bytes (valid during the
 * call), TIMEOUT at the deadline, NOROUTE when nobody listens (NATS "no
 * responders"), UNAVAIL when the connection is closed. */
typedef void gp_bus_reply_cb(void *arg, gp_err err, const char *data, size_t len);

/* Connection events: connected (true) / disconnected (false). */
typedef void gp_bus_conn_cb(void *arg, bool connected);

typedef struct gp_bus_stats {
    uint64_t received;             /* messages delivered to subscribers */
    uint64_t dropped;              /* messages dropped at a full inbox, all lanes */
    uint64_t dropped_lane[GP_BUS_LANES];   /* the same by lane */
    uint64_t dropped_bytes;        /* of dropped: the lane's byte bound was reached */
    uint64_t nats_dropped;         /* dropped by cnats at a subscription's pending limits */
    uint64_t js_refused;           /* JetStream publishes refused: the worker's queue full */
    uint64_t published;
    uint64_t publish_errors;
    uint64_t requests;
    uint64_t request_timeouts;
    uint64_t reconnects;
    uint64_t js_published;
    uint64_t js_publish_errors;
    uint64_t js_full;              /* of those, refused for a full stream or store */
    uint64_t js_delivered;
} gp_bus_stats;

/* Creates the connection.  If the server is not reachable yet, returns OK
 * and keeps trying in the background (reconnects forever with backoff and
 * jitter); conn_cb reports the state changes.  conn_cb may be NULL. */
gp_err gp_bus_new(struct ev_loop *loop, const gp_bus_opts *opts,
                  gp_bus_conn_cb *conn_cb, void *conn_arg, gp_bus **out);
/* Closes the connection and fails pending requests with UNAVAIL.  NULL ok.
 * Also frees the bus's subscriptions and pull consumers (their handles are
 * invalid afterwards); gp_jsmsg still held may still be ended.  Allowed
 * inside any bus callback (deferred until it returns).  Waits briefly for
 * cnats threads to leave their callbacks. */
void   gp_bus_free(gp_bus *bus);
bool   gp_bus_is_connected(const gp_bus *bus);
/* True when nats-server refused something of this connection for its
 * permissions (NATS' asynchronous -ERR "Permissions Violation for ...", for
 * a publish or a subscription); the server's text is copied into out.  A
 * refused publish is dropped by the server and its request only times out,
 * so a client says why with this.  Also true after the server refused the
 * connection's credentials ("Authorization Violation"). */
bool   gp_bus_refusal(const gp_bus *bus, char *out, size_t n);
void   gp_bus_get_stats(const gp_bus *bus, gp_bus_stats *out);

/* Subscribes; queue may be NULL (every subscriber gets every message) or a
 * queue group name (one member of the group gets each message).  The
 * subscription is in the control lane. */
gp_err gp_bus_sub_new(gp_bus *bus, const char *subject, const char *queue,
                      gp_bus_msg_cb *cb, void *arg, gp_bus_sub **out);
/* The same in a given lane (GP_LANE_BULK for telemetry floods). */
gp_err gp_bus_sub_new_lane(gp_bus *bus, const char *subject, const char *queue,
                           gp_bus_lane lane, gp_bus_msg_cb *cb, void *arg, gp_bus_sub **out);
/* Unsubscribes.  Messages already queued for it are discarded.  NULL ok. */
void   gp_bus_sub_free(gp_bus_sub *sub);

/* Publishes.  reply may be NULL.  Written to the socket at once; may wait
 * up to about GP_BUS_WRITE_DEADLINE_MS when the server does not read (see
 * the top of this file). */
gp_err gp_bus_pub(gp_bus *bus, const char *subject, const char *reply,
                  const void *data, size_t len);

/* Request/reply with a deadline; cb is called exactly once (also from
 * gp_bus_fail_requests and gp_bus_free, with UNAVAIL).  When it returns an
 * error cb is not called.  TOOBIG past max_pending (gp_bus_opts) outstanding
 * requests; UNAVAIL after gp_bus_fail_requests. */
gp_err gp_bus_request(gp_bus *bus, const char *subject, const void *data, size_t len,
                      unsigned timeout_ms, gp_bus_reply_cb *cb, void *arg);
/* The same with the header Nats-Msg-Id: msg_id, so a request to a
 * stream's subject (its reply the PubAck) that is retried is stored once
 * within the stream's duplicate window, on a bus without a JetStream
 * context (an agent's). */
gp_err gp_bus_request_msgid(gp_bus *bus, const char *subject, const char *msg_id,
                            const void *data, size_t len, unsigned timeout_ms,
                            gp_bus_reply_cb *cb, void *arg);

/* For shutdown: calls every outstanding request's callback now, with
 * UNAVAIL (so nothing waiting on the bus outlives what its callback
 * points to), and refuses new requests from then on (UNAVAIL), also ones
 * made inside those callbacks.  Subscriptions and publishing keep working,
 * so a handler told UNAVAIL can still send its reply.  Returns how many
 * requests were failed.  Call it before ending pending handler requests. */
size_t gp_bus_fail_requests(gp_bus *bus);

/* Blocks until all buffered publishes reached the server (or timeout).
 * For command-line tools and tests only, never on a service loop. */
gp_err gp_bus_flush_blocking(gp_bus *bus, unsigned timeout_ms);

/* ---- JetStream ------------------------------------------------------- */

typedef struct gp_stream_cfg {
    const char  *name;             /* "USAGE" */
    const char **subjects;         /* NULL-terminated */
    int64_t      max_age_s;        /* 0 = unlimited */
    int64_t      max_bytes;        /* 0 = unlimited */
    int64_t      duplicate_window_s; /* dedupe window for message ids; 0 = server default (2 min) */
    bool         memory;           /* memory storage (tests); default file */
    int          replicas;         /* 0 = 1; a service's come from stream-replicas (gp_app) */
    /* When full (max_bytes): false (the default) refuses the new message,
     * so its publisher sees the error (TOOBIG) and its outbox keeps it;
     * true drops the oldest, for plain publications nobody could retry. */
    bool         discard_old;
} gp_stream_cfg;

typedef void gp_bus_done_cb(void *arg, gp_err err);

/* Creates the stream, or updates it to cfg without lowering anything the
 * stream has (gp/streamcfg.h: its replicas, max_bytes, max_age and
 * max_msgs stay where they are larger, and the kept ones are logged as
 * stream_kept); on the worker thread; cb once.  JetStream calls return
 * INVAL on a bus opened without opts.jetstream, and TOOBIG past
 * GP_MAX_PENDING_REQ jobs, or GP_MAX_JS_QUEUE_BYTES of publishes, queued
 * for the worker (gp_bus_stats.js_refused); on an error return cb is not
 * called. */
gp_err gp_bus_js_stream(gp_bus *bus, const gp_stream_cfg *cfg, gp_bus_done_cb *cb, void *arg);

/* Publishes to a stream with a message id (Nats-Msg-Id) so a retried
 * publish is stored once.  cb once: OK when stored (or recognised as a
 * duplicate), otherwise the error: TOOBIG when the stream is full (its
 * byte or message limit, with discard new) or the server's store is
 * (counted in gp_bus_stats.js_full).  cb may be NULL. */
gp_err gp_bus_js_pub(gp_bus *bus, const char *subject, const char *msg_id,
                     const void *data, size_t len, gp_bus_done_cb *cb, void *arg);

/* One stream as nats-server reports it (gp_bus_js_streams). */
typedef struct gp_stream_state {
    char     name[64];
    uint64_t msgs, bytes;
    int64_t  max_msgs, max_bytes;  /* <= 0: unlimited */
    int64_t  max_age_ns;           /* <= 0: unlimited */
    int      replicas;
    bool     discard_old;
} gp_stream_state;

/* Called once with the streams of the connection's account (at most
 * GP_MAX_STREAMS_LISTED; n 0 with an error); s is valid during the call. */
typedef void gp_bus_streams_cb(void *arg, gp_err err, const gp_stream_state *s, size_t n);

/* Lists the account's streams with their state and limits, on the worker
 * thread.  Errors as gp_bus_js_stream. */
gp_err gp_bus_js_streams(gp_bus *bus, gp_bus_streams_cb *cb, void *arg);

/* A message fetched from a durable pull consumer.  The callback owns it
 * and must end it with exactly one of gp_jsmsg_ack / gp_jsmsg_nak /
 * gp_jsmsg_term (which free it), now or later; the consumer keeps at most
 * max_inflight un-ended messages. */
typedef void gp_bus_js_cb(void *arg, gp_jsmsg *m);

typedef struct gp_pull_cfg {
    const char *stream;
    const char *durable;           /* durable consumer name */
    const char *filter_subject;    /* NULL = all of the stream */
    int         batch;             /* messages per fetch (default 64) */
    int         max_inflight;      /* un-ended messages (default 1024) */
    int64_t     ack_wait_ms;       /* redelivery after this (default 30 s) */
    bool        bind_only;         /* the durable exists, made by its owner: bind to it as it
                                    * is, never create or update it (an identity that may only
                                    * fetch and ack it, as a tenant its tenant-<t> on JOBS) */
} gp_pull_cfg;

gp_err gp_bus_js_pull_new(gp_bus *bus, const gp_pull_cfg *cfg, gp_bus_js_cb *cb, void *arg,
                          gp_bus_pull **out);
/* Creates the durable consumer cfg describes, or updates it to cfg, on the
 * worker thread, without reading from it: for a consumer one service makes
 * for another identity to read (cfg->bind_only must be false).  cb once,
 * OK or the error (CONFLICT: the JetStream API refused the config). */
gp_err gp_bus_js_consumer(gp_bus *bus, const gp_pull_cfg *cfg, gp_bus_done_cb *cb, void *arg);
/* Stops fetching; un-ended messages are redelivered later by the server.
 * Messages already handed out may still be ended.  Does not block; the
 * worker is joined on the loop once its current fetch (<= 1 s) returns.
 * The durable consumer is kept on the server.  If the stream does not
 * exist yet, the consumer retries every second until it does. */
void   gp_bus_js_pull_free(gp_bus_pull *p);

const char *gp_jsmsg_subject(const gp_jsmsg *m);
const void *gp_jsmsg_data(const gp_jsmsg *m);
size_t      gp_jsmsg_len(const gp_jsmsg *m);
uint64_t    gp_jsmsg_delivered(const gp_jsmsg *m);   /* delivery count, 1 = first */
void        gp_jsmsg_ack(gp_jsmsg *m);
void        gp_jsmsg_nak(gp_jsmsg *m, unsigned delay_ms);
void        gp_jsmsg_term(gp_jsmsg *m);

#endif
