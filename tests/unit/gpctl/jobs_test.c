/* jobs_test.c -- gpctl's job parts that need no bus: submit's flags
 * and job files (JSON and YAML, flags over the file) into a JobSpec, bad
 * values refused with a sentence naming the flag or field, the jobs and
 * attempts tables, the "why it waits" sentence, event lines and the
 * summary's arithmetic.  Links services/gpctl/{output,jobspec,jobview}.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../services/gpctl/jobspec.h"
#include "../../../services/gpctl/jobview.h"
#include "gp/codec.h"
#include "test.h"

#define NOW_MS 1764756000000ull         /* 2025-12-03T10:00:00Z */

static char err[512];

/* Runs jobspec_args over a NULL-terminated list; spec is cleared first. */
static int
args(msg_job_spec *s, const char **tenant, const char *const *av)
{
    char *argv[64];
    int   argc = 0;

    gp_msg_clear(&msg_job_spec_desc, s);
    while (av[argc] != NULL && argc < 63) {
        argv[argc] = (char *)av[argc];
        argc++;
    }
    err[0] = '\0';
    return jobspec_args(argc, argv, s, tenant, err, sizeof(err));
}

static const char *
item(const gp_arr *a, size_t es, uint32_t i)
{
    return i < a->n ? (const char *)a->v + i * es : "";
}

#define ENV_ES   (MSG_JOB_SPEC_ENV_ITEM_MAXLEN + 1)
#define MODEL_ES (MSG_JOB_SPEC_GPU_MODELS_ITEM_MAXLEN + 1)

/* ---- flags ------------------------------------------------------------------------ */

static void
test_every_flag(void)
{
    msg_job_spec s = {0};
    const char  *tenant = NULL;
    int          rc = args(&s, &tenant, (const char *const[]){
        "--tenant", "acme", "--name", "resnet train", "--command", "sim:run=300s exit=0",
        "--env", "A=1", "--env=B=x,y", "--gpus", "2", "--nodes", "3", "--model", "H100",
        "--model", "L4,A100", "--min-vram", "24576", "--pool", "p1", "--product", "h100-std",
        "--origin", "52.52,-13.4", "--max-latency", "30", "--priority", "700",
        "--interruptible", "--checkpoint-interval", "60", "--max-price", "2500000",
        "--currency", "EUR", "--max-attempts", "5", "--max-run", "3600",
        "--request-id", "req-0001", NULL});

    T_OKM(rc == 0, "every flag accepted (%s)", err);
    T_OK(tenant != NULL && strcmp(tenant, "acme") == 0);
    T_OK(strcmp(s.name, "resnet train") == 0);
    T_OK(strcmp(s.command, "sim:run=300s exit=0") == 0);
    T_EQ_INT(s.env.n, 2);
    T_OK(strcmp(item(&s.env, ENV_ES, 0), "A=1") == 0);
    T_OKM(strcmp(item(&s.env, ENV_ES, 1), "B=x,y") == 0, "--env keeps commas in the value");
    T_EQ_INT(s.gpus_per_node, 2);
    T_EQ_INT(s.nodes, 3);
    T_EQ_INT(s.gpu_models.n, 3);
    T_OKM(strcmp(item(&s.gpu_models, MODEL_ES, 0), "H100") == 0 &&
          strcmp(item(&s.gpu_models, MODEL_ES, 1), "L4") == 0 &&
          strcmp(item(&s.gpu_models, MODEL_ES, 2), "A100") == 0,
          "--model repeatable and comma-separated");
    T_EQ_INT(s.min_vram_mb, 24576);
    T_OK(strcmp(s.pool, "p1") == 0 && strcmp(s.product, "h100-std") == 0);
    T_OK(fabs(s.origin_lat - 52.52) < 1e-9 && fabs(s.origin_lon + 13.4) < 1e-9);
    T_OK(GP_HAS(&s, MSG_JOB_SPEC__ORIGIN_LAT) && GP_HAS(&s, MSG_JOB_SPEC__ORIGIN_LON));
    T_EQ_INT(s.max_latency_ms, 30);
    T_EQ_INT(s.priority, 700);
    T_OK(s.interruptible && GP_HAS(&s, MSG_JOB_SPEC__INTERRUPTIBLE));
    T_EQ_INT(s.checkpoint_interval_s, 60);
    T_EQ_INT(s.max_price_micros_per_gpu_hour, 2500000);
    T_OK(strcmp(s.currency, "EUR") == 0);
    T_EQ_INT(s.max_attempts, 5);
    T_EQ_INT(s.max_run_s, 3600);
    T_OK(strcmp(s.client_request_id, "req-0001") == 0);
    T_OKM(gp_msg_roundtrip_ok(&msg_job_spec_desc, &s), "the spec encodes and decodes as is");
    rc = args(&s, &tenant, (const char *const[]){"--tenant", "a", "--command", "x", "--gpus",
                                                 "1", "--interruptible=false", NULL});
    T_OKM(rc == 0 && !s.interruptible && GP_HAS(&s, MSG_JOB_SPEC__INTERRUPTIBLE),
          "--interruptible=false");
    gp_msg_clear(&msg_job_spec_desc, &s);
}

