// SPDX-License-Identifier: Apache-2.0
/* probe_rec: the advice of pcopy --probe, and its table (see probe_rec.h). */
#include "roles/probe_rec.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "wire/proto.h"

/* A growing text in a fixed buffer; what does not fit is cut. */
struct text {
	char *p;
	size_t cap;
	size_t len;
};

__attribute__((format(printf, 2, 3)))
static void text_add(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->cap == 0 || t->len >= t->cap - 1)
		return;
	va_start(ap, fmt);
	n = vsnprintf(t->p + t->len, t->cap - t->len, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	t->len += (size_t)n < t->cap - t->len ? (size_t)n : t->cap - t->len - 1;
}

void probe_fmt_size(uint64_t v, char *buf, size_t cap)
{
	if (v != 0 && v % (1u << 30) == 0)
		snprintf(buf, cap, "%" PRIu64 "G", v >> 30);
	else if (v != 0 && v % (1u << 20) == 0)
		snprintf(buf, cap, "%" PRIu64 "M", v >> 20);
	else if (v != 0 && v % 1024 == 0)
		snprintf(buf, cap, "%" PRIu64 "k", v >> 10);
	else
		snprintf(buf, cap, "%" PRIu64, v);
}

/* A rate in bytes per second as MB/s or GB/s. */
static void fmt_bytes_rate(double r, char *buf, size_t cap)
{
	if (r >= 1e9)
		snprintf(buf, cap, "%.1f GB/s", r / 1e9);
	else
		snprintf(buf, cap, "%.0f MB/s", r / 1e6);
}

/* A rate in bytes per second as Mbit/s or Gbit/s. */
static void fmt_bit_rate(double r, char *buf, size_t cap)
{
	if (r * 8 >= 1e10)
		snprintf(buf, cap, "%.1f Gbit/s", r * 8 / 1e9);
	else
		snprintf(buf, cap, "%.0f Mbit/s", r * 8 / 1e6);
}

static const struct pcopy_probe_cell *probe_best_cell(const struct pcopy_probe *p)
{
	const struct pcopy_probe_cell *best = NULL;

	for (unsigned i = 0; i < p->ncells; i++)
		if (best == NULL || p->cell[i].rate > best->rate)
			best = &p->cell[i];
	return best != NULL && best->rate > 0 ? best : NULL;
}

/* Whether a is cheaper than b: fewer streams, then autotuning, then a
 * smaller window. */
static bool probe_cell_cheaper(const struct pcopy_probe_cell *a, const struct pcopy_probe_cell *b)
{
	if (a->streams != b->streams)
		return a->streams < b->streams;
	if ((a->window == 0) != (b->window == 0))
		return a->window == 0;
	return a->window < b->window;
}

unsigned probe_streams_for(double rate, double rtt_s)
{
	double n = rate * rtt_s / PROBE_REC_STREAM_SHARE;

	if (!(n > 1))
		return 1;
	return n >= PROTO_MAX_STREAMS ? PROTO_MAX_STREAMS : (unsigned)n + (n > (unsigned)n);
}

/* The cheapest cell that reaches PROBE_REC_GOOD of target with at least
 * need streams, or with the most streams of those that reach it when
 * none has need. */
static const struct pcopy_probe_cell *probe_pick_cell(const struct pcopy_probe *p, double target,
						      unsigned need)
{
	const struct pcopy_probe_cell *pick = NULL;
	unsigned most = 0;

	for (unsigned i = 0; i < p->ncells; i++)
		if (p->cell[i].rate >= PROBE_REC_GOOD * target && p->cell[i].streams > most)
			most = p->cell[i].streams;
	need = need < most ? need : most;
	for (unsigned i = 0; i < p->ncells; i++) {
		const struct pcopy_probe_cell *c = &p->cell[i];
		if (c->rate >= PROBE_REC_GOOD * target && c->streams >= need &&
		    (pick == NULL || probe_cell_cheaper(c, pick)))
			pick = c;
	}
	return pick;
}

