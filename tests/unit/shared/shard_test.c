/* shard_test.c -- gp_fnv1a against FNV-1a's published test vectors, and
 * gp_shard_of as its value mod GP_SHARDS (the Redis key layout). */
#include "gp/shard.h"
#include "test.h"

int
main(void)
{
    /* http://www.isthe.com/chongo/src/fnv/test_fnv.c, FNV-1a 32 */
    T_OKM(gp_fnv1a("") == 0x811c9dc5u, "\"\" -> 0x811c9dc5");
    T_OKM(gp_fnv1a("a") == 0xe40c292cu, "\"a\" -> 0xe40c292c");
    T_OKM(gp_fnv1a("foobar") == 0xbf9cf968u, "\"foobar\" -> 0xbf9cf968");
    T_OKM(gp_fnv1a("\xff") != gp_fnv1a("\x7f"), "bytes are taken unsigned");
    T_OKM(gp_shard_of("foobar") == 0xbf9cf968u % GP_SHARDS, "a site's shard: its hash mod %u",
          GP_SHARDS);
    return T_DONE();
}