typedef struct bad_case {
    const char *flag, *value, *want;    /* want: a piece of the message */
} bad_case;

static void
test_bad_flags(void)
{
    static const bad_case cases[] = {
        {"--gpus", "0", "--gpus: gpus_per_node"},
        {"--gpus", "17", "out of range"},
        {"--gpus", "two", "--gpus: gpus_per_node"},
        {"--nodes", "9", "--nodes: nodes"},
        {"--priority", "1001", "--priority: priority"},
        {"--priority", "-1", "priority"},
        {"--max-latency", "0", "max_latency_ms"},
        {"--origin", "91,10", "origin_lat"},
        {"--origin", "10,181", "origin_lon"},
        {"--origin", "nan,1", "origin_lat"},
        {"--origin", "52.5", "expected LAT,LON"},
        {"--env", "NOEQUALS", "is not NAME=value"},
        {"--env", "=x", "is not NAME=value"},
        {"--model", "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", "1 to 31 bytes"},
        {"--model", "A,B,C,D,E,F,G,H,I", "more than 8 items"},
        {"--request-id", "a b", "[A-Za-z0-9_-]"},
        {"--currency", "EURO", "currency"},
        {"--max-price", "-5", "max_price"},
        {"--max-attempts", "21", "max_attempts"},
        {"--max-run", "x", "max_run_s"},
        {"--checkpoint-interval", "86401", "checkpoint_interval_s"},
        {"--min-vram", "1048577", "min_vram_mb"},
        {"--interruptible=maybe", NULL, "expected true or false"},
        {"--colour", "red", "unknown flag --colour"},
    };
    msg_job_spec s = {0};
    const char  *tenant;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const bad_case *c = &cases[i];
        int rc = args(&s, &tenant, (const char *const[]){"--tenant", "acme", "--command", "x",
                                                         "--gpus", "1", c->flag, c->value, NULL});

        T_OKM(rc != 0 && strstr(err, c->want) != NULL, "%s %s refused: \"%s\"", c->flag,
              c->value ? c->value : "", err);
    }
    T_OKM(args(&s, &tenant, (const char *const[]){"--command", "x", "--gpus", "1", NULL}) != 0 &&
          strstr(err, "--tenant") != NULL, "no --tenant: %s", err);
    T_OKM(args(&s, &tenant, (const char *const[]){"--tenant", "a.b", "--command", "x", "--gpus",
                                                  "1", NULL}) != 0 &&
          strstr(err, "--tenant") != NULL, "a tenant that is no id: %s", err);
    T_OKM(args(&s, &tenant, (const char *const[]){"--tenant", "a", "--gpus", "1", NULL}) != 0 &&
          strstr(err, "missing the image") != NULL, "no image, no command: %s", err);
    T_OKM(args(&s, &tenant, (const char *const[]){"--tenant", "a", "--command", "x", NULL}) != 0 &&
          strstr(err, "missing the GPUs") != NULL, "no --gpus: %s", err);
    T_OKM(args(&s, &tenant, (const char *const[]){"--tenant", "a", "--command", "x", "--gpus",
                                                  "1", "--max-latency", "30", NULL}) != 0 &&
          strstr(err, "--origin") != NULL, "--max-latency without --origin: %s", err);
    T_OKM(args(&s, &tenant, (const char *const[]){"--tenant", "a", "--command", "x", "--gpus",
                                                  "1", "--max-price", "5", NULL}) != 0 &&
          strstr(err, "--currency") != NULL, "--max-price without --currency: %s", err);
    T_OKM(args(&s, &tenant, (const char *const[]){"--tenant", "a", "--command", "x", "--gpus",
                                                  NULL}) != 0 &&
          strstr(err, "--gpus needs a value") != NULL, "a flag without its value: %s", err);
    T_OKM(args(&s, &tenant, (const char *const[]){"--tenant", "a", "stray", NULL}) != 0 &&
          strstr(err, "unexpected argument \"stray\"") != NULL, "a stray word: %s", err);
    gp_msg_clear(&msg_job_spec_desc, &s);
}

