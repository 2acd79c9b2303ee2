/* inventory_test.c -- the inventory follower's rules without a bus: a
 * change applies only over an older revision (a page read before an event
 * never undoes it, a late event of another registry instance neither), a
 * delete's tombstone keeps a stale page from bringing the record back, a
 * complete load removes what it did not see unless an event touched it
 * since the load began, nodes go before their sites, and bad events are
 * counted and dropped.  White-box: the follower's static rules. */
#include <string.h>

#include "../../../shared/src/inventory.c"
#include "test.h"

/* What the callbacks saw, in order: "+s1 -n1 ..." */
static char seen[1024];

static void
on_site(void *arg, gp_inv_what what, const char *id, const struct msg_site *m)
{
    (void)arg;
    (void)m;
    snprintf(seen + strlen(seen), sizeof(seen) - strlen(seen), "%ss:%s ",
             what == GP_INV_PUT ? "+" : "-", id);
}

static void
on_node(void *arg, gp_inv_what what, const char *id, const char *site, const struct msg_node *m)
{
    (void)arg;
    (void)site;
    (void)m;
    snprintf(seen + strlen(seen), sizeof(seen) - strlen(seen), "%sn:%s ",
             what == GP_INV_PUT ? "+" : "-", id);
}

static msg_site
site(const char *id, const char *region, uint64_t rev)
{
    msg_site s = {0};

    snprintf(s.id, sizeof(s.id), "%s", id);
    snprintf(s.tenant, sizeof(s.tenant), "op");
    snprintf(s.region, sizeof(s.region), "%s", region);
    s.rev = rev;
    return s;
}

static msg_node
node(const char *id, const char *at, uint64_t rev)
{
    msg_node n = {0};

    snprintf(n.id, sizeof(n.id), "%s", id);
    snprintf(n.site, sizeof(n.site), "%s", at);
    n.rev = rev;
    return n;
}

static msg_site_change
site_ev(int32_t change, const char *id, const char *region, uint64_t rev)
{
    msg_site_change ev = {0};

    ev.change = change;
    snprintf(ev.id, sizeof(ev.id), "%s", id);
    ev.rev = rev;
    if (change != MSG_SITE_CHANGE_CHANGE_DELETED) {
        ev.site = site(id, region, rev);
        GP_SET_HAS(&ev, MSG_SITE_CHANGE__SITE);
    }
    return ev;
}

static const char *
region_of(const gp_inventory *inv, const char *id)
{
    const gp_inv_site *s = gp_inventory_site(inv, id);

    return s != NULL ? s->region : "(none)";
}

/* One encoded event through the subscription's handler. */
static void
deliver_site(gp_inventory *inv, const msg_site_change *ev)
{
    gp_buf     b;
    gp_bus_msg m = {.subject = "test"};

    gp_buf_init(&b, 0);
    T_OK(gp_msg_encode(&msg_site_change_desc, ev, &b) == GP_EOK);
    m.data = b.p;
    m.len = b.n;
    on_site_msg(inv, &m);
    gp_buf_fini(&b);
}

static void
revisions(void)
{
    gp_inventory_opts o = {.on_site = on_site, .on_node = on_node};
    gp_inventory     *inv = inv_alloc(&o);
    msg_site          s;
    msg_site_change   ev;

    seen[0] = '\0';
    load_begin(inv);
    s = site("s1", "eu-west", 10);
    page_site(inv, &s);
    ev = site_ev(MSG_SITE_CHANGE_CHANGE_UPDATED, "s1", "eu-north", 12);
    site_change(inv, &ev);
    T_OKM(strcmp(region_of(inv, "s1"), "eu-north") == 0, "an event newer than the page wins");
    s = site("s1", "eu-west", 11);               /* a page read before the event */
    page_site(inv, &s);
    T_OKM(strcmp(region_of(inv, "s1"), "eu-north") == 0,
          "a page older than the event does not undo it (%s)", region_of(inv, "s1"));
    ev = site_ev(MSG_SITE_CHANGE_CHANGE_UPDATED, "s1", "eu-south", 11);
    site_change(inv, &ev);
    T_OKM(strcmp(region_of(inv, "s1"), "eu-north") == 0, "a late, older event neither");
    T_EQ_INT(*inv->c[C_STALE], 2);
    T_OKM(strcmp(seen, "+s:s1 +s:s1 ") == 0, "the owner heard the page and the newer event "
          "only (%s)", seen);
    s = site("s1", "eu-north", 12);              /* the same revision again: a reload */
    page_site(inv, &s);
    T_OKM(strcmp(seen, "+s:s1 +s:s1 +s:s1 ") == 0, "a reload's page repeats the record to "
          "the owner (idempotent upserts)");
    T_EQ_INT(gp_inventory_nsites(inv), 1);
    gp_inventory_free(inv);
}

static void
tombstones(void)
{
    gp_inventory_opts o = {.on_site = on_site, .on_node = on_node};
    gp_inventory     *inv = inv_alloc(&o);
    msg_site          s;
    msg_site_change   ev;

    seen[0] = '\0';
    load_begin(inv);
    s = site("s2", "eu-west", 5);
    page_site(inv, &s);
    ev = site_ev(MSG_SITE_CHANGE_CHANGE_DELETED, "s2", "", 7);
    site_change(inv, &ev);
    T_OKM(gp_inventory_site(inv, "s2") == NULL, "a deleted site is not found");
    s = site("s2", "eu-west", 5);                /* a page read before the delete */
    page_site(inv, &s);
    T_OKM(gp_inventory_site(inv, "s2") == NULL, "a page read before its delete does not "
          "bring it back");
    ev = site_ev(MSG_SITE_CHANGE_CHANGE_DELETED, "s3", "", 9);
    site_change(inv, &ev);
    s = site("s3", "eu-west", 8);                /* a delete seen before its create's page */
    page_site(inv, &s);
    T_OKM(gp_inventory_site(inv, "s3") == NULL, "nor one whose delete came before the page");
    T_OKM(strcmp(seen, "+s:s2 -s:s2 ") == 0, "the owner heard s2 put and deleted, nothing of "
          "s3 (%s)", seen);
    s = site("s3", "eu-west", 10);               /* created again later */
    page_site(inv, &s);
    T_OKM(strcmp(region_of(inv, "s3"), "eu-west") == 0, "a newer create after a delete applies");
    T_EQ_INT(gp_inventory_nsites(inv), 1);
    gp_inventory_free(inv);
}