/* The fastest one-stream cell, or NULL. */
static const struct pcopy_probe_cell *probe_one_stream(const struct pcopy_probe *p)
{
	const struct pcopy_probe_cell *one = NULL;

	for (unsigned i = 0; i < p->ncells; i++)
		if (p->cell[i].streams == 1 && (one == NULL || p->cell[i].rate > one->rate))
			one = &p->cell[i];
	return one;
}

/* The most bytes one stream may have in flight in cell c: its window, or
 * with autotuning the smaller of the sender's and receiver's maxima (0:
 * unknown). */
static uint64_t probe_window_cap(const struct pcopy_probe *p, const struct pcopy_probe_cell *c)
{
	uint64_t a = p->src_tcp_wmem_max, b = p->sink_tcp_rmem_max;

	if (c->window != 0)
		return c->window;
	if (a == 0 || b == 0)
		return a > b ? a : b;
	return a < b ? a : b;
}

/* The disks' pace (0: neither was measured), and which one sets it. */
static double probe_disk_limit(const struct pcopy_probe *p, const char **who)
{
	double lim = 0;

	*who = NULL;
	if (p->src_read.rate > 0) {
		lim = p->src_read.rate;
		*who = "the source disk reads";
	}
	if (p->sink_write.rate > 0 && (lim == 0 || p->sink_write.rate < lim)) {
		lim = p->sink_write.rate;
		*who = "the sink disk writes";
	}
	return lim;
}

/* The network finding: its rate, why one stream is not enough, the
 * advice. */
static void probe_reason_net(const struct pcopy_probe *p, const struct pcopy_probe_cell *best,
			     const struct pcopy_probe_cell *pick, unsigned fewest, struct text *t)
{
	const struct pcopy_probe_cell *one = probe_one_stream(p);
	char a[32], b[32], w[32];

	fmt_bit_rate(best->rate, a, sizeof(a));
	text_add(t, "network %s at %.0f ms RTT", a, p->rtt_s * 1e3);
	if (one != NULL && one->rate < 0.8 * best->rate) {
		uint64_t cap = probe_window_cap(p, one);
		double inflight = one->rate * p->rtt_s;
		fmt_bit_rate(one->rate, a, sizeof(a));
		probe_fmt_size(cap, w, sizeof(w));
		if (cap != 0 && inflight >= 0.4 * (double)cap)
			text_add(t, ": one stream is window-limited to %s at %s %s%s", a,
				 one->window != 0 ? "a window of" : "the kernel's", w,
				 one->window != 0 ? "" : " maximum");
		else
			text_add(t, ": one stream reaches only %s, not for want of window (%.0f kB in "
				 "flight), so loss or congestion holds each stream back", a,
				 inflight / 1e3);
	} else if (one != NULL) {
		text_add(t, ": one stream fills it");
	}
	text_add(t, "; use -s %u", pick->streams);
	if (pick->window != 0) {
		probe_fmt_size(pick->window, w, sizeof(w));
		text_add(t, " -w %s", w);
	}
	if (pick->streams > fewest)
		text_add(t, " (%u streams, not %u: with %.1f MB in flight, more streams get through "
			 "slow start sooner)", pick->streams, fewest, best->rate * p->rtt_s / 1e6);
	if (pick->rate < PROBE_REC_GOOD * best->rate) {
		fmt_bit_rate(pick->rate, b, sizeof(b));
		text_add(t, " (%s: the disk sets the pace, more streams would not help)", b);
	}
}

/* The cores that compress (or decompress) on a side with cpus processors:
 * one reader thread per core, up to 16 (pcopy(1), COMPRESSION). */
static double probe_cores(unsigned cpus)
{
	return cpus == 0 ? 1 : cpus > PROBE_REC_CODEC_THREADS ? PROBE_REC_CODEC_THREADS : cpus;
}

/* What a codec delivers, in raw bytes per second, on a path where
 * sending raw gives link: the link times its ratio, or the slower side's
 * CPU over its cores; *who names that side when a CPU limits it. */
