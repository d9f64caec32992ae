/* SPDX-License-Identifier: Apache-2.0 */
/* sink_ent: the sink's per-entry records. */
#include "pipeline/sink_ent.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipeline/journal.h"
#include "sys/sync.h"

/* Copies s into *at and moves *at past it. */
static char *sink_ent_str(char **at, const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = *at;

	memcpy(p, s, n);
	*at += n;
	return p;
}

struct sink_ent *sink_ent_new(const struct proto_entry *e)
{
	size_t n = strlen(e->path) + strlen(e->target) + strlen(e->user) + strlen(e->group) + 4;
	struct sink_ent *r = malloc(sizeof(*r) + n);
	char *at;

	if (r == NULL)
		return NULL;
	memset(r, 0, sizeof(*r));
	r->id = e->id;
	r->type = e->type;
	r->flags = e->flags;
	r->mode = e->mode;
	r->uid = e->uid;
	r->gid = e->gid;
	r->mtime_s = e->mtime_s;
	r->mtime_ns = e->mtime_ns;
	r->atime_s = e->atime_s;
	r->atime_ns = e->atime_ns;
	r->rdev = e->rdev;
	r->link_id = e->link_id;
	at = r->str;
	r->path = sink_ent_str(&at, e->path);
	r->target = sink_ent_str(&at, e->target);
	r->user = sink_ent_str(&at, e->user);
	r->group = sink_ent_str(&at, e->group);
	r->fd = -1;
	r->base_fd = -1;
	r->copy_fd = -1;
	r->size_known = !(e->flags & PROTO_ENT_SIZE_UNKNOWN);
	r->size = e->size;
	r->data = e->type == PROTO_ENT_REG && (e->size > 0 || !r->size_known);
	atomic_init(&r->refs, 1);
	atomic_init(&r->carry, SINK_CARRY_NONE);
	if (r->data) {
		if (pthread_mutex_init(&r->lock, NULL) != 0) {
			free(r);
			return NULL;
		}
		r->lock_ok = true;
	}
	return r;
}

void sink_ent_entry(const struct sink_ent *r, struct proto_entry *e)
{
	e->id = r->id;
	e->type = r->type;
	e->flags = r->flags;
	e->mode = r->mode;
	e->uid = r->uid;
	e->gid = r->gid;
	e->mtime_s = r->mtime_s;
	e->mtime_ns = r->mtime_ns;
	e->atime_s = r->atime_s;
	e->atime_ns = r->atime_ns;
	e->size = r->size;
	e->rdev = r->rdev;
	e->link_id = r->link_id;
	memcpy(e->path, r->path, strlen(r->path) + 1);
	memcpy(e->target, r->target, strlen(r->target) + 1);
	memcpy(e->user, r->user, strlen(r->user) + 1);
	memcpy(e->group, r->group, strlen(r->group) + 1);
}

void sink_ent_get(struct sink_ent *r)
{
	atomic_fetch_add_explicit(&r->refs, 1, memory_order_relaxed);
}

void sink_ent_put(struct sink_ent *r)
{
	if (atomic_fetch_sub_explicit(&r->refs, 1, memory_order_acq_rel) != 1)
		return;
	if (r->lock_ok)
		sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&r->lock));
	if (r->base_fd >= 0) /* the sink closes it sooner: this only on an abort */
		close(r->base_fd);
	if (r->copy_fd >= 0) /* likewise */
		close(r->copy_fd);
	journal_free(r->jr);
	free(r->seen);
	free(r->owed);
	free(r->fail_msg);
	free(r);
}

void sink_ent_fail_msg(struct sink_ent *r, const char *msg)
{
	free(r->fail_msg);
	r->fail_msg = msg[0] != '\0' ? strndup(msg, PROTO_MAX_MSG) : NULL;
}
