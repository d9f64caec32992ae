/* SPDX-License-Identifier: Apache-2.0 */
/* server: one session on the far end. */
#include "roles/server.h"

#include <pcopy/pcopy.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "wire/acceptor.h"
#include "wire/attach.h"
#include "roles/api.h"
#include "codec/codec.h"
#include "sys/crypto.h"
#include "sys/log.h"
#include "sys/net.h"
#include "sys/platform.h"
#include "transport/chan.h"
#include "wire/pathsafe.h"
#include "roles/datapath.h"
#include "roles/probe.h"
#include "roles/sshdata.h"
#include "roles/sshroute.h"
#include "pipeline/sink.h"
#include "pipeline/srcfile.h"
#include "pipeline/srclist.h"

/* A probe's directory (its disk test writes an unnamed file there): it
 * must stay beneath the root, be a directory, and be writable by us. */
static int server_probe_dir(const struct server_cfg *cfg, const char *path, int *fd,
			    struct pc_err *e)
{
	*fd = pathsafe_open(cfg->rootfd, path, O_RDONLY | O_DIRECTORY, 0, cfg->beneath);
	if (*fd == -EXDEV || *fd == -ELOOP)
		return pc_err_set(e, -PC_E_USAGE, "path '%s' is not allowed: it must stay inside "
				  "the served directory", path);
	if (*fd < 0)
		return pc_err_set(e, *fd, "cannot probe '%s': %s", path, strerror(-*fd));
	if (faccessat(*fd, ".", W_OK, AT_EACCESS) != 0)
		return pc_err_set(e, -errno, "cannot probe '%s': no right to write there (%s)",
				  path, strerror(errno));
	return 0;
}

/* Opens what the request names: the sources (srclist: each one that
 * cannot be opened is reported with SKIP in its turn, and the others are
 * copied; a FIFO's wait for its writer ends on a stop signal or when the
 * client gives up), or the destination. Returns 0 or a negative code (e
 * set). */
static int server_prepare(const struct server_cfg *cfg, struct ctl *c,
			  const struct proto_request *req, struct srclist *list,
			  struct sink_target *target, int *probe_fd, struct pc_err *e)
{
	bool to_stdout = req->flags & PROTO_REQ_DEST_STDOUT;

	/* Refuse now, before any data connection, what would only fail later. */
	if (req->codec[0] != '\0') {
		struct codec_choice choice[CODEC_MAX_CHOICES];
		unsigned n;
		bool is_auto;
		int ret = codec_parse(req->codec, choice, &n, &is_auto, e);
		if (ret < 0)
			return ret;
	}
	if (!(req->flags & PROTO_REQ_ENCRYPT) && cfg->transport != SESSION_PIPE &&
	    !cfg->allow_unencrypted)
		return pc_err_set(e, -PC_E_AUTH, "this daemon sends and receives data only in TLS; "
				  "it was started without --allow-unencrypted, so --no-encrypt "
				  "cannot be used with it");
	if ((req->flags & PROTO_REQ_DATA_KEY) && cfg->transport != SESSION_PIPE)
		return pc_err_set(e, -PC_E_PROTO, "a data key may only travel over a private "
				  "channel (ssh), not to a daemon");
	if ((req->flags & PROTO_REQ_CONNECT_SSH) && cfg->transport != SESSION_PIPE)
		return pc_err_set(e, -PC_E_PROTO, "a daemon does not run ssh (CONNECT_SSH)");
	for (unsigned i = 0; i < req->npaths; i++) {
		const char *path = proto_request_path(req, i);
		if (cfg->beneath && pathsafe_check_rel(path) < 0)
			return pc_err_set(e, -PC_E_USAGE, "path '%s' is not allowed: it must stay "
					  "inside the served directory", path);
	}
	if (req->role == PROTO_ROLE_PROBE)
		return server_probe_dir(cfg, proto_request_path(req, 0), probe_fd, e);
	if (req->role == PROTO_ROLE_SOURCE) {
		const char *paths[PROTO_MAX_PATHS];
		for (unsigned i = 0; i < req->npaths; i++)
			paths[i] = proto_request_path(req, i);
		return srclist_build(list, cfg->rootfd, cfg->beneath, paths, req->npaths,
				     req->flags & PROTO_REQ_RECURSIVE, req->flags & PROTO_REQ_DEREF,
				     false, c, e);
	}
	if (to_stdout && !cfg->allow_stdout)
		return pc_err_set(e, -PC_E_PROTO, "this server cannot write to standard output");
	if (req->nsources == 0 || req->npaths != 1)
		return pc_err_set(e, -PC_E_PROTO, "a sink request names one destination and at "
				  "least one source");
	return sink_target_open(target, cfg->rootfd, proto_request_path(req, 0), cfg->beneath,
				req->nsources, to_stdout, proto_request_path(req, 0), e);
}

