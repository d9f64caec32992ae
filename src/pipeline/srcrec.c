/* SPDX-License-Identifier: Apache-2.0 */
/* srcrec: the source's in-flight file records. */
#include "pipeline/srcrec.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct src_rec *src_rec_new(uint32_t id, uint64_t size, int base_fd, const char *open_path,
			    const char *display)
{
	struct src_rec *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return NULL;
	r->open_path = open_path ? strdup(open_path) : NULL;
	r->display = strdup(display);
	if ((open_path != NULL && r->open_path == NULL) || r->display == NULL) {
		free(r->open_path);
		free(r->display);
		free(r);
		return NULL;
	}
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
	free(r->open_path);
	free(r->display);
	free(r->sums);
	free(r);
}

uint64_t src_rec_blocks(uint64_t size, uint32_t B)
{
	return (size + B - 1) / B;
}