static double probe_codec_rate(const struct pcopy_probe *p, const struct pcopy_probe_codec *c,
			       double link, const char **who)
{
	double src = c->src_comp * probe_cores(p->src_cpus);
	double sink = c->sink_decomp * probe_cores(p->sink_cpus);
	double r = link * c->ratio;

	*who = NULL;
	if (src < r) {
		r = src;
		*who = "source";
	}
	if (sink < r) {
		r = sink;
		*who = "sink";
	}
	return r;
}

/* The compression finding, and rec_codec. raw is what sending raw
 * delivers (network and disks), link the network alone, disk the disks'
 * pace (0: unknown), which caps what compression can deliver too. */
static void probe_reason_codec(struct pcopy_probe *p, double link, double raw, double disk,
			       struct text *t)
{
	const struct pcopy_probe_codec *best = NULL, *fastest = NULL;
	const char *who = NULL, *fwho = NULL;
	double best_rate = 0, fast_rate = 0;
	char a[32], b[32];

	snprintf(p->rec_codec, sizeof(p->rec_codec), "none");
	for (unsigned i = 0; i < p->ncodecs; i++) {
		const struct pcopy_probe_codec *c = &p->codec[i];
		const char *w;
		double r = probe_codec_rate(p, c, link, &w);
		if (disk > 0 && r > disk)
			r = disk; /* the disks still set the pace */
		if (c->ratio >= PROBE_REC_MIN_RATIO && r > best_rate) {
			best = c;
			best_rate = r;
			who = w;
		}
		if (fastest == NULL || r > fast_rate) {
			fastest = c;
			fast_rate = r;
			fwho = w;
		}
	}
	if (fastest == NULL) {
		text_add(t, "; compression not measured: -c none");
		return;
	}
	if (raw < PROBE_REC_GOOD * link) {
		text_add(t, "; compression cannot help: a disk, not the network, sets the pace: "
			 "-c none");
		return;
	}
	if (best == NULL) {
		text_add(t, "; the sample does not compress (%.2fx at -c %s): -c none",
			 fastest->ratio, fastest->spec);
	} else if (best_rate >= PROBE_REC_CODEC_MARGIN * raw) {
		snprintf(p->rec_codec, sizeof(p->rec_codec), "%s", best->spec);
		fmt_bytes_rate(best_rate, a, sizeof(a));
		fmt_bytes_rate(raw, b, sizeof(b));
		text_add(t, "; compression pays: -c %s shrinks the sample %.2fx and would deliver "
			 "about %s against %s raw%s%s", best->spec, best->ratio, a, b,
			 who ? ", held by the CPU of the " : "", who ? who : "");
	} else {
		const struct pcopy_probe_codec *c = best;
		const char *side = who ? who : fwho;
		double cpu = side != NULL && strcmp(side, "sink") == 0
			     ? c->sink_decomp * probe_cores(p->sink_cpus)
			     : c->src_comp * probe_cores(p->src_cpus);
		fmt_bytes_rate(cpu, a, sizeof(a));
		fmt_bytes_rate(raw, b, sizeof(b));
		text_add(t, "; compression would cost more than it saves: %s CPU %s at -c %s "
			 "(%.2fx on the sample) vs %s %s", side ? side : "source", a, c->spec,
			 c->ratio, b, raw < link ? "raw" : "link");
	}
	text_add(t, " (codecs timed on %s; your data may compress differently)", p->sample);
}

