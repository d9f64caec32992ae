// SPDX-License-Identifier: Apache-2.0
/* bar: the text of the terminal progress bar, as a pure function of what
 * a copy has done, so that it can be tested without a terminal. The
 * terminal side (redrawing, clearing) is in tty.c. */
#ifndef PCOPY_CLI_BAR_H
#define PCOPY_CLI_BAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define BAR_RATE_TAU_S 3.0            /* the current rate's smoothing time constant */
#define BAR_NAME_MIN_SIZE (64ull << 20) /* a file this large is named in the bar */

/* What the bar shows. */
struct bar_state {
	uint64_t bytes;          /* done */
	uint64_t total;          /* announced so far */
	bool total_final;        /* total is the copy's: percent and ETA make sense */
	double rate;             /* current rate, bytes/s (smoothed); <= 0: not known yet */
	double avg;              /* average rate since the start, bytes/s */
	uint64_t entries_done, entries_total;
	bool show_entries;       /* a tree (-r): show entries done / announced */
	const char *current;     /* the file in flight, or NULL */
	uint64_t current_size;
};

/* Writes the bar for st into out[cap], at most width - 1 columns (the
 * last column stays free so that the terminal never wraps). Every byte
 * written is printable ASCII: a file name's other bytes become '?', and a
 * long name is cut in the middle with "...". Fields are dropped, least
 * useful first (name, average rate, entries, ETA, the graph), until the
 * line fits; below 8 columns the line is empty. Returns the length. */
size_t bar_format(char *out, size_t cap, unsigned width, const struct bar_state *st);

/* Bytes as "999 B", "1.5 KiB" ... "12.3 TiB": at most 9 characters. */
void bar_fmt_bytes(uint64_t n, char *out, size_t cap);

/* A rate as "85.3 MB/s" (decimal, as the summary): at most 10 characters. */
void bar_fmt_rate(double bps, char *out, size_t cap);

/* Seconds as "0:07", "12:34" or "3:04:05"; "--:--" when unknown (< 0 or
 * over 99 hours). */
void bar_fmt_eta(double s, char *out, size_t cap);

/* The current rate: from the first sample that shows bytes moving (the
 * seconds before, a login and a handshake, say nothing of the rate), the
 * average since then for its first BAR_RATE_TAU_S, and from then on an
 * exponential moving average with that time constant, seeded with it.
 * Starting from zero instead, the shown rate took two or three time
 * constants to rise to the real one, and the ETA was off by as much. */
struct bar_rate {
	double rate;          /* bytes per second; < 0: not known yet */
	double from_s;        /* when bytes were first seen moving; < 0: not yet */
	uint64_t from_bytes;  /* the count then */
	double last_s;        /* the previous sample */
	uint64_t last_bytes;
};

void bar_rate_init(struct bar_rate *r);

/* Takes a sample: bytes done at t_s seconds since the start (both never
 * go down). Returns the rate (< 0: not known yet). */
double bar_rate_feed(struct bar_rate *r, double t_s, uint64_t bytes);

#endif
