// SPDX-License-Identifier: Apache-2.0
/* tty: the progress bar on a terminal: one line on stderr, redrawn in
 * place ("\r", the text, erase to the end of the line) and fitted to the
 * terminal's width less three columns (the last one, so that the terminal
 * never wraps, and room for the "^C" it echoes on a Ctrl-C), asked for at
 * each redraw (TIOCGWINSZ), so that a
 * resize is followed at the next one without a SIGWINCH handler (pcopy's
 * signals are taken by a signalfd; see src/sys/platform.c).
 *
 * Thread safety: every call takes the bar's lock. Log lines written by
 * any thread go through tty_log_before/tty_log_after (pcopy_log_hooks),
 * which clear the bar and hold the lock while the line is written: the
 * next redraw puts the bar back under it, so the screen never shows a
 * half bar next to a message. */
#ifndef PCOPY_CLI_TTY_H
#define PCOPY_CLI_TTY_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include <pcopy/pcopy.h>

#include "cli/bar.h"

struct tty_bar {
	pthread_mutex_t lock;
	int fd;                  /* the terminal (stderr); immutable */
	bool tree;               /* -r: show entries; immutable */
	bool shown;              /* a bar is on the screen; lock */
	struct bar_rate rate;    /* the current rate; lock */
};

/* True when a bar makes sense on fd: it is a terminal whose TERM is not
 * "dumb". */
bool tty_wanted(int fd);

/* Returns 0 or -errno (the lock). */
int tty_init(struct tty_bar *t, int fd, bool tree);
void tty_destroy(struct tty_bar *t);

/* Redraws the bar for p (the hooks' progress). */
void tty_update(struct tty_bar *t, const struct pcopy_progress *p);

/* Erases the bar, leaving the cursor at the start of an empty line: call
 * before printing the summary or an error. Idempotent. */
void tty_clear(struct tty_bar *t);

/* pcopy_log_hooks' pair, with arg a struct tty_bar. */
void tty_log_before(void *arg);
void tty_log_after(void *arg);

#endif
