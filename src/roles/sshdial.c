// SPDX-License-Identifier: Apache-2.0
/* sshdial: `pcopy --ssh-dial HOST PORT`, run by ssh as its ProxyCommand
 * with ProxyUseFdpass (roles/sshroute.h): connects to HOST:PORT with the
 * window of -w (and -4/-6, --timeout for the connect), passes the socket
 * back to ssh over standard output and exits. ssh then speaks its protocol
 * on a TCP connection whose buffers pcopy chose: a data stream through ssh
 * gets the window a direct stream would, instead of growing until the
 * path's queue overflows. */
#include <pcopy/pcopy.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "roles/api.h"
#include "sys/net.h"

int pcopy_ssh_dial(const struct pcopy_opts *o, const char *host, const char *port,
		   struct pcopy_result *r)
{
	struct pc_err e;
	struct stat st;
	char *end;
	unsigned long p;
	int fd, ret;

	memset(r, 0, sizeof(*r));
	pc_err_init(&e);
	errno = 0;
	p = strtoul(port, &end, 10);
	if (errno != 0 || end == port || *end != '\0' || p == 0 || p > 65535)
		return api_result(r, &e, pc_err_set(&e, -PC_E_USAGE, "--ssh-dial: bad port '%s'",
						     port));
	/* ssh hands its ProxyCommand one end of a socketpair as stdout. */
	if (fstat(STDOUT_FILENO, &st) != 0 || !S_ISSOCK(st.st_mode))
		return api_result(r, &e, pc_err_set(&e, -PC_E_USAGE, "--ssh-dial is ssh's "
						     "ProxyCommand with ProxyUseFdpass: its "
						     "output must be a socket"));
	/* ssh may be stopped while we connect (an early stream whose host
	 * answered the probe after all, roles/datapath.h): the connect then
	 * ends before the host's sshd ever accepts it. */
	fd = net_connect_watch(host, (uint16_t)p, o->family, (uint32_t)o->window,
			       o->timeout_s * 1000u, STDOUT_FILENO, &e);
	if (fd < 0)
		return api_result(r, &e, fd);
	ret = net_send_fds(STDOUT_FILENO, &fd, 1, "pcopy");
	if (ret < 0)
		ret = pc_err_set(&e, ret, "cannot pass the connection to %s port %lu to ssh: %s",
				 host, p, strerror(-ret));
	close(fd);
	return api_result(r, &e, ret);
}
