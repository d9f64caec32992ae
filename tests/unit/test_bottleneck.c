// SPDX-License-Identifier: Apache-2.0
/* Unit tests for bottleneck: each verdict from synthetic stage times, the
 * margin that makes "none clear", the table it derives the network from,
 * and no verdict without numbers. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include "roles/bottleneck.h"

/* Fractions of 1000 µs of one thread's life: busy, in, out. */
static void stage(struct proto_stats *st, unsigned i, unsigned busy, unsigned in, unsigned out)
{
	st->stage[i] = (struct proto_stage){ .threads = 1, .span_us = 1000, .busy_us = busy,
					     .in_us = in, .out_us = out };
}

/* A copy where nothing stands out: every stage works a little and waits a
 * little, and the sockets never fill. */
static void calm(struct proto_stats *src, struct proto_stats *sink)
{
	memset(src, 0, sizeof(*src));
	memset(sink, 0, sizeof(*sink));
	src->wall_us = sink->wall_us = 1000;
	stage(src, PROTO_STAGE_READ, 200, 300, 500);
	stage(src, PROTO_STAGE_ENCODE, 100, 400, 500);
	stage(src, PROTO_STAGE_SEND, 0, 600, 250);
	stage(sink, PROTO_STAGE_RECV, 0, 300, 400);
	stage(sink, PROTO_STAGE_DECODE, 100, 300, 300);
	stage(sink, PROTO_STAGE_WRITE, 200, 700, 0);
}

static struct pcopy_result judge(const struct proto_stats *src, const struct proto_stats *sink)
{
	struct pcopy_result r;

	memset(&r, 0x5a, sizeof(r));
	bottleneck_judge(src, sink, &r);
	return r;
}

static void test_none_clear(void **state)
{
	struct proto_stats src, sink;

	(void)state;
	calm(&src, &sink);
	struct pcopy_result r = judge(&src, &sink);
	assert_int_equal(r.bottleneck.verdict, PCOPY_VERDICT_NONE_CLEAR);
	assert_string_equal(r.bottleneck.name, "none clear");
	assert_string_equal(r.bottleneck.key, "none");
	/* The busiest: the network, min(send waiting for room 25 %, receive
	 * waiting for bytes 30 %); the reads and the writes at 20 %. */
	assert_string_equal(r.bottleneck.busiest, "the network");
	assert_true(r.bottleneck.busy > 0.249 && r.bottleneck.busy < 0.251);
	assert_string_equal(r.bottleneck.second_label, "network idle");
	/* A stage at 60 % that leads the next (40 %) by less than the margin. */
	stage(&sink, PROTO_STAGE_WRITE, 600, 400, 0);
	stage(&src, PROTO_STAGE_READ, 401, 100, 499);
	r = judge(&src, &sink);
	assert_int_equal(r.bottleneck.verdict, PCOPY_VERDICT_NONE_CLEAR);
	assert_string_equal(r.bottleneck.busiest, "sink disk writes");
	/* ...and by the margin: named. */
	stage(&src, PROTO_STAGE_READ, 399, 100, 501);
	r = judge(&src, &sink);
	assert_int_equal(r.bottleneck.verdict, PCOPY_VERDICT_SINK_WRITE);
	/* Below BOTTLENECK_MIN, even alone: none. */
	calm(&src, &sink);
	stage(&sink, PROTO_STAGE_WRITE, 450, 550, 0);
	stage(&src, PROTO_STAGE_READ, 0, 100, 0);
	stage(&src, PROTO_STAGE_SEND, 0, 600, 0);
	r = judge(&src, &sink);
	assert_int_equal(r.bottleneck.verdict, PCOPY_VERDICT_NONE_CLEAR);
}

struct verdict_case {
	int verdict;
	const char *name, *key;
	unsigned side_stage;       /* the stage made slow */
	bool sink_side;
	unsigned busy, in, out;
	double busy_want;
	const char *second_label;
	double second_want;
};

