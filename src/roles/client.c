/* SPDX-License-Identifier: Apache-2.0 */
/* client: pcopy_copy, the command the user ran. It works out what the
 * arguments name, opens the sources (push) or the destination (pull),
 * starts or reaches the other end (a local child, a daemon, or a host
 * through ssh), and runs its own side of the transfer; for a third-party
 * copy it starts both ends and relays their control messages. */
#include <pcopy/pcopy.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <inttypes.h>
#include <time.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "wire/acceptor.h"
#include "roles/api.h"
#include "roles/bottleneck.h"
#include "codec/codec.h"
#include "sys/crypto.h"
#include "wire/auth.h"
#include "transport/tls.h"
#include "wire/ctl.h"
#include "wire/keyfile.h"
#include "roles/loc.h"
#include "sys/log.h"
#include "sys/net.h"
#include "transport/chan.h"
#include "sys/platform.h"
#include "roles/relay.h"
#include "roles/relaydata.h"
#include "roles/session.h"
#include "roles/spawn.h"
#include "roles/datapath.h"
#include "roles/probe.h"
#include "roles/probe_rec.h"
#include "roles/sshdata.h"
#include "roles/sshroute.h"
#include "roles/datamemo.h"
#include "pipeline/srclist.h"

enum client_mode { CLIENT_LOCAL, CLIENT_PUSH, CLIENT_PULL, CLIENT_THIRD };

#define CLIENT_MAX_ARGV 64
#define CLIENT_ERROR_GRACE_MS 2000 /* for the server's ERROR after our data connections failed */
#define CLIENT_SSH_GRACE_MS 5000 /* for ssh to end after a session failed (its link may be dead) */

/* One far end: our own local sink, a daemon, or a host reached with ssh. */
struct endpoint {
	const struct loc *loc;             /* NULL: the local child */
	enum session_transport t;
	struct ctl *ctl;                   /* owned */
	pid_t child;                       /* the local child or ssh; -1 */
	char peer[LOC_MAX_HOST + 16];      /* names it in messages */
	char data_host[LOC_MAX_HOST + 1];  /* where to reach it for data */
	struct proto_request req;          /* what we ask of it */
	uint16_t port;                     /* READY: its data port (0: it connects, or the
	                                      data goes to the daemon's own port) */
	char ready_host[PROTO_MAX_HOST + 1]; /* READY: its own idea of its address */
	uint8_t k[PROTO_KEY_LEN];          /* the data session key */
	uint8_t K[PROTO_KEY_LEN];          /* daemon: the key file's key; wiped after use */
	struct session_dial *dial;         /* daemon in TLS: our data connections on their
	                                      way to its port (session_dial_*); owned */
	int via;                           /* PCOPY_DATA_VIA_*: how its data streams go */
	struct sshdata *sdata;             /* data streams through ssh; owned */
	struct sshroute route;             /* how ssh reaches the host, when via is not direct */
	struct sshroute_run route_run;     /* the ssh -G that reads it (client_request_via) */
	struct datapath_probe probe;       /* auto: the direct path, looked at during the login */
	struct session_hs hs;              /* the handshake between its halves */
	bool hello_sent;                   /* its first half is done (client_hello) */
	char memo_key[LOC_MAX_USER + LOC_MAX_HOST + SSHROUTE_MAX_HOST + 16]; /* datamemo's */
};

struct client {
	const struct pcopy_opts *o;
	struct pc_err *e;
	enum client_mode mode;
	struct loc *src;                   /* [nsrc] */
	int nsrc;
	struct loc dst;
	struct srclist list;               /* push/local: the sources */
	struct source_input input;         /* push/local: what our source sends */
	struct sink_target target;         /* pull: where the files go */
	struct endpoint ep[2];             /* [0] the server, or the third-party source;
	                                      [1] the third-party sink */
	struct chan *chans[PROTO_MAX_STREAMS]; /* two-party: the data channels; owned */
	uint8_t proofs[PROTO_MAX_STREAMS][PROTO_MAC_LEN]; /* owed by the listeners we push to */
	char security[96];                 /* how the data travelled, for the summary */
	int via;                           /* PCOPY_VIA_*: the data's path, for the summary */
	char via_reason[256];              /* why it went through ssh in an automatic
	                                      choice; "" when it did not */
	struct session_run run;            /* results of our side */
	struct relay_result relay;         /* third party results */
};

static int client_request_via(struct client *c, struct endpoint *ep);
static int client_ssh_streams(struct client *c, struct endpoint *ep, struct pc_err *e);
static void client_route_settle(struct client *c, struct endpoint *ep);
static void client_early_streams(struct client *c, struct endpoint *ep);
static int client_hello(struct client *c, struct endpoint *ep);

/* ---- Arguments --------------------------------------------------------- */

_Static_assert(PROTO_MIN_BWLIMIT == PCOPY_MIN_BWLIMIT && PROTO_MAX_BWLIMIT == PCOPY_MAX_BWLIMIT,
	       "--bwlimit's bounds are the wire's");
_Static_assert((int)PROTO_LIST_NEW == (int)PCOPY_LISTED_NEW &&
	       (int)PROTO_LIST_CHANGED == (int)PCOPY_LISTED_CHANGED &&
	       (int)PROTO_LIST_GONE == (int)PCOPY_LISTED_GONE, "pcopy.h's listing kinds are LIST's");
_Static_assert(PROTO_MAX_FILTERS == PCOPY_MAX_FILTERS && PROTO_MAX_FILTER == PCOPY_MAX_FILTER &&
	       PROTO_REQ_FILTER_BYTES == PCOPY_MAX_FILTER_BYTES,
	       "pcopy.h's filter bounds are the wire's");

/* Checks the options (main checks them too, but the library is also
 * driven by tests and tools). */