static void server_tell(struct ctl *c, struct pc_err *e, int code)
{
	char msg[PROTO_MAX_MSG + 1];

	pc_err_get(e, msg, sizeof(msg));
	(void)ctl_send_error(c, code, msg);
}

/* Whether the client's data connections come through the daemon's own
 * port (version 5): a daemon session in TLS that accepts them. */
static bool server_routed(const struct server_cfg *cfg, const struct proto_request *req)
{
	return cfg->route_fd >= 0 && cfg->transport == SESSION_DAEMON_TLS &&
	       (req->flags & PROTO_REQ_ENCRYPT) && !(req->flags & PROTO_REQ_CONNECT);
}

/* The data listeners of one session, and the attach socket's path. */
struct server_listeners {
	int lfd;                       /* TCP; -1: none */
	int afd;                       /* attach socket (data through ssh); -1: none */
	char apath[108];               /* its path, removed with it */
};

static void server_unlisten(struct server_listeners *l)
{
	if (l->lfd >= 0)
		close(l->lfd);
	attach_close(l->afd, l->apath);
	l->lfd = l->afd = -1;
	l->apath[0] = '\0';
}

/* A client through ssh may bring its data streams through ssh too
 * (SSH_DATA): each one hands its pipes over on our attach socket. Not a
 * daemon's business (no ssh there), and not when we connect. */
static int server_attach(const struct server_cfg *cfg, const struct proto_request *req,
			 struct server_listeners *l, struct pc_err *e)
{
	if (!(req->flags & PROTO_REQ_SSH_DATA) || cfg->transport != SESSION_PIPE ||
	    (req->flags & PROTO_REQ_CONNECT))
		return 0;
	l->afd = attach_listen(req->attach_id, l->apath, sizeof(l->apath), e);
	return l->afd < 0 ? l->afd : 0;
}

/* Unless the client listens (PROTO_REQ_CONNECT) or its connections come
 * through the daemon's port (READY's port is then 0), opens the data
 * listener (l->lfd), and the attach socket if asked; then sends READY.
 * Returns 0 or a negative code; the client has been told. */
static int server_listen(struct ctl *c, const struct server_cfg *cfg,
			 const struct proto_request *req, struct server_listeners *l,
			 struct pc_err *e)
{
	struct proto_msg m = { .type = PROTO_READY };
	int ret = server_attach(cfg, req, l, e);
	int *lfd = &l->lfd;

	if (ret < 0) {
		server_tell(c, e, ret);
		return ret;
	}
	snprintf(m.u.ready.host, sizeof(m.u.ready.host), "%s", cfg->self_host ? cfg->self_host : "");
	/* Only ssh streams (SSH_ONLY): nothing listens on the network. */
	bool ssh_only = (req->flags & PROTO_REQ_SSH_ONLY) && l->afd >= 0;
	if (!(req->flags & PROTO_REQ_CONNECT) && !server_routed(cfg, req) && !ssh_only) {
		/* Before authentication: no privileged port for a stranger. */
		if (req->port_lo != 0 && req->port_lo < PROTO_MIN_DATA_PORT) {
			ret = pc_err_set(e, -PC_E_USAGE, "data ports below %u are not allowed "
					 "(-Z %u-%u)", PROTO_MIN_DATA_PORT, (unsigned)req->port_lo,
					 (unsigned)req->port_hi);
			server_tell(c, e, ret);
			return ret;
		}
		*lfd = net_listen(cfg->listen_host, req->port_lo, req->port_hi, req->family,
				  req->window, e);
		if (*lfd == -EADDRINUSE) { /* the client may listen instead */
			char msg[sizeof(e->msg)];
			pc_err_get(e, msg, sizeof(msg));
			pc_err_replace(e, *lfd, "%s, or -z", msg);
		}
		if (*lfd < 0) {
			server_tell(c, e, *lfd);
			return *lfd;
		}
		m.u.ready.data_port = net_local_port(*lfd);
	}
	ret = ctl_send(c, &m);
	if (ret < 0)
		return pc_err_set(e, ret, "lost control connection to %s", ctl_peer(c));
	return 0;
}

/* A connecting server of a third-party copy that may go through ssh
 * (CONNECT_SSH): with our own ssh (PCOPY_RSH here, else ssh) to
 * req->connect_ssh, only so (connect_port 0), or raced against direct
 * connections to host (datapath). *sd receives the ssh streams that
 * carry the data, if they do. */
static int server_connect_ssh(const struct proto_request *req, const char *host,
			      const uint8_t k[PROTO_KEY_LEN], struct chan **chans,
			      struct sshdata **sd, struct pc_err *e)
{
	const char *rsh = getenv("PCOPY_RSH");
	struct sshroute route;
	int ret;

