/* output_test.c -- gpctl's pure output helpers: tables sized to
 * their data, cut and cleaned cells, ages, times, sizes, money, JSON. */
#include <string.h>

#include "../../../services/gpctl/output.h"
#include "gp/limits.h"
#include "test.h"

/* Prints t into a string (caller frees). */
static char *
render(const table *t, int indent)
{
    char  *s = NULL;
    size_t n = 0;
    FILE  *f = open_memstream(&s, &n);

    table_print(t, f, indent);
    fclose(f);
    return s;
}

static void
test_text(void)
{
    char buf[256], long_s[128];

    T_EQ_INT(text_width("M\xc3\xbcnchen"), 7);
    text_clean(buf, sizeof(buf), "a\tb\nc", 48);
    T_OK(strcmp(buf, "a b c") == 0);
    memset(long_s, 'x', 60);
    long_s[60] = '\0';
    text_clean(buf, sizeof(buf), long_s, 48);
    T_EQ_INT(text_width(buf), 48);
    T_OK(strcmp(buf + 45, "...") == 0);
    /* 50 two-byte characters: cut on a code point boundary */
    for (int i = 0; i < 50; i++)
        memcpy(long_s + 2 * i, "\xc3\xbc", 2);
    long_s[100] = '\0';
    text_clean(buf, sizeof(buf), long_s, 10);
    T_EQ_INT(text_width(buf), 10);
    T_OK(strncmp(buf, "\xc3\xbc\xc3\xbc", 4) == 0 && strcmp(buf + 14, "...") == 0);
    text_clean(buf, sizeof(buf), NULL, 10);
    T_OK(buf[0] == '\0');
}

static void
test_table(void)
{
    static const char *const heads[] = {"NAME", "STATE", "NOTE", NULL};
    table t;
    char *s;

    table_init(&t, heads);
    T_EQ_INT(t.ncols, 3);
    table_add(&t, (const char *const[]){"site-0001", "ok", ""});
    table_add(&t, (const char *const[]){"s2", "quarantined", "x"});
    s = render(&t, 0);
    T_OKM(strcmp(s, "NAME        STATE         NOTE\n"
                    "site-0001   ok\n"
                    "s2          quarantined   x\n") == 0, "table aligned, no trailing blanks");
    free(s);
    s = render(&t, 2);
    T_OK(strncmp(s, "  NAME        STATE", 19) == 0);
    free(s);
    table_free(&t);
    T_EQ_INT(t.nrows, 0);
}

static void
test_table_big(void)
{
    static const char *const heads[] = {"NODE", "INDEX", NULL};
    table  t;
    char  *s, name[32], idx[16];
    size_t lines = 0;

    table_init(&t, heads);
    for (int i = 0; i < 12000; i++) {
        snprintf(name, sizeof(name), "site-%04d-n%d", i / 8, i % 8);
        snprintf(idx, sizeof(idx), "%d", i % 8);
        table_add(&t, (const char *const[]){name, idx});
    }
    T_EQ_INT(t.nrows, 12000);
    T_EQ_INT(t.width[0], strlen("site-0000-n0"));
    s = render(&t, 0);
    for (char *p = s; *p; p++)
        lines += *p == '\n';
    T_EQ_INT(lines, 12001);
    T_OK(strstr(s, "site-1499-n7   7\n") != NULL);
    free(s);
    table_free(&t);
}

static void
test_ages(void)
{
    char          b[32];
    const int64_t now = 1764665462123;
    static const struct {
        int64_t     ago_s;
        const char *want;
    } cases[] = {
        {45, "45s"}, {303, "5m3s"}, {95 * 60, "95m"}, {4 * 3600 + 600, "4h10m"},
        {30 * 3600, "30h"}, {3 * 86400 + 4 * 3600, "3d4h"}, {3 * 86400, "3d"},
        {120 * 86400, "120d"},
    };

    for (size_t i = 0; i < GP_NELEM(cases); i++) {
        fmt_age(b, sizeof(b), now, (uint64_t)(now - cases[i].ago_s * 1000));
        T_OKM(strcmp(b, cases[i].want) == 0, "age %llds -> %s (want %s)",
              (long long)cases[i].ago_s, b, cases[i].want);
    }
    fmt_age(b, sizeof(b), now, 0);
    T_OK(strcmp(b, "never") == 0);
    fmt_age(b, sizeof(b), now, (uint64_t)now + 5000);
    T_OK(strcmp(b, "0s") == 0);
    fmt_iso8601(b, sizeof(b), (uint64_t)now);
    T_OK(strcmp(b, "2025-12-02T08:51:02.123Z") == 0);
    fmt_iso8601(b, sizeof(b), 0);
    T_OK(b[0] == '\0');
    fmt_duration(b, sizeof(b), 12345);
    T_OK(strcmp(b, "3h25m") == 0);
    fmt_hhmm(b, sizeof(b), 420);
    T_OK(strcmp(b, "07:00") == 0);
    fmt_utc_offset(b, sizeof(b), -330);
    T_OK(strcmp(b, "UTC-05:30") == 0);
    fmt_utc_offset(b, sizeof(b), 60);
    T_OK(strcmp(b, "UTC+01:00") == 0);
}

