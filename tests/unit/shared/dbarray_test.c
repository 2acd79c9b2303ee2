/* dbarray_test.c -- PostgreSQL array literals: every element quoted, '\'
 * and '"' escaped, NULL unquoted, the empty array, the buffer cap.
 * (db_test has PostgreSQL read such a literal back.) */
#include <string.h>

#include "gp/dbarray.h"
#include "test.h"

static const char *
lit(const char *const *v, int n)
{
    static gp_buf b = GP_BUF_INIT;

    if (gp_pgarr_begin(&b) != GP_EOK)
        return "(begin failed)";
    for (int i = 0; i < n; i++)
        if (gp_pgarr_add(&b, v[i]) != GP_EOK)
            return "(add failed)";
    if (gp_pgarr_end(&b) != GP_EOK)
        return "(end failed)";
    return b.p;
}

#define T_LIT(want, ...) do {                                                  \
        const char *const v_[] = {__VA_ARGS__};                                \
        const char *got_ = lit(v_, (int)(sizeof(v_) / sizeof(v_[0])));         \
        T_OKM(strcmp(got_, want) == 0, "%s (got %s)", want, got_);             \
    } while (0)

int
main(void)
{
    gp_buf b = GP_BUF_INIT;

    T_OK(strcmp(lit(NULL, 0), "{}") == 0);
    T_LIT("{\"n1\"}", "n1");
    T_LIT("{\"a b\",\"c\\\"d\",NULL}", "a b", "c\"d", NULL);
    T_LIT("{\"\",\"NULL\",\"null\"}", "", "NULL", "null");     /* quoted: text, not SQL NULL */
    T_LIT("{\"x\\\\y\",\"\\\\\",\"\\\"\\\"\"}", "x\\y", "\\", "\"\"");
    T_LIT("{\"{a,b}\",\" lead\",\"tab\there\",\"comma,\"}", "{a,b}", " lead", "tab\there", "comma,");
    T_LIT("{\"é€\"}", "é€");

    /* reuse: begin resets */
    gp_pgarr_begin(&b);
    gp_pgarr_add(&b, "old");
    gp_pgarr_begin(&b);
    gp_pgarr_add(&b, "new");
    gp_pgarr_end(&b);
    T_OK(strcmp(b.p, "{\"new\"}") == 0);
    gp_buf_fini(&b);

    /* add before begin: refused, not a literal without its brace */
    gp_buf_init(&b, 0);
    T_EQ_INT(gp_pgarr_add(&b, "x"), GP_EINVAL);
    T_EQ_INT(gp_pgarr_end(&b), GP_EINVAL);
    gp_buf_fini(&b);

    /* the cap */
    gp_buf_init(&b, 16);
    T_EQ_INT(gp_pgarr_begin(&b), GP_EOK);
    T_EQ_INT(gp_pgarr_add(&b, "0123456789"), GP_EOK);
    T_EQ_INT(gp_pgarr_add(&b, "0123456789"), GP_ETOOBIG);
    gp_buf_fini(&b);
    return T_DONE();
}
