// SPDX-License-Identifier: Apache-2.0
/* bottleneck: the stage table and the verdict.
 *
 * The rules (docs/DESIGN-NOTES.md, "Which link is the slow one"). A copy is
 * a pipeline of bounded queues: read -> compress -> send -> network ->
 * receive -> decode -> write. Its slowest stage works all the time; the
 * stages before it wait to hand on (their queues are full) and those after
 * it wait for input (theirs are empty). So each candidate gets a score, the
 * fraction of its threads' time that says "this is the slow one":
 *   source disk reads                 READ's busy (in a read or a stream's poll)
 *   compression (CPU) on the source   COMPRESS's busy (checksum and codec)
 *   encryption                        the larger of SEND's and RECEIVE's busy,
 *                                     which is their CPU time inside TLS (0 in clear)
 *   the network                       the smaller of SEND's waiting for room in
 *                                     the socket and RECEIVE's waiting for bytes:
 *                                     a full sending socket alone may mean a
 *                                     sink that stopped reading, an empty
 *                                     receiving one a source with nothing to send;
 *                                     both at once mean the path between is slow
 *   decompression (CPU) on the sink   DECODE's busy (codec and checksum)
 *   sink disk writes                  WRITE's busy (in a write, a create, a rename)
 * The highest score is the verdict when it is at least BOTTLENECK_MIN and
 * leads the next by BOTTLENECK_MARGIN; otherwise no stage dominates ("none
 * clear": e.g. a copy from memory to memory, where every stage takes its
 * share of the CPU). The second headline number is how idle the network
 * was (1 - its score), or for the network itself how idle the sink's
 * writers were. */
#include "roles/bottleneck.h"

#include <stdio.h>
#include <string.h>

struct bn_candidate {
	int verdict;
	enum pcopy_stage stage;  /* the table row it speaks for */
	const char *name;
	const char *key;
};

static const struct bn_candidate bn_candidates[] = {
	{ PCOPY_VERDICT_SOURCE_READ, PCOPY_STAGE_READ, "source disk reads", "source_read" },
	{ PCOPY_VERDICT_COMPRESSION, PCOPY_STAGE_COMPRESS, "compression (CPU) on the source",
	  "compression" },
	{ PCOPY_VERDICT_ENCRYPTION, PCOPY_STAGE_SEND, "encryption", "encryption" },
	{ PCOPY_VERDICT_NETWORK, PCOPY_STAGE_NETWORK, "the network", "network" },
	{ PCOPY_VERDICT_DECOMPRESSION, PCOPY_STAGE_DECODE, "decompression (CPU) on the sink",
	  "decompression" },
	{ PCOPY_VERDICT_SINK_WRITE, PCOPY_STAGE_WRITE, "sink disk writes", "sink_write" },
};
#define BN_NCAND (sizeof(bn_candidates) / sizeof(bn_candidates[0]))

static double bn_frac(uint64_t part, uint64_t whole)
{
	return whole > 0 ? (double)part / (double)whole : 0.0;
}

/* A stage's row: its times as shares of its threads' part of the copy's
 * wall time (threads * wall_us), not of their own lifetimes: a stage that
 * finished early (readers whose last blocks went into the pool and the
 * socket buffers while a slow sink still wrote) was idle for the rest of
 * the copy, and must not look busy. */
static void bn_row(struct pcopy_stage_stats *row, const char *name, const char *side,
		   const struct proto_stage *g, uint64_t wall_us)
{
	uint64_t whole = (uint64_t)g->threads * wall_us;

	snprintf(row->name, sizeof(row->name), "%s", name);
	snprintf(row->side, sizeof(row->side), "%s", side);
	row->threads = g->threads;
	row->busy = bn_frac(g->busy_us, whole);
	row->blocked_in = bn_frac(g->in_us, whole);
	row->blocked_out = bn_frac(g->out_us, whole);
}

static double bn_min(double a, double b)
{
	return a < b ? a : b;
}

static double bn_max(double a, double b)
{
	return a > b ? a : b;
}

static bool bn_has_stages(const struct proto_stats *st)
{
	for (unsigned i = 0; i < PROTO_STAGES; i++)
		if (st->stage[i].threads > 0)
			return true;
	return false;
}

