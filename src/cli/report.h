// SPDX-License-Identifier: Apache-2.0
/* report: what the command line shows of a copy besides its messages: the
 * progress bar on a terminal (tty.c), the entries not copied, and the
 * --json output (the summary object, and progress events with -P). It
 * owns the struct pcopy_hooks that main passes to pcopy_copy. */
#ifndef PCOPY_CLI_REPORT_H
#define PCOPY_CLI_REPORT_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

#include <pcopy/pcopy.h>

#include "cli/tty.h"

#define REPORT_BAR_MS 200u       /* the bar's redraw interval */
#define REPORT_JSON_SCHEMA 1     /* "schema" member: bumped on incompatible changes */

/* An entry not copied. */
struct report_fail {
	char *path;              /* owned; NULL when the side that saw it did not say */
	char *reason;            /* owned */
	bool skipped;            /* the source never sent it */
};

struct report {
	struct pcopy_hooks hooks;   /* handed to pcopy_copy; arg is the report */
	bool bar_on;                /* the terminal bar is drawn */
	struct tty_bar bar;         /* valid when bar_on */
	FILE *json;                 /* --json's stream; NULL: no JSON */
	bool json_close;            /* json is a file we opened */
	unsigned json_every_s;      /* -P with --json: seconds between progress events;
	                               0: none */
	double json_next_s;         /* control thread: elapsed_s of the next event */
	pthread_mutex_t lock;       /* guards fails, nfails */
	struct report_fail *fails;  /* [nfails]; lock */
	size_t nfails, cap;         /* lock */
	bool oom;                   /* lock: a failure could not be kept */
	bool dry_run;               /* -n: the listing is the output (set after init) */
};

/* Sets r up: a bar on fd (stderr) if bar; JSON to json (NULL: none; owned
 * if json_close), with progress events every json_every_s seconds; tree
 * for -r. Returns 0 or -errno. Register the log hooks (pcopy_log_hooks
 * with tty_log_before/after and &r->bar) when r->bar_on. */
int report_init(struct report *r, int fd, bool bar, bool tree, FILE *json, bool json_close,
		unsigned json_every_s);

/* Clears the bar (call before printing the summary or an error). */
void report_bar_clear(struct report *r);

/* Writes the summary object of a copy that ended with ret (exit status
 * exit_code) to the JSON stream, if any. opts are the copy's options.
 * Returns 0, or -1 when the JSON could not be written (errno set). */
int report_summary(struct report *r, const struct pcopy_opts *o, const struct pcopy_result *res,
		   int ret, int exit_code);

/* Frees what r holds and closes the JSON file if it is ours. Returns 0,
 * or -1 if closing it failed (errno set). */
int report_free(struct report *r);

#endif
