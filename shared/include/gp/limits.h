/* gp/limits.h -- every size and count limit in gridpool, with its reason.
 *
 * Each may be overridden with -D at build time; the checks at the bottom
 * refuse combinations that cannot work. */
#ifndef GP_LIMITS_H
#define GP_LIMITS_H

/* Largest encoded message a service accepts or publishes.  NATS' default
 * max_payload is 1 MiB; a 1,000-site listing (about 3,000 nodes) encodes to
 * roughly 600 KiB, so list replies page at GP_MAX_PAGE items instead of
 * growing past this. */
#ifndef GP_MAX_MSG_BYTES
# define GP_MAX_MSG_BYTES        (1000 * 1024)
#endif

/* Items in one list reply page; gpctl follows the cursor for more. */
#ifndef GP_MAX_PAGE
# define GP_MAX_PAGE             1000
#endif

/* Messages queued between cnats delivery threads and one service loop,
 * per lane (gp/bus.h).  Past this, the lane's messages are dropped and
 * counted (gp_bus_dropped_total{lane}): the loop is the bottleneck and
 * queueing more only adds latency.  Control lane (requests, replies): */
#ifndef GP_MAX_INBOX
# define GP_MAX_INBOX            65536
#endif
/* Bulk lane (heartbeats): smaller, since a beat queued longer than a second
 * or two is worth less than the next one; at the registry's ~20,000+ beats
 * a second a full bulk inbox is under 2 s of work. */
#ifndef GP_MAX_INBOX_BULK
# define GP_MAX_INBOX_BULK       32768
#endif
/* The same lanes bounded in bytes (message bodies) too: 65,536 requests
 * of up to GP_MAX_MSG_BYTES each would be 64 GiB.  Past it a message is
 * dropped and counted (gp_bus_stats.dropped_bytes).  cnats' own queue of
 * each subscription has the same bounds (its pending limits). */
#ifndef GP_MAX_INBOX_BYTES
# define GP_MAX_INBOX_BYTES      (64 * 1024 * 1024)
#endif
#ifndef GP_MAX_INBOX_BULK_BYTES
# define GP_MAX_INBOX_BULK_BYTES (32 * 1024 * 1024)
#endif

/* Bytes of JetStream publishes waiting for the bus's worker thread (at
 * most GP_MAX_PENDING_REQ of them); past it gp_bus_js_pub says TOOBIG. */
#ifndef GP_MAX_JS_QUEUE_BYTES
# define GP_MAX_JS_QUEUE_BYTES   (64 * 1024 * 1024)
#endif

/* Outstanding bus requests (request/reply we initiated) per service. */
#ifndef GP_MAX_PENDING_REQ
# define GP_MAX_PENDING_REQ      4096
#endif

/* Requests accepted by the dispatcher and not yet answered (async handlers
 * waiting on Redis or PostgreSQL).  Past this a request gets UNAVAIL. */
#ifndef GP_MAX_INFLIGHT
# define GP_MAX_INFLIGHT         8192
#endif

/* Redis commands in flight per connection before gp_kv_cmd says TOOBIG. */
#ifndef GP_KV_MAX_INFLIGHT
# define GP_KV_MAX_INFLIGHT      65536
#endif

/* PostgreSQL queries waiting for a pooled connection. */
#ifndef GP_DB_MAX_QUEUE
# define GP_DB_MAX_QUEUE         4096
#endif

/* Parameters in one PostgreSQL statement. */
#ifndef GP_DB_MAX_PARAMS
# define GP_DB_MAX_PARAMS        64
#endif

/* Statements in one PostgreSQL transaction built with gp_db_tx. */
#ifndef GP_DB_MAX_TX_STMTS
# define GP_DB_MAX_TX_STMTS      64
#endif

/* Nesting of objects and arrays a decoder follows (hostile input guard). */
#ifndef GP_MAX_DEPTH
# define GP_MAX_DEPTH            8
#endif

