/* spawn: starting the other end of a session as a child process that
 * speaks the control protocol on a socketpair, and reaping it. */
#ifndef PCOPY_SPAWN_H
#define PCOPY_SPAWN_H

#include <sys/types.h>

#include "err.h"

/* Starts `exe --server --control-fd 3 [verbosity flags]` with the child's
 * end of a new socketpair as fd 3; stdin, stdout and stderr are inherited.
 * On success *pid is the child and *ctl_fd our end (O_CLOEXEC).
 * Returns 0 or a negative code with the detail in e. */
int spawn_local_server(const char *exe, int verbosity, pid_t *pid, int *ctl_fd,
		       struct pc_err *e);

/* Waits for the child. Returns its exit status, or 128 + signal number if
 * a signal killed it, or -errno. */
int spawn_wait(pid_t pid);

#endif
