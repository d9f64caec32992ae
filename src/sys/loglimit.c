/* SPDX-License-Identifier: Apache-2.0 */
/* loglimit: per-key log summaries in fixed windows (loglimit.h). */
#include "sys/loglimit.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct loglimit_entry {
	char key[LOGLIMIT_MAX_KEY];
	uint64_t start_ns;             /* when its window opened */
	unsigned long more;            /* events counted, not logged, since */
};

struct loglimit {
	struct loglimit_entry *e;      /* cap of them; the first n are in use */
	unsigned n, cap;
	unsigned budget, opened;       /* windows opened in the global window */
	uint64_t global_ns;            /* when the global window opened */
	unsigned long others;          /* events past the budget in it */
	uint64_t window_ns;
	loglimit_report_fn report;
	void *arg;
};

struct loglimit *loglimit_new(unsigned cap, unsigned budget, uint64_t window_ns,
			      loglimit_report_fn report, void *arg)
{
	struct loglimit *l;

	if (cap == 0 || budget == 0 || window_ns == 0 || report == NULL)
		return NULL;
	l = calloc(1, sizeof(*l));
	if (l == NULL)
		return NULL;
	l->e = calloc(cap, sizeof(*l->e));
	if (l->e == NULL) {
		free(l);
		return NULL;
	}
	l->cap = cap;
	l->budget = budget;
	l->window_ns = window_ns;
	l->report = report;
	l->arg = arg;
	return l;
}

void loglimit_free(struct loglimit *l)
{
	if (l == NULL)
		return;
	free(l->e);
	free(l);
}

/* Reports entry i if it counted anything, and removes it. */
static void loglimit_end(struct loglimit *l, unsigned i)
{
	if (l->e[i].more > 0)
		l->report(l->arg, l->e[i].key, l->e[i].more);
	l->e[i] = l->e[--l->n];
}

uint64_t loglimit_flush(struct loglimit *l, uint64_t now_ns)
{
	uint64_t next = UINT64_MAX;

	if (l->opened > 0) {
		uint64_t end = l->global_ns + l->window_ns;
		if (now_ns == UINT64_MAX || now_ns >= end) {
			if (l->others > 0)
				l->report(l->arg, NULL, l->others);
			l->opened = 0;
			l->others = 0;
		} else {
			next = end - now_ns;
		}
	}

	for (unsigned i = l->n; i-- > 0;) {
		uint64_t end = l->e[i].start_ns + l->window_ns;
		if (now_ns == UINT64_MAX || now_ns >= end)
			loglimit_end(l, i);
		else if (end - now_ns < next)
			next = end - now_ns;
	}
	return next;
}

bool loglimit_admit(struct loglimit *l, const char *key, uint64_t now_ns)
{
	char k[LOGLIMIT_MAX_KEY];
	unsigned oldest = 0;

	snprintf(k, sizeof(k), "%s", key);
	(void)loglimit_flush(l, now_ns);
	for (unsigned i = 0; i < l->n; i++) {
		if (strcmp(l->e[i].key, k) == 0) {
			l->e[i].more++;
			return false;
		}
	}
	if (l->opened == l->budget) {
		l->others++;
		return false;
	}
	if (l->opened++ == 0)
		l->global_ns = now_ns;
	if (l->n == l->cap) {
		for (unsigned i = 1; i < l->n; i++)
			if (l->e[i].start_ns < l->e[oldest].start_ns)
				oldest = i;
		loglimit_end(l, oldest);
	}
	l->e[l->n] = (struct loglimit_entry){ .start_ns = now_ns };
	memcpy(l->e[l->n].key, k, sizeof(k));
	l->n++;
	return true;
}
