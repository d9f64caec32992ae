// SPDX-License-Identifier: Apache-2.0
/* attach: the Unix socket where data streams through ssh meet their
 * session (attach.h). */
#include "wire/attach.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "sys/net.h"
#include "sys/platform.h"
#include "wire/keyfile.h"

_Static_assert(ATTACH_ID_HEX + 1 <= 64, "an id is short");

void attach_id_format(const uint8_t id[PROTO_ATTACH_ID_LEN], char hex[ATTACH_ID_HEX + 1])
{
	static const char digits[] = "0123456789abcdef";

	for (unsigned i = 0; i < PROTO_ATTACH_ID_LEN; i++) {
		hex[2 * i] = digits[id[i] >> 4];
		hex[2 * i + 1] = digits[id[i] & 0xf];
	}
	hex[ATTACH_ID_HEX] = '\0';
}

int attach_id_parse(const char *hex, uint8_t id[PROTO_ATTACH_ID_LEN])
{
	uint8_t any = 0;

	if (strlen(hex) != ATTACH_ID_HEX)
		return -PC_E_USAGE;
	for (unsigned i = 0; i < PROTO_ATTACH_ID_LEN; i++) {
		int hi = keyfile_hex_digit(hex[2 * i]), lo = keyfile_hex_digit(hex[2 * i + 1]);
		if (hi < 0 || lo < 0)
			return -PC_E_USAGE;
		id[i] = (uint8_t)(hi << 4 | lo);
		any |= id[i];
	}
	return any != 0 ? 0 : -PC_E_USAGE;
}

/* The private directory: $XDG_RUNTIME_DIR/pcopy (a per-user directory that
 * the login made), else ${TMPDIR:-/tmp}/pcopy-UID. */
static int attach_dir_name(char *dir, size_t cap)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR"), *tmp = getenv("TMPDIR");
	int n;

	if (xdg != NULL && xdg[0] == '/')
		n = snprintf(dir, cap, "%s/pcopy", xdg);
	else
		n = snprintf(dir, cap, "%s/pcopy-%u", tmp != NULL && tmp[0] == '/' ? tmp : "/tmp",
			     (unsigned)geteuid());
	return n > 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
}

/* Whether dir is a directory of ours that nobody else may enter (not a
 * symlink: lstat). Returns 0, -ENOENT, or a negative code with e set. */
static int attach_dir_check(const char *dir, struct pc_err *e)
{
	struct stat st;

	if (lstat(dir, &st) != 0)
		return errno == ENOENT ? -ENOENT
				       : pc_err_set(e, -errno, "%s: %s", dir, strerror(errno));
	if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 077) != 0)
		return pc_err_set(e, -EPERM, "%s is not a private directory of this user "
				  "(a directory owned by uid %u with mode 0700): remove it",
				  dir, (unsigned)geteuid());
	return 0;
}

/* The socket's address for id; with create, makes the directory first.
 * Returns 0 or a negative code with e set (-ENOENT without e when the
 * directory is not there yet). */
static int attach_addr(const uint8_t id[PROTO_ATTACH_ID_LEN], bool create,
		       struct sockaddr_un *sa, struct pc_err *e)
{
	char dir[sizeof(sa->sun_path)], hex[ATTACH_ID_HEX + 1];
	int ret = attach_dir_name(dir, sizeof(dir));

	if (ret < 0)
		return pc_err_set(e, ret, "the directory for the session's socket would be too "
				  "long a path (XDG_RUNTIME_DIR or TMPDIR)");
	if (create && mkdir(dir, 0700) != 0 && errno != EEXIST)
		return pc_err_set(e, -errno, "cannot make %s: %s", dir, strerror(errno));
	ret = attach_dir_check(dir, e);
	if (ret < 0)
		return ret;
	attach_id_format(id, hex);
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	int n = snprintf(sa->sun_path, sizeof(sa->sun_path), "%s/%s", dir, hex);
	if (n < 0 || (size_t)n >= sizeof(sa->sun_path))
		return pc_err_set(e, -ENAMETOOLONG, "%s/%s is too long for a Unix socket's path",
				  dir, hex);
	return 0;
}

/* The uid of the process at the other end of Unix socket fd, or -1. */
static long attach_peer_uid(int fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0 || len != sizeof(cr))
		return -1;
	return (long)cr.uid;
}

