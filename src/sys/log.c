/* SPDX-License-Identifier: Apache-2.0 */
/* log: leveled messages to stderr, one write(2) per message, one line
 * each. Under systemd, with stderr connected to the journal, each line
 * starts with its syslog priority (<3> to <7>) for journald, instead of
 * the prefix. No line carries a time stamp: the journal, or whatever reads
 * stderr, adds its own. */
#include "sys/log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sys/utf8.h"

/* Written by log_setup before any thread starts, read-only afterwards. */
static int log_threshold = LOG_WARN;
static char log_prefix[64] = "pcopy";
static bool log_notices; /* LOG_NOTICE shows even below LOG_WARN */
static bool log_journal; /* stderr is the journal: <N> priorities, no prefix */
/* log_set_hooks: set before threads start, read-only after */
static void (*log_before)(void *arg), (*log_after)(void *arg);
static void *log_hook_arg;

void log_set_notices(bool on)
{
	log_notices = on;
}

/* Whether stderr is the stream systemd connected to the journal: then
 * $JOURNAL_STREAM holds its DEV:INO (systemd.exec(5)). A service that sent
 * its stderr elsewhere inherits the variable all the same, so it must match
 * stderr itself. */
static bool log_stderr_is_journal(void)
{
	const char *env = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	char extra;

	if (env == NULL || sscanf(env, "%llu:%llu%c", &dev, &ino, &extra) != 2)
		return false;
	if (fstat(STDERR_FILENO, &st) != 0)
		return false;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

void log_setup(int level, const char *prefix)
{
	log_threshold = level;
	snprintf(log_prefix, sizeof(log_prefix), "%s", prefix != NULL ? prefix : "pcopy");
	log_journal = log_stderr_is_journal();
}

/* The syslog priority journald reads from a line's "<N>" (sd-daemon(3)). */
static int log_priority(int level)
{
	switch (level) {
	case LOG_ERROR: return 3;
	case LOG_WARN: return 4;
	case LOG_NOTICE: return 5;
	case LOG_INFO: return 6;
	default: return 7;
	}
}

void log_set_hooks(void (*before)(void *arg), void (*after)(void *arg), void *arg)
{
	log_before = before;
	log_after = after;
	log_hook_arg = arg;
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

/* Appends the bytes at p[i..i+k) to out as \xNN each, if they all fit. */
static bool log_hex(char *out, size_t cap, size_t *len, const unsigned char *p, size_t k)
{
	static const char hex[] = "0123456789abcdef";

	if (*len + 4 * k > cap)
		return false;
	for (size_t i = 0; i < k; i++) {
		out[(*len)++] = '\\';
		out[(*len)++] = 'x';
		out[(*len)++] = hex[p[i] >> 4];
		out[(*len)++] = hex[p[i] & 15];
	}
	return true;
}

/* Appends the n bytes at p to out (room for cap bytes, *len used), so that
 * a message that quotes a peer (its ERROR text, a file name) stays one line
 * and cannot steer a terminal: every control character as \xNN, C0 and
 * DEL, and C1 too (U+0080 to U+009F: an 8-bit terminal reads a raw 0x9b
 * as ESC [, some UTF-8 ones U+009B), and any byte that is not part of
 * valid UTF-8. Valid UTF-8 passes as it is, so that names stay readable.
 * Stops where the next character no longer fits. */
static void log_escape_into(char *out, size_t cap, size_t *len, const char *text, size_t n,
			    bool backslash)
{
	const unsigned char *p = (const unsigned char *)text;

	for (size_t i = 0; i < n;) {
		size_t k = p[i] < 0x80 ? 1 : utf8_seq_len(p + i, n - i);
		bool control = p[i] < 0x20 || p[i] == 0x7f || k == 0 ||
			       (k == 2 && p[i] == 0xc2 && p[i + 1] < 0xa0) ||
			       (backslash && p[i] == '\\');
		if (k == 0)
			k = 1;
		if (control) {
			if (!log_hex(out, cap, len, p + i, k))
				return;
		} else {
			if (*len + k > cap)
				return;
			memcpy(out + *len, p + i, k);
			*len += k;
		}
		i += k;
	}
}

void log_escape(char *out, size_t cap, const char *in)
{
	size_t len = 0;

	if (cap == 0)
		return;
	log_escape_into(out, cap - 1, &len, in, strlen(in), false);
	out[len] = '\0';
}

void log_escape_name(char *out, size_t cap, const char *in)
{
	size_t len = 0;

	if (cap == 0)
		return;
	log_escape_into(out, cap - 1, &len, in, strlen(in), true);
	out[len] = '\0';
}

/* Writes text[0..n) as one line of level: our prefix, or under the
 * journal its priority; escaped unless it is already (escape false). */
static void log_emit(int level, const char *text, size_t n, bool escape)
{
	char line[4096];
	size_t len;
	int r;

	if (log_journal)
		r = snprintf(line, sizeof(line), "<%d>", log_priority(level));
	else
		r = snprintf(line, sizeof(line), "%s: ", log_prefix);
	if (r < 0)
		return;
	len = (size_t)r < sizeof(line) ? (size_t)r : sizeof(line) - 1;
	/* Keep one byte for the newline, which survives truncation. */
	if (escape) {
		log_escape_into(line, sizeof(line) - 1, &len, text, n, false);
	} else {
		size_t k = n < sizeof(line) - 1 - len ? n : sizeof(line) - 1 - len;
		memcpy(line + len, text, k);
		len += k;
	}
	line[len++] = '\n';
	if (log_before != NULL)
		log_before(log_hook_arg);
	log_write(line, len);
	if (log_after != NULL)
		log_after(log_hook_arg);
}

void log_msg(int level, const char *fmt, ...)
{
	char text[4096];
	size_t n;
	va_list ap;
	int saved_errno = errno;
	int r;

	if (level == LOG_NOTICE) {
		if (log_threshold < LOG_WARN && !log_notices)
			return;
	} else if (level > log_threshold || log_threshold < LOG_ERROR) {
		return;
	}

	va_start(ap, fmt);
	r = vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	if (r < 0)
		goto out;
	n = strnlen(text, sizeof(text));
	/* A caller's own trailing newline is not doubled, nor escaped. */
	if (n > 0 && text[n - 1] == '\n')
		n--;

	log_emit(level, text, n, true);
out:
	errno = saved_errno;
}

void log_escaped(int level, const char *text)
{
	int saved_errno = errno;

	log_emit(level, text, strlen(text), false);
	errno = saved_errno;
}
