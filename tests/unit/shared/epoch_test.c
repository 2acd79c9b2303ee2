/* epoch_test.c -- the per-shard rebuild driver (gp/epoch.h) with a fake
 * service: no Redis and no PostgreSQL; every call the service "sends" is
 * queued, and the test answers it with a fabricated reply through
 * gp_epoch_answered.  Asserts: every begun shard waits for the one read;
 * "present" counts present and does not mark again; a failure marks again
 * unless "lost"; "wait" marks again and counts nothing; a mark arriving
 * during a round calls again at its end (and only then); a failed read
 * fails every begun shard; chunked steps go on until the service says
 * seal, and "sealed" is done; a failed send fails its shard; the counters
 * and the round's log lines. */
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gp/epoch.h"
#include "gp/log.h"
#include "test.h"

enum { S_CHUNK = GP_EPOCH_FIRST, S_SEAL };

/* The fake service's per-shard data: chunks to send, sent, counted. */
typedef struct fjob {
    int      rows, sent;
    unsigned counted;
} fjob;

/* The fake round's figures, for the log line. */
typedef struct fround {
    unsigned rows, counted;
} fround;

/* A call the fake service sent: whose, at which step. */
typedef struct call {
    gp_epoch_job *j;
    int           step;
} call;

typedef struct fake {
    call            q[2 * GP_SHARDS];
    int             head, tail;
    int             reads, dones, ends, agains;
    gp_epoch_round *round;             /* the read in progress */
    gp_err          begin_rc, step_rc;  /* what a send returns */
} fake;

static fake       F;
static gp_epoch   ep;
static gp_metrics *mx;
static int         logfd = -1;

static gp_err
f_send(gp_epoch_job *j, gp_err rc)
{
    if (rc == GP_EOK && F.tail < (int)(sizeof(F.q) / sizeof(F.q[0])))
        F.q[F.tail++] = (call){j, j->step};
    return rc;
}

static gp_err
f_begin(void *svc, gp_epoch_job *j)
{
    (void)svc;
    return f_send(j, F.begin_rc);
}

static void
f_read(void *svc, gp_epoch_round *r)
{
    (void)svc;
    F.reads++;
    F.round = r;
}

/* Like the services: the first call after the read is a chunk (even with
 * no rows), then one chunk per row, then the seal. */
static gp_err
f_step(void *svc, gp_epoch_job *j, const redisReply *rep)
{
    fjob *d = j->data;

    (void)svc;
    if (rep != NULL && rep->type == REDIS_REPLY_INTEGER)
        d->counted += (unsigned)rep->integer;
    if (rep != NULL && d->sent >= d->rows)
        j->step = S_SEAL;
    if (j->step == S_CHUNK)
        d->sent++;
    return f_send(j, F.step_rc);
}

static void
f_done(void *svc, gp_epoch_job *j)
{
    const fjob *d = j->data;
    fround     *fr = gp_epoch_data(j->round);

    (void)svc;
    F.dones++;
    fr->rows += (unsigned)d->rows;
    fr->counted += d->counted;
}

static void
f_fields(void *svc, gp_epoch_round *r, char *buf, size_t len)
{
    const fround *fr = gp_epoch_data(r);

    (void)svc;
    snprintf(buf, len, "rows=%u counted=%u", fr->rows, fr->counted);
}

static void
f_end(void *svc, gp_epoch_round *r)
{
    (void)svc;
    (void)r;
    F.ends++;
    F.round = NULL;
}

static void
f_again(void *svc)
{
    (void)svc;
    F.agains++;
}

static const gp_epoch_ops ops = {
    .metric = "gp_test_redis_rebuilds_total",
    .round_size = sizeof(fround),
    .job_size = sizeof(fjob),
    .begin = f_begin,
    .read = f_read,
    .step = f_step,
    .done = f_done,
    .fields = f_fields,
    .end = f_end,
    .again = f_again,
};

/* A fresh driver, fake and log for each test. */
static void
setup(void)
{
    memset(&F, 0, sizeof(F));
    memset(&ep, 0, sizeof(ep));
    gp_metrics_free(mx);
    mx = gp_metrics_new();
    gp_epoch_init(&ep, &ops, NULL, "inst-1", mx);
    char path[] = "/tmp/epoch_test.XXXXXX";

    if (logfd >= 0)
        close(logfd);
    if ((logfd = mkstemp(path)) >= 0) {
        unlink(path);
        fcntl(logfd, F_SETFL, O_APPEND);
    }
    gp_log_setup("epoch_test", "info", logfd);
}