static int client_check_opts(const struct pcopy_opts *o, struct pc_err *e)
{
	if (o->streams < 1 || o->streams > PROTO_MAX_STREAMS)
		return pc_err_set(e, -PC_E_USAGE, "-s/--streams must be 1 to %u, not %u",
				  PROTO_MAX_STREAMS, o->streams);
	if (o->block_size != 0 && (o->block_size < PROTO_MIN_BLOCK || o->block_size > PROTO_MAX_BLOCK))
		return pc_err_set(e, -PC_E_USAGE, "-B/--block-size must be 4k to 64M, not %" PRIu64,
				  (uint64_t)o->block_size);
	if (o->window > (1u << 30))
		return pc_err_set(e, -PC_E_USAGE, "-w/--window must be at most 1G");
	if (o->bwlimit != 0 && (o->bwlimit < PROTO_MIN_BWLIMIT || o->bwlimit > PROTO_MAX_BWLIMIT))
		return pc_err_set(e, -PC_E_USAGE, "--bwlimit must be 1k to 1T bytes per second");
	if (o->port_hi < o->port_lo || (o->port_lo == 0 && o->port_hi != 0))
		return pc_err_set(e, -PC_E_USAGE, "-Z: the range must be LO-HI with 1024 <= LO <= HI");
	if (o->port_lo != 0 && o->port_lo < PROTO_MIN_DATA_PORT)
		return pc_err_set(e, -PC_E_USAGE, "-Z: data ports below %u are not allowed",
				  PROTO_MIN_DATA_PORT);
	if (o->root != NULL)
		return pc_err_set(e, -PC_E_USAGE, "--root is for a daemon (--serve); a copy names "
				  "its paths itself");
	if (o->allow_unencrypted)
		return pc_err_set(e, -PC_E_USAGE, "--allow-unencrypted is for a daemon (--serve); "
				  "a client sends in clear with --no-encrypt");
	if (o->max_sessions != 0 || o->max_startups != 0 || o->max_per_source != 0)
		return pc_err_set(e, -PC_E_USAGE, "%s is for a daemon (--serve): it limits the "
				  "connections a daemon takes",
				  o->max_sessions != 0 ? "--max-sessions"
				  : o->max_startups != 0 ? "--max-startups" : "--max-per-source");
	if (o->encrypt == PCOPY_ENCRYPT_OFF && o->cipher != NULL)
		return pc_err_set(e, -PC_E_USAGE, "--cipher and --no-encrypt do not go together");
	if (o->delete_missing && (!o->recursive || !(o->update || o->checksum || o->resume)))
		return pc_err_set(e, -PC_E_USAGE, "--delete needs -r and -u (or --checksum, or -a): it "
				  "keeps a copy of a tree in step, removing what the source no "
				  "longer has");
	if (o->inplace && (!o->checksum || o->resume))
		return pc_err_set(e, -PC_E_USAGE, o->resume
				  ? "--inplace and -a do not go together: -a keeps a partial file "
				    "beside the old one, --inplace writes into the old one"
				  : "--inplace needs --checksum: it writes only the blocks that "
				    "differ into the file already there");
	if (o->relay && o->reverse)
		return pc_err_set(e, -PC_E_USAGE, "-3 and -z do not go together: with -3 this "
				  "host connects to both");
	if (o->reverse && o->data_via == PCOPY_DATA_VIA_SSH)
		return pc_err_set(e, -PC_E_USAGE, "--data-via ssh and -z do not go together: "
				  "through ssh the remote side never connects to us");
	if (o->cipher != NULL) {
		enum tls_cipher tc;
		int ret = tls_cipher_parse(o->cipher, &tc, e);
		if (ret < 0)
			return ret;
	}
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

/* Whether -c spec (NULL: none) compresses any stream: "none", "0" and
 * "zlib:0" do not. */
static bool client_compresses(const char *spec)
{
	struct codec_choice c[CODEC_MAX_CHOICES];
	struct pc_err e;
	unsigned n = 0;
	bool is_auto = false, any = false;

	if (spec == NULL)
		return false;
	pc_err_init(&e);
	if (codec_parse(spec, c, &n, &is_auto, &e) == 0)
		for (unsigned i = 0; i < n; i++)
			any |= c[i].id != CODEC_NONE && c[i].level > 0;
	pc_err_destroy(&e);
	return any || is_auto;
}

static bool client_is_remote(const struct loc *l)
{
	return l->kind == LOC_DAEMON || l->kind == LOC_SSH;
}

static bool client_same_host(const struct loc *a, const struct loc *b)
{
	return a->kind == b->kind && strcmp(a->host, b->host) == 0 && a->port == b->port &&
	       strcmp(a->user, b->user) == 0;
}

static int client_classify(struct client *c, int nsrc, char *const srcs[], const char *dst)
{
	int nremote = 0, nstdin = 0, ret;

	if (nsrc < 1)
		return pc_err_set(c->e, -PC_E_USAGE, "missing destination operand after '%s'", dst);
	c->src = calloc((size_t)nsrc, sizeof(*c->src));
	if (c->src == NULL)
		return pc_err_set(c->e, -ENOMEM, "out of memory");
	c->nsrc = nsrc;
	for (int i = 0; i < nsrc; i++) {
		ret = loc_parse(srcs[i], &c->src[i], c->e);
		if (ret < 0)
			return ret;
		nremote += client_is_remote(&c->src[i]);
		nstdin += c->src[i].kind == LOC_STDIO;
	}
	ret = loc_parse(dst, &c->dst, c->e);
	if (ret < 0)
		return ret;
	if (nstdin > 0 && nsrc > 1)
		return pc_err_set(c->e, -PC_E_USAGE, "'-' (standard input) must be the only source");
	if (nremote > 0 && nremote < nsrc)
		return pc_err_set(c->e, -PC_E_USAGE, "local and remote sources cannot be mixed");
	for (int i = 1; i < nremote; i++)
		if (!client_same_host(&c->src[0], &c->src[i]))
			return pc_err_set(c->e, -PC_E_USAGE, "remote sources must all be on one host "
					  "('%s' and '%s' are not)", srcs[0], srcs[i]);
	if (nremote > 0 && client_is_remote(&c->dst)) {
		if (c->src[0].kind != LOC_SSH || c->dst.kind != LOC_SSH)
			return pc_err_set(c->e, -PC_E_USAGE, "a copy between two remote hosts works "
					  "through ssh (host:path) only, not through daemons");
		c->mode = CLIENT_THIRD;
	} else {
		c->mode = nremote ? CLIENT_PULL : client_is_remote(&c->dst) ? CLIENT_PUSH
									       : CLIENT_LOCAL;
	}
	if (c->dst.kind == LOC_STDIO && c->mode == CLIENT_LOCAL && nsrc > 1)
		return pc_err_set(c->e, -PC_E_USAGE, "only one source can be written to '-'");
	return 0;
}

/* The directory a local copy lands in, opened: dst itself if it is a
 * directory, else the directory that would hold it. -errno if neither
 * opens (the sink then says why). */
static int client_landing_dir(const char *dst)
{
	char parent[PROTO_MAX_PATH + 2];
	int fd = open(dst, O_PATH | O_DIRECTORY | O_CLOEXEC);
	size_t len = strlen(dst);

	if (fd >= 0 || len >= sizeof(parent))
		return fd >= 0 ? fd : -ENAMETOOLONG;
	while (len > 1 && dst[len - 1] == '/')
		len--;
	while (len > 0 && dst[len - 1] != '/')
		len--;
	while (len > 1 && dst[len - 1] == '/')
		len--;
	snprintf(parent, sizeof(parent), "%.*s", (int)len, len == 0 ? "." : dst);
	fd = open(parent, O_PATH | O_DIRECTORY | O_CLOEXEC);
	return fd >= 0 ? fd : -errno;
}

/* cp's refusal: a local copy of a directory into itself (the destination
 * is the directory or lies inside it) would meet, as it walks, what it
 * writes, and copy parts of the copy again. Returns 0 or -PC_E_USAGE with
 * the detail in c->e. */
static int client_not_into_itself(struct client *c, char *const srcs[], const char *dst)
{
	int ret = 0, fd;

	if (c->mode != CLIENT_LOCAL || !c->o->recursive || c->dst.kind == LOC_STDIO)
		return 0;
	fd = client_landing_dir(c->dst.path);
	if (fd < 0)
		return 0;
	for (int i = 0; i < c->nsrc && ret == 0; i++) {
		struct stat st;
		size_t n = strlen(srcs[i]);
		/* As the walk takes it: a link is followed with -L, or when
		 * the name ends in '/'. */
		bool follow = c->o->dereference || (n > 0 && srcs[i][n - 1] == '/');
		if ((follow ? stat(srcs[i], &st) : lstat(srcs[i], &st)) != 0 || !S_ISDIR(st.st_mode))
			continue;
		if (platform_dir_within(fd, st.st_dev, st.st_ino) == 1)
			ret = pc_err_set(c->e, -PC_E_USAGE, "cannot copy directory '%s' into itself, "
					 "'%s'", srcs[i], dst);
	}
	close(fd);
	return ret;
}

/* cp's other refusal: a local copy of a file onto itself (the destination,
 * or its name in the destination directory, is that very file) does
 * nothing a user could want, and says so. Returns 0 or -PC_E_USAGE with
 * the detail in c->e. */
static int client_not_onto_itself(struct client *c, char *const srcs[])
{
	struct stat d, s;

	if (c->mode != CLIENT_LOCAL || c->dst.kind == LOC_STDIO)
		return 0;
	for (int i = 0; i < c->nsrc; i++) {
		const char *base = strrchr(srcs[i], '/'), *target = c->dst.path;
		char name[PATH_MAX];
		if (stat(srcs[i], &s) != 0 || !S_ISREG(s.st_mode))
			continue;
		/* Into a directory, the copy takes the source's name there. */
		if (stat(c->dst.path, &d) == 0 && S_ISDIR(d.st_mode)) {
			size_t dl = strlen(c->dst.path);
			while (dl > 1 && c->dst.path[dl - 1] == '/')
				dl--;
			int n = snprintf(name, sizeof(name), "%.*s/%s", (int)dl, c->dst.path,
					 base != NULL ? base + 1 : srcs[i]);
			if (n < 0 || (size_t)n >= sizeof(name))
				continue;
			target = name;
		}
		if (lstat(target, &d) == 0 && S_ISREG(d.st_mode) && d.st_dev == s.st_dev &&
		    d.st_ino == s.st_ino)
			return pc_err_set(c->e, -PC_E_USAGE, "'%s' and '%s' are the same file",
					  srcs[i], target);
	}
	return 0;
}

/* Prepares the sources of a push or local copy (srclist). One that cannot
 * be opened is reported in its turn by the transfer, like cp does; when
 * none can, each is reported here and the copy stops with -PC_E_PARTIAL.
 * A stop signal while a FIFO waits for its writer ends the whole copy
 * (-PC_E_INTERRUPTED, detail in c->e). */
static int client_open_sources(struct client *c, char *const srcs[])
{
	int ret = srclist_build(&c->list, AT_FDCWD, false, (const char *const *)srcs,
				(unsigned)c->nsrc, c->o->recursive, c->o->dereference, true, NULL,
				c->e);

	if (ret < 0)
		return ret;
	c->input = (struct source_input){ .dirfd = AT_FDCWD, .paths = c->list.paths,
					  .npaths = c->list.n };
	if (c->list.unusable < c->list.n)
		return 0;
	for (unsigned i = 0; i < c->list.n; i++) {
		log_error("%s", c->list.paths[i].msg);
		if (c->o->hooks != NULL && c->o->hooks->failed != NULL)
			c->o->hooks->failed(c->o->hooks->arg, srcs[i], c->list.paths[i].msg,
					    true);
	}
	return -PC_E_PARTIAL;
}

/* ---- Endpoints --------------------------------------------------------- */

/* The command line ssh runs on the remote side, with the binary quoted
 * for the remote shell. */
static void client_remote_cmd(const struct pcopy_opts *o, char *buf, size_t cap)
{
	int v = api_verbosity();
	size_t n = spawn_quote(o->remote_pcopy ? o->remote_pcopy : "pcopy", buf, cap);

	/* Quiet unless asked, but with the notices a user should see. */
	snprintf(buf + n, cap - n, " --server %s", v < 0 ? "-q" : v >= 3 ? "-vv" : v == 2 ? "-v"
											      : "-q --notices");
}

/* How the data of a session with ep travels: TLS wherever it crosses a
 * network (every far end: ssh, a daemon, third party), in clear to our own
 * local child unless --encrypt; --no-encrypt: in clear everywhere. The
 * cipher was checked by client_check_opts. */
static struct auth_data_mode client_data_mode(const struct pcopy_opts *o,
					      const struct endpoint *ep)
{
	struct auth_data_mode m = { .tls = o->encrypt == PCOPY_ENCRYPT_ON ||
					   (o->encrypt == PCOPY_ENCRYPT_DEFAULT && ep->loc != NULL) };

	if (o->cipher != NULL) {
		struct pc_err e;
		pc_err_init(&e);
		if (tls_cipher_parse(o->cipher, &m.cipher, &e) < 0)
			m.cipher = TLS_CIPHER_AUTO;
		pc_err_destroy(&e);
	}
	return m;
}

/* ep->ctl over a plain chan on rfd and wfd (one socket, or the pipes to
 * a child), which it owns from now on; on failure both are closed.
 * Returns 0 or a negative code (c->e set). */
static int client_ctl_new(struct client *c, struct endpoint *ep, int rfd, int wfd, bool local)
{
	struct chan *ch = chan_plain_new(rfd, wfd);
	int err = ch == NULL ? errno : ENOMEM;

	ep->ctl = ch != NULL ? ctl_new(ch, ep->peer, local) : NULL;
	if (ep->ctl != NULL)
		return 0;
	if (ch != NULL) {
		chan_free(ch); /* closes rfd and wfd */
	} else {
		close(rfd);
		if (wfd != rfd)
			close(wfd);
	}
	if (err == ENOMEM)
		return pc_err_set(c->e, -ENOMEM, "out of memory");
	return pc_err_set(c->e, -err, "control channel to %s: %s", ep->peer, strerror(err));
}

static int client_spawn_ssh(struct client *c, struct endpoint *ep)
{
	const char *rsh = c->o->rsh ? c->o->rsh : "ssh";
	char cmd[1024], target[LOC_MAX_USER + LOC_MAX_HOST + 2], remote[PROTO_MAX_PATH + 64];
	char *argv[CLIENT_MAX_ARGV];
	int argc = 0, rfd, wfd, ret;

	snprintf(cmd, sizeof(cmd), "%s", rsh);
	if (spawn_split(cmd, argv, &argc, CLIENT_MAX_ARGV - 4) < 0)
		return pc_err_set(c->e, -PC_E_USAGE, "--rsh '%s' is not a command", rsh);
	loc_ssh_target(ep->loc, target, sizeof(target));
	client_remote_cmd(c->o, remote, sizeof(remote));
	argv[argc++] = target;
	argv[argc++] = remote;
	argv[argc] = NULL;
	ret = spawn_piped(argv, &ep->child, &rfd, &wfd, NULL, c->e);
	if (ret < 0)
		return ret;
	return client_ctl_new(c, ep, rfd, wfd, false);
}

static int client_spawn_local(struct client *c, struct endpoint *ep)
{
	char exe[4096];
	int fd, ret;
	/* Start the resolved path, so the child shows up as "pcopy" in ps
	 * and top rather than "exe". */
	ssize_t n = strcmp(c->o->self_exe, "/proc/self/exe") == 0
			    ? readlink(c->o->self_exe, exe, sizeof(exe) - 1) : -1;

	if (n > 0)
		exe[n] = '\0';
	ret = spawn_local_server(n > 0 ? exe : c->o->self_exe, ep->data_host, api_verbosity(),
				 &ep->child, &fd, c->e);
	if (ret < 0)
		return ret;
	return client_ctl_new(c, ep, fd, fd, true);
}

/* Stops and closes the data connections on their way, if any. */
static void client_dial_stop(struct endpoint *ep)
{
	struct chan *none[PROTO_MAX_STREAMS];
	struct pc_err e;

	if (ep->dial == NULL)
		return;
	pc_err_init(&e);
	(void)session_dial_finish(ep->dial, &ep->req, false, none, &e); /* -PC_E_ABORTED */
	pc_err_destroy(&e);
	ep->dial = NULL;
}

static int client_connect_daemon(struct client *c, struct endpoint *ep)
{
	int fd = net_connect(ep->loc->host, ep->loc->port, c->o->family, 0,
			     SESSION_CONNECT_TIMEOUT_S, c->e);
	int ret;

	if (fd < 0)
		return fd;
	(void)net_set_nodelay(fd);
	ret = net_peer_host(fd, ep->data_host, sizeof(ep->data_host));
	if (ret < 0) {
		close(fd);
		return pc_err_set(c->e, ret, "%s: %s", ep->peer, pc_strerror(ret));
	}
	struct auth_data_mode m = client_data_mode(c->o, ep);
	if (!m.tls)
		return client_ctl_new(c, ep, fd, fd, false);
	/* Our data connections go to the same address and port, unless the
	 * daemon is to connect to us (-z): they connect while the control
	 * channel's handshake runs (docs/PROTOCOL.md 6.2). */
	if (!(ep->req.flags & PROTO_REQ_CONNECT)) {
		ret = session_dial_start(ep->data_host, ep->loc->port, &ep->req, &ep->dial, c->e);
		if (ret < 0) {
			close(fd);
			return ret;
		}
	}
	/* The control channel in TLS keyed by K: the handshake proves both
	 * ends, and hides names, sizes and errors. */
	struct chan *ch;
	struct pc_err e2;
	char why[sizeof(e2.msg)];
	uint64_t deadline = platform_now_ns() + SESSION_AUTH_TIMEOUT_S * 1000000000ull;
	pc_err_init(&e2);
	ret = auth_ctl_tls_connect(fd, ep->K, m.cipher, deadline, &ch, &e2);
	pc_err_get(&e2, why, sizeof(why));
	pc_err_destroy(&e2);
	if (ret < 0) {
		client_dial_stop(ep);
		close(fd);
		/* A handshake record that failed its check was altered on the
		 * way (tls.c says so in why): a wrong key fails the binder
		 * instead, so --key-file is no advice then. */
		if (ret == -PC_E_AUTH && strstr(why, "altered on the way") == NULL)
			return pc_err_set(c->e, ret, "%s proved a different key: the client's and the "
					  "daemon's key files must hold the same key (check "
					  "--key-file)", ep->peer);
		if (ret == -PC_E_PROTO)
			return pc_err_set(c->e, ret, "%s does not speak TLS 1.3: it is not a pcopy "
					  "daemon, or one older than protocol version %u (%s)",
					  ep->peer, PROTO_VERSION, why);
		return pc_err_set(c->e, ret, "%s: %s", ep->peer, why);
	}
	ep->t = SESSION_DAEMON_TLS;
	ep->ctl = ctl_new(ch, ep->peer, false);
	if (ep->ctl == NULL) {
		client_dial_stop(ep);
		chan_free(ch);
		return pc_err_set(c->e, -ENOMEM, "out of memory");
	}
	/* The session key is the control channel's TLS exporter: our data
	 * connections can say their ClientHellos now, with REQUEST. */
	if (ep->dial != NULL) {
		ret = auth_session_key_tls(ch, ep->k);
		if (ret < 0)
			ret = pc_err_set(c->e, ret, "%s: cannot derive the session key: %s", ep->peer,
					 pc_strerror(ret));
		else
			ret = session_dial_key(ep->dial, ep->k, c->e);
		if (ret < 0)
			client_dial_stop(ep);
	}
	return ret;
}

static int client_open_endpoint_raw(struct client *c, struct endpoint *ep);

/* Starts or reaches the far end ep->loc (NULL: a local child); Ctrl-C
 * works while we wait for it. */
static int client_open_endpoint(struct client *c, struct endpoint *ep)
{
	int ret = client_open_endpoint_raw(c, ep);

	if (ret == 0)
		ctl_set_intr(ep->ctl, api_sigfd());
	return ret;
}

static int client_open_endpoint_raw(struct client *c, struct endpoint *ep)
{
	const struct loc *l = ep->loc;

	if (l == NULL) {
		ep->t = SESSION_PIPE;
		snprintf(ep->peer, sizeof(ep->peer), "local sink");
		snprintf(ep->data_host, sizeof(ep->data_host), c->o->family == 6 ? "::1" : "127.0.0.1");
		return client_spawn_local(c, ep);
	}
	if (l->kind == LOC_DAEMON) {
		ep->t = SESSION_DAEMON;
		snprintf(ep->peer, sizeof(ep->peer), strchr(l->host, ':') ? "[%s]:%u" : "%s:%u",
			 l->host, (unsigned)l->port);
		/* A bad key file is the user's to fix: say so before any network. */
		if (c->o->key_file == NULL)
			return pc_err_set(c->e, -PC_E_USAGE, "%s: a daemon needs --key-file KEY "
					  "(or PCOPY_KEY_FILE)", ep->peer);
		int ret = keyfile_load(c->o->key_file, ep->K, c->e);
		return ret < 0 ? ret : client_connect_daemon(c, ep);
	}
	ep->t = SESSION_PIPE;
	loc_host_display(l, ep->peer, sizeof(ep->peer));
	snprintf(ep->data_host, sizeof(ep->data_host), "%s", l->host);
	int ret = client_spawn_ssh(c, ep);
	bool auto_via = ep->via == PCOPY_DATA_VIA_AUTO && ep->route_run.pid > 0;
	client_route_settle(c, ep); /* reaps the ssh -G even if ssh did not start */
	/* Only through ssh: the streams start with the control channel. */
	if (ret == 0 && ep->via == PCOPY_DATA_VIA_SSH)
		ret = client_ssh_streams(c, ep, c->e);
	/* Still auto: a look at the direct path while the login runs, at
	 * the address ssh's HostName gives, if it gives one. Our first flight
	 * goes now, so that the far end starts while the probe waits (in
	 * client_handshake): its REQUEST is final in every flow that probes. */
	if (ret == 0 && auto_via && ep->via == PCOPY_DATA_VIA_AUTO) {
		datapath_probe_start(&ep->probe, ep->route.host[0] ? ep->route.host : ep->data_host,
				     c->o->port_lo, c->o->family ? c->o->family : ep->route.family);
		ret = client_hello(c, ep);
	}
	return ret;
}

/* After the far end went away during the handshake: if it was ssh, its
 * exit status says why. Replaces the generic "closed the connection". */
static int client_explain_launch(struct client *c, struct endpoint *ep, int ret)
{
	if (ep->loc == NULL || ep->loc->kind != LOC_SSH || ep->child <= 0 ||
	    (ret != -PC_E_NET && ret != -EPIPE && ret != -ECONNRESET))
		return ret;
	/* ssh went as a stop signal came: it had the signal too (Ctrl-C and
	 * timeout(1) stop the whole process group), and waiting for it, or
	 * blaming it, would hide the interruption. */
	if (platform_stop_pending())
		return pc_err_replace(c->e, -PC_E_INTERRUPTED, "interrupted while starting %s on %s",
				      c->o->rsh ? c->o->rsh : "ssh", ep->peer);
	ctl_free(ep->ctl);
	ep->ctl = NULL;
	int st = spawn_wait(ep->child);
	ep->child = -1;
	if (st == 255)
		return pc_err_replace(c->e, -PC_E_LAUNCH, "cannot reach %s with %s (its message is "
				      "above)", ep->peer, c->o->rsh ? c->o->rsh : "ssh");
	if (st == 127 && c->o->remote_pcopy != NULL)
		return pc_err_replace(c->e, -PC_E_LAUNCH, "'%s' (--remote-pcopy) not found on %s",
				      c->o->remote_pcopy, ep->peer);
	if (st == 127)
		return pc_err_replace(c->e, -PC_E_LAUNCH, "pcopy not found on %s; install it or "
				      "pass --remote-pcopy", ep->peer);
	if (st == 126 && c->o->remote_pcopy != NULL)
		return pc_err_replace(c->e, -PC_E_LAUNCH, "'%s' (--remote-pcopy) cannot be run on %s",
				      c->o->remote_pcopy, ep->peer);
	if (st == 126)
		return pc_err_replace(c->e, -PC_E_LAUNCH, "pcopy on %s cannot be run; check "
				      "--remote-pcopy", ep->peer);
	return pc_err_replace(c->e, -PC_E_LAUNCH, "the remote pcopy on %s exited with status %d "
			      "before the session started", ep->peer, st);
}

/* Sends ep's first flight (HELLO, KEY, REQUEST), once: ep->req must be
 * final. */
static int client_hello(struct client *c, struct endpoint *ep)
{
	int ret;

	if (ep->hello_sent)
		return 0;
	ep->hello_sent = true;
	ret = session_client_hello(ep->ctl, ep->t, ep->K, &ep->req, &ep->hs, c->e);
	crypto_wipe(ep->K, sizeof(ep->K));
	return ret < 0 ? client_explain_launch(c, ep, ret) : 0;
}

/* HELLO ... READY with ep; keeps the data port and key. A probe of the
 * direct path (client_open_endpoint) has its wait here, while the far end
 * starts. */
static int client_handshake(struct client *c, struct endpoint *ep)
{
	struct proto_msg m;
	int ret = client_hello(c, ep);

	if (ret < 0)
		return ret;
	if (ep->probe.state != DATAPATH_PROBE_OFF) {
		client_early_streams(c, ep);
		if (ep->sdata == NULL)
			datapath_probe_end(&ep->probe);
	}
	ret = session_client_ready(ep->ctl, &ep->hs, &m.u.ready, ep->k, c->e);
	if (ret < 0)
		return client_explain_launch(c, ep, ret);
	ep->port = m.u.ready.data_port;
	snprintf(ep->ready_host, sizeof(ep->ready_host), "%s", m.u.ready.host);
	if (ep->req.flags & PROTO_REQ_DATA_KEY)
		memcpy(ep->k, ep->req.data_key, sizeof(ep->k));
	return 0;
}

static void client_close_endpoint(struct client *c, struct endpoint *ep, int *ret)
{
	if (ep->route_run.pid > 0) /* the session failed before it was read */
		sshroute_finish(&ep->route_run, &ep->route);
	client_dial_stop(ep); /* data connections the session never took */
	datapath_probe_end(&ep->probe);
	/* Keys, whether or not the handshake ran: a failed daemon connect
	 * leaves K, a handshake never finished leaves hs. */
	crypto_wipe(&ep->hs, sizeof(ep->hs));
	crypto_wipe(ep->K, sizeof(ep->K));
	crypto_wipe(ep->k, sizeof(ep->k));
	crypto_wipe(ep->req.data_key, sizeof(ep->req.data_key));
	ctl_free(ep->ctl); /* closes the channel: the far end sees EOF */
	ep->ctl = NULL;
	/* Their channels are closed: their ssh's end as the session does. */
	sshdata_end(ep->sdata, *ret < 0);
	ep->sdata = NULL;
	/* Interrupted: the --rsh command may be where EOF on its stdin goes
	 * unnoticed (ssh still resolving or connecting to the host), and
	 * waiting for it would undo the interruption: pass the stop on. The
	 * remote pcopy sees its channel close either way. */
	if (ep->child > 0 && ep->loc != NULL && *ret == -PC_E_INTERRUPTED &&
	    kill(ep->child, SIGTERM) != 0)
		log_warn("cannot stop '%s' for %s: %s", c->o->rsh ? c->o->rsh : "ssh", ep->peer,
			 strerror(errno));
	/* After a failure the link itself may be dead (a timeout): ssh would
	 * wait for it as long as TCP does. Its remote pcopy has seen the
	 * session fail too; a few seconds let it end and say why. */
	if (ep->child > 0) {
		int st = *ret < 0 ? spawn_reap(ep->child, CLIENT_SSH_GRACE_MS) : spawn_wait(ep->child);
		if (*ret == 0 && st != 0)
			*ret = pc_err_set(c->e, -PC_E_LAUNCH, "%s exited with status %d", ep->peer, st);
	}
	ep->child = -1;
}

/* ---- Requests ---------------------------------------------------------- */

static int client_request(struct client *c, struct endpoint *ep, enum proto_role role)
{
	const struct pcopy_opts *o = c->o;
	struct proto_request *req = &ep->req;
	int ret = 0;

	memset(req, 0, sizeof(*req));
	req->role = (uint8_t)role;
	req->streams = (uint16_t)o->streams;
	req->block_size = o->block_size != 0 ? (uint32_t)o->block_size
			  : o->checksum ? PCOPY_DELTA_BLOCK : PCOPY_DEFAULT_BLOCK;
	req->window = (uint32_t)o->window;
	req->timeout_s = o->timeout_s;
	req->bwlimit = o->bwlimit;
	req->sync = (o->update || o->checksum || o->resume ? PROTO_SYNC_UPDATE : 0) |
		    (o->checksum ? PROTO_SYNC_CHECKSUM : 0) | (o->resume ? PROTO_SYNC_RESUME : 0) |
		    (o->inplace ? PROTO_SYNC_INPLACE : 0) | (o->verify ? PROTO_SYNC_VERIFY : 0) |
		    (o->delete_missing ? PROTO_SYNC_DELETE : 0) | (o->dry_run ? PROTO_SYNC_DRY_RUN : 0);
	req->family = (uint8_t)o->family;
	req->nsources = (uint32_t)c->nsrc;
	req->flags |= (o->recursive ? PROTO_REQ_RECURSIVE : 0) |
		      (o->preserve ? PROTO_REQ_PRESERVE : 0) |
		      (o->numeric_ids ? PROTO_REQ_NUMERIC_IDS : 0) |
		      (o->dereference ? PROTO_REQ_DEREF : 0) |
		      (o->hard_links ? PROTO_REQ_HARDLINKS : 0);
	req->flags |= auth_data_flags(client_data_mode(o, ep));
	if (c->dst.kind == LOC_STDIO)
		req->flags |= PROTO_REQ_ORDERED;
	if (c->dst.kind == LOC_STDIO && c->mode == CLIENT_LOCAL)
		req->flags |= PROTO_REQ_DEST_STDOUT;
	snprintf(req->codec, sizeof(req->codec), "%s", o->codec ? o->codec : "");
	if (c->mode != CLIENT_THIRD) {
		ret = client_request_via(c, ep);
		if (ret < 0)
			return ret;
	}
	if (role == PROTO_ROLE_SINK)
		ret = proto_request_add_path(req, c->dst.path);
	if (role == PROTO_ROLE_PROBE) /* the directory of its disk test; "": the home */
		ret = proto_request_add_path(req, c->dst.path[0] != '\0' ? c->dst.path : ".");
	for (int i = 0; role == PROTO_ROLE_SOURCE && i < c->nsrc && ret == 0; i++)
		ret = proto_request_add_path(req, c->src[i].path);
	if (ret < 0)
		return pc_err_set(c->e, -PC_E_USAGE, "too many or too long remote paths");
	/* Both roles: the source walks by them, a sink's --delete spares what
	 * they exclude. */
	for (unsigned i = 0; role != PROTO_ROLE_PROBE && i < o->nfilters; i++)
		if (proto_request_add_filter(req, o->filters[i]) < 0)
			return pc_err_set(c->e, -PC_E_USAGE, "filter rule '%s' is not '- PATTERN' "
					  "or '+ PATTERN', or the rules pass %u rules or %u "
					  "bytes", o->filters[i], PCOPY_MAX_FILTERS,
					  PCOPY_MAX_FILTER_BYTES);
	return 0;
}

/* How ep's data streams go (ep->via), and the REQUEST's part of it: a host
 * reached with ssh may take them through ssh (SSH_DATA, with a fresh
 * attach id), or only so (SSH_ONLY: --data-via ssh, or a host that ssh
 * reaches through a proxy, where direct connections stand little chance).
 * Not with -z (the far end connects to us), nor in auto mode with a --rsh
 * that is not ssh (it would not take our options). What ssh's
 * configuration says is read in the background (ep->route_run) while the
 * control ssh starts; client_route_settle finishes the choice. */
static int client_request_via(struct client *c, struct endpoint *ep)
{
	const struct pcopy_opts *o = c->o;
	char target[LOC_MAX_USER + LOC_MAX_HOST + 2];

	ep->via = PCOPY_DATA_VIA_DIRECT;
	if (ep->loc == NULL || ep->loc->kind != LOC_SSH || o->reverse ||
	    o->data_via == PCOPY_DATA_VIA_DIRECT ||
	    (o->data_via == PCOPY_DATA_VIA_AUTO && !sshdata_is_ssh(o->rsh)))
		return 0;
	ep->via = o->data_via;
	loc_ssh_target(ep->loc, target, sizeof(target));
	sshroute_start(o->rsh, target, &ep->route_run);
	ep->req.flags |= PROTO_REQ_SSH_DATA;
	int ret = crypto_random(ep->req.attach_id, sizeof(ep->req.attach_id));
	return ret < 0 ? pc_err_set(c->e, ret, "no random bytes: %s", pc_strerror(ret)) : 0;
}

/* Once the control ssh is on its way: reads ssh's configuration for ep
 * (client_request_via started it) and settles ep->via, and SSH_ONLY in
 * the REQUEST, which has not gone yet. Nothing to do for a direct via. */
static void client_route_settle(struct client *c, struct endpoint *ep)
{
	char target[LOC_MAX_USER + LOC_MAX_HOST + 2], host[LOC_MAX_HOST + 16];

	if (ep->via == PCOPY_DATA_VIA_DIRECT)
		return;
	sshroute_finish(&ep->route_run, &ep->route);
	if (ep->via == PCOPY_DATA_VIA_AUTO && ep->route.proxied != NULL) {
		loc_host_display(ep->loc, host, sizeof(host));
		log_notice("%s is reached through a proxy (%s); the data goes through ssh", host,
			   ep->route.proxied);
		snprintf(c->via_reason, sizeof(c->via_reason), "%.120s is reached through a proxy (%.100s)",
			 host, ep->route.proxied);
		ep->via = PCOPY_DATA_VIA_SSH;
	}
	if (ep->via == PCOPY_DATA_VIA_AUTO) {
		uint64_t age;
		loc_ssh_target(ep->loc, target, sizeof(target));
		/* -4 and -6 have keys of their own: a family the host lacks
		 * is no firewall, and must not send the next plain copies
		 * through ssh. */
		snprintf(ep->memo_key, sizeof(ep->memo_key), "%s\n%s:%u%s", target, ep->route.host,
			 (unsigned)ep->route.port, ep->req.family == 4 ? " -4"
						   : ep->req.family == 6 ? " -6" : "");
		if (datamemo_recall(ep->memo_key, (uint64_t)time(NULL), &age)) {
			/* As --data-via ssh: the streams start with the
			 * control ssh, and no direct connection is tried. */
			loc_host_display(ep->loc, host, sizeof(host));
			log_notice("no direct data connection to %s %" PRIu64 " min ago; the data "
				   "goes through ssh", host, age / 60);
			snprintf(c->via_reason, sizeof(c->via_reason), "no direct data connection "
				 "to %.120s %" PRIu64 " min ago", host, age / 60);
			ep->via = PCOPY_DATA_VIA_SSH;
		}
	}
	if (ep->via == PCOPY_DATA_VIA_SSH)
		ep->req.flags |= PROTO_REQ_SSH_ONLY;
}

/* How ep's data streams through ssh start; target[LOC_MAX_USER +
 * LOC_MAX_HOST + 2] receives the ssh destination cfg points at. */
static void client_ssh_cfg(struct client *c, struct endpoint *ep, struct sshdata_cfg *cfg,
			   char *target)
{
	loc_ssh_target(ep->loc, target, LOC_MAX_USER + LOC_MAX_HOST + 2);
	*cfg = (struct sshdata_cfg){
		.rsh = c->o->rsh, .target = target, .remote_pcopy = c->o->remote_pcopy,
		.attach_id = ep->req.attach_id, .streams = ep->req.streams, .peer = ep->peer,
		.route = &ep->route, .window = ep->req.window, .family = ep->req.family,
	};
}

/* Starts ep's data streams through ssh (they connect while the session
 * starts). Returns 0 or a negative code with the detail in e. */
static int client_ssh_streams(struct client *c, struct endpoint *ep, struct pc_err *e)
{
	char target[LOC_MAX_USER + LOC_MAX_HOST + 2];
	struct sshdata_cfg cfg;

	client_ssh_cfg(c, ep, &cfg, target);
	return sshdata_start(&cfg, &ep->sdata, e);
}

/* The probe answered after the streams through ssh started early: the
 * path is open, and they stop. */
static void client_early_streams_stop(struct endpoint *ep)
{
	log_info("%s answered the look at the direct path after all; the data streams "
		 "through ssh stop", ep->data_host);
	sshdata_end(ep->sdata, true);
	ep->sdata = NULL;
}

/* auto: if the probe of the direct path has had no answer within
 * DATAPATH_PROBE_MS of its start (or was told it is unreachable), starts
 * the streams through ssh now, beside the control login, rather than after
 * READY and the race's head start. They hold their proofs until
 * datapath_open has given the direct connects their chance. The wait ends
 * early when the control channel speaks: the far end answered our first
 * flight (the login took less than the wait, and the probe had as long),
 * or ssh failed. Once they have started, the probe is still watched until
 * the control channel speaks: a late answer stops them at once. Nothing
 * here fails the copy: streams that cannot start now start at the
 * fallback, or say why there. */
static void client_early_streams(struct client *c, struct endpoint *ep)
{
	int rfd = ctl_rfd(ep->ctl), avail = 0;
	struct pollfd p = { .fd = rfd, .events = POLLIN };
	struct pc_err e2;

	/* A stop signal ends the wait too: the handshake reports it. */
	if (!datapath_probe_quiet(&ep->probe, rfd) || platform_stop_pending())
		return;
	/* ssh failed (EOF, nothing to read): the handshake says why. */
	if (platform_poll(&p, 1, 0) > 0 && ioctl(rfd, FIONREAD, &avail) == 0 && avail == 0)
		return;
	if (ep->probe.state == DATAPATH_PROBE_BLOCKED)
		log_info("%s is unreachable for a look at the direct path; the data streams "
			 "through ssh start now, in case", ep->data_host);
	else
		log_info("no answer from %s to a look at the direct path within %.2f s; the "
			 "data streams through ssh start now, in case", ep->data_host,
			 (double)(platform_now_ns() - ep->probe.t0) / 1e9);
	pc_err_init(&e2);
	if (client_ssh_streams(c, ep, &e2) < 0) {
		char why[sizeof(e2.msg)];
		pc_err_get(&e2, why, sizeof(why));
		log_info("the early data streams through ssh did not start (%s); they start "
			 "at the fallback, if it comes", why);
	}
	pc_err_destroy(&e2);
	/* A slow link's answer may still come while the far end starts: the
	 * streams then stop before their own connects are through. */
	if (ep->sdata != NULL && datapath_probe_answered(&ep->probe, rfd))
		client_early_streams_stop(ep);
}

/* ---- Two-party copies -------------------------------------------------- */

/* Our data connections to a daemon failed. A daemon that failed after
 * READY (a path it could not open) has said why on the control channel,
 * and that beats "connection refused": if its ERROR comes within the grace
 * time, it replaces the error in e. Returns the code now in e, or ret. */
static int client_server_said(struct endpoint *ep, int ret, struct pc_err *e)
{
	struct pollfd p = { .fd = ctl_rfd(ep->ctl), .events = POLLIN };
	struct proto_msg *m;
	struct pc_err said;
	char msg[sizeof(said.msg)];

	if (!ctl_pending(ep->ctl) && poll(&p, 1, CLIENT_ERROR_GRACE_MS) <= 0)
		return ret;
	if ((m = malloc(sizeof(*m))) == NULL)
		return ret;
	pc_err_init(&said);
	if (ctl_recv(ep->ctl, m) == 0 && m->type == PROTO_ERROR) {
		(void)ctl_check(ep->ctl, m, PROTO_END, &said);
		ret = pc_err_get(&said, msg, sizeof(msg));
		pc_err_replace(e, ret, "%s", msg);
	}
	pc_err_destroy(&said);
	free(m);
	return ret;
}

/* Opens our data connections to (or, with -z, from) the server; those
 * already on their way to a daemon's port (ep->dial) are finished here.
 * pending: see session_connect_data. The channels go to chans[]. */
static int client_data(struct client *c, struct endpoint *ep, int lfd,
		       uint8_t (*pending)[PROTO_MAC_LEN], struct chan **chans)
{
	const struct proto_request *req = &ep->req;
	struct session_dial *dial = ep->dial;
	struct pc_err e2;
	int ret;

	ep->dial = NULL; /* finished below, whatever happens */

	if (lfd >= 0) {
		ret = acceptor_run(lfd, -1, ep->ctl, req, ep->k, ep->peer, chans, c->e);
		/* The server gave up on connecting to us: its ERROR says why. */
		return ret == -PC_E_ABORTED ? pc_err_get(c->e, NULL, 0) : ret;
	}
	if (ep->via == PCOPY_DATA_VIA_SSH)
		return sshdata_open(ep->sdata, req, ep->k, chans, c->e);
	if (ep->via == PCOPY_DATA_VIA_AUTO && dial == NULL) {
		/* Direct, or through ssh when that cannot connect. */
		char target[LOC_MAX_USER + LOC_MAX_HOST + 2];
		struct sshdata_cfg scfg;
		client_ssh_cfg(c, ep, &scfg, target);
		struct datapath_cfg dc = { .host = ep->data_host, .alt_host = ep->ready_host,
					   .port = ep->port, .req = req, .k = ep->k,
					   .pending = pending, .ssh = &scfg,
					   .why = c->via_reason, .why_cap = sizeof(c->via_reason) };
		/* Early streams: only while the probe is still unanswered. One
		 * that answered since (a link slower than the probe's wait)
		 * is an open path: the race as always. */
		if (ep->sdata != NULL && !datapath_probe_quiet(&ep->probe, -1))
			client_early_streams_stop(ep);
		datapath_probe_end(&ep->probe);
		dc.early = ep->sdata;
		ep->sdata = NULL; /* datapath_open's now */
		ret = datapath_open(&dc, chans, &ep->sdata, c->e);
		/* Remember a fallback for the next copies; forget the host when
		 * direct worked. */
		if (ret == 0)
			datamemo_note(ep->memo_key, ep->sdata != NULL, (uint64_t)time(NULL));
		return ret;
	}
	pc_err_init(&e2);
	if (dial != NULL)
		ret = session_dial_finish(dial, req, true, chans, &e2);
	else
		ret = session_connect_data(ep->data_host, ep->port, req, ep->k, pending,
					   chans, &e2);
	/* A host name only our ssh config knows: try the address the server
	 * says it has. Not after a handshake failed its proof (-PC_E_AUTH:
	 * a wrong key, or altered on the way): that reached the listener,
	 * which may hold our other streams already; going around would hide
	 * why, and duplicate them. */
	if (ret < 0 && ret != -PC_E_INTERRUPTED && ret != -PC_E_AUTH && dial == NULL &&
	    ep->ready_host[0] != '\0' && strcmp(ep->ready_host, ep->data_host) != 0)
		ret = session_connect_data(ep->ready_host, ep->port, req, ep->k, pending,
					   chans, &e2);
	bool own = ret == -PC_E_AUTH || ret == -PC_E_TIMEOUT || ret == -PC_E_INTERRUPTED;
	if (own) {
		/* We reached something, or were stopped: "cannot reach" would
		 * mislead. */
		char msg[sizeof(e2.msg)];
		pc_err_get(&e2, msg, sizeof(msg));
		pc_err_set(c->e, ret, "%s", msg);
	} else if (ret < 0) {
		pc_err_set(c->e, -PC_E_NET, "cannot reach %s port %u for data; try -z%s",
			   ep->data_host, dial != NULL ? (unsigned)ep->loc->port : (unsigned)ep->port,
			   dial != NULL ? ", or fewer streams (-s) than the daemon's --max-per-source"
					: " or -Z");
	}
	pc_err_destroy(&e2);
	if (own)
		ret = pc_err_get(c->e, NULL, 0);
	else if (ret < 0)
		ret = -PC_E_NET;
	if (ret < 0 && ret != -PC_E_INTERRUPTED && ep->t != SESSION_PIPE)
		return client_server_said(ep, ret, c->e);
	return ret;
}

/* Records how the data travels (for the summary) and says it with -v:
 * the protocol version, the cipher or why not, and the control channel.
 * data is one of our data channels, or NULL in a third-party copy. */
static void client_say_security(struct client *c, const struct endpoint *ep,
				const struct chan *data)
{
	const char *ctl = ep->t == SESSION_DAEMON_TLS ? "TLS 1.3 too"
			  : ep->t == SESSION_DAEMON ? "in clear (--no-encrypt)"
			  : ep->loc == NULL ? "a socket to our own child" : "inside ssh";

	if (data == NULL) /* third party: the hosts' way, as we asked for it */
		c->via = (ep->req.flags & PROTO_REQ_CONNECT_SSH) == 0 ? PCOPY_VIA_DIRECT
			 : c->o->data_via == PCOPY_DATA_VIA_SSH ? PCOPY_VIA_SSH : PCOPY_VIA_HOSTS;
	else
		c->via = ep->loc == NULL ? PCOPY_VIA_LOCAL
			 : ep->sdata != NULL ? PCOPY_VIA_SSH : PCOPY_VIA_DIRECT;
	if (ep->sdata != NULL)
		snprintf(c->security, sizeof(c->security), "encrypted (ssh)");
	else if (data != NULL && chan_encrypted(data))
		snprintf(c->security, sizeof(c->security), "encrypted (%s)", chan_describe(data));
	else if (data == NULL && (ep->req.flags & PROTO_REQ_ENCRYPT))
		/* Third party: the data goes from h1 to h2 directly; we know
		 * how it was asked to travel, not the cipher they settled on. */
		snprintf(c->security, sizeof(c->security), "encrypted (%s between the hosts)",
			 (ep->req.flags & PROTO_REQ_CONNECT_SSH) ? "TLS 1.3 or ssh" : "TLS 1.3");
	else if (c->o->encrypt == PCOPY_ENCRYPT_OFF)
		snprintf(c->security, sizeof(c->security), "not encrypted (--no-encrypt)");
	else
		snprintf(c->security, sizeof(c->security), "not encrypted (a local copy)");
	const char *ktls = tls_ktls_status();
	log_info("protocol version %u; data %s, kernel TLS %s%s%s; control channel %s",
		 PROTO_VERSION, c->security, strcmp(ktls, "on") == 0 ? "on" : "off (",
		 strcmp(ktls, "on") == 0 ? "" : ktls, strcmp(ktls, "on") == 0 ? "" : ")", ctl);
}

static int client_two_party(struct client *c)
{
	struct endpoint *ep = &c->ep[0];
	enum proto_role server_role = c->mode == CLIENT_PULL ? PROTO_ROLE_SOURCE : PROTO_ROLE_SINK;
	int lfd = -1, ret;

	if (c->o->relay)
		return pc_err_set(c->e, -PC_E_USAGE, "-3 is for a copy between two remote hosts "
				  "(H1:SRC H2:DST)");

	ep->loc = c->mode == CLIENT_PULL ? &c->src[0] : c->mode == CLIENT_PUSH ? &c->dst : NULL;
	ret = client_request(c, ep, server_role);
	if (ret == 0 && c->o->reverse) {
		/* -z: we listen, the server connects to the address it sees us at. */
		lfd = net_listen(ep->loc ? NULL : c->o->family == 6 ? "::1" : "127.0.0.1",
				 c->o->port_lo, c->o->port_hi, c->o->family, ep->req.window, c->e);
		ret = lfd < 0 ? lfd : 0;
		ep->req.flags |= PROTO_REQ_CONNECT;
		ep->req.connect_port = lfd >= 0 ? net_local_port(lfd) : 0;
	} else {
		ep->req.port_lo = c->o->port_lo;
		ep->req.port_hi = c->o->port_hi;
	}
	if (ret == 0)
		ret = client_open_endpoint(c, ep);
	if (ret == 0)
		ret = client_handshake(c, ep);
	if (ret < 0)
		client_dial_stop(ep);
	/* A push to a daemon over connections we opened: the data starts with
	 * our proof, and the daemon's proofs are checked at the end. The port
	 * is the daemon's, on the address our control connection reached.
	 * Through ssh the data host is resolved by us, not by ssh, and may be
	 * another machine: there each listener proves itself first. */
	bool owed = lfd < 0 && server_role == PROTO_ROLE_SINK && ep->t != SESSION_PIPE &&
		    !(ep->req.flags & PROTO_REQ_ENCRYPT); /* TLS: the handshake proves them */
	if (ret == 0)
		ret = client_data(c, ep, lfd, owed ? c->proofs : NULL, c->chans);
	if (lfd >= 0)
		close(lfd);
	if (ret < 0)
		return ret;
	client_say_security(c, ep, c->chans[0]);
	c->run = (struct session_run){
		.role = server_role == PROTO_ROLE_SINK ? PROTO_ROLE_SOURCE : PROTO_ROLE_SINK,
		.req = &ep->req, .ctl = ep->ctl, .chans = c->chans,
		.confirm = owed ? (const uint8_t (*)[PROTO_MAC_LEN])c->proofs : NULL,
		.sigfd = api_sigfd(),
		.report = true, .progress_s = c->o->progress_s, .hooks = c->o->hooks,
		.peer = ep->peer,
		.peer_local = ep->loc == NULL, .input = &c->input, .target = &c->target,
		/* A pull: the server reports the sources it cannot open. */
		.skip_paths = server_role == PROTO_ROLE_SOURCE ? ep->req.npaths : 0,
	};
	ret = session_transfer(&c->run, c->e);
	session_close_chans(c->chans, ep->req.streams);
	return ret;
}

/* ---- Third party ------------------------------------------------------- */

/* A third-party copy's data may go through ssh too (docs/PROTOCOL.md 6.5):
 * the listener opens an attach socket (SSH_DATA, or SSH_ONLY with
 * --data-via ssh), and the connecting host runs the data ssh's itself to
 * reach it (CONNECT_SSH), with its own ssh configuration. */
static int client_third_via(struct client *c, struct endpoint *listener,
			    struct endpoint *connector)
{
	const struct pcopy_opts *o = c->o;
	char target[LOC_MAX_USER + LOC_MAX_HOST + 2];
	int ret;

	if (o->data_via == PCOPY_DATA_VIA_DIRECT)
		return 0;
	listener->req.flags |= PROTO_REQ_SSH_DATA |
			       (o->data_via == PCOPY_DATA_VIA_SSH ? PROTO_REQ_SSH_ONLY : 0);
	ret = crypto_random(listener->req.attach_id, sizeof(listener->req.attach_id));
	if (ret < 0)
		return pc_err_set(c->e, ret, "no random bytes: %s", pc_strerror(ret));
	memcpy(connector->req.attach_id, listener->req.attach_id,
	       sizeof(connector->req.attach_id));
	connector->req.flags |= PROTO_REQ_CONNECT_SSH;
	loc_ssh_target(listener->loc, target, sizeof(target));
	if (strlen(target) > PROTO_MAX_SSH_DEST)
		return pc_err_set(c->e, -PC_E_USAGE, "%s: too long for the other host to reach "
				  "with ssh", target);
	snprintf(connector->req.connect_ssh, sizeof(connector->req.connect_ssh), "%s", target);
	snprintf(connector->req.connect_pcopy, sizeof(connector->req.connect_pcopy), "%s",
		 o->remote_pcopy != NULL ? o->remote_pcopy : "");
	return 0;
}

/* -3: both hosts listen, we connect to each (directly or through ssh, as
 * a two-party copy does) and pump stream i of h1 into stream i of h2
 * while relaying the control messages. */
static int client_third_relayed(struct client *c, const uint8_t key[PROTO_KEY_LEN])
{
	struct endpoint *src = &c->ep[0], *dst = &c->ep[1];
	struct chan *out[PROTO_MAX_STREAMS] = { NULL }; /* to h2; owned, as c->chans (h1) */
	struct relaydata *rd = NULL;
	struct pc_err e2;
	int ret = 0;

	for (int i = 0; i < 2 && ret == 0; i++) {
		struct endpoint *ep = &c->ep[i];
		ep->req.flags |= PROTO_REQ_DATA_KEY;
		memcpy(ep->req.data_key, key, PROTO_KEY_LEN);
		ep->req.port_lo = c->o->port_lo;
		ep->req.port_hi = c->o->port_hi;
		ret = client_request_via(c, ep);
	}
	for (int i = 0; i < 2 && ret == 0; i++)
		ret = client_open_endpoint(c, &c->ep[i]);
	for (int i = 0; i < 2 && ret == 0; i++)
		ret = client_handshake(c, &c->ep[i]);
	if (ret == 0)
		ret = client_data(c, src, -1, NULL, c->chans);
	if (ret == 0)
		ret = client_data(c, dst, -1, NULL, out);
	if (ret == 0)
		ret = relaydata_start(c->chans, out, src->req.streams, &rd, c->e);
	if (ret == 0) {
		snprintf(c->security, sizeof(c->security), "encrypted (relayed through this host)");
		c->via = PCOPY_VIA_RELAY;
		ret = relay_run(src->ctl, dst->ctl, api_sigfd(), &(struct relay_report){
				c->o->progress_s, c->o->hooks, !c->o->recursive },
				src->req.npaths, &c->relay, c->e);
	}
	/* The sink's DONE (or either host's ERROR) has said how the data
	 * went: a pump's failure made a host fail too, and what a host
	 * closes after its DONE no longer matters. */
	pc_err_init(&e2);
	(void)relaydata_finish(rd, true, &e2);
	pc_err_destroy(&e2);
	session_close_chans(c->chans, src->req.streams);
	session_close_chans(out, dst->req.streams);
	return ret;
}

/* h1:SRC h2:DST. The listening end (h2, or h1 with -z) answers first; the
 * other end then connects to the address the listener reported. Both get
 * the same fresh data key. */
static int client_third_party(struct client *c)
{
	struct endpoint *src = &c->ep[0], *dst = &c->ep[1];
	struct endpoint *listener = c->o->reverse ? src : dst;
	struct endpoint *connector = c->o->reverse ? dst : src;
	uint8_t key[PROTO_KEY_LEN];
	int ret;

	src->loc = &c->src[0];
	dst->loc = &c->dst;
	ret = crypto_random(key, sizeof(key));
	if (ret == 0)
		ret = client_request(c, src, PROTO_ROLE_SOURCE);
	if (ret == 0)
		ret = client_request(c, dst, PROTO_ROLE_SINK);
	if (ret == 0 && c->o->relay) {
		ret = client_third_relayed(c, key);
		crypto_wipe(key, sizeof(key));
		return ret;
	}
	if (ret < 0)
		return ret;
	for (int i = 0; i < 2; i++) {
		c->ep[i].req.flags |= PROTO_REQ_DATA_KEY;
		memcpy(c->ep[i].req.data_key, key, sizeof(key));
	}
	crypto_wipe(key, sizeof(key));
	ret = client_third_via(c, listener, connector);
	if (ret < 0)
		return ret;
	listener->req.port_lo = c->o->port_lo;
	listener->req.port_hi = c->o->port_hi;
	ret = client_open_endpoint(c, listener);
	if (ret == 0)
		ret = client_open_endpoint(c, connector);
	if (ret == 0)
		ret = client_handshake(c, listener);
	if (ret < 0)
		return ret;
	/* The connector's REQUEST changes now: its first flight has not gone
	 * (it does not probe: client_open_endpoint sends it early only then). */
	if (connector->hello_sent)
		return pc_err_set(c->e, -EINVAL, "internal error: %s's request went out early",
				  connector->peer);
	connector->req.flags |= PROTO_REQ_CONNECT;
	connector->req.connect_port = listener->port;
	snprintf(connector->req.connect_host, sizeof(connector->req.connect_host), "%s",
		 listener->ready_host[0] ? listener->ready_host : listener->loc->host);
	ret = client_handshake(c, connector);
	if (ret < 0)
		return ret;
	client_say_security(c, connector, NULL);
	return relay_run(src->ctl, dst->ctl, api_sigfd(),
			 &(struct relay_report){ c->o->progress_s, c->o->hooks, !c->o->recursive },
			 src->req.npaths, &c->relay, c->e);
}

/* ---- Results ----------------------------------------------------------- */

static void client_side_stats(const struct proto_stats *st, struct pcopy_side_stats *out)
{
	out->bytes = st->bytes;
	out->wire_bytes = st->wire_bytes;
	out->files = st->files;
	out->dirs = st->dirs;
	out->links = st->links;
	out->unchanged = st->unchanged;
	out->unchanged_bytes = st->unchanged_bytes;
	out->deleted = st->deleted;
	out->resumed = st->resumed;
	out->cpu_s = (double)(st->cpu_user_us + st->cpu_sys_us) / 1e6;
	out->codec_cpu_s = (double)st->codec_cpu_us / 1e6;
	out->maxrss_kib = st->maxrss_kb;
}

/* The network as the bottleneck of a copy under --bwlimit is the cap the
 * user set, most likely: the name says so (the key stays "network"). */
static void client_name_cap(const struct pcopy_opts *o, struct pcopy_result *r)
{
	char rate[32];

	if (o->bwlimit == 0 || r->bottleneck.verdict != PCOPY_VERDICT_NETWORK)
		return;
	snprintf(r->bottleneck.name, sizeof(r->bottleneck.name), "--bwlimit %s/s",
		 platform_fmt_bytes(o->bwlimit, rate, sizeof(rate)));
}

static void client_results(struct client *c, struct pcopy_result *r)
{
	const struct session_run *run = &c->run;

	if (c->mode == CLIENT_THIRD) {
		client_side_stats(&c->relay.src, &r->source);
		client_side_stats(&c->relay.sink, &r->sink);
		bottleneck_judge(&c->relay.src, &c->relay.sink, r);
		client_name_cap(c->o, r);
		r->files_failed = c->relay.failed;
		r->files_unverified = c->relay.unverified;
		r->xfer_s = (double)c->relay.sink.wall_us / 1e6; /* DONE comes last */
		return;
	}
	bool source = run->role == PROTO_ROLE_SOURCE;
	r->xfer_s = (double)run->self.wall_us / 1e6; /* ours ends after the other's */
	client_side_stats(source ? &run->self : &run->other, &r->source);
	client_side_stats(source ? &run->other : &run->self, &r->sink);
	bottleneck_judge(source ? &run->self : &run->other, source ? &run->other : &run->self, r);
	client_name_cap(c->o, r);
	r->files_failed = run->failed;
	r->files_unverified = run->unverified;
	if (!source || run->req == NULL)
		return;
	r->nstream_stats = run->req->streams;
	for (unsigned i = 0; i < run->req->streams; i++) {
		codec_format(&run->streams[i].choice, r->stream[i].codec, sizeof(r->stream[i].codec));
		r->stream[i].raw = run->streams[i].raw;
		r->stream[i].wire = run->streams[i].wire;
	}
}

static void client_free(struct client *c, int *ret)
{
	srclist_free(&c->list);
	free(c->src);
	sink_target_close(&c->target);
	for (int i = 0; i < 2; i++)
		client_close_endpoint(c, &c->ep[i], ret);
}

/* A client c (zeroed) for the options o, its errors going to e: nothing is
 * open yet. Returns client_check_opts's verdict on o. */
static int client_init(struct client *c, const struct pcopy_opts *o, struct pc_err *e)
{
	c->o = o;
	c->e = e;
	c->target.dirfd = -1;
	c->ep[0].child = c->ep[1].child = -1;
	c->ep[0].probe.fd = c->ep[1].probe.fd = -1;
	return client_check_opts(o, e);
}

int pcopy_copy(const struct pcopy_opts *o, int nsrc, char *const srcs[], const char *dst,
	       struct pcopy_result *r)
{
	struct client *c = calloc(1, sizeof(*c));
	uint64_t start = platform_now_ns();
	struct pc_err e;
	int ret;

	memset(r, 0, sizeof(*r));
	pc_err_init(&e);
	if (c == NULL)
		return api_result(r, &e, pc_err_set(&e, -ENOMEM, "out of memory"));
	ret = client_init(c, o, &e);
	if (ret == 0)
		ret = client_classify(c, nsrc, srcs, dst);
	if (ret == 0 && c->mode == CLIENT_PULL)
		ret = sink_target_open(&c->target, AT_FDCWD, c->dst.path, false, (uint32_t)nsrc,
				       c->dst.kind == LOC_STDIO, dst, &e);
	bool none = false; /* no source could be opened: no session at all */
	if (ret == 0)
		ret = client_not_into_itself(c, srcs, dst);
	if (ret == 0)
		ret = client_not_onto_itself(c, srcs);
	if (ret == 0 && (c->mode == CLIENT_PUSH || c->mode == CLIENT_LOCAL)) {
		ret = client_open_sources(c, srcs);
		none = ret == -PC_E_PARTIAL;
	}
	if (ret == 0)
		ret = c->mode == CLIENT_THIRD ? client_third_party(c) : client_two_party(c);
	client_results(c, r);
	snprintf(r->security, sizeof(r->security), "%s", c->security);
	r->data_via = c->via;
	snprintf(r->via_reason, sizeof(r->via_reason), "%s", c->via_reason);
	if (none)
		r->files_failed = c->list.unusable;
	client_free(c, &ret);
	r->streams = o->streams;
	r->compressed = client_compresses(o->codec);
	r->wall_s = (double)(platform_now_ns() - start) / 1e9;
	/* -e: a file that read back wrong is a data integrity failure (exit
	 * 12), not just a file not copied. */
	if (ret == -PC_E_PARTIAL && r->files_unverified > 0 && o->inplace)
		ret = pc_err_replace(&e, -PC_E_INTEGRITY, "%u file%s read back from the disk other than "
				 "sent (--verify); the message of each says whether it was "
				 "written in place (--inplace)", r->files_unverified,
				 r->files_unverified == 1 ? "" : "s");
	else if (ret == -PC_E_PARTIAL && r->files_unverified > 0)
		ret = pc_err_replace(&e, -PC_E_INTEGRITY, "%u file%s read back from the disk other than "
				 "sent, and %s not put in place (--verify)", r->files_unverified,
				 r->files_unverified == 1 ? "" : "s",
				 r->files_unverified == 1 ? "was" : "were");
	api_result(r, &e, ret);
	/* Each file that failed was reported as it failed; sum them up. */
	if (ret == -PC_E_PARTIAL && r->files_failed > 0 && !o->recursive)
		snprintf(r->msg, sizeof(r->msg), "%u of %d files were not copied", r->files_failed,
			 nsrc);
	else if (ret == -PC_E_PARTIAL && r->files_failed > 0)
		snprintf(r->msg, sizeof(r->msg), "%u %s not copied", r->files_failed,
			 r->files_failed == 1 ? "entry was" : "entries were");
	free(c);
	return ret;
}

/* ---- pcopy --probe --------------------------------------------------------- */

/* The probe's session: set up as a push to c->dst would be (so through
 * the same transport), with PROBE_STREAMS streams left to autotuning;
 * then probe_run. */
static int client_probe_session(struct client *c, const char *src, struct pcopy_probe *p)
{
	struct endpoint *ep = &c->ep[0];
	int ret;

	if (c->o->reverse || c->o->relay)
		return pc_err_set(c->e, -PC_E_USAGE, "--probe does not go with %s",
				  c->o->reverse ? "-z" : "-3");
	ep->loc = &c->dst;
	ret = client_request(c, ep, PROTO_ROLE_PROBE);
	if (ret < 0)
		return ret;
	ep->req.streams = PROBE_STREAMS;
	ep->req.window = 0;
	ep->req.codec[0] = '\0';
	ep->req.port_lo = c->o->port_lo;
	ep->req.port_hi = c->o->port_hi;
	ret = client_open_endpoint(c, ep);
	if (ret == 0)
		ret = client_handshake(c, ep);
	if (ret < 0)
		client_dial_stop(ep);
	/* The listeners prove themselves before a byte goes (pending NULL). */
	if (ret == 0)
		ret = client_data(c, ep, -1, NULL, c->chans);
	if (ret < 0)
		return ret;
	client_say_security(c, ep, c->chans[0]);
	snprintf(p->security, sizeof(p->security), "data %s, to %s", c->security, ep->peer);
	ret = probe_run(ep->ctl, c->chans, ep->req.streams, api_sigfd(), src, p, c->e);
	session_close_chans(c->chans, ep->req.streams);
	return ret;
}

/* HOST[:DIR] or a pcopy:// URL; a bare HOST means its home. */
static int client_probe_dest(struct client *c, const char *host)
{
	char arg[LOC_MAX_USER + LOC_MAX_HOST + PROTO_MAX_PATH + 16];
	int ret;

	snprintf(arg, sizeof(arg), "%s%s", host,
		 strncmp(host, "pcopy://", 8) != 0 && strchr(host, ':') == NULL ? ":" : "");
	ret = loc_parse(arg, &c->dst, c->e);
	if (ret == 0 && !client_is_remote(&c->dst))
		ret = pc_err_set(c->e, -PC_E_USAGE, "--probe: '%s' is not a remote host; give "
				 "[USER@]HOST[:DIR] or pcopy://HOST:PORT[/DIR]", host);
	c->mode = CLIENT_PUSH;
	return ret;
}

int pcopy_probe(const struct pcopy_opts *o, const char *src, const char *host,
		struct pcopy_probe *p, struct pcopy_result *r)
{
	struct client *c = calloc(1, sizeof(*c));
	uint64_t start = platform_now_ns();
	struct pc_err e;
	int ret;

	memset(r, 0, sizeof(*r));
	memset(p, 0, sizeof(*p));
	pc_err_init(&e);
	if (c == NULL)
		return api_result(r, &e, pc_err_set(&e, -ENOMEM, "out of memory"));
	ret = client_init(c, o, &e);
	if (ret == 0 && src != NULL && access(src, R_OK) != 0)
		ret = pc_err_set(&e, -PC_E_FILEIO, "--probe: cannot read '%s': %s", src,
				 strerror(errno));
	if (ret == 0)
		ret = client_probe_dest(c, host);
	if (ret == 0)
		ret = client_probe_session(c, src, p);
	client_free(c, &ret);
	p->secs = (double)(platform_now_ns() - start) / 1e9;
	if (ret == 0)
		probe_recommend(p);
	r->streams = PROBE_STREAMS;
	r->wall_s = p->secs;
	snprintf(r->security, sizeof(r->security), "%s", c->security);
	api_result(r, &e, ret);
	free(c);
	return ret;
}
