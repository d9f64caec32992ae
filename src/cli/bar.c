// SPDX-License-Identifier: Apache-2.0
/* bar: the text of the terminal progress bar. */
#include "cli/bar.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void bar_fmt_bytes(uint64_t n, char *out, size_t cap)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	double v = (double)n;
	unsigned u = 0;

	if (n < 1024) {
		snprintf(out, cap, "%u B", (unsigned)n);
		return;
	}
	v /= 1024.0;
	while (v >= 1000.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
		v /= 1024.0;
		u++;
	}
	/* Three significant digits: 1.50, 15.0, 150. */
	snprintf(out, cap, v < 9.995 ? "%.2f %s" : v < 99.95 ? "%.1f %s" : "%.0f %s", v, units[u]);
}

void bar_fmt_rate(double bps, char *out, size_t cap)
{
	double mb = bps > 0 ? bps / 1e6 : 0;

	if (mb < 999.95)
		snprintf(out, cap, "%.1f MB/s", mb);
	else if (mb < 999950.0)
		snprintf(out, cap, "%.2f GB/s", mb / 1e3);
	else
		snprintf(out, cap, ">999 GB/s");
}

void bar_fmt_eta(double s, char *out, size_t cap)
{
	if (!(s >= 0) || s >= 99.0 * 3600.0) {
		snprintf(out, cap, "--:--");
		return;
	}
	unsigned t = (unsigned)(s + 0.5);
	if (t >= 3600)
		snprintf(out, cap, "%u:%02u:%02u", t / 3600, t / 60 % 60, t % 60);
	else
		snprintf(out, cap, "%u:%02u", t / 60, t % 60);
}

void bar_rate_init(struct bar_rate *r)
{
	*r = (struct bar_rate){ .rate = -1, .from_s = -1 };
}

double bar_rate_feed(struct bar_rate *r, double t_s, uint64_t bytes)
{
	double dt = t_s - r->last_s;
	uint64_t db = bytes >= r->last_bytes ? bytes - r->last_bytes : 0;

	if (dt <= 0)
		return r->rate; /* no time passed: nothing to learn */
	if (r->from_s < 0 && db > 0) {
		/* The bytes began somewhere in this interval: count from its
		 * start, the cautious guess. */
		r->from_s = r->last_s;
		r->from_bytes = r->last_bytes;
	}
	if (r->from_s >= 0 && (t_s - r->from_s <= BAR_RATE_TAU_S || r->rate < 0))
		r->rate = (double)(bytes - r->from_bytes) / (t_s - r->from_s);
	else if (r->from_s >= 0)
		r->rate += (1.0 - exp(-dt / BAR_RATE_TAU_S)) * ((double)db / dt - r->rate);
	r->last_s = t_s;
	r->last_bytes = bytes;
	return r->rate;
}

/* The fields of the bar, in the order they are shown. */
enum { F_PCT, F_GRAPH, F_BYTES, F_RATE, F_AVG, F_ETA, F_ENTRIES, F_NAME, F_N };

/* Text fields by how much they matter, most first (graph and name take
 * what is left). */
static const int bar_priority[] = { F_BYTES, F_PCT, F_RATE, F_ETA, F_ENTRIES, F_AVG };

