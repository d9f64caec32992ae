/* SPDX-License-Identifier: Apache-2.0 */
/* testentries: building ENTRIES messages in the unit tests. */
#ifndef PCOPY_TESTENTRIES_H
#define PCOPY_TESTENTRIES_H

#include <stdlib.h>
#include <string.h>

#include "wire/proto.h"

/* A regular-file entry: path, size (0 and SIZE_UNKNOWN when `stream`),
 * mode; every other field 0 or empty. */
static inline void testentries_reg(struct proto_entry *e, const char *path, uint64_t size,
				   uint32_t mode, int stream)
{
	memset(e, 0, sizeof(*e));
	e->type = PROTO_ENT_REG;
	e->flags = stream ? PROTO_ENT_SIZE_UNKNOWN : 0;
	e->size = stream ? 0 : size;
	e->mode = mode;
	strcpy(e->path, path);
}

/* Fills *m as an ENTRIES of the one regular file path, with id `id`. The
 * message borrows *b (caller's storage, which must outlive m). Returns
 * proto_batch_add's result. */
static inline int testentries_one(struct proto_batch *b, struct proto_msg *m, uint32_t id,
				  const char *path, uint64_t size, uint32_t mode, int stream)
{
	struct proto_entry *e = malloc(sizeof(*e));
	int ret = -1;

	if (e == NULL)
		return ret;
	testentries_reg(e, path, size, mode, stream);
	proto_batch_init(b, id);
	ret = proto_batch_add(b, e);
	proto_batch_msg(b, m);
	free(e);
	return ret;
}

#endif