	sshroute_probe(rsh, req->connect_ssh, &route);
	const struct sshdata_cfg scfg = {
		.rsh = rsh, .target = req->connect_ssh,
		.remote_pcopy = req->connect_pcopy[0] != '\0' ? req->connect_pcopy : NULL,
		.attach_id = req->attach_id, .streams = req->streams, .peer = req->connect_ssh,
		.route = &route, .window = req->window, .family = req->family,
	};

	if (req->connect_port != 0 && host != NULL && host[0] != '\0') {
		const struct datapath_cfg dc = { .host = host, .port = req->connect_port,
						 .req = req, .k = k, .ssh = &scfg };
		return datapath_open(&dc, chans, sd, e);
	}
	ret = sshdata_start(&scfg, sd, e);
	if (ret == 0)
		ret = sshdata_open(*sd, req, k, chans, e);
	if (ret < 0) {
		sshdata_end(*sd, true);
		*sd = NULL;
	}
	return ret;
}

/* Opens the data connections: accepts them on lfd, or (lfd < 0,
 * PROTO_REQ_CONNECT) connects to the client. A server that connects waits
 * for each listener's proof before it sends a byte of data: the address
 * came from the client, and a server must not be made to send file data to
 * whatever listens there. Returns 0 or a negative code; the client has
 * been told unless it gave up first. */
static int server_data(struct ctl *c, const struct server_cfg *cfg,
		       const struct proto_request *req, const uint8_t k[PROTO_KEY_LEN],
		       const struct server_listeners *l, struct chan **chans, struct sshdata **sd,
		       struct pc_err *e)
{
	int ret;

	if (l->lfd >= 0 || l->afd >= 0 || server_routed(cfg, req)) {
		/* Watch the client too: if it gives up (its other end failed,
		 * or it cannot reach us), stop waiting at once. */
		if (l->lfd >= 0 || l->afd >= 0) {
			ret = acceptor_run(l->lfd, l->afd, c, req, k, ctl_peer(c), chans, e);
		} else {
			ret = acceptor_run_passed(cfg->route_fd, c, req, k, ctl_peer(c), chans,
						  e);
			/* Done with it: the daemon then forgets our token, and drops
			 * what names it later after its 10 s, as any stranger; what
			 * waits in the socket now goes with it. */
			close(cfg->route_fd);
		}
		if (ret == -PC_E_ABORTED)
			return pc_err_get(e, NULL, 0); /* the client gave up: nothing to tell */
	} else {
		const char *host = req->connect_host[0] ? req->connect_host : cfg->client_host;
		if (req->flags & PROTO_REQ_CONNECT_SSH)
			ret = server_connect_ssh(req, host, k, chans, sd, e);
		else if (host == NULL || host[0] == '\0')
			ret = pc_err_set(e, -PC_E_NET, "cannot tell the client's address to connect to");
		else
			ret = session_connect_data(host, req->connect_port, req, k, NULL, chans,
						   e);
	}
	if (ret < 0)
		server_tell(c, e, ret);
	return ret;
}

