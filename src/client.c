/* client: pcopy_copy, the command the user ran. It works out what the
 * arguments name, opens the sources (push) or the destination (pull),
 * starts or reaches the other end, and runs its own side of the transfer. */
#include <pcopy/pcopy.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "api.h"
#include "codec.h"
#include "ctl.h"
#include "keyfile.h"
#include "loc.h"
#include "log.h"
#include "net.h"
#include "platform.h"
#include "session.h"
#include "spawn.h"

enum client_mode { CLIENT_LOCAL, CLIENT_PUSH, CLIENT_PULL };

struct client {
	const struct pcopy_opts *o;
	struct pc_err *e;
	enum client_mode mode;
	struct loc *src;           /* [nsrc] */
	int nsrc;
	struct loc dst;
	const struct loc *remote;  /* the daemon location (push: dst, pull: src[0]) */
	struct src_file *files;    /* push/local: the sources that opened */
	unsigned nfiles;
	unsigned skipped;          /* sources that could not be opened */
	struct sink_target target; /* pull: where the file goes */
	struct ctl *ctl;
	pid_t child;
	char peer[LOC_MAX_HOST + 16];
	char data_host[NET_MAX_ADDR];
	int fds[PROTO_MAX_STREAMS];
};

/* Checks the numeric options (main checks them too, but the library is
 * also driven by tests and tools). */
static int client_check_opts(const struct pcopy_opts *o, struct pc_err *e)
{
	if (o->streams < 1 || o->streams > PROTO_MAX_STREAMS)
		return pc_err_set(e, -PC_E_USAGE, "-s/--streams must be 1 to %u, not %u",
				  PROTO_MAX_STREAMS, o->streams);
	if (o->block_size < PROTO_MIN_BLOCK || o->block_size > PROTO_MAX_BLOCK)
		return pc_err_set(e, -PC_E_USAGE, "-B/--block-size must be 4k to 64M");
	if (o->window > (1u << 30))
		return pc_err_set(e, -PC_E_USAGE, "-w/--window must be at most 1G");
	if (o->codec != NULL) {
		struct codec_choice c[CODEC_MAX_CHOICES];
		unsigned n;
		bool is_auto;
		if (strlen(o->codec) > PROTO_MAX_CODEC_SPEC)
			return pc_err_set(e, -PC_E_USAGE, "-c: the list is too long");
		return codec_parse(o->codec, c, &n, &is_auto, e);
	}
	return 0;
}

static int client_classify(struct client *c, int nsrc, char *const srcs[], const char *dst)
{
	int ndaemon = 0, nstdin = 0, ret;

	if (nsrc < 1)
		return pc_err_set(c->e, -PC_E_USAGE, "missing destination operand after '%s'",
				  dst);
	c->src = calloc((size_t)nsrc, sizeof(*c->src));
	if (c->src == NULL)
		return pc_err_set(c->e, -ENOMEM, "out of memory");
	c->nsrc = nsrc;
	for (int i = 0; i < nsrc; i++) {
		ret = loc_parse(srcs[i], &c->src[i], c->e);
		if (ret < 0)
			return ret;
		ndaemon += c->src[i].kind == LOC_DAEMON;
		nstdin += c->src[i].kind == LOC_STDIO;
	}
	ret = loc_parse(dst, &c->dst, c->e);
	if (ret < 0)
		return ret;
	if (nstdin > 0 && nsrc > 1)
		return pc_err_set(c->e, -PC_E_USAGE, "'-' (standard input) must be the only source");
	if (ndaemon > 0 && c->dst.kind == LOC_DAEMON)
		return pc_err_set(c->e, -PC_E_USAGE,
				  "copying from one daemon to another is not supported");
	if (ndaemon > 0 && nsrc > 1)
		return pc_err_set(c->e, -PC_E_USAGE,
				  "a pull from a daemon takes exactly one pcopy:// source");
	c->mode = ndaemon ? CLIENT_PULL : c->dst.kind == LOC_DAEMON ? CLIENT_PUSH : CLIENT_LOCAL;
	c->remote = c->mode == CLIENT_PULL ? &c->src[0] : c->mode == CLIENT_PUSH ? &c->dst : NULL;
	if (c->dst.kind == LOC_STDIO && c->mode == CLIENT_LOCAL && nsrc > 1)
		return pc_err_set(c->e, -PC_E_USAGE, "only one source can be written to '-'");
	return 0;
}

/* Opens every source; one that cannot be opened is reported and skipped,
 * like cp does. */
