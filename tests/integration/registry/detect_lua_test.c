/* detect_lua_test.c -- the registry's Lua copy of the failure detector
 * (services/registry/scripts.h, REGISTRY_LUA_DETECT) computes exactly
 * what gp/detect.h computes: the same random histories of beats (jittered,
 * lost, long gaps past the ceiling) and contacts are fed to both, under
 * several configurations, and every suspect and lost deadline after every
 * event must be equal to the millisecond.  Run in a real redis-server's
 * Lua (the one the registry's scripts run in), since the copy lives in
 * doubles there and C in integers. */
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp/detect.h"
#include "test_stack.h"
#include "../../../services/registry/scripts.h"

/* Replays ARGV[2..] ("b<ms>" a beat, "c<ms>" a contact) under the
 * configuration ARGV[1] and returns suspect_at, lost_at after each. */
static const char replay_lua[] =
    REGISTRY_LUA_DETECT "local C = dcfg(ARGV[1])\n"
                        "local d = {lb = 0, lc = 0, m8 = 0, d4 = 0, n = 0}\n"
                        "local out = {}\n"
                        "for i = 2, #ARGV do\n"
                        "  local t = tonumber(string.sub(ARGV[i], 2))\n"
                        "  if string.sub(ARGV[i], 1, 1) == 'b' then dbeat(d, C, t)\n"
                        "  elseif t > d.lc then d.lc = t end\n"
                        "  out[#out + 1] = dnum(suspect_at(d, C))\n"
                        "  out[#out + 1] = dnum(lost_at(d, C))\n"
                        "end\n"
                        "return out\n";

#define EVENTS 400

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint32_t
next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}

/* One history: the kind and time of each event. */
static void
history(const gp_detect_cfg *c, char kinds[EVENTS], uint64_t at[EVENTS])
{
    uint64_t t = 1700000000000ull + next_rand() % 100000;
    uint32_t jitter = 1 + next_rand() % (c->interval_ms / 2 + 1);

    for (int i = 0; i < EVENTS; i++) {
        uint32_t r = next_rand() % 100;

        if (r < 3)
            t += c->ceiling_ms + next_rand() % 60000; /* an outage, a return */
        else if (r < 8)
            t += 2 * c->interval_ms + next_rand() % jitter; /* a lost beat */
        else
            t += c->interval_ms - jitter / 2 + next_rand() % jitter;
        kinds[i] = r % 5 == 4 ? 'c' : 'b'; /* now and then a renewal */
        at[i] = t;
    }
}

static int
replay(redisContext *rc, const gp_detect_cfg *c, int run)
{
    char        kinds[EVENTS], args[EVENTS + 1][32];
    uint64_t    at[EVENTS];
    const char *argv[EVENTS + 4];
    gp_detect   d = {0};
    redisReply *rep;
    int         bad = 0, n = 0;

    history(c, kinds, at);
    argv[n++] = "EVAL";
    argv[n++] = replay_lua;
    argv[n++] = "0";
    snprintf(args[0], sizeof(args[0]), "%u %u %u %u %u", c->interval_ms, c->floor_ms, c->ceiling_ms,
             c->k, c->lost_ms);
    argv[n++] = args[0];
    for (int i = 0; i < EVENTS; i++) {
        snprintf(args[i + 1], sizeof(args[0]), "%c%" PRIu64, kinds[i], at[i]);
        argv[n++] = args[i + 1];
    }
    rep = redisCommandArgv(rc, n, argv, NULL);
    if (rep == NULL || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 * EVENTS) {
        T_OKM(0, "run %d: the Lua replay answered (%s)", run,
              rep != NULL && rep->type == REDIS_REPLY_ERROR ? rep->str : "no array");
        freeReplyObject(rep);
        return 1;
    }
    for (int i = 0; i < EVENTS; i++) {
        uint64_t s, l;

        if (kinds[i] == 'b')
            gp_detect_beat(&d, c, at[i]);
        else
            gp_detect_contact(&d, at[i]);
        s = strtoull(rep->element[2 * i]->str, NULL, 10);
        l = strtoull(rep->element[2 * i + 1]->str, NULL, 10);
        if (s != gp_detect_suspect_at(&d, c) || l != gp_detect_lost_at(&d, c)) {
            if (bad++ == 0)
                printf("# run %d event %d (%c at %" PRIu64 "): Lua %" PRIu64 "/%" PRIu64
                       ", C %" PRIu64 "/%" PRIu64 "\n",
                       run, i, kinds[i], at[i], s, l, gp_detect_suspect_at(&d, c),
                       gp_detect_lost_at(&d, c));
        }
    }
    freeReplyObject(rep);
    return bad;
}

int
main(void)
{
    redisContext *rc = redisConnect(tl_env("GP_REDIS_HOST"), atoi(tl_env("GP_REDIS_PORT")));
    gp_detect_cfg cfgs[4];
    int           bad = 0, runs = 0;

    T_OKM(rc != NULL && rc->err == 0, "redis connection");
    gp_detect_cfg_default(&cfgs[0], 5000);
    gp_detect_cfg_default(&cfgs[1], 400);
    gp_detect_cfg_default(&cfgs[2], 60000);
    cfgs[3] = (gp_detect_cfg){
        .interval_ms = 1000, .floor_ms = 1200, .ceiling_ms = 9000, .k = 2, .lost_ms = 4000};
    for (int k = 0; k < 4; k++) {
        T_OKM(gp_detect_cfg_check(&cfgs[k]) == NULL, "configuration %d is valid", k);
        for (int run = 0; run < 25; run++, runs++)
            bad += replay(rc, &cfgs[k], runs);
    }
    T_OKM(bad == 0,
          "%d histories of %d events: Lua and C give the same suspect and lost "
          "deadlines after every event (%d differ)",
          runs, EVENTS, bad);
    redisFree(rc);
    return T_DONE();
}
