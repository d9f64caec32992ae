/* SPDX-License-Identifier: Apache-2.0 */
/* ring: packets in a circular byte arena.
 *
 * Records are 16-byte aligned and the arena size is a multiple of 16, so the
 * space left at the end of the arena is always 0 or fits a header. When a
 * packet does not fit there, a wrap mark (len == RING_WRAP) is written and
 * the tail goes back to 0. head == tail means empty or full: count tells. */
#include "ring.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define RING_ALIGN 16u
#define RING_WRAP UINT32_MAX
#define RING_HDR sizeof(struct ring_rec)

_Static_assert(sizeof(struct ring_rec) % RING_ALIGN == 0,
	       "ring_rec keeps records aligned");

struct ring {
	uint8_t *buf;     /* cap bytes, aligned */
	size_t cap;       /* multiple of RING_ALIGN */
	size_t need;      /* header + room, aligned: space one packet needs */
	size_t head;      /* oldest record */
	size_t tail;      /* where the next record goes */
	size_t count;     /* records held (wrap marks not counted) */
};

static size_t ring_align(size_t n)
{
	return (n + RING_ALIGN - 1) & ~(size_t)(RING_ALIGN - 1);
}

struct ring *ring_new(size_t capacity, size_t room)
{
	struct ring *r = NULL;

	if (capacity < 4 * room)
		return NULL;
	r = calloc(1, sizeof(*r));
	if (r == NULL)
		return NULL;
	r->cap = ring_align(capacity);
	r->need = ring_align(RING_HDR + room);
	if (posix_memalign((void **)&r->buf, 4096, r->cap) != 0) {
		free(r);
		return NULL;
	}
	/* Fault every page in now, and keep them: no page faults in the
	 * packet path. mlock may fail under a low RLIMIT_MEMLOCK; fine. */
	memset(r->buf, 0, r->cap);
	(void)mlock(r->buf, r->cap);
	return r;
}

void ring_free(struct ring *r)
{
	if (r == NULL)
		return;
	free(r->buf);
	free(r);
}

uint8_t *ring_reserve(struct ring *r)
{
	struct ring_rec *mark;

	if (r->count == 0)
		r->head = r->tail = 0;
	if (r->count == 0 || r->tail > r->head) {
		if (r->cap - r->tail >= r->need)
			return r->buf + r->tail + RING_HDR;
		if (r->head < r->need)
			return NULL;
		if (r->tail < r->cap) {
			mark = (struct ring_rec *)(void *)(r->buf + r->tail);
			mark->len = RING_WRAP;
		}
		r->tail = 0;
		return r->buf + RING_HDR;
	}
	if (r->head - r->tail >= r->need)
		return r->buf + r->tail + RING_HDR;
	return NULL;
}

size_t ring_commit(struct ring *r, const struct ring_rec *rec, uint32_t len)
{
	struct ring_rec *dst = (struct ring_rec *)(void *)(r->buf + r->tail);
	size_t pos = r->tail;

	assert(RING_HDR + len <= r->need);
	*dst = *rec;
	dst->len = len;
	r->tail += ring_align(RING_HDR + len);
	if (r->tail == r->cap)
		r->tail = 0;
	r->count++;
	return pos;
}

size_t ring_count(const struct ring *r)
{
	return r->count;
}

size_t ring_first(const struct ring *r)
{
	return r->head;
}

struct ring_rec *ring_at(const struct ring *r, size_t pos)
{
	return (struct ring_rec *)(void *)(r->buf + pos);
}

size_t ring_next(const struct ring *r, size_t pos)
{
	pos += ring_align(RING_HDR + ring_at(r, pos)->len);
	if (pos == r->cap)
		return 0;
	if (pos != r->tail && ring_at(r, pos)->len == RING_WRAP)
		return 0;
	return pos;
}

size_t ring_end(const struct ring *r)
{
	return r->tail;
}

void ring_pop(struct ring *r)
{
	assert(r->count > 0);
	r->count--;
	if (r->count == 0) {
		r->head = r->tail = 0;
		return;
	}
	r->head = ring_next(r, r->head);
}