static int client_open_sources(struct client *c, char *const srcs[])
{
	c->files = calloc((size_t)c->nsrc, sizeof(*c->files));
	if (c->files == NULL)
		return pc_err_set(c->e, -ENOMEM, "out of memory");
	for (int i = 0; i < c->nsrc; i++) {
		struct src_file *f = &c->files[c->nfiles];
		struct pc_err fe;
		int ret;

		pc_err_init(&fe);
		ret = c->src[i].kind == LOC_STDIO
			      ? srcfile_open_stdin(f, &fe)
			      : srcfile_open(f, AT_FDCWD, srcs[i], false, srcs[i], &fe);
		if (ret < 0) {
			char msg[sizeof(fe.msg)];
			pc_err_get(&fe, msg, sizeof(msg));
			log_error("%s", msg);
			c->skipped++;
		} else {
			c->nfiles++;
		}
		pc_err_destroy(&fe);
	}
	return 0;
}

static int client_connect(struct client *c)
{
	const struct loc *r = c->remote;
	int fd, ret;

	if (c->mode == CLIENT_LOCAL) {
		char exe[4096];
		/* Start the resolved path, so the child shows up as "pcopy"
		 * in ps and top rather than "exe". */
		ssize_t n = strcmp(c->o->self_exe, "/proc/self/exe") == 0
				    ? readlink(c->o->self_exe, exe, sizeof(exe) - 1) : -1;
		if (n > 0)
			exe[n] = '\0';
		ret = spawn_local_server(n > 0 ? exe : c->o->self_exe, api_verbosity(), &c->child,
					 &fd, c->e);
		if (ret < 0)
			return ret;
		snprintf(c->peer, sizeof(c->peer), "local sink");
		snprintf(c->data_host, sizeof(c->data_host), "127.0.0.1");
		c->ctl = ctl_new(fd, fd, c->peer, true);
	} else {
		snprintf(c->peer, sizeof(c->peer), strchr(r->host, ':') ? "[%s]:%u" : "%s:%u",
			 r->host, (unsigned)r->port);
		fd = net_connect(r->host, r->port, 0, SESSION_ACCEPT_TIMEOUT_S, c->e);
		if (fd < 0)
			return fd;
		(void)net_set_nodelay(fd);
		ret = net_peer_host(fd, c->data_host, sizeof(c->data_host));
		if (ret < 0) {
			close(fd);
			return pc_err_set(c->e, ret, "%s: %s", c->peer, pc_strerror(ret));
		}
		c->ctl = ctl_new(fd, fd, c->peer, false);
	}
	if (c->ctl == NULL) {
		close(fd);
		return pc_err_set(c->e, -ENOMEM, "out of memory");
	}
	return 0;
}

static void client_request(const struct client *c, struct proto_request *req)
{
	const struct pcopy_opts *o = c->o;

	memset(req, 0, sizeof(*req));
	req->role = c->mode == CLIENT_PULL ? PROTO_ROLE_SOURCE : PROTO_ROLE_SINK;
	req->streams = (uint16_t)o->streams;
	req->block_size = (uint32_t)o->block_size;
	req->window = (uint32_t)o->window;
	req->timeout_s = o->timeout_s;
	/* As many as the user named, opened or not: cp's rule that several
	 * sources need a directory does not depend on which ones exist. */
	req->nsources = c->mode == CLIENT_PULL ? 1 : (uint32_t)c->nsrc;
	if (c->dst.kind == LOC_STDIO)
		req->flags |= PROTO_REQ_ORDERED;
	if (c->dst.kind == LOC_STDIO && c->mode == CLIENT_LOCAL)
		req->flags |= PROTO_REQ_DEST_STDOUT;
	snprintf(req->path, sizeof(req->path), "%s", c->remote ? c->remote->path : c->dst.path);
	snprintf(req->codec, sizeof(req->codec), "%s", o->codec ? o->codec : "");
}

static void client_side_stats(const struct proto_stats *st, struct pcopy_side_stats *out)
{
	out->bytes = st->bytes;
	out->wire_bytes = st->wire_bytes;
	out->files = st->files;
	out->cpu_s = (double)(st->cpu_user_us + st->cpu_sys_us) / 1e6;
	out->codec_cpu_s = (double)st->codec_cpu_us / 1e6;
	out->maxrss_kib = st->maxrss_kb;
}

