/* SPDX-License-Identifier: Apache-2.0 */
/* log: leveled messages to stderr, one write(2) per message. */
#include "sys/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Written by log_setup before any thread starts, read-only afterwards. */
static int log_threshold = LOG_WARN;
static char log_prefix[64] = "pcopy";

void log_setup(int level, const char *prefix)
{
	log_threshold = level;
	snprintf(log_prefix, sizeof(log_prefix), "%s", prefix != NULL ? prefix : "pcopy");
}

int log_level(void)
{
	return log_threshold;
}

/* Writes all of buf to stderr; a short write only happens for huge lines or
 * a full pipe, and then the rest follows. Errors are dropped: there is
 * nowhere left to report them. */
static void log_write(const char *buf, size_t len)
{
	ssize_t n;

	while (len > 0) {
		n = write(STDERR_FILENO, buf, len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		buf += n;
		len -= (size_t)n;
	}
}

/* Appends the n bytes at p to out (room for cap bytes, *len used), each
 * control character (below 0x20, or 0x7f) as \xNN, so that a message
 * that quotes a peer (its ERROR text, a file name) stays one line and
 * cannot steer a terminal. Stops where the next byte no longer fits. */
static void log_escape_into(char *out, size_t cap, size_t *len, const char *p, size_t n)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c >= 0x20 && c != 0x7f) {
			if (*len + 1 > cap)
				return;
			out[(*len)++] = (char)c;
			continue;
		}
		if (*len + 4 > cap)
			return;
		out[(*len)++] = '\\';
		out[(*len)++] = 'x';
		out[(*len)++] = hex[c >> 4];
		out[(*len)++] = hex[c & 15];
	}
}

void log_escape(char *out, size_t cap, const char *in)
{
	size_t len = 0;

	if (cap == 0)
		return;
	log_escape_into(out, cap - 1, &len, in, strlen(in));
	out[len] = '\0';
}

void log_msg(int level, const char *fmt, ...)
{
	char text[4096], line[4096];
	size_t len, n;
	va_list ap;
	int saved_errno = errno;
	int r;

	if (level > log_threshold || log_threshold < LOG_ERROR)
		return;

	va_start(ap, fmt);
	r = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (r < 0)
		goto out;
	n = strnlen(text, sizeof(text));
	/* A caller's own trailing newline is not doubled, nor escaped. */
	if (n > 0 && text[n - 1] == '\n')
		n--;

	r = snprintf(line, sizeof(line), "%s: ", log_prefix);
	if (r < 0)
		goto out;
	len = (size_t)r < sizeof(line) ? (size_t)r : sizeof(line) - 1;
	/* Keep one byte for the newline, which survives truncation. */
	log_escape_into(line, sizeof(line) - 1, &len, text, n);
	line[len++] = '\n';
	log_write(line, len);
out:
	errno = saved_errno;
}