/* The lines logged since setup. */
static const char *
logged(void)
{
    static char buf[4096];
    ssize_t     n = pread(logfd, buf, sizeof(buf) - 1, 0);

    buf[n > 0 ? n : 0] = '\0';
    for (char *c = buf; (c = strchr(c, '\n')) != NULL;)
        *c = ' ';                      /* one TAP line */
    return buf;
}

/* The oldest unanswered call of shard sh (NULL: none). */
static call *
pending(unsigned sh)
{
    for (int i = F.head; i < F.tail; i++)
        if (F.q[i].j != NULL && F.q[i].j->shard == sh)
            return &F.q[i];
    return NULL;
}

/* Takes shard sh's oldest call off the queue: its job. */
static gp_epoch_job *
take(unsigned sh)
{
    call         *c = pending(sh);
    gp_epoch_job *j = c != NULL ? c->j : NULL;

    if (c != NULL)
        c->j = NULL;
    return j;
}

/* A string (or, type REDIS_REPLY_ERROR, an error reply) to sh's call. */
static void
say_text(unsigned sh, int type, const char *s)
{
    gp_epoch_job *j = take(sh);
    char          text[64];
    redisReply    r = {.type = type, .str = text};

    snprintf(text, sizeof(text), "%s", s);
    r.len = strlen(text);
    if (j != NULL)
        gp_epoch_answered(j, &r, GP_EOK);
}

static void
say_str(unsigned sh, const char *s)
{
    say_text(sh, REDIS_REPLY_STRING, s);
}

static void
say_int(unsigned sh, long long v)
{
    gp_epoch_job *j = take(sh);
    redisReply    r = {.type = REDIS_REPLY_INTEGER, .integer = v};

    if (j != NULL)
        gp_epoch_answered(j, &r, GP_EOK);
}

static void
say_err(unsigned sh, gp_err err)
{
    gp_epoch_job *j = take(sh);

    if (j != NULL)
        gp_epoch_answered(j, NULL, err);
}

static int
queued(void)
{
    int n = 0;

    for (int i = F.head; i < F.tail; i++)
        n += F.q[i].j != NULL;
    return n;
}

static unsigned long long
count(int result)
{
    return ep.m_rebuilds[result] != NULL ? *ep.m_rebuilds[result] : 999;
}

/* Nothing marked: no round, no call. */
static void
test_nothing_marked(void)
{
    setup();
    gp_epoch_run(&ep);
    T_OKM(queued() == 0 && !ep.busy && F.ends == 0, "nothing marked: no begin, no round");
}

/* Three shards begin; the read waits for the last begin; present counts
 * present and is not marked again; chunks go on until the seal; sealed
 * is done; the log line has the service's fields. */
