/* server: one session on the far end. */
#include "server.h"

#include <pcopy/pcopy.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "api.h"
#include "log.h"
#include "net.h"
#include "pathsafe.h"
#include "sink.h"
#include "srcfile.h"

/* Opens what the request names. Returns 0 or a negative code (e set). */
static int server_prepare(const struct server_cfg *cfg, const struct proto_request *req,
			  struct src_file *file, struct sink_target *target, struct pc_err *e)
{
	bool to_stdout = req->flags & PROTO_REQ_DEST_STDOUT;

	if (cfg->beneath && pathsafe_check_rel(req->path) < 0)
		return pc_err_set(e, -PC_E_USAGE, "path '%s' is not allowed: it must stay inside "
				  "the served directory", req->path);
	if (req->role == PROTO_ROLE_SOURCE)
		return srcfile_open(file, cfg->rootfd, req->path, cfg->beneath, req->path, e);
	if (to_stdout && !cfg->allow_stdout)
		return pc_err_set(e, -PC_E_PROTO, "this server cannot write to standard output");
	if (req->nsources == 0)
		return pc_err_set(e, -PC_E_PROTO, "request names no sources");
	return sink_target_open(target, cfg->rootfd, req->path, cfg->beneath, req->nsources,
				to_stdout, req->path, e);
}

static void server_tell(struct ctl *c, struct pc_err *e, int code)
{
	char msg[PROTO_MAX_MSG + 1];

	pc_err_get(e, msg, sizeof(msg));
	(void)ctl_send_error(c, code, msg);
}

int server_session(struct ctl *c, const struct server_cfg *cfg, struct pc_err *e)
{
	uint8_t k[PROTO_KEY_LEN];
	struct proto_request req;
	struct src_file file = { .fd = -1 };
	struct sink_target target = { .dirfd = -1 };
	int fds[PROTO_MAX_STREAMS], lfd = -1, ret;

	for (unsigned i = 0; i < PROTO_MAX_STREAMS; i++)
		fds[i] = -1;
	ret = session_server_handshake(c, cfg->transport, cfg->key, &req, k, e);
	if (ret < 0)
		goto out;
	ret = server_prepare(cfg, &req, &file, &target, e);
	if (ret == 0) {
		lfd = net_listen(cfg->listen_host, 0, req.window, e);
		ret = lfd < 0 ? lfd : 0;
	}
	if (ret < 0) {
		server_tell(c, e, ret);
		goto out;
	}
	struct proto_msg m = { .type = PROTO_READY };
	m.u.ready.data_port = net_local_port(lfd);
	ret = ctl_send(c, &m);
	if (ret < 0) {
		pc_err_set(e, ret, "lost control connection to %s", ctl_peer(c));
		goto out;
	}
	ret = session_accept_data(lfd, k, req.streams, req.timeout_s, ctl_peer(c), fds, e);
	close(lfd);
	lfd = -1;
	if (ret < 0) {
		server_tell(c, e, ret);
		goto out;
	}
	session_check_window(fds[0], req.window);
	struct session_run run = {
		.role = req.role, .req = &req, .ctl = c, .fds = fds, .sigfd = cfg->sigfd,
		.report = false, .peer = ctl_peer(c), .files = &file,
		.nfiles = 1, .target = &target,
	};
	ret = session_transfer(&run, e);
out:
	session_close_fds(fds, PROTO_MAX_STREAMS);
	if (lfd >= 0)
		close(lfd);
	srcfile_close(&file);
	sink_target_close(&target);
	return ret;
}

int pcopy_server(const struct pcopy_opts *o, struct pcopy_result *r)
{
	int rfd = o->control_fd >= 0 ? o->control_fd : STDIN_FILENO;
	int wfd = o->control_fd >= 0 ? o->control_fd : STDOUT_FILENO;
	struct server_cfg cfg = {
		.transport = SESSION_PIPE, .rootfd = AT_FDCWD, .beneath = false,
		.listen_host = "127.0.0.1", .allow_stdout = o->control_fd >= 0 &&
							   o->control_fd != STDOUT_FILENO,
		.sigfd = api_sigfd(),
	};
	struct ctl *c = ctl_new(rfd, wfd, "client", false);
	struct pc_err e;
	int ret;

	memset(r, 0, sizeof(*r));
	pc_err_init(&e);
	if (c == NULL)
		return api_result(r, &e, pc_err_set(&e, -ENOMEM, "out of memory"));
	ret = server_session(c, &cfg, &e);
	ctl_free(c);
	return api_result(r, &e, ret);
}