/* ---- files ------------------------------------------------------------------------ */

static int
load_text(msg_job_spec *s, const char *text)
{
    FILE *f = fmemopen((void *)text, strlen(text), "r");
    int   rc;

    gp_msg_clear(&msg_job_spec_desc, s);
    err[0] = '\0';
    rc = jobspec_load(s, f, "job", err, sizeof(err));
    fclose(f);
    return rc;
}

static char *
temp_file(const char *text, const char *suffix)
{
    static char path[64];
    int         fd;

    snprintf(path, sizeof(path), "/tmp/gpctl-job-XXXXXX%s", suffix);
    fd = mkstemps(path, (int)strlen(suffix));
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        abort();
    close(fd);
    return path;
}

static const char yaml_job[] =
    "# a job\n"
    "name: resnet\n"
    "command: \"sim:run=300s exit=0\"\n"
    "gpus_per_node: 2\n"
    "nodes: 1\n"
    "env:\n"
    "  - A=1\n"
    "  - B=2\n"
    "gpu_models: [H100, A100]\n"
    "origin_lat: 52.52\n"
    "origin_lon: 13.4\n"
    "max_latency_ms: 30\n"
    "priority: 100\n"
    "interruptible: true\n"
    "max_price_micros_per_gpu_hour: 2000000\n"
    "currency: EUR\n"
    "client_request_id: req-7\n";

static const char json_job[] =
    "{\"name\": \"resnet\", \"command\": \"sim:run=300s\", \"gpus_per_node\": 4,\n"
    " \"env\": [\"A=1\"], \"gpu_models\": [\"L4\"], \"min_vram_mb\": 24000,\n"
    "\t\"interruptible\":false, \"max_run_s\":3600, \"pool\":\"p1\"}\n";