static void
test_round(void)
{
    gp_epoch_round *r;
    unsigned long long tok = 0;
    char            inst[16] = "";
    gp_buf          out;

    setup();
    gp_epoch_mark(&ep, 3);
    gp_epoch_mark(&ep, 7);
    gp_epoch_mark(&ep, 9);
    gp_epoch_mark(&ep, GP_SHARDS);     /* out of range: ignored */
    gp_epoch_run(&ep);
    T_OKM(queued() == 3 && pending(3) && pending(7) && pending(9),
          "one begin per marked shard (%d calls)", queued());
    T_OKM(pending(3) && pending(3)->step == GP_EPOCH_BEGIN &&
              sscanf(pending(3)->j->token, "%15[^:]:%llu", inst, &tok) == 2 &&
              strcmp(inst, "inst-1") == 0 && tok > 0,
          "the token is <instance>:<mono ms> (%s)", pending(3) ? pending(3)->j->token : "-");
    T_OKM(!ep.stale[3] && !ep.stale[7] && !ep.stale[9] && !ep.stale_any && ep.busy,
          "the round took the marks and is busy");
    say_str(3, "begun");
    T_OKM(F.reads == 0, "one begin answered begun: no read yet");
    say_str(7, "begun");
    T_OKM(F.reads == 0, "two begun, one begin unanswered: no read yet");
    say_str(9, "present");
    T_OKM(F.reads == 1 && F.round != NULL, "every begin answered: one read (%d)", F.reads);
    T_OKM(count(1) == 1 && !ep.stale[9], "present counted once, not marked again (%llu)",
          count(1));
    r = F.round;
    T_OKM(r != NULL && gp_epoch_begun(r, 3) && gp_epoch_begun(r, 7) && !gp_epoch_begun(r, 9) &&
              !gp_epoch_begun(r, 4),
          "the read is handed the begun shards only");
    if (r == NULL)
        return;
    ((fjob *)gp_epoch_begun(r, 3)->data)->rows = 2;
    ((fjob *)gp_epoch_begun(r, 7)->data)->rows = 0;
    gp_epoch_read_done(r, GP_EOK, NULL);
    T_OKM(queued() == 2 && pending(3) && pending(3)->step == S_CHUNK && pending(7) &&
              pending(7)->step == S_CHUNK,
          "after the read each begun shard's first step is sent (%d calls)", queued());
    say_int(3, 5);
    T_OKM(pending(3) && pending(3)->step == S_CHUNK,
          "shard 3: a second chunk for its second row");
    say_int(3, 7);
    T_OKM(pending(3) && pending(3)->step == S_SEAL, "shard 3: through its rows, then the seal");
    say_int(7, 0);
    T_OKM(pending(7) && pending(7)->step == S_SEAL, "shard 7: no rows, one chunk, then the seal");
    say_str(7, "sealed");
    T_OKM(count(0) == 1 && F.ends == 0, "shard 7 done, the round waits for shard 3");
    say_str(3, "sealed");
    T_OKM(count(0) == 2 && count(1) == 1 && count(2) == 0 && F.dones == 2,
          "done 2, present 1, failed 0 (%llu %llu %llu)", count(0), count(1), count(2));
    T_OKM(F.ends == 1 && !ep.busy && F.agains == 0 && queued() == 0,
          "the round ended once, not busy, no again without a mark");
    T_OKM(strstr(logged(), "event=redis_rebuilt shards=2 rows=2 counted=12") != NULL &&
              strstr(logged(), "redis_rebuild_failed") == NULL,
          "redis_rebuilt with the service's fields: %s", logged());
    gp_buf_init(&out, 0);
    gp_metrics_render(mx, &out);
    T_OKM(out.p != NULL && strstr(out.p, "gp_test_redis_rebuilds_total{result=\"done\"} 2") &&
              strstr(out.p, "gp_test_redis_rebuilds_total{result=\"present\"} 1"),
          "the counters under the service's metric name");
    gp_buf_fini(&out);
}

/* Failures at the begin: marked again unless lost; wait marks again and
 * counts nothing; then a failed read fails the begun one. */
static void
test_failures(void)
{
    char want[128];

    setup();
    for (unsigned sh = 1; sh <= 5; sh++)
        gp_epoch_mark(&ep, sh);
    gp_epoch_run(&ep);
    say_err(1, GP_ETIMEOUT);
    say_str(2, "lost");
    say_str(3, "wait");
    say_text(4, REDIS_REPLY_ERROR, "ERR boom");
    T_OKM(F.reads == 0, "shard 5's begin unanswered: no read");
    say_str(5, "begun");
    T_OKM(F.reads == 1, "one read for the one begun shard");
    T_OKM(count(2) == 3 && count(1) == 0 && count(0) == 0,
          "timeout, lost and a Redis error failed; wait counted nowhere (failed %llu)", count(2));
    T_OKM(ep.stale[1] && !ep.stale[2] && ep.stale[3] && ep.stale[4] && !ep.stale[5],
          "marked again: the timeout, the wait, the error; not lost, not the begun one");
    if (F.round == NULL)
        return;
    gp_epoch_read_done(F.round, GP_EUNAVAIL, "database unavailable");
    T_OKM(count(2) == 4 && ep.stale[5] && queued() == 0,
          "the failed read failed the begun shard, marked again, no step sent");
    snprintf(want, sizeof(want), "event=redis_rebuild_failed shards=4 why=\"shard 1 step 0: %s\"",
             gp_err_name(GP_ETIMEOUT));
    T_OKM(strstr(logged(), want) != NULL && strstr(logged(), "redis_rebuilt ") == NULL,
          "the first failure's why: %s", logged());
    T_OKM(F.agains == 1 && F.ends == 1 && !ep.busy, "marked again: again at the round's end");
}

