/* SPDX-License-Identifier: Apache-2.0 */
/* entcount: entries counted as a user counts them (see entcount.h). */
#include "pipeline/entcount.h"

#include <string.h>

void entcount_init(struct entcount *c)
{
	memset(c, 0, sizeof(*c));
}

void entcount_announce(struct entcount *c, uint32_t id, uint8_t type)
{
	uint32_t i = id % PROTO_MAX_INFLIGHT;
	uint64_t bit = 1ull << (i % 64);

	if (type == PROTO_ENT_DIR_END) {
		c->ends[i / 64] |= bit;
		c->ends_announced++;
	} else {
		c->ends[i / 64] &= ~bit;
	}
}

void entcount_done(struct entcount *c, uint32_t from, uint32_t upto)
{
	for (uint32_t id = from; id < upto; id++) {
		uint32_t i = id % PROTO_MAX_INFLIGHT;
		c->ends_done += (c->ends[i / 64] >> (i % 64)) & 1u;
	}
}
