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
 * with its stdin and stdout on two new pipes; stderr is inherited, so the
 * user sees what it says. On success *pid is the child, *rfd reads its
 * stdout and *wfd writes its stdin (both O_CLOEXEC, owned by the caller).
 * Returns 0 or a negative code with the detail in e. */
int spawn_piped(char *const argv[], pid_t *pid, int *rfd, int *wfd, struct pc_err *e);

/* Waits for the child. Returns its exit status, or 128 + signal number if
 * a signal killed it, or -errno. */
int spawn_wait(pid_t pid);

#endif
