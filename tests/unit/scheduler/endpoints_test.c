/* endpoints_test.c -- an attempt's endpoints as the text attempts.endpoints
 * keeps (endpoints.c): written and read back the same, what the text
 * cannot carry left out and counted, malformed entries skipped. */
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "msg_gen.h"
#include "../../../services/scheduler/plan/endpoints.h"

static msg_endpoint
ep(const char *name, const char *host, uint32_t port, const char *proto)
{
    msg_endpoint e = {.port = port};

    snprintf(e.name, sizeof(e.name), "%s", name);
    snprintf(e.host, sizeof(e.host), "%s", host);
    snprintf(e.protocol, sizeof(e.protocol), "%s", proto);
    return e;
}

static void
test_round_trip(void)
{
    msg_endpoint v[3] = {ep("ssh", "192.0.2.2", 40001, "tcp"), ep("http", "node-7.example", 40002, ""),
                         ep("dns", "[2001:db8::1]", 40003, "udp")};
    gp_arr       a = {.v = v, .n = 3}, back;
    char         text[SCHED_ENDPOINTS_MAX];

    T_OKM(sched_endpoints_text(&a, text, sizeof(text)) == 0, "three endpoints written");
    T_OKM(strcmp(text, "ssh=192.0.2.2:40001/tcp,http=node-7.example:40002/tcp,"
                       "dns=[2001:db8::1]:40003/udp") == 0, "text: %s", text);
    T_OKM(sched_endpoints_parse(text, &back) == 0 && back.n == 3, "three read back");
    if (back.n == 3) {
        const msg_endpoint *b = back.v;

        T_OKM(strcmp(b[0].name, "ssh") == 0 && strcmp(b[0].host, "192.0.2.2") == 0 &&
              b[0].port == 40001 && strcmp(b[0].protocol, "tcp") == 0, "first the same");
        T_OKM(strcmp(b[2].host, "[2001:db8::1]") == 0 && b[2].port == 40003 &&
              strcmp(b[2].protocol, "udp") == 0, "an IPv6 host the same");
    }
    free(back.v);
}

static void
test_refused(void)
{
    msg_endpoint v[4] = {ep("a,b", "h", 1, "tcp"), ep("ok", "h=x", 2, "tcp"), ep("ok", "::1", 3, "tcp"),
                         ep("fine", "10.0.0.1", 4, "tcp")};
    gp_arr       a = {.v = v, .n = 4}, back;
    char         text[SCHED_ENDPOINTS_MAX], small[20];

    T_OKM(sched_endpoints_text(&a, text, sizeof(text)) == 3, "a separator in a name or host, "
          "a bare IPv6 host: left out and counted");
    T_OKM(strcmp(text, "fine=10.0.0.1:4/tcp") == 0, "the rest written: %s", text);
    a.v = &v[3];
    a.n = 1;
    T_OKM(sched_endpoints_text(&a, small, 10) == 1 && small[0] == '\0', "no room: left out");
    T_OKM(sched_endpoints_parse("x=h:0/tcp,=h:1/tcp,y=h:70000/tcp,z=h:5,w=h:6/tcp", &back) == 0 &&
          back.n == 1 && strcmp(((msg_endpoint *)back.v)[0].name, "w") == 0,
          "malformed entries skipped, the good one kept");
    free(back.v);
    T_OKM(sched_endpoints_parse("", &back) == 0 && back.n == 0 && back.v == NULL, "empty: none");
}

int
main(void)
{
    test_round_trip();
    test_refused();
    return T_DONE();
}
