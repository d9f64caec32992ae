// SPDX-License-Identifier: Apache-2.0
/* test_probe: the advice of pcopy --probe (probe_rec) on synthetic sweeps,
 * and the pure parts of probe.c (the standard sample, the codec timing). */
#include "testutil.h"

#include "roles/probe.h"
#include "roles/probe_rec.h"

#define MB 1e6
#define MiB (1u << 20)

/* A path with 50 ms RTT, kernels that autotune to 4 MiB and let -w ask
 * for 8 MiB, 4 cores each side, disks far faster than the network, and
 * codecs that would never pay (no cell: add them). */
static void path_init(struct pcopy_probe *p)
{
	memset(p, 0, sizeof(*p));
	p->rtt_s = 0.050;
	p->src_tcp_wmem_max = 4 * MiB;
	p->sink_tcp_rmem_max = 4 * MiB;
	p->src_wmem_max = p->sink_rmem_max = 8 * MiB;
	p->src_cpus = p->sink_cpus = 4;
	p->window_settable = true;
	p->src_read.rate = 2000 * MB;
	p->sink_write.rate = 1500 * MB;
	snprintf(p->sample, sizeof(p->sample), "the test's sample");
	p->ncodecs = 1;
	p->codec[0] = (struct pcopy_probe_codec){ "lz4", 1.05, 800 * MB, 3000 * MB };
}

static void add_cell(struct pcopy_probe *p, unsigned s, uint64_t w, double mbs)
{
	assert_true(p->ncells < PCOPY_PROBE_MAX_CELLS);
	p->cell[p->ncells++] = (struct pcopy_probe_cell){ s, w, mbs * MB };
}

static void assert_contains(const char *text, const char *want)
{
	if (strstr(text, want) == NULL)
		fail_msg("'%s' not in: %s", want, text);
}

/* 1 Gbit/s at 50 ms: one stream is held by its window (8 MiB / 50 ms =
 * 168 MB/s would do, but it reaches 84); 8 MiB windows fill the link
 * with 2 streams, which autotuning never does. 5.8 MB in flight: 8
 * streams (of at most 1 MiB each) are as good as 2 and leave slow start
 * sooner. */
static void test_window_limited(void **state)
{
	struct pcopy_probe p;

	(void)state;
	path_init(&p);
	add_cell(&p, 1, 0, 70);
	add_cell(&p, 2, 0, 95);
	add_cell(&p, 4, 0, 105);
	add_cell(&p, 8, 0, 100);
	add_cell(&p, 1, 8 * MiB, 84);
	add_cell(&p, 2, 8 * MiB, 113);
	add_cell(&p, 4, 8 * MiB, 117);
	add_cell(&p, 8, 8 * MiB, 116);
	probe_recommend(&p);
	assert_int_equal(p.rec_streams, 8);
	assert_int_equal(p.rec_window, 8 * MiB);
	assert_string_equal(p.rec_codec, "none");
	assert_contains(p.reason, "network 936 Mbit/s at 50 ms RTT");
	assert_contains(p.reason, "one stream is window-limited to 672 Mbit/s at a window of 8M");
	assert_contains(p.reason, "use -s 8 -w 8M (8 streams, not 2: with ");
	assert_contains(p.reason, "the sample does not compress");
}

/* The same link when only autotuning is there (through ssh streams, or
 * kernels that let -w ask for no more): the window-limited single stream
 * is blamed on the kernel's maximum. */
static void test_window_limited_autotuning(void **state)
{
	struct pcopy_probe p;

	(void)state;
	path_init(&p);
	add_cell(&p, 1, 0, 80);
	add_cell(&p, 2, 0, 112);
	add_cell(&p, 4, 0, 116);
	add_cell(&p, 8, 0, 115);
	probe_recommend(&p);
	assert_int_equal(p.rec_streams, 8);
	assert_int_equal(p.rec_window, 0);
	assert_contains(p.reason, "one stream is window-limited to 640 Mbit/s at the kernel's "
			"4M maximum; use -s 8 (8 streams, not 2");
	assert_null(strstr(p.reason, "-w "));
}

/* Kernels that autotune to 64 MiB: one stream fills 1 Gbit/s at 50 ms
 * once it is up, but a copy must first get it there, and 8 streams,
 * as fast in the sweep, do that sooner. */
