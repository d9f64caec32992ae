/* SPDX-License-Identifier: Apache-2.0 */
/* err: pcopy's error codes, their exit codes, and a detail buffer.
 *
 * Functions return 0 or a negative code: -errno for system errors, or one of
 * the -PC_E_* codes below. Each PC_E_* code maps to one documented exit code
 * (man/pcopy.1, "EXIT STATUS"). The human-readable detail (which file, which
 * host, what to do) lives in a struct pc_err owned by the session or thread,
 * never in a global. */
#ifndef PCOPY_ERR_H
#define PCOPY_ERR_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <pthread.h>

/* Our own codes live far above errno's range. */
enum pc_errcode {
	PC_E_BASE = 1000,
	PC_E_USAGE,       /* bad option or argument              -> exit 1 */
	PC_E_PROTO,       /* malformed or unexpected message     -> exit 2 */
	PC_E_PARTIAL,     /* some files were not copied          -> exit 3 */
	PC_E_LAUNCH,      /* peer could not be started/authed    -> exit 5 */
	PC_E_AUTH,        /* authentication failed               -> exit 5 */
	PC_E_VERSION,     /* incompatible protocol versions      -> exit 2 */
	PC_E_NET,         /* socket I/O failed or peer vanished  -> exit 10 */
	PC_E_FILEIO,      /* local file I/O failed               -> exit 11 */
	PC_E_INTEGRITY,   /* checksum or size mismatch           -> exit 12 */
	PC_E_INTERRUPTED, /* signal received                     -> exit 20 */
	PC_E_TIMEOUT,     /* peer idle past --timeout            -> exit 30 */
	PC_E_ABORTED,     /* another thread failed first (never shown) */
	PC_E_CODEC,       /* compressing a block failed here     -> exit 13 */
	PC_E_BUSY,        /* the daemon runs all the sessions it may -> exit 14 */
	PC_E_MAX
};

/* Documented exit codes. */
enum pc_exit {
	PC_EXIT_OK = 0,
	PC_EXIT_USAGE = 1,
	PC_EXIT_PROTO = 2,
	PC_EXIT_PARTIAL = 3,
	PC_EXIT_LAUNCH = 5,
	PC_EXIT_NET = 10,
	PC_EXIT_FILEIO = 11,
	PC_EXIT_INTEGRITY = 12,
	PC_EXIT_CODEC = 13,
	PC_EXIT_BUSY = 14,        /* the daemon is busy: try again later */
	PC_EXIT_INTERRUPTED = 20,
	PC_EXIT_TIMEOUT = 30,
};

/* Static text for a code (negative or positive; errno values use strerror). */
const char *pc_strerror(int code);

/* The exit code for an error code. 0 -> 0; unknown errno values map by kind
 * (ENOSPC/EIO/EACCES... -> file I/O, ECONNRESET/EPIPE... -> socket I/O). */
int pc_exit_code(int code);

/* First-error-wins detail record, shared by the threads of one session.
 * Thread-safe: pc_err_set may be called from any thread. */
struct pc_err {
	pthread_mutex_t lock;
	int code;        /* guarded by lock; 0 until the first error */
	char msg[1024];  /* guarded by lock */
};

void pc_err_init(struct pc_err *e);
void pc_err_destroy(struct pc_err *e);

/* Records code and a formatted message if no error was recorded yet.
 * Returns code, so callers can write `return pc_err_set(e, -PC_E_X, ...)`.
 * A later error never overwrites the first one. */
int pc_err_set(struct pc_err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int pc_err_vset(struct pc_err *e, int code, const char *fmt, va_list ap)
	__attribute__((format(printf, 3, 0)));

/* Like pc_err_set, but overwrites an error already recorded: for a better
 * explanation of the same failure that arrives later (the peer's own
 * message after a broken connection). */
int pc_err_replace(struct pc_err *e, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Copies out the recorded code (0 if none) and message. Thread-safe. */
int pc_err_get(struct pc_err *e, char *msg, size_t cap);

#endif