static void
test_files(void)
{
    msg_job_spec s = {0};
    const char  *tenant, *path;

    T_OKM(load_text(&s, yaml_job) == 0, "YAML job (%s)", err);
    T_OK(strcmp(s.name, "resnet") == 0 && strcmp(s.command, "sim:run=300s exit=0") == 0);
    T_OK(s.gpus_per_node == 2 && s.nodes == 1 && s.priority == 100 && s.interruptible);
    T_OK(s.env.n == 2 && strcmp(item(&s.env, ENV_ES, 1), "B=2") == 0);
    T_OK(s.gpu_models.n == 2 && strcmp(item(&s.gpu_models, MODEL_ES, 1), "A100") == 0);
    T_OK(fabs(s.origin_lat - 52.52) < 1e-9 && s.max_latency_ms == 30);
    T_OK(s.max_price_micros_per_gpu_hour == 2000000 && strcmp(s.currency, "EUR") == 0);
    T_OK(strcmp(s.client_request_id, "req-7") == 0);

    T_OKM(load_text(&s, json_job) == 0, "JSON job (%s)", err);
    T_OK(s.gpus_per_node == 4 && s.min_vram_mb == 24000 && s.max_run_s == 3600);
    T_OK(!s.interruptible && GP_HAS(&s, MSG_JOB_SPEC__INTERRUPTIBLE));
    T_OK(s.env.n == 1 && s.gpu_models.n == 1 && strcmp(s.pool, "p1") == 0);
    T_OKM(load_text(&s, "command: x\ngpus_per_node: 1\ngpu_models: [A]\ngpu_models: [B]\n"
                       "env: X=1\n") == 0 &&
          s.gpu_models.n == 1 && strcmp(item(&s.gpu_models, MODEL_ES, 0), "B") == 0 &&
          s.env.n == 1, "a repeated key: the last list wins; a scalar is a one-item list");

    /* flags over the file: scalars replaced, a list flag replaces the list */
    path = temp_file(yaml_job, ".yaml");
    T_OKM(args(&s, &tenant, (const char *const[]){"--tenant", "acme", "--gpus", "8", "-f", path,
                                                  "--model", "L4", "--name", "other", NULL}) == 0,
          "-f job.yaml with flags (%s)", err);
    T_EQ_INT(s.gpus_per_node, 8);
    T_OK(strcmp(s.name, "other") == 0);
    T_OKM(s.gpu_models.n == 1 && strcmp(item(&s.gpu_models, MODEL_ES, 0), "L4") == 0,
          "--model replaces the file's gpu_models");
    T_OKM(s.env.n == 2 && strcmp(s.command, "sim:run=300s exit=0") == 0,
          "what no flag names stays as in the file");
    unlink(path);
    path = temp_file(json_job, ".json");
    T_OKM(args(&s, &tenant, (const char *const[]){"--tenant", "acme", "--file", path, "--env",
                                                  "C=3", "--env", "D=4", "--interruptible",
                                                  NULL}) == 0, "--file job.json (%s)", err);
    T_OKM(s.env.n == 2 && strcmp(item(&s.env, ENV_ES, 0), "C=3") == 0 &&
          strcmp(item(&s.env, ENV_ES, 1), "D=4") == 0, "repeated --env replace the file's env");
    T_OK(s.interruptible && s.gpus_per_node == 4);
    unlink(path);
    T_OKM(args(&s, &tenant, (const char *const[]){"--tenant", "a", "-f", "/nonexistent/j.yaml",
                                                  NULL}) != 0 &&
          strstr(err, "cannot read /nonexistent/j.yaml") != NULL, "a missing file: %s", err);
    gp_msg_clear(&msg_job_spec_desc, &s);
}

static void
test_bad_files(void)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"command: x\ngpus_per_node: \"2\"\n", "job:2: gpus_per_node: expected a number"},
        {"{\"command\": \"x\", \"gpus_per_node\": 2, \"colour\": 1}", "unknown field \"colour\""},
        {"command: x\ngpus_per_node: 99\n", "job:2: gpus_per_node"},
        {"command: x\nenv: {A: 1}\n", "env: expected a list"},
        {"command: [a, b]\n", "command: expected a plain value"},
        {"command: x\ngpu_models: [[H100]]\n", "a list item must be a plain value"},
        {"- command: x\n", "expected a mapping"},
        {"command: x\ninterruptible: yes\n", "expected true or false"},
        {"command: x\ninterruptible: \"true\"\n", "expected a boolean"},
        {"command: x\nenv: [NOEQ]\n", "is not NAME=value"},
        {"command: [x\n", "job:"},
        {"", "empty file"},
        {"command: x\n---\ncommand: y\n", "one job per file"},
    };
    msg_job_spec s = {0};

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        T_OKM(load_text(&s, cases[i].text) != 0 && strstr(err, cases[i].want) != NULL,
              "bad file %zu refused: \"%s\"", i, err);
    gp_msg_clear(&msg_job_spec_desc, &s);
}

