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

void log_msg(int level, const char *fmt, ...)
{
	char line[4096];
	size_t len;
	va_list ap;
	int saved_errno = errno;
	int n;

	if (level > log_threshold || log_threshold < LOG_ERROR)
		return;

	n = snprintf(line, sizeof(line), "%s: ", log_prefix);
	if (n < 0)
		goto out;
	len = (size_t)n;

	va_start(ap, fmt);
	n = vsnprintf(line + len, sizeof(line) - len, fmt, ap);
	va_end(ap);
	if (n < 0)
		goto out;

	/* Keep one byte for the newline, which survives truncation; a
	 * caller's own trailing newline is not doubled. */
	len += (size_t)n;
	if (len > sizeof(line) - 2)
		len = sizeof(line) - 2;
	if (line[len - 1] != '\n')
		line[len++] = '\n';
	line[len] = '\0';
	log_write(line, len);
out:
	errno = saved_errno;
}
