/* SPDX-License-Identifier: Apache-2.0 */
/* srcrec: the source's in-flight file records. */
#include "pipeline/srcrec.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct src_rec *src_rec_new(uint32_t id, uint64_t size, int base_fd, const char *open_path,
			    const char *display)
{
	/* One allocation: the record, then its two strings. */
	size_t olen = open_path != NULL ? strlen(open_path) + 1 : 0, dlen = strlen(display) + 1;
	struct src_rec *r = malloc(sizeof(*r) + olen + dlen);
	char *at;

	if (r == NULL)
		return NULL;
	memset(r, 0, sizeof(*r));
	at = r->str;
	if (open_path != NULL) {
		r->open_path = memcpy(at, open_path, olen);
		at += olen;
	}
	r->display = memcpy(at, display, dlen);
	r->id = id;
	r->size = size;
	r->base_fd = base_fd;
	r->fd = -1;
	atomic_init(&r->failed, false);
	atomic_init(&r->refs, 1);
	atomic_init(&r->reads_left, 0);
	enc_file_init(&r->enc);
	return r;
}

void src_rec_get(struct src_rec *r)
{
	atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
}

void src_rec_put(struct src_rec *r)
{
	if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
		return;
	if (r->own_fd && r->fd >= 0)
		close(r->fd);
	free(r->sums);
	free(r);
}

uint64_t src_rec_blocks(uint64_t size, uint32_t B)
{
	return (size + B - 1) / B;
}
