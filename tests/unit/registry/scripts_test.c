/* scripts_test.c -- the registry's Redis key layout
 * (services/registry/scripts.h): the shard of a site is stable (it is part
 * of the stored layout: a change would strand every key), in range and
 * spread; keys carry the shard as a hash tag and fit their buffers; no Lua
 * script names a key of its own (Cluster: every key must come in KEYS). */
#include <string.h>

#include "gp/limits.h"
#include "test.h"
#include "../../../services/registry/scripts.h"

int
main(void)
{
    char     key[REGISTRY_KEY_LEN], id[GP_MAX_ID + 1];
    unsigned hits[REGISTRY_SHARDS] = {0}, empty = 0, most = 0;
    const char *const lua[] = {registry_hb_lua, registry_sweep_read_lua, registry_sweep_lua,
                               registry_reseed_lua, registry_forget_lua, registry_unlock_lua,
                               registry_contact_lua, registry_adm_lua};

    /* FNV-1a 32 of "s1" is 0x0851b8c9; mod 256 = 0xc9 = 201 */
    T_EQ_INT(registry_shard("s1"), 201);
    T_EQ_INT(registry_shard(""), 2166136261u % REGISTRY_SHARDS);
    for (int i = 0; i < 25600; i++) {
        char site[16];

        snprintf(site, sizeof(site), "s%04d", i);
        hits[registry_shard(site)]++;
    }
    for (unsigned s = 0; s < REGISTRY_SHARDS; s++) {
        empty += hits[s] == 0;
        most = hits[s] > most ? hits[s] : most;
    }
    T_OKM(empty == 0 && most < 3 * 100, "25,600 sites spread over all shards (largest %u)", most);

    registry_node_key(key, 7, "n1");
    T_OK(strcmp(key, "gp:{7}:node:n1") == 0);
    registry_seen_key(key, 255);
    T_OK(strcmp(key, "gp:{255}:seen") == 0);
    registry_rtt_key(key, "s1");
    T_OK(strcmp(key, "gp:{201}:rtt:s1") == 0);
    memset(id, 'x', GP_MAX_ID);
    id[GP_MAX_ID] = '\0';
    registry_rtt_key(key, id);
    T_OKM(strlen(key) < REGISTRY_KEY_LEN - 1 && strcmp(key + strlen(key) - GP_MAX_ID, id) == 0,
          "the longest id fits a key buffer (%zu bytes)", strlen(key));
    registry_node_key(key, REGISTRY_SHARDS - 1, id);
    T_OK(strcmp(key + strlen(key) - GP_MAX_ID, id) == 0);

    for (size_t i = 0; i < sizeof(lua) / sizeof(lua[0]); i++)
        T_OKM(strstr(lua[i], "'gp:") == NULL && strstr(lua[i], "\"gp:") == NULL && strstr(lua[i], "..") == NULL,
              "script %zu names no key of its own (all come in KEYS)", i);
    return T_DONE();
}
