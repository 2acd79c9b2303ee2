/* codec_bench.c -- encode and decode rate of the generic codec on a
 * heartbeat with 8 GPUs of full telemetry and 2 attempts, next to msgpack-c
 * itself on the same message in the same run:
 *   encode reference: the same map packed by hand with msgpack_pack_*
 *                     (hand-written msgpack is allowed here only, as the
 *                     reference);
 *   decode reference: msgpack_unpack_next over the same bytes (the object
 *                     tree only: no field lookup, checks or struct fill).
 * No servers.  Each measurement is bounded by count and time; the four
 * runs alternate, repeated, and the median is reported.
 *
 * Output: key=value lines (see bench.h). */
#include <msgpack.h>

#include "bench.h"
#include "gp/buf.h"

#define TRIALS     5
#define TRIAL_S    0.3          /* seconds per trial and per measurement */
#define MAX_ITERS  5000000      /* and at most this many messages per trial */
#define CHECK_EVERY 256         /* clock read every N iterations */

static msg_heartbeat hb;

static void
pk_str(msgpack_packer *pk, const char *s)
{
    size_t n = strlen(s);

    msgpack_pack_str(pk, n);
    msgpack_pack_str_body(pk, s, n);
}

/* The reference encoder: the heartbeat map written out by hand, field by
 * field, the way a hand-coded service would (same keys, same order, same
 * integer widths as the codec chooses: smallest form; doubles as float64). */
static void
hand_pack(msgpack_packer *pk, const msg_heartbeat *h)
{
    const msg_gpu_telemetry *g = h->gpus.v;
    const msg_attempt_usage *a = h->attempts.v;

    msgpack_pack_map(pk, 9);
    pk_str(pk, "site");          pk_str(pk, h->site);
    pk_str(pk, "node");          pk_str(pk, h->node);
    pk_str(pk, "seq");           msgpack_pack_uint64(pk, h->seq);
    pk_str(pk, "sent_ms");       msgpack_pack_uint64(pk, h->sent_ms);
    pk_str(pk, "uptime_s");      msgpack_pack_uint64(pk, h->uptime_s);
    pk_str(pk, "disk");          pk_str(pk, msg_heartbeat_disk_names[h->disk]);
    pk_str(pk, "uplink_rtt_ms"); msgpack_pack_double(pk, h->uplink_rtt_ms);
    pk_str(pk, "gpus");
    msgpack_pack_array(pk, h->gpus.n);
    for (uint32_t i = 0; i < h->gpus.n; i++) {
        const int32_t *x = g[i].xids.v, *t = g[i].throttle.v;

        msgpack_pack_map(pk, 10);
        pk_str(pk, "index");       msgpack_pack_int64(pk, g[i].index);
        pk_str(pk, "state");       pk_str(pk, msg_gpu_telemetry_state_names[g[i].state]);
        pk_str(pk, "temp_c");      msgpack_pack_double(pk, g[i].temp_c);
        pk_str(pk, "power_w");     msgpack_pack_double(pk, g[i].power_w);
        pk_str(pk, "util_pct");    msgpack_pack_double(pk, g[i].util_pct);
        pk_str(pk, "mem_used_mb"); msgpack_pack_uint64(pk, g[i].mem_used_mb);
        pk_str(pk, "ecc_sbe");     msgpack_pack_uint64(pk, g[i].ecc_sbe);
        pk_str(pk, "ecc_dbe");     msgpack_pack_uint64(pk, g[i].ecc_dbe);
        pk_str(pk, "xids");
        msgpack_pack_array(pk, g[i].xids.n);
        for (uint32_t k = 0; k < g[i].xids.n; k++)
            msgpack_pack_int64(pk, x[k]);
        pk_str(pk, "throttle");
        msgpack_pack_array(pk, g[i].throttle.n);
        for (uint32_t k = 0; k < g[i].throttle.n; k++)
            pk_str(pk, msg_gpu_telemetry_throttle_names[t[k]]);
    }
    pk_str(pk, "attempts");
    msgpack_pack_array(pk, h->attempts.n);
    for (uint32_t i = 0; i < h->attempts.n; i++) {
        msgpack_pack_map(pk, 5);
        pk_str(pk, "job_id");    pk_str(pk, a[i].job_id);
        pk_str(pk, "attempt");   msgpack_pack_uint64(pk, a[i].attempt);
        pk_str(pk, "gpu_ms");    msgpack_pack_uint64(pk, a[i].gpu_ms);
        pk_str(pk, "energy_mj"); msgpack_pack_uint64(pk, a[i].energy_mj);
        pk_str(pk, "state");     pk_str(pk, msg_attempt_usage_state_names[a[i].state]);
    }
}

