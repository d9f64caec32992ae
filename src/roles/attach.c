// SPDX-License-Identifier: Apache-2.0
/* attach: `pcopy --attach ID`, the far end of a data stream through ssh
 * (wire/attach.h). It only hands its standard input and output (sshd's
 * pipes) to the session and stays out of the way: the session reads and
 * writes them itself. It must stay alive until the session is done, for
 * sshd closes the command's input as soon as the command exits. */
#include <pcopy/pcopy.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "roles/api.h"
#include "sys/net.h"
#include "sys/platform.h"
#include "wire/attach.h"

/* "ssh from ADDR" (SSH_CLIENT is "ADDR PORT PORT"), for the session's log. */
static void attach_who(char *who, size_t cap)
{
	const char *sc = getenv("SSH_CLIENT");
	size_t n = sc != NULL ? strcspn(sc, " ") : 0;

	if (n > 0 && n < NET_MAX_ADDR)
		snprintf(who, cap, "ssh from %.*s", (int)n, sc);
	else
		snprintf(who, cap, "ssh");
}

/* Puts /dev/null on fds 0 and 1: the session then holds the only copies of
 * sshd's pipes, and its close is the stream's end. */
static int attach_let_go(struct pc_err *e)
{
	int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	int ret = 0;

	if (fd < 0)
		return pc_err_set(e, -errno, "/dev/null: %s", strerror(errno));
	if (dup2(fd, STDIN_FILENO) < 0 || dup2(fd, STDOUT_FILENO) < 0)
		ret = pc_err_set(e, -errno, "dup2: %s", strerror(errno));
	close(fd);
	return ret;
}

/* Waits until the session closes conn (its end of the stream), or a stop
 * signal. Returns 0 or a negative code. */
static int attach_wait(int conn, struct pc_err *e)
{
	struct pollfd p[2] = { { .fd = conn, .events = POLLIN },
			       { .fd = api_sigfd(), .events = POLLIN } };
	char junk[64];

	for (;;) {
		int n = poll(p, 2, -1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return pc_err_set(e, -errno, "poll: %s", strerror(errno));
		if (p[1].revents & POLLIN)
			return pc_err_set(e, -PC_E_INTERRUPTED, "interrupted");
		ssize_t r = recv(conn, junk, sizeof(junk), 0);
		if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN))
			return 0; /* the session is done with the stream */
	}
}

int pcopy_attach(const struct pcopy_opts *o, struct pcopy_result *r)
{
	uint8_t id[PROTO_ATTACH_ID_LEN];
	char who[NET_MAX_ADDR + 16];
	struct pc_err e;
	int conn, ret;

	memset(r, 0, sizeof(*r));
	pc_err_init(&e);
	if (o->attach_id == NULL || attach_id_parse(o->attach_id, id) < 0)
		return api_result(r, &e, pc_err_set(&e, -PC_E_USAGE, "--attach needs the %u hex "
						     "digits of a session's id", ATTACH_ID_HEX));
	attach_who(who, sizeof(who));
	/* sshd's pipes, soon the session's data stream: wide ones spare sshd
	 * copying what it holds (platform_pipe_widen); narrow ones work too. */
	(void)platform_pipe_widen(STDIN_FILENO);
	(void)platform_pipe_widen(STDOUT_FILENO);
	conn = attach_offer(id, ATTACH_WAIT_S, STDIN_FILENO, STDOUT_FILENO, who, &e);
	if (conn < 0)
		return api_result(r, &e, conn);
	ret = attach_let_go(&e);
	if (ret == 0)
		ret = attach_wait(conn, &e);
	close(conn);
	return api_result(r, &e, ret);
}