void probe_recommend(struct pcopy_probe *p)
{
	const struct pcopy_probe_cell *best = probe_best_cell(p), *pick;
	struct text t = { p->reason, sizeof(p->reason), 0 };
	const char *disk_who;
	double disk = probe_disk_limit(p, &disk_who);

	p->reason[0] = '\0';
	p->rec_streams = PCOPY_DEFAULT_STREAMS;
	p->rec_window = 0;
	snprintf(p->rec_codec, sizeof(p->rec_codec), "none");
	if (best == NULL) {
		text_add(&t, "the network was not measured: keep the defaults");
		return;
	}
	double raw = disk > 0 && disk < best->rate ? disk : best->rate;
	unsigned fewest = probe_pick_cell(p, raw, 1)->streams;
	pick = probe_pick_cell(p, raw, probe_streams_for(raw, p->rtt_s));
	p->rec_streams = pick->streams;
	p->rec_window = pick->window;
	probe_reason_net(p, best, pick, fewest, &t);
	if (disk > 0 && disk < best->rate) {
		char a[32], b[32];
		fmt_bytes_rate(disk, a, sizeof(a));
		fmt_bytes_rate(best->rate, b, sizeof(b));
		text_add(&t, "; %s %s, less than the network's %s: the disk is the bottleneck",
			 disk_who, a, b);
	}
	probe_reason_codec(p, best->rate, raw, disk, &t);
}

/* ---- The table ----------------------------------------------------------- */

static void probe_row_disk(struct text *t, const char *stage, const struct pcopy_probe_disk *d)
{
	char a[32];

	if (d->rate <= 0) {
		text_add(t, "%-14s %-16s %s\n", stage, "not measured", d->what);
		return;
	}
	fmt_bytes_rate(d->rate, a, sizeof(a));
	text_add(t, "%-14s %-16s %.0f MiB in %.2f s, %s%s\n", stage, a,
		 (double)d->bytes / (1 << 20), d->secs, d->what,
		 d->cached ? " (from the page cache)" : "");
}

int pcopy_probe_format(const struct pcopy_probe *p, char *buf, size_t cap)
{
	struct text t = { buf, cap, 0 };
	char a[32], b[32];

	if (cap > 0)
		buf[0] = '\0';
	text_add(&t, "%-14s %-16s %s\n", "stage", "measured", "detail");
	probe_row_disk(&t, "source read", &p->src_read);
	text_add(&t, "%-14s %-16s %s\n", "network rtt", "", p->security);
	snprintf(a, sizeof(a), "%.1f ms", p->rtt_s * 1e3);
	text_add(&t, "%-14s %-16s %s\n", "", a, "control channel round trip, least of 5");
	for (unsigned i = 0; i < p->ncells; i++) {
		const struct pcopy_probe_cell *c = &p->cell[i];
		fmt_bit_rate(c->rate, a, sizeof(a));
		if (c->window != 0)
			probe_fmt_size(c->window, b, sizeof(b));
		text_add(&t, "%-14s %-16s -s %u -w %s\n", i == 0 ? "network" : "", a, c->streams,
			 c->window != 0 ? b : "auto");
	}
	probe_row_disk(&t, "sink write", &p->sink_write);
	for (unsigned i = 0; i < p->ncodecs; i++) {
		const struct pcopy_probe_codec *c = &p->codec[i];
		fmt_bytes_rate(c->src_comp, a, sizeof(a));
		fmt_bytes_rate(c->sink_decomp, b, sizeof(b));
		text_add(&t, "%-14s %-16s -c %s: %.2fx, compress %s here, decompress %s there\n",
			 i == 0 ? "codecs" : "", "", c->spec, c->ratio, a, b);
	}
	text_add(&t, "%-14s %-16s this host %u, the far side %u; windows: send max %s here, "
		 "receive max %s there\n", "cpus, kernel", "", p->src_cpus, p->sink_cpus,
		 p->src_tcp_wmem_max ? (probe_fmt_size(p->src_tcp_wmem_max, a, sizeof(a)), a) : "?",
		 p->sink_tcp_rmem_max ? (probe_fmt_size(p->sink_tcp_rmem_max, b, sizeof(b)), b) : "?");
	text_add(&t, "\nrecommended: -s %u", p->rec_streams);
	if (p->rec_window != 0) {
		probe_fmt_size(p->rec_window, a, sizeof(a));
		text_add(&t, " -w %s", a);
	}
	text_add(&t, " -c %s\nwhy: %s\n", p->rec_codec, p->reason);
	return (int)t.len;
}
