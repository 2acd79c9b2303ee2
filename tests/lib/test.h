/* tests/lib/test.h -- TAP output for every C test (unit and integration).
 *
 * Each T_OK prints "ok N - expr" or "not ok N - expr (file:line)";
 * T_DONE() prints the plan and returns the exit status.  tests/run.sh
 * counts the lines across all test programs into "N passed, N failed".
 * Integration tests include test_stack.h beside it, which includes this.
 * Every test object is compiled with -Itests/lib: #include "test.h". */
#ifndef GP_TEST_H
#define GP_TEST_H

#include <stdio.h>
#include <stdlib.h>

static int t_run;
static int t_fail;

#define T_OK(cond) T_OKM(cond, "%s", #cond)

#define T_OKM(cond, ...) do {                                                  \
        int t_c_ = !!(cond);                                                   \
        t_run++;                                                               \
        printf("%sok %d - ", t_c_ ? "" : "not ", t_run);                       \
        printf(__VA_ARGS__);                                                   \
        if (!t_c_) {                                                           \
            t_fail++;                                                          \
            printf(" (%s:%d)", __FILE__, __LINE__);                            \
        }                                                                      \
        printf("\n");                                                          \
        fflush(stdout);                                                        \
    } while (0)

/* Evaluates a and b once each. */
#define T_EQ_INT(a, b) do {                                                    \
        long long t_a_ = (long long)(a), t_b_ = (long long)(b);                \
        T_OKM(t_a_ == t_b_, "%s == %s (%lld vs %lld)", #a, #b, t_a_, t_b_);    \
    } while (0)

#define T_DONE() (printf("1..%d\n", t_run), t_fail ? 1 : 0)

#endif
