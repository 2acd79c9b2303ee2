/* shard.h -- the Redis shard of a site, shared by every service that keeps
 * per-node keys in Redis (the registry's live view, the scheduler's GPU
 * reservations).
 *
 * Every key of a site carries the tag {N}, N = FNV-1a (32 bit) of the site
 * id mod GP_SHARDS, so all the keys of one site (its nodes' live state and
 * their reservations) are in one Redis Cluster slot: one Lua script may
 * read a node's health and book GPUs of several nodes of one site
 * atomically.  GP_SHARDS is part of the key layout: changing it moves
 * every key (it would come with new epoch keys). */
#ifndef GP_SHARD_H
#define GP_SHARD_H

#define GP_SHARDS 256u

#include <stdint.h>

/* The shard of a site id (any NUL-terminated string), 0..GP_SHARDS-1. */
unsigned gp_shard_of(const char *site);

/* FNV-1a, 32 bit, of a NUL-terminated string: the shard's hash, and the
 * one every in-memory table keyed by an id uses (a slot is h % size). */
uint32_t gp_fnv1a(const char *s);

#endif