static void test_slow_start(void **state)
{
	struct pcopy_probe p;

	(void)state;
	path_init(&p);
	p.src_tcp_wmem_max = p.sink_tcp_rmem_max = 64 * MiB;
	add_cell(&p, 1, 0, 117);
	add_cell(&p, 2, 0, 100);
	add_cell(&p, 4, 0, 116);
	add_cell(&p, 8, 0, 117);
	probe_recommend(&p);
	assert_int_equal(p.rec_streams, 8);
	assert_contains(p.reason, "one stream fills it; use -s 8 (8 streams, not 1: with ");
	assert_int_equal(probe_streams_for(117 * MB, 0.050), 6);
	assert_int_equal(probe_streams_for(117 * MB, 0.0002), 1);
	assert_int_equal(probe_streams_for(0, 0.050), 1);
	assert_int_equal(probe_streams_for(1e12, 1), PROTO_MAX_STREAMS);
}

/* A fast LAN where a CPU is the limit: one stream is as good as eight,
 * and compression (lz4 shrinks the sample 1.5x) cannot keep up with
 * the link on the sink's one core. */
static void test_cpu_limited(void **state)
{
	struct pcopy_probe p;

	(void)state;
	path_init(&p);
	p.rtt_s = 0.0002;
	add_cell(&p, 1, 0, 900);
	add_cell(&p, 2, 0, 905);
	p.codec[0] = (struct pcopy_probe_codec){ "lz4", 1.5, 700 * MB, 600 * MB };
	p.sink_cpus = 1;
	probe_recommend(&p);
	assert_int_equal(p.rec_streams, 1);
	assert_int_equal(p.rec_window, 0);
	assert_string_equal(p.rec_codec, "none");
	assert_contains(p.reason, "one stream fills it; use -s 1");
	assert_contains(p.reason, "compression would cost more than it saves: sink CPU 600 MB/s "
			"at -c lz4 (1.50x on the sample) vs 905 MB/s link");
	assert_contains(p.reason, "codecs timed on the test's sample");
}

/* A 100 Mbit/s link and a sample that shrinks 3x: zlib:1 pays, lz4
 * (2x) less, zlib:6 (3.5x) is held by the source's one core. */
static void test_compression_pays(void **state)
{
	struct pcopy_probe p;

	(void)state;
	path_init(&p);
	p.rtt_s = 0.010;
	add_cell(&p, 1, 0, 11.5);
	add_cell(&p, 2, 0, 11.8);
	p.ncodecs = 3;
	p.codec[0] = (struct pcopy_probe_codec){ "lz4", 2.0, 700 * MB, 2000 * MB };
	p.codec[1] = (struct pcopy_probe_codec){ "zlib:1", 3.0, 80 * MB, 300 * MB };
	p.codec[2] = (struct pcopy_probe_codec){ "zlib", 3.5, 5 * MB, 300 * MB };
	p.src_cpus = 1;
	probe_recommend(&p);
	assert_int_equal(p.rec_streams, 1);
	assert_string_equal(p.rec_codec, "zlib:1");
	assert_contains(p.reason, "compression pays: -c zlib:1 shrinks the sample 3.00x and "
			"would deliver about 35 MB/s against 12 MB/s raw");
}

/* A lossy path: each stream is held by loss far below its window, and
 * every doubling of the streams nearly doubles the rate. */
static void test_lossy(void **state)
{
	struct pcopy_probe p;

	(void)state;
	path_init(&p);
	p.rtt_s = 0.080;
	add_cell(&p, 1, 0, 5);
	add_cell(&p, 2, 0, 9.8);
	add_cell(&p, 4, 0, 19);
	add_cell(&p, 8, 0, 36);
	probe_recommend(&p);
	assert_int_equal(p.rec_streams, 8);
	assert_int_equal(p.rec_window, 0);
	assert_contains(p.reason, "one stream reaches only 40 Mbit/s, not for want of window "
			"(400 kB in flight), so loss or congestion holds each stream back; use -s 8");
}

/* The sink's disk writes 50 MB/s: the fewest streams that reach it (at
 * 10 ms, half a MB in flight: slow start asks for no more). */
