// SPDX-License-Identifier: Apache-2.0
/* prune: a stack of open directory frames, each a set of names (an arena of
 * NUL-terminated names and an open-addressing table of offsets), and a
 * queue of closed ones (see prune.h). */
#include "pipeline/prune.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct prune_dir {
	uint32_t id;          /* its DIR_END's id, once closed */
	char *path;           /* the directory's wire path */
	char *arena;          /* the names, each NUL-terminated */
	size_t used, cap;
	uint32_t *slots;      /* offset + 1 into arena; 0 = empty. nslots a power of 2 */
	size_t nslots, n;
	size_t bytes;         /* what it counts in prune.bytes */
	bool spared;          /* an entry of it failed (prune_spare) */
	struct prune_dir *next; /* in the queue of closed frames */
};

struct prune {
	struct prune_dir **stack; /* open frames, the innermost last */
	unsigned depth, cap;
	struct prune_dir *head, *tail; /* closed frames, by DIR_END id */
	size_t bytes, max_bytes;
};

static uint32_t name_hash(const char *s, size_t n)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (uint8_t)s[i]) * 16777619u;
	return h;
}

/* The slot of name[0..n) in d: where it is, or the empty one where it
 * would go. */
static uint32_t *dir_slot(const struct prune_dir *d, const char *name, size_t n)
{
	size_t mask = d->nslots - 1, i = name_hash(name, n) & mask;

	for (;; i = (i + 1) & mask) {
		uint32_t *s = &d->slots[i];
		if (*s == 0)
			return s;
		const char *have = d->arena + *s - 1;
		if (strncmp(have, name, n) == 0 && have[n] == '\0')
			return s;
	}
}

void prune_dir_free(struct prune_dir *d)
{
	if (d == NULL)
		return;
	free(d->path);
	free(d->arena);
	free(d->slots);
	free(d);
}

bool prune_dir_has(const struct prune_dir *d, const char *name)
{
	return d->n > 0 && *dir_slot(d, name, strlen(name)) != 0;
}

/* Accounts for delta more bytes (or fewer) held by d. Returns 0 or -E2BIG. */
static int prune_account(struct prune *p, struct prune_dir *d, size_t old, size_t now)
{
	p->bytes = p->bytes - old + now;
	d->bytes = d->bytes - old + now;
	return p->bytes > p->max_bytes ? -E2BIG : 0;
}

/* Doubles d's table (or makes its first). Returns 0, -ENOMEM or -E2BIG. */
static int dir_grow(struct prune *p, struct prune_dir *d)
{
	size_t nslots = d->nslots != 0 ? d->nslots * 2 : 16;
	uint32_t *slots = calloc(nslots, sizeof(*slots));

	if (slots == NULL)
		return -ENOMEM;
	struct prune_dir tmp = *d;
	tmp.slots = slots;
	tmp.nslots = nslots;
	for (size_t i = 0; i < d->nslots; i++) {
		if (d->slots[i] == 0)
			continue;
		const char *name = d->arena + d->slots[i] - 1;
		*dir_slot(&tmp, name, strlen(name)) = d->slots[i];
	}
	free(d->slots);
	d->slots = slots;
	int ret = prune_account(p, d, d->nslots * sizeof(*slots), nslots * sizeof(*slots));
	d->nslots = nslots;
	return ret;
}

/* Adds name[0..n) to d. Returns 0, -ENOMEM or -E2BIG. */
static int dir_add(struct prune *p, struct prune_dir *d, const char *name, size_t n)
{
	int ret;

	if ((d->n + 1) * 2 > d->nslots && (ret = dir_grow(p, d)) < 0)
		return ret;
	uint32_t *slot = dir_slot(d, name, n);
	if (*slot != 0)
		return 0; /* there already (a source that sends a name twice) */
	if (d->used + n + 1 > d->cap) {
		size_t cap = d->cap != 0 ? d->cap * 2 : 256;
		while (cap < d->used + n + 1)
			cap *= 2;
		if (cap > UINT32_MAX)
			return -E2BIG;
		char *a = realloc(d->arena, cap);
		if (a == NULL)
			return -ENOMEM;
		d->arena = a;
		if ((ret = prune_account(p, d, d->cap, cap)) < 0) {
			d->cap = cap;
			return ret;
		}
		d->cap = cap;
	}
	memcpy(d->arena + d->used, name, n);
	d->arena[d->used + n] = '\0';
	*slot = (uint32_t)(d->used + 1);
	d->used += n + 1;
	d->n++;
	return 0;
}