int attach_listen(const uint8_t id[PROTO_ATTACH_ID_LEN], char *path, size_t cap,
		  struct pc_err *e)
{
	struct sockaddr_un sa;
	int fd, ret = attach_addr(id, true, &sa, e);

	if (ret < 0)
		return ret;
	if (strlen(sa.sun_path) >= cap)
		return pc_err_set(e, -ENAMETOOLONG, "%s: path too long", sa.sun_path);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return pc_err_set(e, -errno, "socket: %s", strerror(errno));
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 64) != 0) {
		ret = pc_err_set(e, -errno, "cannot listen on %s: %s", sa.sun_path,
				 strerror(errno));
		close(fd);
		return ret;
	}
	snprintf(path, cap, "%s", sa.sun_path);
	return fd;
}

void attach_close(int lfd, const char *path)
{
	if (lfd >= 0)
		close(lfd);
	if (path != NULL && path[0] != '\0')
		(void)unlink(path);
}

int attach_take(int conn, uint64_t deadline_ns, int fds[2], char *who, size_t cap)
{
	struct pollfd p = { .fd = conn, .events = POLLIN };
	int ret;

	for (;;) {
		uint64_t now = platform_now_ns();
		if (now >= deadline_ns)
			return -PC_E_TIMEOUT;
		int n = poll(&p, 1, (int)((deadline_ns - now) / 1000000u) + 1);
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n <= 0)
			continue;
		if (attach_peer_uid(conn) != (long)geteuid())
			return -EPERM;
		ret = net_recv_fds(conn, fds, 2, who, cap);
		if (ret != -EAGAIN)
			return ret;
	}
}

int attach_offer(const uint8_t id[PROTO_ATTACH_ID_LEN], unsigned wait_s, int in_fd, int out_fd,
		 const char *who, struct pc_err *e)
{
	/* Between looks, in_fd is watched: its writer gone (sshd closes it
	 * when the client's ssh goes, as when the client stopped a stream it
	 * started in case) ends the wait. No events: only a hang-up counts. */
	struct pollfd watch = { .fd = in_fd, .events = 0 };
	uint64_t deadline = platform_now_ns() + (uint64_t)wait_s * 1000000000u;
	struct sockaddr_un sa;
	int fds[2] = { in_fd, out_fd }, fd, ret;
	bool named = false; /* sa holds the path we wait for */

	for (;;) {
		/* The session may not have made its directory, nor listened,
		 * yet: the data ssh's start with the control ssh. */
		ret = attach_addr(id, false, &sa, e);
		if (ret < 0 && ret != -ENOENT)
			return ret;
		named = ret == 0;
		if (ret == 0) {
			fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
			if (fd < 0)
				return pc_err_set(e, -errno, "socket: %s", strerror(errno));
			if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
				break;
			ret = -errno;
			close(fd);
			if (ret != -ENOENT && ret != -ECONNREFUSED)
				return pc_err_set(e, ret, "cannot reach the session at %s: %s",
						  sa.sun_path, strerror(-ret));
		}
		if (platform_now_ns() >= deadline) {
			char hex[ATTACH_ID_HEX + 1];
			attach_id_format(id, hex);
			return pc_err_set(e, -PC_E_LAUNCH, "no pcopy session %s on this host "
					  "(waited %u s for its socket%s%s)", hex, wait_s,
					  named ? " at " : "", named ? sa.sun_path : "");
		}
		if (poll(&watch, 1, 20) > 0) {
			if (watch.revents & (POLLHUP | POLLERR))
				return pc_err_set(e, -PC_E_NET, "the stream's input closed before its "
						  "session was there");
			watch.fd = -1; /* not an open fd (POLLNVAL): sleep alone */
		}
	}
	if (attach_peer_uid(fd) != (long)geteuid()) {
		close(fd);
		return pc_err_set(e, -EPERM, "the socket %s belongs to another user", sa.sun_path);
	}
	ret = net_send_fds(fd, fds, 2, who);
	if (ret < 0) {
		close(fd);
		return pc_err_set(e, ret, "cannot hand the stream to the session at %s: %s",
				  sa.sun_path, strerror(-ret));
	}
	return fd;
}