/* ---- tables ------------------------------------------------------------------------ */

static char *
render(const table *t)
{
    char  *s = NULL;
    size_t n = 0;
    FILE  *f = open_memstream(&s, &n);

    table_print(t, f, 0);
    fclose(f);
    return s;
}

/* out equals want; on a difference both are shown as TAP comments. */
static void
same(const char *out, const char *want, const char *what)
{
    int eq = strcmp(out, want) == 0;

    T_OKM(eq, "%s", what);
    if (!eq)
        printf("# got:\n%s# want:\n%s", out, want);
}

static void
set_attempt(msg_attempt *a, uint32_t num, int rank, const char *site, const char *node)
{
    memset(a, 0, sizeof(*a));
    snprintf(a->job_id, sizeof(a->job_id), "j1");
    a->attempt = num;
    a->rank = rank;
    snprintf(a->site, sizeof(a->site), "%s", site);
    snprintf(a->node, sizeof(a->node), "%s", node);
}

static void
test_job_rows(void)
{
    msg_job     j = {0}, p = {0};
    msg_attempt at[3];
    table       t;
    char       *out;

    snprintf(j.id, sizeof(j.id), "j1");
    snprintf(j.tenant, sizeof(j.tenant), "acme");
    j.state = MSG_JOB_STATE_RUNNING;
    j.spec.gpus_per_node = 4;
    j.spec.nodes = 2;
    j.spec.priority = 500;
    GP_SET_HAS(&j.spec, MSG_JOB_SPEC__PRIORITY);
    j.spec.max_attempts = 5;
    j.attempts_made = 2;
    j.created_ms = NOW_MS - 330000;
    set_attempt(&at[0], 1, 0, "s1", "n1");
    set_attempt(&at[1], 2, 1, "s2", "n5");
    set_attempt(&at[2], 2, 0, "s2", "n4");
    j.attempts.v = at;
    j.attempts.n = 3;
    T_OKM(job_latest_attempt(&j) == &at[2], "latest attempt: highest number, rank 0");
    snprintf(p.id, sizeof(p.id), "j2");
    snprintf(p.tenant, sizeof(p.tenant), "beta");
    p.spec.gpus_per_node = 1;
    p.created_ms = NOW_MS - 45000;
    snprintf(p.reason, sizeof(p.reason), "no node fits: 2,400 wrong model, 300 not enough "
             "free GPUs, 211 outside the latency bound");
    table_init(&t, job_heads);
    T_OK(job_row(&t, &j, (int64_t)NOW_MS) == 0 && job_row(&t, &p, (int64_t)NOW_MS) == 0);
    out = render(&t);
    same(out,
         "ID   TENANT   STATE     GPUS   PRIO   AGE     ATTEMPTS   SITE/NODE   REASON\n"
         "j1   acme     running   2x4    500    5m30s   2/5        s2/n4       -\n"
         "j2   beta     pending   1x1    100    45s     0/3        -           "
         "no node fits: 2,400 wrong model, 300 ...\n",
         "jobs table: nodes x GPUs, default priority and attempts, latest attempt, reason cut");
    free(out);
    table_free(&t);
    j.attempts.v = NULL;
    j.attempts.n = 0;
}

