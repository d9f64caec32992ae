// SPDX-License-Identifier: Apache-2.0
/* bottleneck: names the slowest link of a copy from both sides' stage
 * times (END's and DONE's, wire/proto.h). Pure: no I/O, no state. */
#ifndef PCOPY_BOTTLENECK_H
#define PCOPY_BOTTLENECK_H

#include <pcopy/pcopy.h>

#include "wire/proto.h"

/* A stage must score at least this (a fraction of its threads' time)... */
#define BOTTLENECK_MIN 0.5
/* ...and this much more than the next, to be named the bottleneck. */
#define BOTTLENECK_MARGIN 0.2

/* Fills r->stage (the table, nstages = PCOPY_STAGES) and r->bottleneck
 * from the source's stats (its END) and the sink's (its DONE). Without
 * stage times on either side (both all zero: a copy that failed or moved
 * nothing), nstages is 0 and the verdict PCOPY_VERDICT_UNKNOWN. */
void bottleneck_judge(const struct proto_stats *src, const struct proto_stats *sink,
		      struct pcopy_result *r);

#endif