/* A read that fails fails every begun shard, at the first step. */
static void
test_read_fails(void)
{
    setup();
    gp_epoch_mark(&ep, 10);
    gp_epoch_mark(&ep, 11);
    gp_epoch_run(&ep);
    say_str(10, "begun");
    say_str(11, "begun");
    if (F.round == NULL) {
        T_OKM(0, "no read");
        return;
    }
    gp_epoch_read_done(F.round, GP_EINTERNAL, NULL);
    T_OKM(count(2) == 2 && count(0) == 0 && ep.stale[10] && ep.stale[11] && queued() == 0,
          "both begun shards failed and are marked again (failed %llu)", count(2));
    T_OKM(strstr(logged(), "why=\"shard 10 step 1: ") != NULL,
          "the why names the first step: %s", logged());
}

/* A mark during the round (another shard): again at its end. */
static void
test_mark_meanwhile(void)
{
    setup();
    gp_epoch_mark(&ep, 20);
    gp_epoch_run(&ep);
    gp_epoch_mark(&ep, 30);
    gp_epoch_run(&ep);
    T_OKM(queued() == 1 && pending(30) == NULL && ep.stale[30],
          "a run while a round is busy begins nothing (%d calls)", queued());
    T_OKM(F.agains == 0, "no again before the round ends");
    say_str(20, "present");
    T_OKM(F.agains == 1 && F.ends == 1 && ep.stale[30] && !ep.stale[20],
          "marked meanwhile: again once at the end (%d)", F.agains);
    gp_epoch_run(&ep);
    T_OKM(pending(30) != NULL && queued() == 1, "the next run begins the shard marked meanwhile");
    say_str(30, "present");
}

/* A send that fails fails its shard: a begin at step 0, a step later. */
static void
test_send_fails(void)
{
    setup();
    F.begin_rc = GP_EUNAVAIL;
    gp_epoch_mark(&ep, 40);
    gp_epoch_run(&ep);
    T_OKM(count(2) == 1 && ep.stale[40] && F.ends == 1 && !ep.busy,
          "a begin not sent: failed and marked again, the round over");
    T_OKM(strstr(logged(), "why=\"shard 40 step 0: UNAVAIL\"") != NULL, "its why: %s", logged());
    setup();
    gp_epoch_mark(&ep, 41);
    gp_epoch_run(&ep);
    say_str(41, "begun");
    F.step_rc = GP_EUNAVAIL;
    if (F.round != NULL)
        gp_epoch_read_done(F.round, GP_EOK, NULL);
    T_OKM(count(2) == 1 && ep.stale[41] && F.ends == 1 && F.dones == 0,
          "a step not sent: failed and marked again");
    T_OKM(strstr(logged(), "why=\"shard 41 step 1: UNAVAIL\"") != NULL, "its why: %s", logged());
}

/* A start marks every shard. */
static void
test_start(void)
{
    unsigned n = 0;

    setup();
    gp_epoch_start(&ep);
    for (unsigned sh = 0; sh < GP_SHARDS; sh++)
        n += ep.stale[sh];
    T_OKM(n == GP_SHARDS && ep.stale_any, "a start marks all %u shards (%u)", GP_SHARDS, n);
    gp_epoch_run(&ep);
    T_OKM(queued() == (int)GP_SHARDS, "one begin each (%d)", queued());
    for (unsigned sh = 0; sh < GP_SHARDS; sh++)
        say_str(sh, "present");
    T_OKM(count(1) == GP_SHARDS && F.reads == 0 && F.ends == 1,
          "all present: no read, the round over");
}

int
main(void)
{
    test_nothing_marked();
    test_round();
    test_failures();
    test_read_fails();
    test_mark_meanwhile();
    test_send_fails();
    test_start();
    gp_metrics_free(mx);
    if (logfd >= 0)
        close(logfd);
    return T_DONE();
}
