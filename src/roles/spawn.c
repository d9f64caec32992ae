/* SPDX-License-Identifier: Apache-2.0 */
/* spawn: the local sink as a child process. */
#include "roles/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sys/platform.h"

int spawn_local_server(const char *exe, const char *bind, int verbosity, pid_t *pid,
		       int *ctl_fd, struct pc_err *e)
{
	const char *vflag = verbosity < 0 ? "-q" : verbosity >= 3 ? "-vv" : verbosity == 2 ? "-v"
										     : "-q";
	/* execv takes char *const[]; writable copies keep -Wcast-qual happy. */
	char a0[] = "pcopy", a1[] = "--server", a2[] = "--control-fd", a3[] = "3", a4[4];
	char a5[] = "--bind", a6[64], a7[] = "--notices";
	/* Quiet unless asked, but with the notices a user should see. */
	char *argv[] = { a0, a1, a2, a3, a5, a6, a4, verbosity == 1 ? a7 : NULL, NULL };
	int sv[2];
	pid_t child;

	snprintf(a4, sizeof(a4), "%s", vflag);
	snprintf(a6, sizeof(a6), "%s", bind);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		return pc_err_set(e, -errno, "socketpair: %s", strerror(errno));
	child = fork();
	if (child < 0) {
		int ret = -errno;
		close(sv[0]);
		close(sv[1]);
		return pc_err_set(e, ret, "cannot start the local sink: %s", strerror(-ret));
	}
	if (child == 0) {
		/* Only async-signal-safe calls from here to exec. dup2 clears
		 * O_CLOEXEC on the new descriptor. */
		platform_signals_reset();
		if (sv[1] == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(sv[1], 3) < 0)
			_exit(127);
		execv(exe, argv);
		_exit(127);
	}
	close(sv[1]);
	*pid = child;
	*ctl_fd = sv[0];
	return 0;
}

/* In a child after fork: exec argv, or report errno on errfd and exit.
 * Async-signal-safe calls only. */
static void spawn_exec(char *const argv[], int errfd)
{
	int err;

	platform_signals_reset();
	execvp(argv[0], argv);
	err = errno;
	if (write(errfd, &err, sizeof(err)) < 0)
		_exit(127);
	_exit(127);
}

int spawn_piped(char *const argv[], pid_t *pid, int *rfd, int *wfd, int *efd,
		struct pc_err *e)
{
	int in[2] = { -1, -1 }, out[2] = { -1, -1 }, ex[2] = { -1, -1 }, er[2] = { -1, -1 };
	int err = 0, ret = 0;
	pid_t child = -1;

	if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0 ||
	    pipe2(ex, O_CLOEXEC) != 0 || (efd != NULL && pipe2(er, O_CLOEXEC | O_NONBLOCK) != 0)) {
		ret = pc_err_set(e, -errno, "pipe: %s", strerror(errno));
		goto out;
	}
	/* Wide pipes spare ssh copying what it holds (platform_pipe_widen);
	 * narrow ones work too, only slower. */
	(void)platform_pipe_widen(in[1]);
	(void)platform_pipe_widen(out[0]);
	child = fork();
	if (child == 0) {
		/* The new 0, 1 (and 2) lose O_CLOEXEC through dup2; ex[1]
		 * closes itself on a successful exec, which is how we know.
		 * The child's stderr blocks as usual: O_NONBLOCK is on our
		 * end's file only. */
		if (dup2(in[0], STDIN_FILENO) < 0 || dup2(out[1], STDOUT_FILENO) < 0 ||
		    (efd != NULL && dup2(er[1], STDERR_FILENO) < 0))
			_exit(127);
		spawn_exec(argv, ex[1]);
	}
	if (child < 0) {
		ret = pc_err_set(e, -errno, "cannot start '%s': %s", argv[0], strerror(errno));
		goto out;
	}
	close(ex[1]);
	ex[1] = -1;
	while (read(ex[0], &err, sizeof(err)) < 0 && errno == EINTR)
		;
	if (err != 0) {
		(void)spawn_wait(child);
		child = -1;
		ret = pc_err_set(e, -PC_E_LAUNCH, "cannot run '%s': %s", argv[0], strerror(err));
		goto out;
	}
	*pid = child;
	*rfd = out[0];
	*wfd = in[1];
	out[0] = in[1] = -1;
	if (efd != NULL) {
		*efd = er[0];
		er[0] = -1;
	}
out:
	for (int i = 0; i < 2; i++) {
		int *fds[] = { &in[i], &out[i], &ex[i], &er[i] };
		for (int j = 0; j < 4; j++)
			if (*fds[j] >= 0)
				close(*fds[j]);
	}
	return ret;
}

int spawn_split(char *cmd, char **argv, int *argc, int max)
{
	char *save = NULL;

	/* strtok_r: data streams through ssh are started from several threads. */
	for (char *w = strtok_r(cmd, " \t", &save); w != NULL; w = strtok_r(NULL, " \t", &save)) {
		if (*argc >= max)
			return -PC_E_USAGE;
		argv[(*argc)++] = w;
	}
	return *argc > 0 ? 0 : -PC_E_USAGE;
}

size_t spawn_quote(const char *word, char *buf, size_t cap)
{
	size_t n = 0;

	if (cap < 3)
		return 0;
	buf[n++] = '\'';
	for (const char *p = word; *p != '\0' && n + 6 < cap; p++) {
		if (*p == '\'') {
			memcpy(buf + n, "'\\''", 4);
			n += 4;
		} else {
			buf[n++] = *p;
		}
	}
	buf[n++] = '\'';
	buf[n] = '\0';
	return n;
}

int spawn_wait(pid_t pid)
{
	int status;

	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + WTERMSIG(status);
}

int spawn_reap(pid_t pid, int ms)
{
	const struct timespec tick = { .tv_nsec = 10 * 1000000 };
	int status;

	for (int waited = 0;; waited += 10) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid)
			break;
		if (r < 0 && errno != EINTR)
			return -1;
		if (waited >= ms) {
			(void)kill(pid, SIGKILL);
			while (waitpid(pid, &status, 0) < 0)
				if (errno != EINTR)
					return -1;
			break;
		}
		nanosleep(&tick, NULL);
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
