/* kv_slot_test.c -- gp_kv_key_slot against the Redis Cluster
 * specification's examples (CRC16/XMODEM, hash tags).  The integration test
 * kv_cluster_test checks it against a real cluster's CLUSTER KEYSLOT. */
#include <string.h>

#include "gp/kv.h"
#include "test.h"

#define SLOT(s) gp_kv_key_slot((s), strlen(s))

int
main(void)
{
    /* CRC16("123456789") = 0x31C3 (the spec's check value): 12739 */
    T_EQ_INT(SLOT("123456789"), 0x31C3 & 16383);
    T_EQ_INT(SLOT("foo"), 12182);          /* the spec's MOVED example key */
    T_EQ_INT(SLOT("a"), 15495);
    T_EQ_INT(SLOT("b"), 3300);
    T_EQ_INT(SLOT(""), 0);
    /* a tag: only what is between the first '{' and the next '}' */
    T_EQ_INT(SLOT("{user1000}.following"), SLOT("user1000"));
    T_EQ_INT(SLOT("{user1000}.followers"), SLOT("{user1000}.following"));
    T_EQ_INT(SLOT("gp:{17}:node:s1-n1"), SLOT("17"));
    /* empty tag: the whole key */
    T_EQ_INT(SLOT("foo{}{bar}"), gp_kv_key_slot("foo{}{bar}", 10));
    T_OK(SLOT("foo{}{bar}") != SLOT("bar"));
    /* the first '{' and the first '}' after it */
    T_EQ_INT(SLOT("foo{{bar}}zap"), SLOT("{bar"));
    T_EQ_INT(SLOT("foo{bar}{zap}"), SLOT("bar"));
    /* no closing brace: the whole key */
    T_OK(SLOT("{abc") != SLOT("abc"));
    /* binary safe */
    T_EQ_INT(gp_kv_key_slot("a\0b", 3), gp_kv_key_slot("a\0b", 3));
    T_OK(gp_kv_key_slot("a\0b", 3) != SLOT("a"));
    return T_DONE();
}