/* The table: the six measured stages and the network between them. All
 * are shares of the copy's wall time, the longer of the two sides' (the
 * sink's DONE comes last; a source's END may come long before, when its
 * last blocks fit in the socket buffers): the same yardstick whichever
 * side the client is. */
static void bn_table(const struct proto_stats *src, const struct proto_stats *sink,
		     struct pcopy_stage_stats *t)
{
	uint64_t wall = src->wall_us > sink->wall_us ? src->wall_us : sink->wall_us;

	bn_row(&t[PCOPY_STAGE_READ], "read", "source", &src->stage[PROTO_STAGE_READ], wall);
	bn_row(&t[PCOPY_STAGE_COMPRESS], "compress", "source", &src->stage[PROTO_STAGE_ENCODE],
	       wall);
	bn_row(&t[PCOPY_STAGE_SEND], "send", "source", &src->stage[PROTO_STAGE_SEND], wall);
	bn_row(&t[PCOPY_STAGE_RECEIVE], "receive", "sink", &sink->stage[PROTO_STAGE_RECV], wall);
	bn_row(&t[PCOPY_STAGE_DECODE], "decode", "sink", &sink->stage[PROTO_STAGE_DECODE], wall);
	bn_row(&t[PCOPY_STAGE_WRITE], "write", "sink", &sink->stage[PROTO_STAGE_WRITE], wall);
	struct pcopy_stage_stats *n = &t[PCOPY_STAGE_NETWORK];
	snprintf(n->name, sizeof(n->name), "network");
	snprintf(n->side, sizeof(n->side), "both");
	n->threads = t[PCOPY_STAGE_SEND].threads;
	n->busy = bn_min(t[PCOPY_STAGE_SEND].blocked_out, t[PCOPY_STAGE_RECEIVE].blocked_in);
	n->blocked_in = t[PCOPY_STAGE_SEND].blocked_in;
	n->blocked_out = t[PCOPY_STAGE_RECEIVE].blocked_out;
}

static double bn_score(const struct pcopy_stage_stats *t, int verdict, enum pcopy_stage stage)
{
	if (verdict == PCOPY_VERDICT_ENCRYPTION)
		return bn_max(t[PCOPY_STAGE_SEND].busy, t[PCOPY_STAGE_RECEIVE].busy);
	return t[stage].busy;
}

void bottleneck_judge(const struct proto_stats *src, const struct proto_stats *sink,
		      struct pcopy_result *r)
{
	struct pcopy_bottleneck *b = &r->bottleneck;
	const struct bn_candidate *top = NULL;
	double best = -1.0, next = -1.0;

	memset(b, 0, sizeof(*b));
	memset(r->stage, 0, sizeof(r->stage));
	r->nstages = 0;
	b->verdict = PCOPY_VERDICT_UNKNOWN;
	if (!bn_has_stages(src) || !bn_has_stages(sink))
		return;
	r->nstages = PCOPY_STAGES;
	bn_table(src, sink, r->stage);
	for (size_t i = 0; i < BN_NCAND; i++) {
		double sc = bn_score(r->stage, bn_candidates[i].verdict, bn_candidates[i].stage);
		if (sc > best) {
			next = best;
			best = sc;
			top = &bn_candidates[i];
		} else if (sc > next) {
			next = sc;
		}
	}
	b->busy = best;
	if (best >= BOTTLENECK_MIN && best - next >= BOTTLENECK_MARGIN) {
		b->verdict = top->verdict;
		snprintf(b->name, sizeof(b->name), "%s", top->name);
		snprintf(b->key, sizeof(b->key), "%s", top->key);
	} else {
		b->verdict = PCOPY_VERDICT_NONE_CLEAR;
		snprintf(b->name, sizeof(b->name), "none clear");
		snprintf(b->key, sizeof(b->key), "none");
		snprintf(b->busiest, sizeof(b->busiest), "%s", top->name);
	}
	if (b->verdict == PCOPY_VERDICT_NETWORK) {
		snprintf(b->second_label, sizeof(b->second_label), "sink idle");
		b->second = r->stage[PCOPY_STAGE_WRITE].blocked_in;
	} else {
		snprintf(b->second_label, sizeof(b->second_label), "network idle");
		b->second = 1.0 - r->stage[PCOPY_STAGE_NETWORK].busy;
	}
}
