// SPDX-License-Identifier: Apache-2.0
/* stage: where the pipeline's threads spend their time, for the summary's
 * bottleneck line (docs/DESIGN-NOTES.md, "Which link is the slow one").
 *
 * Each worker thread owns a struct stage_acc per stage it takes part in and
 * adds to it with the monotonic clock around its blocking calls (a few
 * clock reads per block, never per byte). After the thread is done (joined,
 * or ordered before the reader by the pipeline's own synchronisation), its
 * owner adds the accumulators into a struct stage_sum and turns that into
 * the struct proto_stage that END or DONE carries. Nothing here is shared
 * between threads: no locks, no atomics. */
#ifndef PCOPY_STAGE_H
#define PCOPY_STAGE_H

#include <stdint.h>

#include "wire/proto.h"

/* One thread's time in one stage, in ns. busy, in and out are disjoint
 * stretches of [start, end]. Owner thread only until it is done. */
struct stage_acc {
	uint64_t start_ns;      /* when the thread started */
	uint64_t span_ns;       /* its lifetime; set by stage_acc_end */
	uint64_t busy_ns;       /* doing the stage's work */
	uint64_t in_ns;         /* waiting for input */
	uint64_t out_ns;        /* waiting to hand on */
};

/* The threads of one stage, added up. */
struct stage_sum {
	uint32_t threads;       /* threads that did more than wait for input */
	uint64_t span_ns, busy_ns, in_ns, out_ns;
};

/* Marks the start of a thread's life at now. */
void stage_acc_begin(struct stage_acc *a, uint64_t now);

/* Marks its end at now (>= the start). */
void stage_acc_end(struct stage_acc *a, uint64_t now);

/* Adds a finished thread's accumulator to s. A thread that only ever
 * waited for input (a writer no file was given to, a reader that never got
 * a claim) is left out: its waiting says nothing about the stage. */
void stage_sum_add(struct stage_sum *s, const struct stage_acc *a);

/* The stage as END or DONE carries it, in µs, within the bounds a decoder
 * checks (wire/proto.h): the span is cut to threads * wall_us, and the
 * parts, out first, then in, then busy, to the span. */
void stage_sum_row(const struct stage_sum *s, uint64_t wall_us, struct proto_stage *row);

#endif
