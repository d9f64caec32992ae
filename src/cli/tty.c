// SPDX-License-Identifier: Apache-2.0
/* tty: the progress bar on a terminal. */
#include "cli/tty.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "cli/bar.h"

bool tty_wanted(int fd)
{
	const char *term = getenv("TERM");

	return isatty(fd) == 1 && (term == NULL || strcmp(term, "dumb") != 0);
}

int tty_init(struct tty_bar *t, int fd, bool tree)
{
	int ret = pthread_mutex_init(&t->lock, NULL);

	if (ret != 0)
		return -ret;
	t->fd = fd;
	t->tree = tree;
	t->shown = false;
	bar_rate_init(&t->rate);
	return 0;
}

void tty_destroy(struct tty_bar *t)
{
	(void)pthread_mutex_destroy(&t->lock);
}

/* Writes all of buf; a terminal that fails us gets no more bar. */
static void tty_write(struct tty_bar *t, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(t->fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		buf += n;
		len -= (size_t)n;
	}
}

static void tty_lock(struct tty_bar *t)
{
	/* Only EDEADLK or EINVAL, both bugs: abort rather than draw unlocked. */
	if (pthread_mutex_lock(&t->lock) != 0)
		abort();
}

static void tty_unlock(struct tty_bar *t)
{
	if (pthread_mutex_unlock(&t->lock) != 0)
		abort();
}

static void tty_clear_locked(struct tty_bar *t)
{
	if (t->shown)
		tty_write(t, "\r\033[K", 4);
	t->shown = false;
}

void tty_update(struct tty_bar *t, const struct pcopy_progress *p)
{
	struct winsize ws;
	char line[512 + 8];
	unsigned width = 80;

	if (ioctl(t->fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
		width = ws.ws_col;
	if (width > 512)
		width = 512;
	/* Two more columns free (bar_format keeps one): the terminal echoes
	 * a Ctrl-C as "^C" after the bar, and must not wrap it to a new line
	 * that our clearing would not reach. */
	width = width > 2 ? width - 2 : 0;
	tty_lock(t);
	double rate = bar_rate_feed(&t->rate, p->elapsed_s, p->bytes);
	struct bar_state st = {
		.bytes = p->bytes, .total = p->total, .total_final = p->total_final,
		.rate = rate, .avg = p->elapsed_s > 0 ? (double)p->bytes / p->elapsed_s : 0,
		.entries_done = p->entries_done, .entries_total = p->entries_total,
		.show_entries = t->tree, .current = p->current, .current_size = p->current_size,
	};
	memcpy(line, "\r", 1);
	size_t n = bar_format(line + 1, sizeof(line) - 5, width, &st);
	memcpy(line + 1 + n, "\033[K", 3);
	tty_write(t, line, n + 4);
	t->shown = true;
	tty_unlock(t);
}

void tty_clear(struct tty_bar *t)
{
	tty_lock(t);
	tty_clear_locked(t);
	tty_unlock(t);
}

void tty_log_before(void *arg)
{
	struct tty_bar *t = arg;

	tty_lock(t);
	tty_clear_locked(t);
}

void tty_log_after(void *arg)
{
	tty_unlock(arg);
}
