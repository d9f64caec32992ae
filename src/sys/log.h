/* SPDX-License-Identifier: Apache-2.0 */
/* log: leveled messages to stderr. Only stderr: stdout may carry file data
 * and a server's stdout carries the control channel.
 *
 * The level and the prefix are set once at start-up by the top of the
 * program (log_setup) before any thread starts; after that they are only
 * read, so logging is thread-safe (each message is a single write). */
#ifndef PCOPY_LOG_H
#define PCOPY_LOG_H

#include <stdbool.h>
#include <stddef.h>

enum log_level { LOG_QUIET = -1, LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3,
		 LOG_NOTICE = 100 /* a warning that log_set_notices shows even when quiet */ };

/* Sets the threshold and the prefix ("pcopy", "pcopy[server]"), and looks
 * whether stderr is systemd's journal ($JOURNAL_STREAM): then lines start
 * with their syslog priority ("<3>") instead of the prefix. Call before
 * starting threads. prefix is copied. */
void log_setup(int level, const char *prefix);
int log_level(void);

/* A server that its client started quiet still shows notices (LOG_NOTICE:
 * how the copy goes, such as data streams that go through ssh), for the
 * client's user to read: its stderr is the user's. Call before threads
 * start, as log_setup. */
void log_set_notices(bool on);

/* Calls before(arg) ahead of writing each line and after(arg) once it is
 * written, on the logging thread (a terminal display clears its line in
 * before and holds its lock until after). Set before threads start, as
 * log_setup; NULL functions are skipped. */
void log_set_hooks(void (*before)(void *arg), void (*after)(void *arg), void *arg);

void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Writes text, made safe by log_escape already (a pcopy_result's msg), as
 * one line of level the way log_msg writes its lines (prefix, or the
 * journal's priority; the hooks), whatever the verbosity, and without
 * escaping it twice. */
void log_escaped(int level, const char *text);

/* Copies the string in to out[cap] (cap >= 1, always terminated), each
 * control character as \xNN, as log_msg writes every line: for text that
 * may quote a peer and is printed by other means. Truncates, never
 * splitting an escape. */
void log_escape(char *out, size_t cap, const char *in);

/* The same, and a backslash too (as \x5c), so that each output stands for
 * one string only: for names listed one a line for scripts (-n). */
void log_escape_name(char *out, size_t cap, const char *in);
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_notice(...) log_msg(LOG_NOTICE, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