/* The open frame for the directory path[0..n), innermost first, or NULL. */
static struct prune_dir *prune_open(struct prune *p, const char *path, size_t n)
{
	for (unsigned i = p->depth; i-- > 0;) {
		const char *have = p->stack[i]->path;
		if (strncmp(have, path, n) == 0 && have[n] == '\0')
			return p->stack[i];
	}
	return NULL;
}

/* A DIR: a new open frame. */
static int prune_push(struct prune *p, const char *path)
{
	if (p->depth == p->cap) {
		unsigned cap = p->cap != 0 ? p->cap * 2 : 16;
		struct prune_dir **s = realloc(p->stack, cap * sizeof(*s));
		if (s == NULL)
			return -ENOMEM;
		p->stack = s;
		p->cap = cap;
	}
	struct prune_dir *d = calloc(1, sizeof(*d));
	if (d == NULL || (d->path = strdup(path)) == NULL) {
		free(d);
		return -ENOMEM;
	}
	p->stack[p->depth++] = d;
	return prune_account(p, d, 0, sizeof(*d) + strlen(path) + 1);
}

/* A DIR_END: its frame, if open, is closed and queued. */
static void prune_close(struct prune *p, const struct proto_entry *e)
{
	size_t n = strlen(e->path);
	struct prune_dir *d = prune_open(p, e->path, n);
	unsigned i;

	if (d == NULL)
		return;
	for (i = 0; p->stack[i] != d; i++)
		;
	memmove(&p->stack[i], &p->stack[i + 1], (p->depth - i - 1) * sizeof(*p->stack));
	p->depth--;
	d->id = e->id;
	d->next = NULL;
	if (p->tail != NULL)
		p->tail->next = d;
	else
		p->head = d;
	p->tail = d;
}

struct prune *prune_new(size_t max_bytes)
{
	struct prune *p = calloc(1, sizeof(*p));

	if (p != NULL)
		p->max_bytes = max_bytes;
	return p;
}

int prune_note(struct prune *p, const struct proto_entry *e)
{
	const char *slash = strrchr(e->path, '/');

	if (e->type == PROTO_ENT_DIR_END) {
		prune_close(p, e);
		return 0;
	}
	if (slash != NULL) {
		struct prune_dir *parent = prune_open(p, e->path, (size_t)(slash - e->path));
		if (parent != NULL) {
			int ret = dir_add(p, parent, slash + 1, strlen(slash + 1));
			if (ret < 0)
				return ret;
		}
	}
	return e->type == PROTO_ENT_DIR ? prune_push(p, e->path) : 0;
}

struct prune_dir *prune_take(struct prune *p, uint32_t id, const char *path)
{
	while (p->head != NULL && p->head->id <= id) {
		struct prune_dir *d = p->head;
		p->head = d->next;
		if (p->head == NULL)
			p->tail = NULL;
		p->bytes -= d->bytes;
		if (d->id == id && strcmp(d->path, path) == 0)
			return d;
		prune_dir_free(d);
	}
	return NULL;
}

void prune_spare(struct prune *p, const char *path)
{
	const char *slash = strrchr(path, '/');
	struct prune_dir *d;

	if (slash == NULL)
		return;
	size_t n = (size_t)(slash - path);
	d = prune_open(p, path, n);
	for (struct prune_dir *q = p->head; d == NULL && q != NULL; q = q->next)
		if (strncmp(q->path, path, n) == 0 && q->path[n] == '\0')
			d = q;
	if (d != NULL)
		d->spared = true;
}

bool prune_dir_spared(const struct prune_dir *d)
{
	return d->spared;
}

size_t prune_bytes(const struct prune *p)
{
	return p->bytes;
}

void prune_free(struct prune *p)
{
	if (p == NULL)
		return;
	for (unsigned i = 0; i < p->depth; i++)
		prune_dir_free(p->stack[i]);
	while (p->head != NULL) {
		struct prune_dir *d = p->head;
		p->head = d->next;
		prune_dir_free(d);
	}
	free(p->stack);
	free(p);
}