typedef enum which { ENC_GP, ENC_REF, DEC_GP, DEC_REF, NWHICH } which;

static const char *wire;         /* the codec's bytes of hb */
static size_t      wire_n;
static volatile size_t sink;     /* keeps the compiler from dropping work */

/* One trial: messages per second. */
static double
trial(which w)
{
    gp_buf           b;
    msgpack_sbuffer  sb;
    msgpack_packer   pk;
    msgpack_unpacked u;
    msg_heartbeat    out = {0};
    double           t0 = b_now(), t = t0;
    long             n = 0;
    int              bad = 0;

    gp_buf_init(&b, 0);
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_unpacked_init(&u);
    while (n < MAX_ITERS) {
        for (int k = 0; k < CHECK_EVERY; k++, n++) {
            size_t off = 0;

            switch (w) {
            case ENC_GP:
                gp_buf_reset(&b);
                bad |= gp_msg_encode(&msg_heartbeat_desc, &hb, &b) != GP_EOK;
                sink += b.n;
                break;
            case ENC_REF:
                sb.size = 0;
                hand_pack(&pk, &hb);
                sink += sb.size;
                break;
            case DEC_GP:
                bad |= gp_msg_decode(&msg_heartbeat_desc, wire, wire_n, &out, NULL, 0) != GP_EOK;
                sink += out.gpus.n;
                gp_msg_clear(&msg_heartbeat_desc, &out);
                break;
            case DEC_REF:
                bad |= msgpack_unpack_next(&u, wire, wire_n, &off) != MSGPACK_UNPACK_SUCCESS;
                sink += u.data.via.map.size + off;
                break;
            default:
                break;
            }
        }
        t = b_now();
        if (t - t0 >= TRIAL_S)
            break;
    }
    msgpack_unpacked_destroy(&u);
    msgpack_sbuffer_destroy(&sb);
    gp_buf_fini(&b);
    if (bad)
        b_note("codec: errors during trial %d", (int)w);
    return (double)n / (t - t0);
}

int
main(void)
{
    static const char *const names[NWHICH] = {"codec_encode", "codec_encode_ref", "codec_decode",
                                              "codec_decode_ref"};
    gp_buf           b;
    msgpack_sbuffer  sb;
    msgpack_packer   pk;
    msg_heartbeat    back = {0};
    double           rate[NWHICH][TRIALS], med[NWHICH];
    bool             same;

    b_heartbeat(&hb, "site-eu-west-017", "node-000123", 42);
    gp_buf_init(&b, 0);
    if (gp_msg_encode(&msg_heartbeat_desc, &hb, &b) != GP_EOK) {
        b_note("codec: encode failed");
        return 1;
    }
    wire = b.p;
    wire_n = b.n;

    /* The hand-packed reference must say the same thing. */
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    hand_pack(&pk, &hb);
    same = gp_msg_decode(&msg_heartbeat_desc, sb.data, sb.size, &back, NULL, 0) == GP_EOK &&
           gp_msg_equal(&msg_heartbeat_desc, &hb, &back);
    b_note("codec: heartbeat %zu bytes (codec), %zu bytes (hand-packed), same message: %s, "
           "bytes identical: %s", wire_n, sb.size, same ? "yes" : "NO",
           sb.size == wire_n && memcmp(sb.data, wire, wire_n) == 0 ? "yes" : "no");
    gp_msg_clear(&msg_heartbeat_desc, &back);
    msgpack_sbuffer_destroy(&sb);

    for (int w = 0; w < NWHICH; w++)        /* warm-up */
        (void)trial((which)w);
    for (int t = 0; t < TRIALS; t++)
        for (int w = 0; w < NWHICH; w++)
            rate[w][t] = trial((which)w);
    for (int w = 0; w < NWHICH; w++)
        med[w] = b_median(rate[w], TRIALS);

    b_kv("codec_msg_bytes", (double)wire_n);
    b_kv("codec_ref_same_msg", same);
    for (int w = 0; w < NWHICH; w++) {
        char key[64];

        snprintf(key, sizeof(key), "%s_msgs_s", names[w]);
        b_kv(key, (double)(long long)med[w]);
        snprintf(key, sizeof(key), "%s_mb_s", names[w]);
        b_kv(key, med[w] * (double)wire_n / 1e6);
    }
    b_kv("codec_encode_ratio", med[ENC_GP] / med[ENC_REF]);
    b_kv("codec_decode_ratio", med[DEC_GP] / med[DEC_REF]);
    gp_buf_fini(&b);
    gp_msg_clear(&msg_heartbeat_desc, &hb);
    return 0;
}