static const struct verdict_case verdict_cases[] = {
	{ PCOPY_VERDICT_SOURCE_READ, "source disk reads", "source_read", PROTO_STAGE_READ, false,
	  970, 0, 30, 0.97, "network idle", 0.75 },
	{ PCOPY_VERDICT_COMPRESSION, "compression (CPU) on the source", "compression",
	  PROTO_STAGE_ENCODE, false, 950, 50, 0, 0.95, "network idle", 0.75 },
	{ PCOPY_VERDICT_ENCRYPTION, "encryption", "encryption", PROTO_STAGE_SEND, false,
	  900, 50, 50, 0.9, "network idle", 0.95 },
	{ PCOPY_VERDICT_ENCRYPTION, "encryption", "encryption", PROTO_STAGE_RECV, true,
	  880, 100, 20, 0.88, "network idle", 0.9 },
	{ PCOPY_VERDICT_DECOMPRESSION, "decompression (CPU) on the sink", "decompression",
	  PROTO_STAGE_DECODE, true, 930, 50, 20, 0.93, "network idle", 0.75 },
	{ PCOPY_VERDICT_SINK_WRITE, "sink disk writes", "sink_write", PROTO_STAGE_WRITE, true,
	  970, 30, 0, 0.97, "network idle", 0.75 },
};

static void test_each_verdict(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(verdict_cases) / sizeof(verdict_cases[0]); i++) {
		const struct verdict_case *c = &verdict_cases[i];
		struct proto_stats src, sink;

		calm(&src, &sink);
		stage(c->sink_side ? &sink : &src, c->side_stage, c->busy, c->in, c->out);
		struct pcopy_result r = judge(&src, &sink);
		if (r.bottleneck.verdict != c->verdict)
			fail_msg("case %zu (%s): verdict %d, want %d", i, c->name,
				 r.bottleneck.verdict, c->verdict);
		assert_string_equal(r.bottleneck.name, c->name);
		assert_string_equal(r.bottleneck.key, c->key);
		assert_string_equal(r.bottleneck.busiest, "");
		assert_true(r.bottleneck.busy > c->busy_want - 0.001 &&
			    r.bottleneck.busy < c->busy_want + 0.001);
		assert_string_equal(r.bottleneck.second_label, c->second_label);
		assert_true(r.bottleneck.second > c->second_want - 0.001 &&
			    r.bottleneck.second < c->second_want + 0.001);
	}
}

/* The network: the senders wait for room while the receivers wait for
 * bytes. Either alone is another stage's doing. */
static void test_network(void **state)
{
	struct proto_stats src, sink;

	(void)state;
	calm(&src, &sink);
	stage(&src, PROTO_STAGE_SEND, 10, 20, 960);
	stage(&sink, PROTO_STAGE_RECV, 10, 940, 50);
	stage(&sink, PROTO_STAGE_WRITE, 50, 900, 0);
	struct pcopy_result r = judge(&src, &sink);
	assert_int_equal(r.bottleneck.verdict, PCOPY_VERDICT_NETWORK);
	assert_string_equal(r.bottleneck.name, "the network");
	assert_true(r.bottleneck.busy > 0.939 && r.bottleneck.busy < 0.941);
	assert_string_equal(r.bottleneck.second_label, "sink idle");
	assert_true(r.bottleneck.second > 0.899 && r.bottleneck.second < 0.901);
	/* Full sending sockets, receivers busy handing on: the sink is slow. */
	stage(&sink, PROTO_STAGE_RECV, 10, 40, 950);
	stage(&sink, PROTO_STAGE_WRITE, 960, 40, 0);
	r = judge(&src, &sink);
	assert_int_equal(r.bottleneck.verdict, PCOPY_VERDICT_SINK_WRITE);
	assert_true(r.bottleneck.second > 0.959 && r.bottleneck.second < 0.961);
}

