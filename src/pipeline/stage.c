// SPDX-License-Identifier: Apache-2.0
/* stage: per-thread stage times, added up and bounded for the wire. */
#include "pipeline/stage.h"

#include <string.h>

void stage_acc_begin(struct stage_acc *a, uint64_t now)
{
	memset(a, 0, sizeof(*a));
	a->start_ns = now;
}

void stage_acc_end(struct stage_acc *a, uint64_t now)
{
	a->span_ns = now > a->start_ns ? now - a->start_ns : 0;
}

void stage_sum_add(struct stage_sum *s, const struct stage_acc *a)
{
	if (a->busy_ns == 0 && a->out_ns == 0)
		return;
	s->threads++;
	s->span_ns += a->span_ns;
	s->busy_ns += a->busy_ns;
	s->in_ns += a->in_ns;
	s->out_ns += a->out_ns;
}

/* Cuts *part to what is left of room, and takes it from room. */
static void stage_fit(uint64_t *part, uint64_t *room)
{
	if (*part > *room)
		*part = *room;
	*room -= *part;
}

void stage_sum_row(const struct stage_sum *s, uint64_t wall_us, struct proto_stage *row)
{
	uint64_t room;

	memset(row, 0, sizeof(*row));
	if (s->threads == 0)
		return;
	row->threads = s->threads > PROTO_STAGE_MAX_THREADS ? PROTO_STAGE_MAX_THREADS : s->threads;
	row->span_us = s->span_ns / 1000u;
	if (row->span_us / row->threads > wall_us)
		row->span_us = wall_us * row->threads;
	row->busy_us = s->busy_ns / 1000u;
	row->in_us = s->in_ns / 1000u;
	row->out_us = s->out_ns / 1000u;
	room = row->span_us;
	stage_fit(&row->busy_us, &room);
	stage_fit(&row->in_us, &room);
	stage_fit(&row->out_us, &room);
}
