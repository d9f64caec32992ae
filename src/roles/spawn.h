/* SPDX-License-Identifier: Apache-2.0 */
/* spawn: starting the other end of a session as a child process that
 * speaks the control protocol on a socketpair, and reaping it. */
#ifndef PCOPY_SPAWN_H
#define PCOPY_SPAWN_H

#include <sys/types.h>

#include "sys/err.h"

/* Starts `exe --server --control-fd 3 --bind BIND [verbosity flag]`
 * with the child's end of a new socketpair as fd 3; stdin, stdout and
 * stderr are inherited.
 * On success *pid is the child and *ctl_fd our end (O_CLOEXEC).
 * Returns 0 or a negative code with the detail in e. */
int spawn_local_server(const char *exe, const char *bind, int verbosity, pid_t *pid,
		       int *ctl_fd, struct pc_err *e);

/* Starts argv (argv[0] is looked up in PATH), e.g. ssh with its arguments,
 * with its stdin and stdout on two new pipes; with efd NULL stderr is
 * inherited, so the user sees what it says, else it goes to a third pipe
 * whose reading end (non-blocking) is *efd. On success *pid is the child,
 * *rfd reads its stdout and *wfd writes its stdin (all O_CLOEXEC, owned
 * by the caller). Returns 0 or a negative code with the detail in e. */
int spawn_piped(char *const argv[], pid_t *pid, int *rfd, int *wfd, int *efd,
		struct pc_err *e);

/* Appends the words of cmd (split on blanks, like rsync's -e; cmd is cut
 * up in place) to argv[*argc...], at most max in all. Returns 0, or
 * -PC_E_USAGE for too many words or none. */
int spawn_split(char *cmd, char **argv, int *argc, int max);

/* word in single quotes for a remote shell ('\'' for a quote) into
 * buf[cap]; returns its length (a word too long is cut). */
size_t spawn_quote(const char *word, char *buf, size_t cap);

/* Waits for the child. Returns its exit status, or 128 + signal number if
 * a signal killed it, or -errno. */
int spawn_wait(pid_t pid);

/* Waits up to ms for the child to end, then kills it (SIGKILL); reaps it
 * either way. Returns spawn_wait's status, or -1 if it was gone already. */
int spawn_reap(pid_t pid, int ms);

#endif