static void test_table(void **state)
{
	static const char *const names[PCOPY_STAGES] = { "read", "compress", "send", "network",
							 "receive", "decode", "write" };
	static const char *const sides[PCOPY_STAGES] = { "source", "source", "source", "both",
							 "sink", "sink", "sink" };
	struct proto_stats src, sink;

	(void)state;
	calm(&src, &sink);
	src.stage[PROTO_STAGE_SEND].threads = 4;
	src.stage[PROTO_STAGE_SEND].span_us = 4000;
	src.stage[PROTO_STAGE_SEND].in_us = 1000;
	src.stage[PROTO_STAGE_SEND].out_us = 2000;
	struct pcopy_result r = judge(&src, &sink);
	assert_int_equal(r.nstages, PCOPY_STAGES);
	for (unsigned i = 0; i < PCOPY_STAGES; i++) {
		assert_string_equal(r.stage[i].name, names[i]);
		assert_string_equal(r.stage[i].side, sides[i]);
	}
	assert_int_equal(r.stage[PCOPY_STAGE_SEND].threads, 4);
	assert_true(r.stage[PCOPY_STAGE_SEND].blocked_in > 0.249 &&
		    r.stage[PCOPY_STAGE_SEND].blocked_in < 0.251);
	assert_true(r.stage[PCOPY_STAGE_WRITE].busy > 0.199 && r.stage[PCOPY_STAGE_WRITE].busy < 0.201);
	assert_true(r.stage[PCOPY_STAGE_WRITE].blocked_in > 0.699);
	assert_true(r.stage[PCOPY_STAGE_DECODE].blocked_out > 0.299 &&
		    r.stage[PCOPY_STAGE_DECODE].blocked_out < 0.301);
	/* The network row: min(send out 50 %, receive in 30 %), send's in,
	 * receive's out. */
	assert_int_equal(r.stage[PCOPY_STAGE_NETWORK].threads, 4);
	assert_true(r.stage[PCOPY_STAGE_NETWORK].busy > 0.299 &&
		    r.stage[PCOPY_STAGE_NETWORK].busy < 0.301);
	assert_true(r.stage[PCOPY_STAGE_NETWORK].blocked_in > 0.249 &&
		    r.stage[PCOPY_STAGE_NETWORK].blocked_in < 0.251);
	assert_true(r.stage[PCOPY_STAGE_NETWORK].blocked_out > 0.399 &&
		    r.stage[PCOPY_STAGE_NETWORK].blocked_out < 0.401);
}

/* A stage that finished early, busy most of its short life (readers
 * whose last blocks went into the pool and the socket buffers while a slow
 * sink went on writing), is scored by the wall time of its side: it was
 * idle for the rest of the copy. */
static void test_scored_by_wall(void **state)
{
	struct proto_stats src, sink;

	(void)state;
	calm(&src, &sink);
	src.wall_us = sink.wall_us = 10000;
	src.stage[PROTO_STAGE_READ] = (struct proto_stage){ 1, 1000, 800, 0, 200 };
	sink.stage[PROTO_STAGE_WRITE] = (struct proto_stage){ 1, 10000, 9900, 100, 0 };
	struct pcopy_result r = judge(&src, &sink);
	assert_true(r.stage[PCOPY_STAGE_READ].busy > 0.079 && r.stage[PCOPY_STAGE_READ].busy < 0.081);
	assert_true(r.stage[PCOPY_STAGE_READ].blocked_out > 0.019 &&
		    r.stage[PCOPY_STAGE_READ].blocked_out < 0.021);
	assert_int_equal(r.bottleneck.verdict, PCOPY_VERDICT_SINK_WRITE);
	assert_true(r.bottleneck.busy > 0.989 && r.bottleneck.busy < 0.991);
	/* Both sides by the copy's wall time, the longer of the two: a
	 * source's END may come long before the sink's DONE. */
	src.wall_us = 1000;
	r = judge(&src, &sink);
	assert_true(r.stage[PCOPY_STAGE_READ].busy > 0.079 && r.stage[PCOPY_STAGE_READ].busy < 0.081);
	assert_int_equal(r.bottleneck.verdict, PCOPY_VERDICT_SINK_WRITE);
	src.wall_us = 20000;
	r = judge(&src, &sink);
	assert_true(r.stage[PCOPY_STAGE_READ].busy > 0.039 && r.stage[PCOPY_STAGE_READ].busy < 0.041);
	assert_true(r.bottleneck.busy > 0.494 && r.bottleneck.busy < 0.496); /* 9900 / 20000 */
	assert_int_equal(r.bottleneck.verdict, PCOPY_VERDICT_NONE_CLEAR);
}

/* No stage times on a side (a copy that failed before END or DONE): no
 * table, no verdict. */
static void test_unknown(void **state)
{
	struct proto_stats src, sink;

	(void)state;
	calm(&src, &sink);
	memset(sink.stage, 0, sizeof(sink.stage));
	struct pcopy_result r = judge(&src, &sink);
	assert_int_equal(r.nstages, 0);
	assert_int_equal(r.bottleneck.verdict, PCOPY_VERDICT_UNKNOWN);
	assert_string_equal(r.bottleneck.name, "");
	calm(&src, &sink);
	memset(src.stage, 0, sizeof(src.stage));
	r = judge(&src, &sink);
	assert_int_equal(r.bottleneck.verdict, PCOPY_VERDICT_UNKNOWN);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_none_clear),
		cmocka_unit_test(test_each_verdict),
		cmocka_unit_test(test_network),
		cmocka_unit_test(test_table),
		cmocka_unit_test(test_scored_by_wall),
		cmocka_unit_test(test_unknown),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