static void
test_attempt_rows(void)
{
    msg_attempt a;
    int32_t     gpus[] = {0, 1, 2, 3};
    table       t;
    char       *out;

    set_attempt(&a, 2, 0, "s2", "n4");
    a.gpus.v = gpus;
    a.gpus.n = 4;
    a.state = MSG_ATTEMPT_STATE_FAILED;
    a.created_ms = NOW_MS;
    a.started_ms = NOW_MS + 2000;
    a.ended_ms = NOW_MS + 62000;
    a.exit_code = 137;
    GP_SET_HAS(&a, MSG_ATTEMPT__EXIT_CODE);
    a.latency_est_ms = 12.25;
    GP_SET_HAS(&a, MSG_ATTEMPT__LATENCY_EST_MS);
    a.score = 830;
    a.score_latency = 400;
    a.score_price = 200;
    a.score_packing = 100;
    a.score_reliability = 80;
    a.score_thermal = 50;
    table_init(&t, attempt_heads);
    T_OK(attempt_row(&t, &a) == 0);
    set_attempt(&a, 3, 0, "s1", "n1");
    a.state = MSG_ATTEMPT_STATE_RESERVED;
    T_OK(attempt_row(&t, &a) == 0);
    out = render(&t);
    same(out,
                 "ATTEMPT   RANK   SITE   NODE   GPUS      STATE      CREATED    STARTED    "
                 "ENDED      EXIT   LATENCY   SCORE   LAT/PRICE/PACK/REL/THERM\n"
                 "2         0      s2     n4     0,1,2,3   failed     10:00:00   10:00:02   "
                 "10:01:02   137    12.2ms    830     400/200/100/80/50\n"
                 "3         0      s1     n1     -         reserved   -          -          "
                 "-          -      -         0       0/0/0/0/0\n",
         "attempts table: GPUs, times of day, exit, latency, score breakdown");
    free(out);
    table_free(&t);
}

/* ---- why it waits, events, summary ---------------------------------------------------- */

static void
test_why_waits(void)
{
    msg_pending_reason w[3] = {
        {.reason = MSG_PENDING_REASON_REASON_LATENCY, .nodes = 211},
        {.reason = MSG_PENDING_REASON_REASON_MODEL, .nodes = 2400},
        {.reason = MSG_PENDING_REASON_REASON_GPUS, .nodes = 300},
    };
    msg_job j = {0};
    char    buf[512];

    job_why_waits(&j, buf, sizeof(buf));
    T_OKM(strcmp(buf, "no placement tried yet") == 0, "%s", buf);
    j.waiting.v = w;
    j.waiting.n = 3;
    job_why_waits(&j, buf, sizeof(buf));
    T_OKM(strcmp(buf, "2,911 nodes: 2,400 wrong model, 300 not enough free GPUs, 211 outside "
                      "the latency bound") == 0, "largest first, total = sum: %s", buf);
    j.nodes_considered = 3000;
    job_why_waits(&j, buf, sizeof(buf));
    T_OKM(strncmp(buf, "3,000 nodes: 2,400 wrong model,", 31) == 0,
          "total = nodes_considered: %s", buf);
    w[0].nodes = 1;
    j.waiting.n = 1;
    j.nodes_considered = 0;
    job_why_waits(&j, buf, sizeof(buf));
    T_OKM(strcmp(buf, "1 node: 1 outside the latency bound") == 0, "%s", buf);
    for (int r = 0; r < 15; r++)
        T_OKM(strcmp(pending_words(r), "for another reason") != 0, "reason %s has words",
              msg_pending_reason_reason_names[r]);
    T_OK(strcmp(pending_words(99), "for another reason") == 0);
}