/* name, printable ASCII only, cut in the middle to fit w columns (w >= 5). */
static void bar_name(char *out, size_t cap, const char *name, size_t w)
{
	size_t len = strlen(name), k = 0;

	if (w + 1 > cap)
		w = cap - 1;
	for (size_t i = 0; i < len && k < w; i++) {
		/* Past the cut: jump to the tail. */
		if (len > w && k == (w - 3) / 3) {
			memcpy(out + k, "...", 3);
			k += 3;
			i = len - (w - k);
		}
		unsigned char c = (unsigned char)name[i];
		out[k++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
	}
	out[k] = '\0';
}

/* The text fields (all but graph and name) of st. */
static void bar_fields(const struct bar_state *st, char f[F_N][64])
{
	char a[16], b[16], r[16];

	for (int i = 0; i < F_N; i++)
		f[i][0] = '\0';
	bool pct = st->total_final && st->total > 0;
	if (pct) {
		double p = 100.0 * (double)st->bytes / (double)st->total;
		snprintf(f[F_PCT], sizeof(f[F_PCT]), "%3.0f%%", p > 100 ? 100 : floor(p));
	}
	bar_fmt_bytes(st->bytes, a, sizeof(a));
	bar_fmt_bytes(st->total, b, sizeof(b));
	if (st->total > 0)
		snprintf(f[F_BYTES], sizeof(f[F_BYTES]), "%s/%s%s", a, b, st->total_final ? "" : "+");
	else
		snprintf(f[F_BYTES], sizeof(f[F_BYTES]), "%s", a);
	bar_fmt_rate(st->rate, r, sizeof(r));
	snprintf(f[F_RATE], sizeof(f[F_RATE]), "%s", r);
	bar_fmt_rate(st->avg, r, sizeof(r));
	snprintf(f[F_AVG], sizeof(f[F_AVG]), "avg %s", r);
	if (pct) {
		double left = (double)(st->total > st->bytes ? st->total - st->bytes : 0);
		bar_fmt_eta(st->rate > 0 ? left / st->rate : -1, r, sizeof(r));
		snprintf(f[F_ETA], sizeof(f[F_ETA]), "ETA %s", r);
	}
	if (st->show_entries)
		snprintf(f[F_ENTRIES], sizeof(f[F_ENTRIES]), "%llu/%llu%s entries",
			 (unsigned long long)st->entries_done, (unsigned long long)st->entries_total,
			 st->total_final ? "" : "+");
}

size_t bar_format(char *out, size_t cap, unsigned width, const struct bar_state *st)
{
	char f[F_N][64], graph[40] = "", name[256] = "";
	bool on[F_N] = { false };
	size_t avail = width > 0 ? width - 1 : 0, used = 0, len = 0;

	out[0] = '\0';
	if (avail < 7 || cap < 2)
		return 0;
	bar_fields(st, f);
	for (size_t i = 0; i < sizeof(bar_priority) / sizeof(bar_priority[0]); i++) {
		size_t n = strlen(f[bar_priority[i]]);
		if (n == 0 || used + (used > 0 ? 2 : 0) + n > avail)
			continue;
		used += (used > 0 ? 2 : 0) + n;
		on[bar_priority[i]] = true;
	}
	size_t left = avail - used;
	bool named = st->current != NULL && st->current_size >= BAR_NAME_MIN_SIZE;
	if (on[F_PCT] && left >= 14) {
		size_t gw = left - 2;
		gw = named ? gw / 2 : gw;
		gw = gw > 32 ? 32 : gw;
		if (gw >= 12) {
			size_t fill = (size_t)((double)(gw - 2) * (double)st->bytes / (double)st->total);
			fill = fill > gw - 2 ? gw - 2 : fill;
			graph[0] = '[';
			memset(graph + 1, '#', fill);
			memset(graph + 1 + fill, '.', gw - 2 - fill);
			graph[gw - 1] = ']';
			graph[gw] = '\0';
			left -= gw + 2;
			on[F_GRAPH] = true;
		}
	}
	if (named && left >= 12) {
		bar_name(name, sizeof(name), st->current, left - 2);
		on[F_NAME] = true;
	}
	for (int i = 0; i < F_N; i++) {
		const char *s = i == F_GRAPH ? graph : i == F_NAME ? name : f[i];
		if (!on[i])
			continue;
		int n = snprintf(out + len, cap - len, "%s%s", len > 0 ? "  " : "", s);
		if (n < 0 || (size_t)n >= cap - len)
			break;
		len += (size_t)n;
	}
	return len;
}