static void
loads(void)
{
    gp_inventory_opts o = {.nodes = true, .on_site = on_site, .on_node = on_node};
    gp_inventory     *inv = inv_alloc(&o);
    msg_site          s;
    msg_node          n;
    msg_site_change   ev;

    load_begin(inv);
    s = site("a", "r1", 1);
    page_site(inv, &s);
    s = site("b", "r1", 2);
    page_site(inv, &s);
    n = node("b-n1", "b", 3);
    page_node(inv, &n);
    load_end(inv);
    T_OK(gp_inventory_ready(inv));
    T_EQ_INT(gp_inventory_nsites(inv), 2);
    T_EQ_INT(gp_inventory_nnodes(inv), 1);
    /* the second load: b and its node are gone from the registry, c was
     * created during the load after its page had passed, d deleted */
    seen[0] = '\0';
    ev = site_ev(MSG_SITE_CHANGE_CHANGE_DELETED, "d", "", 4);
    site_change(inv, &ev);                       /* before the load: a tombstone */
    load_begin(inv);
    s = site("a", "r1", 1);
    page_site(inv, &s);
    ev = site_ev(MSG_SITE_CHANGE_CHANGE_CREATED, "c", "r2", 5);
    site_change(inv, &ev);
    load_end(inv);
    T_OKM(strcmp(seen, "+s:a +s:c -n:b-n1 -s:b ") == 0, "a complete load removes what it did "
          "not see, the node before its site, and keeps what an event created meanwhile (%s)",
          seen);
    T_OKM(gp_inventory_site(inv, "c") != NULL && gp_inventory_site(inv, "b") == NULL &&
          gp_inventory_node(inv, "b-n1") == NULL, "c known, b and its node not");
    T_OKM(site_find(inv, "d") == NULL, "the tombstone the load passed is dropped");
    T_EQ_INT(gp_inventory_nsites(inv), 2);
    T_EQ_INT(gp_inventory_nnodes(inv), 0);
    /* a failed load removes nothing */
    load_begin(inv);
    load_failed(inv, GP_ENOROUTE, "test");
    T_OK(gp_inventory_site(inv, "a") != NULL && gp_inventory_site(inv, "c") != NULL);
    T_EQ_INT(inv->fails, 1);
    T_EQ_INT(*inv->c[C_FAILS], 1);
    gp_inventory_free(inv);
}

static void
growth(void)
{
    gp_inventory_opts o = {0};
    gp_inventory     *inv = inv_alloc(&o);
    char              id[16];
    int               found = 0;

    load_begin(inv);
    for (int i = 0; i < 5000; i++) {
        msg_site s;

        snprintf(id, sizeof(id), "s%05d", i);
        s = site(id, i % 2 ? "odd" : "even", (uint64_t)i + 1);
        page_site(inv, &s);
    }
    load_end(inv);
    for (int i = 0; i < 5000; i++) {
        snprintf(id, sizeof(id), "s%05d", i);
        found += strcmp(region_of(inv, id), i % 2 ? "odd" : "even") == 0;
    }
    T_EQ_INT(found, 5000);
    T_OK(gp_inventory_site(inv, "s05000") == NULL);
    gp_inventory_free(inv);
}

static void
events(void)
{
    gp_inventory_opts o = {.on_site = on_site};
    gp_inventory     *inv = inv_alloc(&o);
    msg_site_change   ev;
    gp_bus_msg        junk = {.subject = "test", .data = "\xc1\x00", .len = 2};

    seen[0] = '\0';
    ev = site_ev(MSG_SITE_CHANGE_CHANGE_CREATED, "s9", "ap-east", 3);
    deliver_site(inv, &ev);
    T_OKM(strcmp(region_of(inv, "s9"), "ap-east") == 0, "an encoded SiteChange is applied");
    on_site_msg(inv, &junk);
    ev = site_ev(MSG_SITE_CHANGE_CHANGE_UPDATED, "s9", "ap-west", 4);
    snprintf(ev.site.id, sizeof(ev.site.id), "other");       /* record and id disagree */
    deliver_site(inv, &ev);
    ev = site_ev(MSG_SITE_CHANGE_CHANGE_UPDATED, "s9", "ap-west", 4);
    memset(&ev.site, 0, sizeof(ev.site));                     /* an update without its site */
    ev.has = 0;
    T_OKM(!site_change_ok(&ev), "an update without its site is refused");
    deliver_site(inv, &ev);
    ev = site_ev(MSG_SITE_CHANGE_CHANGE_CREATED, "bad id", "ap-west", 4);
    deliver_site(inv, &ev);
    T_EQ_INT(*inv->c[C_BAD], 4);
    T_OKM(strcmp(region_of(inv, "s9"), "ap-east") == 0 && strcmp(seen, "+s:s9 ") == 0,
          "bad events change nothing and reach no owner (%s)", seen);
    T_EQ_INT(*inv->c[C_CHANGES], 1);
    gp_inventory_free(inv);
}

int
main(void)
{
    revisions();
    tombstones();
    loads();
    growth();
    events();
    return T_DONE();
}
