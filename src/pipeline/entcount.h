/* SPDX-License-Identifier: Apache-2.0 */
/* entcount: entries counted as a user counts them, for progress. The wire
 * numbers every entry, a directory's DIR_END too (it marks where what the
 * directory holds ends), so ids alone count each directory twice; the
 * progress shows files, directories and links, and leaves the DIR_ENDs
 * out of both the announced and the done counts. Owned by one thread (the
 * control thread of a source, sink or relay). */
#ifndef PCOPY_ENTCOUNT_H
#define PCOPY_ENTCOUNT_H

#include <stdint.h>

#include "wire/proto.h"

struct entcount {
	/* bit id % PROTO_MAX_INFLIGHT: a DIR_END announced and not yet done
	 * (the protocol keeps fewer than that many entries in flight) */
	uint64_t ends[PROTO_MAX_INFLIGHT / 64];
	uint32_t ends_announced;  /* DIR_ENDs announced */
	uint32_t ends_done;       /* DIR_ENDs below the done mark */
};

/* Starts empty (no entry announced). */
void entcount_init(struct entcount *c);

/* Entry id, of wire type type, was announced (ids in order). */
void entcount_announce(struct entcount *c, uint32_t id, uint8_t type);

/* Every entry below upto is done (the done mark was from). */
void entcount_done(struct entcount *c, uint32_t from, uint32_t upto);

/* The counts to show, given the ids announced (next_id) and the done mark. */
static inline uint64_t entcount_shown_total(const struct entcount *c, uint32_t next_id)
{
	return next_id - c->ends_announced;
}

static inline uint64_t entcount_shown_done(const struct entcount *c, uint32_t upto)
{
	return upto - c->ends_done;
}

#endif