static void
test_event_line(void)
{
    msg_job_event e = {0};
    char          buf[640];

    snprintf(e.tenant, sizeof(e.tenant), "acme");
    snprintf(e.job_id, sizeof(e.job_id), "j1");
    e.seq = 4;
    e.event = MSG_JOB_EVENT_EVENT_ATTEMPT_FAILED;
    e.state = MSG_JOB_EVENT_STATE_PENDING;
    e.attempt = 1;
    snprintf(e.site, sizeof(e.site), "s1");
    snprintf(e.node, sizeof(e.node), "n1");
    e.exit_code = 1;
    GP_SET_HAS(&e, MSG_JOB_EVENT__EXIT_CODE);
    snprintf(e.reason, sizeof(e.reason), "exited 1");
    e.at_ms = NOW_MS + 123;
    job_event_line(&e, buf, sizeof(buf));
    T_OKM(strcmp(buf, "2025-12-03T10:00:00.123Z acme/j1 #4 attempt_failed -> pending attempt=1 "
                      "site=s1 node=n1 exit=1 reason=\"exited 1\"") == 0, "%s", buf);
    memset(&e, 0, sizeof(e));
    snprintf(e.tenant, sizeof(e.tenant), "acme");
    snprintf(e.job_id, sizeof(e.job_id), "j2");
    e.seq = 1;
    e.at_ms = NOW_MS;
    job_event_line(&e, buf, sizeof(buf));
    T_OKM(strcmp(buf, "2025-12-03T10:00:00.000Z acme/j2 #1 submitted -> pending") == 0,
          "absent parts left out: %s", buf);
    e.seq = 7;
    e.event = MSG_JOB_EVENT_EVENT_SUCCEEDED;
    e.state = MSG_JOB_EVENT_STATE_SUCCEEDED;
    GP_SET_HAS(&e, MSG_JOB_EVENT__EXIT_CODE);
    job_event_line(&e, buf, sizeof(buf));
    T_OKM(strcmp(buf, "2025-12-03T10:00:00.000Z acme/j2 #7 succeeded -> succeeded exit=0") == 0,
          "an exit status of 0 is shown when present: %s", buf);
}

static void
test_summary(void)
{
    static const struct {
        int32_t state, nodes, gpus;
    } jobs[] = {
        {MSG_JOB_STATE_RUNNING, 2, 4},  {MSG_JOB_STATE_RUNNING, 0, 1},
        {MSG_JOB_STATE_STARTING, 1, 2}, {MSG_JOB_STATE_PENDING, 1, 8},
        {MSG_JOB_STATE_SUCCEEDED, 1, 8}, {MSG_JOB_STATE_FAILED, 1, 2},
        {MSG_JOB_STATE_CANCELLED, 1, 1},
    };
    job_tally t = {0};
    char      num[32];

    for (size_t i = 0; i < sizeof(jobs) / sizeof(jobs[0]); i++) {
        msg_job j = {0};

        j.state = jobs[i].state;
        j.spec.nodes = jobs[i].nodes;
        j.spec.gpus_per_node = jobs[i].gpus;
        job_tally_add(&t, &j);
    }
    T_EQ_INT(t.total, 7);
    T_EQ_INT(t.by_state[MSG_JOB_STATE_RUNNING], 2);
    T_EQ_INT(t.by_state[MSG_JOB_STATE_STARTING], 1);
    T_EQ_INT(t.by_state[MSG_JOB_STATE_PENDING], 1);
    T_EQ_INT(t.by_state[MSG_JOB_STATE_SUCCEEDED] + t.by_state[MSG_JOB_STATE_FAILED] +
             t.by_state[MSG_JOB_STATE_CANCELLED], 3);
    T_OKM(t.gpus_booked == 11, "booked = 2x4 + 1x1 (nodes default 1) + 1x2: %llu",
          (unsigned long long)t.gpus_booked);
    T_OK(fabs(job_util_pct(t.gpus_booked, 44) - 25.0) < 1e-9);
    T_OK(job_util_pct(5, 0) == 0.0);
    fmt_count(num, sizeof(num), 1234567);
    T_OK(strcmp(num, "1,234,567") == 0);
    fmt_count(num, sizeof(num), 999);
    T_OK(strcmp(num, "999") == 0);
}

int
main(void)
{
    test_every_flag();
    test_bad_flags();
    test_files();
    test_bad_files();
    test_job_rows();
    test_attempt_rows();
    test_why_waits();
    test_event_line();
    test_summary();
    return T_DONE();
}