static int client_session(struct client *c, struct pcopy_result *r)
{
	uint8_t K[PROTO_KEY_LEN] = { 0 }, k[PROTO_KEY_LEN];
	enum session_transport t = c->mode == CLIENT_LOCAL ? SESSION_PIPE : SESSION_DAEMON;
	struct proto_request req;
	uint16_t port;
	int ret;

	if (t == SESSION_DAEMON) {
		if (c->o->key_file == NULL)
			return pc_err_set(c->e, -PC_E_USAGE,
					  "%s: a daemon needs --key-file KEY (or PCOPY_KEY_FILE)",
					  c->peer[0] ? c->peer : c->remote->host);
		ret = keyfile_load(c->o->key_file, K, c->e);
		if (ret < 0)
			return ret;
	}
	ret = client_connect(c);
	client_request(c, &req);
	if (ret == 0)
		ret = session_client_handshake(c->ctl, t, K, &req, &port, k, c->e);
	if (ret == 0)
		ret = session_connect_data(c->data_host, port, k, req.streams, req.window,
					   req.timeout_s, c->fds, c->e);
	if (ret < 0)
		return ret;
	struct session_run run = {
		.role = c->mode == CLIENT_PULL ? PROTO_ROLE_SINK : PROTO_ROLE_SOURCE,
		.req = &req, .ctl = c->ctl, .fds = c->fds, .sigfd = api_sigfd(), .report = true,
		.progress_s = c->o->progress_s, .peer = c->peer,
		.peer_local = c->mode == CLIENT_LOCAL, .files = c->files, .nfiles = c->nfiles,
		.target = &c->target,
	};
	ret = session_transfer(&run, c->e);
	session_close_fds(c->fds, req.streams);
	const struct proto_stats *src = run.role == PROTO_ROLE_SOURCE ? &run.self : &run.other;
	const struct proto_stats *snk = run.role == PROTO_ROLE_SOURCE ? &run.other : &run.self;
	client_side_stats(src, &r->source);
	client_side_stats(snk, &r->sink);
	r->files_failed = run.failed;
	if (run.role == PROTO_ROLE_SOURCE) {
		r->nstream_stats = req.streams;
		for (unsigned i = 0; i < req.streams; i++) {
			codec_format(&run.streams[i].choice, r->stream[i].codec,
				     sizeof(r->stream[i].codec));
			r->stream[i].raw = run.streams[i].raw;
			r->stream[i].wire = run.streams[i].wire;
		}
	}
	return ret;
}

static void client_free(struct client *c)
{
	for (unsigned i = 0; c->files != NULL && i < c->nfiles; i++)
		srcfile_close(&c->files[i]);
	free(c->files);
	free(c->src);
	sink_target_close(&c->target);
	ctl_free(c->ctl);
	c->ctl = NULL;
}

int pcopy_copy(const struct pcopy_opts *o, int nsrc, char *const srcs[], const char *dst,
	       struct pcopy_result *r)
{
	struct client c = { .o = o, .child = -1 };
	uint64_t start = platform_now_ns();
	struct pc_err e;
	int ret;

	memset(r, 0, sizeof(*r));
	pc_err_init(&e);
	c.e = &e;
	c.target.dirfd = -1;
	for (unsigned i = 0; i < PROTO_MAX_STREAMS; i++)
		c.fds[i] = -1;
	ret = client_check_opts(o, &e);
	if (ret == 0)
		ret = client_classify(&c, nsrc, srcs, dst);
	if (ret == 0 && c.mode == CLIENT_PULL)
		ret = sink_target_open(&c.target, AT_FDCWD, c.dst.path, false, 1,
				       c.dst.kind == LOC_STDIO, dst, &e);
	if (ret == 0 && c.mode != CLIENT_PULL)
		ret = client_open_sources(&c, srcs);
	if (ret == 0 && c.mode != CLIENT_PULL && c.nfiles == 0)
		ret = -PC_E_PARTIAL; /* nothing could be opened; each was reported */
	if (ret == 0)
		ret = client_session(&c, r);
	if (ret == 0 && c.skipped > 0)
		ret = -PC_E_PARTIAL;
	client_free(&c); /* closes the control channel: the child sees EOF */
	if (c.child > 0) {
		int st = spawn_wait(c.child);
		if (ret == 0 && st != 0)
			ret = pc_err_set(&e, -PC_E_LAUNCH, "the local sink exited with status %d", st);
	}
	r->streams = o->streams;
	r->wall_s = (double)(platform_now_ns() - start) / 1e9;
	api_result(r, &e, ret);
	/* Each file that failed was reported as it failed; sum them up. */
	if (ret == -PC_E_PARTIAL)
		snprintf(r->msg, sizeof(r->msg), "%u of %d files were not copied",
			 c.skipped + r->files_failed, nsrc);
	return ret;
}
