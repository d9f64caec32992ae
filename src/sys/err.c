/* SPDX-License-Identifier: Apache-2.0 */
/* err: error code texts, exit code mapping and the first-error-wins record. */
#include "sys/err.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Indexed by code - PC_E_BASE; PC_E_BASE itself is never returned. */
static const char *const pc_err_texts[PC_E_MAX - PC_E_BASE] = {
	[PC_E_USAGE - PC_E_BASE] = "invalid usage",
	[PC_E_PROTO - PC_E_BASE] = "protocol error",
	[PC_E_PARTIAL - PC_E_BASE] = "some files were not copied",
	[PC_E_LAUNCH - PC_E_BASE] = "could not start the remote peer",
	[PC_E_AUTH - PC_E_BASE] = "authentication failed",
	[PC_E_VERSION - PC_E_BASE] = "incompatible protocol version",
	[PC_E_NET - PC_E_BASE] = "network connection failed",
	[PC_E_FILEIO - PC_E_BASE] = "file I/O failed",
	[PC_E_INTEGRITY - PC_E_BASE] = "data integrity check failed",
	[PC_E_INTERRUPTED - PC_E_BASE] = "interrupted by a signal",
	[PC_E_TIMEOUT - PC_E_BASE] = "connection timed out",
	[PC_E_ABORTED - PC_E_BASE] = "aborted after another failure",
	[PC_E_CODEC - PC_E_BASE] = "compression failed",
	[PC_E_BUSY - PC_E_BASE] = "the daemon is busy: try again later",
};

/* |code|, or -1 for INT_MIN, which is neither an errno nor one of ours. */
static int pc_err_abs(int code)
{
	if (code == INT_MIN)
		return -1;
	return code < 0 ? -code : code;
}

const char *pc_strerror(int code)
{
	int c = pc_err_abs(code);

	if (c == 0)
		return "success";
	if (c < 0)
		return "unknown error";
	if (c > PC_E_BASE && c < PC_E_MAX && pc_err_texts[c - PC_E_BASE] != NULL)
		return pc_err_texts[c - PC_E_BASE];
	if (c >= PC_E_BASE)
		return "unknown error";
	return strerror(c);
}

/* Exit code for an errno value: network failures apart, everything that
 * reaches the top as an errno came from local files or memory. */
static int pc_exit_code_errno(int e)
{
	switch (e) {
	case ECONNRESET:
	case ECONNREFUSED:
	case ECONNABORTED:
	case EPIPE:
	case ENETUNREACH:
	case ENETDOWN:
	case ENETRESET:
	case EHOSTUNREACH:
	case EHOSTDOWN:
	case ETIMEDOUT:
	case EADDRINUSE:
	case EADDRNOTAVAIL:
	case ENOTCONN:
		return PC_EXIT_NET;
	default:
		/* ENOSPC, EDQUOT, EIO, EACCES, EPERM, ENOENT, ENOTDIR, EISDIR,
		 * EROFS, EXDEV, ELOOP, EEXIST, EFBIG, ENAMETOOLONG, EBADF,
		 * ENOMEM and anything unforeseen. */
		return PC_EXIT_FILEIO;
	}
}

int pc_exit_code(int code)
{
	int c = pc_err_abs(code);

	if (c == 0)
		return PC_EXIT_OK;
	if (c > 0 && c < PC_E_BASE)
		return pc_exit_code_errno(c);

	switch (c) {
	case PC_E_USAGE:
		return PC_EXIT_USAGE;
	case PC_E_PROTO:
	case PC_E_VERSION:
		return PC_EXIT_PROTO;
	case PC_E_PARTIAL:
		return PC_EXIT_PARTIAL;
	case PC_E_LAUNCH:
	case PC_E_AUTH:
		return PC_EXIT_LAUNCH;
	case PC_E_NET:
		return PC_EXIT_NET;
	case PC_E_FILEIO:
		return PC_EXIT_FILEIO;
	case PC_E_INTEGRITY:
		return PC_EXIT_INTEGRITY;
	case PC_E_CODEC:
		return PC_EXIT_CODEC;
	case PC_E_BUSY:
		return PC_EXIT_BUSY;
	case PC_E_INTERRUPTED:
		return PC_EXIT_INTERRUPTED;
	case PC_E_TIMEOUT:
		return PC_EXIT_TIMEOUT;
	default:
		/* PC_E_ABORTED should never reach the top (the thread that
		 * failed first owns the real code); if it does, and for codes
		 * we do not know, report an internal protocol failure. */
		return PC_EXIT_PROTO;
	}
}

/* A mutex on a live pc_err cannot fail to lock unless memory is corrupt;
 * there is no caller to report to, so stop. */
static void pc_err_lock(struct pc_err *e)
{
	if (pthread_mutex_lock(&e->lock) != 0)
		abort();
}

static void pc_err_unlock(struct pc_err *e)
{
	if (pthread_mutex_unlock(&e->lock) != 0)
		abort();
}

void pc_err_init(struct pc_err *e)
{
	/* Default attributes on Linux: init cannot fail short of a bug. */
	if (pthread_mutex_init(&e->lock, NULL) != 0)
		abort();
	e->code = 0;
	e->msg[0] = '\0';
}

void pc_err_destroy(struct pc_err *e)
{
	if (e == NULL)
		return;
	if (pthread_mutex_destroy(&e->lock) != 0)
		abort();
}

__attribute__((format(printf, 4, 0)))
static int pc_err_record(struct pc_err *e, bool replace, int code, const char *fmt,
			 va_list ap)
{
	static const char ellipsis[] = "...";
	int n;

	/* 0 is not an error: recording it would let a later error win. */
	if (code == 0)
		return 0;

	pc_err_lock(e);
	if (e->code == 0 || replace) {
		e->code = code;
		n = vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
		if (n < 0) {
			e->msg[0] = '\0';
		} else if ((size_t)n >= sizeof(e->msg)) {
			/* Truncated: mark it, keeping the terminator. */
			memcpy(e->msg + sizeof(e->msg) - sizeof(ellipsis), ellipsis,
			       sizeof(ellipsis));
		}
	}
	pc_err_unlock(e);
	return code;
}

int pc_err_vset(struct pc_err *e, int code, const char *fmt, va_list ap)
{
	return pc_err_record(e, false, code, fmt, ap);
}

int pc_err_replace(struct pc_err *e, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	code = pc_err_record(e, true, code, fmt, ap);
	va_end(ap);
	return code;
}

int pc_err_set(struct pc_err *e, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	code = pc_err_vset(e, code, fmt, ap);
	va_end(ap);
	return code;
}

int pc_err_get(struct pc_err *e, char *msg, size_t cap)
{
	int code;

	pc_err_lock(e);
	code = e->code;
	if (msg != NULL && cap > 0)
		snprintf(msg, cap, "%s", e->msg);
	pc_err_unlock(e);
	return code;
}