/* Length of identifiers: site, node, tenant, pool, product names. */
#ifndef GP_MAX_ID
# define GP_MAX_ID               63
#endif

/* NATS subject length we build or route on. */
#ifndef GP_MAX_SUBJECT
# define GP_MAX_SUBJECT          255
#endif

/* Tokens in a subject we route on (gp.node.<site>.<node>.hb is 5). */
#ifndef GP_MAX_TOKENS
# define GP_MAX_TOKENS           16
#endif

/* Distinct operations one service may serve or declare (each has its own
 * metric series; bindings of one operation share them). */
#ifndef GP_MAX_ROUTES
# define GP_MAX_ROUTES           64
#endif

/* JetStream streams one service declares (plus the chassis' DLQ). */
#ifndef GP_MAX_STREAMS
# define GP_MAX_STREAMS          8
#endif
/* Streams of an account one gp_bus_js_streams call reports (alerting's
 * check of how full each is); more are left out and logged. */
#ifndef GP_MAX_STREAMS_LISTED
# define GP_MAX_STREAMS_LISTED   64
#endif

/* Metric series one process exports. */
#ifndef GP_MAX_METRICS
# define GP_MAX_METRICS          512
#endif

/* A human-readable error detail carried in error replies and logs. */
#ifndef GP_ERRBUF_LEN
# define GP_ERRBUF_LEN           256
#endif

/* One structured log line. */
#ifndef GP_LOG_LINE
# define GP_LOG_LINE             2048
#endif

/* HTTP request header bytes the metrics/health endpoint reads. */
#ifndef GP_HTTP_MAX_REQ
# define GP_HTTP_MAX_REQ         4096
#endif

/* Concurrent HTTP clients of the metrics/health endpoint. */
#ifndef GP_HTTP_MAX_CLIENTS
# define GP_HTTP_MAX_CLIENTS     32
#endif
/* Of those, slots only /healthz and /readyz are answered in (anything
 * else gets 503 there): a scraper that stops reading holds at most the
 * others, so a liveness probe always finds a slot (gp/http.h). */
#ifndef GP_HTTP_PROBE_SLOTS
# define GP_HTTP_PROBE_SLOTS     2
#endif
/* Kernel send buffer of one HTTP client's socket: a client that stops
 * reading pins at most this much (twice this, as Linux counts it) until
 * the write deadline resets it; a 50 KiB /metrics takes a few more
 * EV_WRITE turns. */
#ifndef GP_HTTP_SNDBUF
# define GP_HTTP_SNDBUF          (8 * 1024)
#endif

/* Reconnect backoff for NATS, Redis and PostgreSQL (ms): doubles from MIN
 * to MAX with +-25% jitter so a fleet of services does not reconnect in
 * lock step after an outage. */
#ifndef GP_BACKOFF_MIN_MS
# define GP_BACKOFF_MIN_MS       100
#endif
#ifndef GP_BACKOFF_MAX_MS
# define GP_BACKOFF_MAX_MS       5000
#endif

#if GP_MAX_MSG_BYTES > (1024 * 1024)
# error "GP_MAX_MSG_BYTES must not exceed the NATS server's max_payload (1 MiB)"
#endif
#if GP_MAX_INBOX_BULK_BYTES < GP_MAX_MSG_BYTES || GP_MAX_INBOX_BYTES < GP_MAX_MSG_BYTES || \
    GP_MAX_JS_QUEUE_BYTES < GP_MAX_MSG_BYTES
# error "a byte bound of a queue must hold at least one message of GP_MAX_MSG_BYTES"
#endif
#if GP_HTTP_PROBE_SLOTS < 1 || GP_HTTP_PROBE_SLOTS >= GP_HTTP_MAX_CLIENTS
# error "GP_HTTP_PROBE_SLOTS must leave at least one general HTTP slot"
#endif
#if GP_MAX_ID < 8 || GP_MAX_ID > 255
# error "GP_MAX_ID out of range"
#endif

#define GP_NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define GP_CONTAINER_OF(ptr, type, member) \
    ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

#endif