static void
test_quantities(void)
{
    char b[64];
    static const struct {
        int64_t     micros;
        const char *want;
    } money[] = {
        {180000, "0.18"}, {1250000, "1.25"}, {12000000, "12.00"}, {1, "0.000001"},
        {-500000, "-0.50"}, {0, "0.00"}, {INT64_MIN, "-9223372036854.775808"},
    };

    for (size_t i = 0; i < GP_NELEM(money); i++) {
        fmt_micros(b, sizeof(b), money[i].micros);
        T_OKM(strcmp(b, money[i].want) == 0, "micros %lld -> %s", (long long)money[i].micros, b);
    }
    fmt_mib(b, sizeof(b), 512);
    T_OK(strcmp(b, "512MiB") == 0);
    fmt_mib(b, sizeof(b), 24576);
    T_OK(strcmp(b, "24GiB") == 0);
    fmt_mib(b, sizeof(b), 23034);
    T_OK(strcmp(b, "22.5GiB") == 0);
    fmt_energy(b, sizeof(b), 3600000000ull);
    T_OK(strcmp(b, "1.000 kWh") == 0);
    fmt_energy(b, sizeof(b), 3600000ull);
    T_OK(strcmp(b, "1.0 Wh") == 0);
}

static void
test_models(void)
{
    const char *eight[] = {"H100", "H100", "H100", "H100", "H100", "H100", "H100", "H100"};
    const char *mixed[] = {"L4", "H100", "L4"};
    char        b[64];

    fmt_models(b, sizeof(b), eight, 8);
    T_OK(strcmp(b, "8xH100") == 0);
    fmt_models(b, sizeof(b), mixed, 3);
    T_OK(strcmp(b, "2xL4,1xH100") == 0);
    fmt_models(b, sizeof(b), NULL, 0);
    T_OK(strcmp(b, "-") == 0);
    fmt_models(b, 6, mixed, 3);                 /* truncated, still terminated */
    T_OK(strlen(b) == 5);
}

static void
test_json(void)
{
    char     *s = NULL;
    size_t    n = 0;
    FILE     *f = open_memstream(&s, &n);
    json_list j;
    gp_buf    b;

    json_list_begin(&j, f);
    json_list_end(&j);
    fflush(f);
    T_OK(strcmp(s, "[]\n") == 0);
    rewind(f);
    json_list_begin(&j, f);
    json_list_item(&j, "{\"a\":1}", 7);
    json_list_item(&j, "{\"b\":2}", 7);
    json_list_end(&j);
    fclose(f);
    T_OK(strcmp(s, "[\n  {\"a\":1},\n  {\"b\":2}\n]\n") == 0);
    free(s);

    gp_buf_init(&b, 0);
    gp_buf_puts(&b, "{}");
    T_OK(json_add_str(&b, "last_seen", "") == GP_EOK && strcmp(b.p, "{\"last_seen\":\"\"}") == 0);
    gp_buf_reset(&b);
    gp_buf_puts(&b, "{\"id\":\"n1\"}");
    T_OK(json_add_str(&b, "k", "a\"b") == GP_EOK &&
         strcmp(b.p, "{\"id\":\"n1\",\"k\":\"a\\\"b\"}") == 0);
    T_OK(json_add_raw(&b, "n", "3") == GP_EOK && strstr(b.p, ",\"n\":3}") != NULL);
    gp_buf_reset(&b);
    gp_buf_puts(&b, "[1]");
    T_OK(json_add_str(&b, "k", "v") == GP_EINVAL);
    gp_buf_fini(&b);
}

int
main(void)
{
    test_text();
    test_table();
    test_table_big();
    test_ages();
    test_quantities();
    test_models();
    test_json();
    return T_DONE();
}