int server_session(struct ctl *c, const struct server_cfg *cfg, struct pc_err *e)
{
	struct srclist list = { 0 };
	struct source_input input = { .dirfd = cfg->rootfd, .beneath = cfg->beneath };
	uint8_t k[PROTO_KEY_LEN];
	struct proto_request *req = calloc(1, sizeof(*req));
	struct sink_target target = { .dirfd = -1 };
	struct session_hs hs;
	struct chan *chans[PROTO_MAX_STREAMS] = { NULL }; /* owned */
	struct server_listeners l = { .lfd = -1, .afd = -1 };
	struct sshdata *sd = NULL;         /* our data streams through ssh, if any */
	int probe_fd = -1;                 /* a probe's directory */
	int ret;

	if (req == NULL)
		return pc_err_set(e, -ENOMEM, "out of memory");
	/* Daemon: READY goes out with our HELLO and AUTH, a round trip before
	 * the client's proof can come, so it cannot wait for our look at the
	 * paths either: a failure there comes as ERROR after it. On a pipe
	 * READY is in our first flight anyway: the paths come first, and a
	 * bad one is refused before any data connection exists. */
	bool early = cfg->transport == SESSION_DAEMON;
	/* In TLS the handshake proved the client before its REQUEST came:
	 * nothing is early, and no data listener opens before that proof. */
	ret = session_server_open(c, cfg->transport, cfg->key, req, &hs, e);
	if (ret < 0)
		goto out;
	if (early)
		ret = server_listen(c, cfg, req, &l, e);
	if (ret == 0)
		ret = session_server_auth(c, &hs, k, e);
	else
		crypto_wipe(hs.key, sizeof(hs.key));
	if (ret < 0)
		goto out;
	ctl_set_deadline(c, 0); /* a daemon's limit for strangers; the transfer has its own */
	if (req->flags & PROTO_REQ_DATA_KEY)
		memcpy(k, req->data_key, sizeof(k));
	ret = server_prepare(cfg, c, req, &list, &target, &probe_fd, e);
	if (ret < 0) {
		server_tell(c, e, ret);
		goto out;
	}
	if (!early) {
		ret = server_listen(c, cfg, req, &l, e);
		if (ret < 0)
			goto out;
	}
	ret = server_data(c, cfg, req, k, &l, chans, &sd, e);
	server_unlisten(&l);
	if (ret < 0)
		goto out;
	session_check_window(chan_wfd(chans[0]), req->window);
	if (req->role == PROTO_ROLE_PROBE) {
		ret = probe_serve(c, chans, req->streams, probe_fd, e);
		goto out;
	}
	struct session_run run = {
		.role = req->role, .req = req, .ctl = c, .chans = chans,
		.sigfd = cfg->sigfd, .report = false, .peer = ctl_peer(c), .input = &input,
		.target = &target, .strip_setid = cfg->transport != SESSION_PIPE,
	};
	input.paths = list.paths;
	input.npaths = list.n;
	ret = session_transfer(&run, e);
	if (ret == -PC_E_PARTIAL) /* each was reported to the client; this is for our log */
		pc_err_set(e, ret, "%u entries were not copied", run.failed);
out:
	server_unlisten(&l);
	session_close_chans(chans, PROTO_MAX_STREAMS);
	sshdata_end(sd, ret < 0);
	srclist_free(&list);
	sink_target_close(&target);
	if (probe_fd >= 0)
		close(probe_fd);
	crypto_wipe(k, sizeof(k));
	free(req);
	return ret;
}

/* Under ssh, SSH_CONNECTION is "client_ip client_port server_ip server_port". */
static void server_ssh_addrs(char *client, char *self, size_t cap)
{
	const char *sc = getenv("SSH_CONNECTION");
	char a[NET_MAX_ADDR], b[NET_MAX_ADDR];

	client[0] = self[0] = '\0';
	if (sc != NULL && sscanf(sc, "%63s %*s %63s", a, b) == 2) {
		snprintf(client, cap, "%s", a);
		snprintf(self, cap, "%s", b);
	}
}

int pcopy_server(const struct pcopy_opts *o, struct pcopy_result *r)
{
	int rfd = o->control_fd >= 0 ? o->control_fd : STDIN_FILENO;
	int wfd = o->control_fd >= 0 ? o->control_fd : STDOUT_FILENO;
	char client[NET_MAX_ADDR], self[NET_MAX_ADDR];
	struct server_cfg cfg = {
		.transport = SESSION_PIPE, .rootfd = AT_FDCWD, .beneath = false,
		.listen_host = o->bind, .allow_stdout = o->control_fd >= 0 &&
							o->control_fd != STDOUT_FILENO,
		.sigfd = api_sigfd(), .self_host = self, .client_host = client, .route_fd = -1,
	};
	struct chan *ch = chan_plain_new(rfd, wfd);
	int err = ch == NULL ? errno : ENOMEM; /* if c is NULL */
	struct ctl *c = ch != NULL ? ctl_new(ch, "client", false) : NULL; /* owns ch */
	struct pc_err e;
	int ret;

	memset(r, 0, sizeof(*r));
	pc_err_init(&e);
	log_set_notices(o->notices);
	/* Under sshd, the control channel is a pair of pipes: wide ones spare
	 * sshd copying what it holds (platform_pipe_widen). A socket
	 * (--control-fd) says -EBADF, and stays as it is. */
	(void)platform_pipe_widen(rfd);
	(void)platform_pipe_widen(wfd);
	/* Started over ssh: the addresses come from ssh. Started by a local
	 * client: --bind says where everything is. */
	server_ssh_addrs(client, self, sizeof(client));
	if (o->bind != NULL) {
		snprintf(client, sizeof(client), "%s", o->bind);
		snprintf(self, sizeof(self), "%s", o->bind);
	}
	if (c == NULL) {
		chan_free(ch);
		if (err == ENOMEM)
			return api_result(r, &e, pc_err_set(&e, -ENOMEM, "out of memory"));
		return api_result(r, &e, pc_err_set(&e, -err, "control channel to the client: %s",
						    strerror(err)));
	}
	ctl_set_intr(c, cfg.sigfd);
	ret = server_session(c, &cfg, &e);
	ctl_free(c);
	return api_result(r, &e, ret);
}