static void test_disk_limited(void **state)
{
	struct pcopy_probe p;

	(void)state;
	path_init(&p);
	p.rtt_s = 0.010;
	p.sink_write.rate = 50 * MB;
	add_cell(&p, 1, 0, 40);
	add_cell(&p, 2, 0, 70);
	add_cell(&p, 4, 0, 110);
	p.codec[0] = (struct pcopy_probe_codec){ "lz4", 3.0, 700 * MB, 2000 * MB };
	probe_recommend(&p);
	assert_int_equal(p.rec_streams, 2);
	assert_contains(p.reason, "the disk sets the pace");
	assert_contains(p.reason, "the sink disk writes 50 MB/s, less than the network's 110 MB/s");
	/* However well the sample compresses: the disk writes raw bytes. */
	assert_string_equal(p.rec_codec, "none");
	assert_contains(p.reason, "compression cannot help");
}

/* Nothing measured: the defaults, and a reason that says so. */
static void test_no_cells(void **state)
{
	struct pcopy_probe p;

	(void)state;
	path_init(&p);
	probe_recommend(&p);
	assert_int_equal(p.rec_streams, PCOPY_DEFAULT_STREAMS);
	assert_int_equal(p.rec_window, 0);
	assert_string_equal(p.rec_codec, "none");
	assert_contains(p.reason, "not measured");
}

/* The table ends with a line a script can take as options. */
static void test_format(void **state)
{
	struct pcopy_probe p;
	char buf[8192];

	(void)state;
	path_init(&p);
	add_cell(&p, 1, 0, 70);
	add_cell(&p, 2, 8 * MiB, 113);
	probe_recommend(&p);
	int n = pcopy_probe_format(&p, buf, sizeof(buf));
	assert_int_equal((size_t)n, strlen(buf));
	assert_contains(buf, "\nrecommended: -s 2 -w 8M -c none\nwhy: network 904 Mbit/s");
	assert_contains(buf, "-s 1 -w auto\n");
	assert_contains(buf, "sink write     1.5 GB/s");
	/* Cut short, still terminated. */
	n = pcopy_probe_format(&p, buf, 40);
	assert_true(strlen(buf) < 40);
}

static void test_fmt_size(void **state)
{
	char b[32];

	(void)state;
	probe_fmt_size(4 * MiB, b, sizeof(b));
	assert_string_equal(b, "4M");
	probe_fmt_size(512 * 1024, b, sizeof(b));
	assert_string_equal(b, "512k");
	probe_fmt_size(1u << 30, b, sizeof(b));
	assert_string_equal(b, "1G");
	probe_fmt_size(212992, b, sizeof(b));
	assert_string_equal(b, "208k");
	probe_fmt_size(1000, b, sizeof(b));
	assert_string_equal(b, "1000");
}

/* The standard sample is the same on both sides, and compresses some
 * (its words) but not all the way (its random half). */
static void test_sample_and_codecs(void **state)
{
	struct proto_probe_codec c[PROTO_PROBE_MAX_CODECS];
	uint8_t *a = malloc(PROBE_SAMPLE_LEN), *b = malloc(PROBE_SAMPLE_LEN);

	(void)state;
	assert_non_null(a);
	assert_non_null(b);
	probe_sample(a, PROBE_SAMPLE_LEN);
	probe_sample(b, PROBE_SAMPLE_LEN);
	assert_memory_equal(a, b, PROBE_SAMPLE_LEN);
	int n = probe_time_codecs(a, PROBE_SAMPLE_LEN, c);
	assert_int_equal(n, 3);
	for (int i = 0; i < n; i++) {
		double ratio = (double)c[i].raw / (double)c[i].enc;
		assert_int_equal(c[i].raw, PROBE_SAMPLE_LEN);
		assert_true(ratio > 1.1 && ratio < 2.2);
		assert_true(c[i].comp_ns > 0 && c[i].decomp_ns > 0);
	}
	assert_int_equal(c[0].codec, PROTO_CODEC_LZ4);
	assert_int_equal(c[1].codec, PROTO_CODEC_ZLIB);
	assert_int_equal(c[1].level, 1);
	free(a);
	free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_window_limited),
		cmocka_unit_test(test_window_limited_autotuning),
		cmocka_unit_test(test_slow_start),
		cmocka_unit_test(test_cpu_limited),
		cmocka_unit_test(test_compression_pays),
		cmocka_unit_test(test_lossy),
		cmocka_unit_test(test_disk_limited),
		cmocka_unit_test(test_no_cells),
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_fmt_size),
		cmocka_unit_test(test_sample_and_codecs),
	};

	return testutil_status(cmocka_run_group_tests_name("probe", tests, NULL, NULL));
}
