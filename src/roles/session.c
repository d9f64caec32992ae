/* SPDX-License-Identifier: Apache-2.0 */
/* session: handshakes and data connections. */
#include "roles/session.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire/auth.h"
#include "transport/tls.h"
#include "sys/crypto.h"
#include "sys/log.h"
#include "sys/net.h"
#include "sys/platform.h"
#include "sys/sync.h"
#include "pipeline/filter.h"
#include "pipeline/source.h"
#include "pipeline/xfer.h"

static void session_hello(struct proto_msg *m, const uint8_t nonce[PROTO_NONCE_LEN])
{
	memset(m, 0, sizeof(*m));
	m->type = PROTO_HELLO;
	m->u.hello.magic = PROTO_MAGIC;
	m->u.hello.version = PROTO_VERSION;
	m->u.hello.min_version = PROTO_MIN_VERSION;
	m->u.hello.caps = PROTO_CAP_NONE;
	memcpy(m->u.hello.nonce, nonce, PROTO_NONCE_LEN);
}

/* Both sides: is the peer's version range compatible with ours? */
static int session_check_version(const struct proto_hello *h, const char *peer,
				 struct pc_err *e)
{
	unsigned lo = h->min_version > PROTO_MIN_VERSION ? h->min_version : PROTO_MIN_VERSION;
	unsigned hi = h->version < PROTO_VERSION ? h->version : PROTO_VERSION;

	if (lo > hi)
		return pc_err_set(e, -PC_E_VERSION,
				  "%s speaks pcopy protocol versions %u to %u, this pcopy speaks %u to "
				  "%u; install matching versions",
				  peer, (unsigned)h->min_version, (unsigned)h->version,
				  PROTO_MIN_VERSION, PROTO_VERSION);
	return 0;
}

static int session_send(struct ctl *c, const struct proto_msg *m, struct pc_err *e)
{
	int ret = ctl_send(c, m);

	if (ret < 0)
		return pc_err_set(e, ret, "cannot send to %s: %s", ctl_peer(c), pc_strerror(ret));
	return 0;
}

/* The session key: from the TLS exporter of a daemon's control channel in
 * TLS (forward secret), else derived from key and both nonces. */
static int session_key(struct ctl *c, enum session_transport t, const uint8_t key[PROTO_KEY_LEN],
		       const uint8_t nc[PROTO_NONCE_LEN], const uint8_t ns[PROTO_NONCE_LEN],
		       uint8_t k[PROTO_KEY_LEN], struct pc_err *e)
{
	int ret = t == SESSION_DAEMON_TLS ? auth_session_key_tls(ctl_chan(c), k)
					  : auth_session_key(key, nc, ns, k);

	if (ret < 0)
		return pc_err_set(e, ret, "cannot derive the session key: %s", pc_strerror(ret));
	return 0;
}

int session_client_hello(struct ctl *c, enum session_transport t,
			 const uint8_t K[PROTO_KEY_LEN], struct proto_request *req,
			 struct session_hs *hs, struct pc_err *e)
{
	struct proto_msg m;
	int ret;

	*hs = (struct session_hs){ .t = t };
	ret = crypto_random(hs->nc, sizeof(hs->nc));
	if (ret == 0 && t == SESSION_PIPE)
		ret = crypto_random(hs->key, sizeof(hs->key));
	if (ret < 0)
		return pc_err_set(e, ret, "cannot get random bytes: %s", pc_strerror(ret));
	if (t != SESSION_PIPE)
		memcpy(hs->key, K, sizeof(hs->key));
	/* Everything at once: the server answers HELLO, its proof (daemon)
	 * and READY in one flight. */
	session_hello(&m, hs->nc);
	ret = session_send(c, &m, e);
	if (ret == 0 && t == SESSION_PIPE) {
		m = (struct proto_msg){ .type = PROTO_KEY };
		memcpy(m.u.key.key, hs->key, sizeof(hs->key));
		ret = session_send(c, &m, e);
		crypto_wipe(&m, sizeof(m));
	}
	m = (struct proto_msg){ .type = PROTO_REQUEST, .u.request = req };
	if (ret == 0)
		ret = session_send(c, &m, e);
	if (ret < 0)
		crypto_wipe(hs->key, sizeof(hs->key));
	return ret;
}

int session_client_ready(struct ctl *c, struct session_hs *hs, struct proto_ready *ready,
			 uint8_t k[PROTO_KEY_LEN], struct pc_err *e)
{
	uint8_t mac[PROTO_MAC_LEN];
	struct proto_msg m;
	int ret;

	ret = ctl_expect(c, PROTO_HELLO, &m, e);
	if (ret == 0)
		ret = session_check_version(&m.u.hello, ctl_peer(c), e);
	if (ret < 0)
		goto out;
	memcpy(hs->ns, m.u.hello.nonce, sizeof(hs->ns));
	if (hs->t == SESSION_DAEMON) {
		/* The daemon proves the key first; only then do we. */
		ret = ctl_expect(c, PROTO_AUTH, &m, e);
		if (ret == 0)
			ret = auth_ctl_mac(hs->key, false, hs->nc, hs->ns, mac);
		if (ret == 0 && !crypto_equal(mac, m.u.auth.mac, sizeof(mac))) {
			(void)ctl_send_error(c, -PC_E_AUTH, "authentication failed: the client's "
					     "key does not match this daemon's key file");
			ret = pc_err_set(e, -PC_E_AUTH,
					 "%s proved a different key: the client's and the daemon's "
					 "key files must hold the same key (check --key-file)",
					 ctl_peer(c));
		}
		m = (struct proto_msg){ .type = PROTO_AUTH };
		if (ret == 0)
			ret = auth_ctl_mac(hs->key, true, hs->nc, hs->ns, m.u.auth.mac);
		if (ret == 0)
			ret = session_send(c, &m, e);
		if (ret < 0)
			goto out;
	}
	ret = ctl_expect(c, PROTO_READY, &m, e);
	if (ret == 0) {
		*ready = m.u.ready;
		ret = session_key(c, hs->t, hs->key, hs->nc, hs->ns, k, e);
	}
out:
	crypto_wipe(hs->key, sizeof(hs->key));
	return ret;
}

int session_server_open(struct ctl *c, enum session_transport t,
			const uint8_t K[PROTO_KEY_LEN], struct proto_request *req,
			struct session_hs *hs, struct pc_err *e)
{
	struct proto_msg *m = calloc(1, sizeof(*m)); /* large: not on the stack */
	int ret = m ? ctl_expect(c, PROTO_HELLO, m, e) : pc_err_set(e, -ENOMEM, "out of memory");

	hs->t = t;
	memset(hs->key, 0, sizeof(hs->key));
	if (ret == 0 && session_check_version(&m->u.hello, ctl_peer(c), e) < 0) {
		char msg[PROTO_MAX_MSG];
		pc_err_get(e, msg, sizeof(msg));
		(void)ctl_send_error(c, -PC_E_VERSION, msg);
		ret = -PC_E_VERSION;
	}
	if (ret == 0) {
		memcpy(hs->nc, m->u.hello.nonce, sizeof(hs->nc));
		ret = crypto_random(hs->ns, sizeof(hs->ns));
		if (ret < 0)
			pc_err_set(e, ret, "cannot get random bytes");
	}
	/* HELLO answers HELLO at once: a client that waits for it before it
	 * says more (another version) gets it, and ours costs no time. */
	if (ret == 0) {
		session_hello(m, hs->ns);
		ret = session_send(c, m, e);
	}
	if (ret == 0 && t == SESSION_PIPE) {
		ret = ctl_expect(c, PROTO_KEY, m, e);
		if (ret == 0)
			memcpy(hs->key, m->u.key.key, sizeof(hs->key));
	} else if (ret == 0 && t == SESSION_DAEMON) {
		memcpy(hs->key, K, sizeof(hs->key));
	}
	if (ret == 0)
		ret = ctl_expect(c, PROTO_REQUEST, m, e);
	if (ret == 0)
		*req = *m->u.request;
	/* Our proof goes first: it is no use to anyone without K, and the
	 * client need not wait for us to check its own. */
	if (ret == 0 && t == SESSION_DAEMON) {
		uint8_t mac[PROTO_MAC_LEN];
		ret = auth_ctl_mac(hs->key, false, hs->nc, hs->ns, mac);
		memset(m, 0, sizeof(*m));
		m->type = PROTO_AUTH;
		memcpy(m->u.auth.mac, mac, sizeof(mac));
		if (ret == 0)
			ret = session_send(c, m, e);
	}
	free(m);
	if (ret < 0)
		crypto_wipe(hs->key, sizeof(hs->key));
	return ret;
}

int session_server_auth(struct ctl *c, struct session_hs *hs, uint8_t k[PROTO_KEY_LEN],
			struct pc_err *e)
{
	uint8_t mac[PROTO_MAC_LEN];
	struct proto_msg m;
	int ret = 0;

	if (hs->t == SESSION_DAEMON) {
		ret = ctl_expect(c, PROTO_AUTH, &m, e);
		if (ret == 0)
			ret = auth_ctl_mac(hs->key, true, hs->nc, hs->ns, mac);
		if (ret == 0 && !crypto_equal(mac, m.u.auth.mac, sizeof(mac))) {
			(void)ctl_send_error(c, -PC_E_AUTH,
					     "authentication failed: the key does not match the "
					     "daemon's key file");
			ret = pc_err_set(e, -PC_E_AUTH, "%s failed to authenticate (wrong key)",
					 ctl_peer(c));
		}
	}
	if (ret == 0)
		ret = session_key(c, hs->t, hs->key, hs->nc, hs->ns, k, e);
	crypto_wipe(hs->key, sizeof(hs->key));
	return ret;
}

void session_close_chans(struct chan **chans, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		chan_free(chans[i]);
		chans[i] = NULL;
	}
}

void session_check_window(int fd, uint32_t window)
{
	uint32_t got = net_granted_window(fd);

	if (window > 0 && got > 0 && got < window)
		log_warn("the kernel limited the TCP window to %u bytes (asked for %u); "
			 "raise net.core.rmem_max and net.core.wmem_max to allow more",
			 (unsigned)got, (unsigned)window);
}

/* What the connector threads of one session_dial share: the gate they
 * wait at after the TCP connect, until the session key is known. */
struct dial_gate {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int state;              /* guarded by lock: 0 wait, 1 go, -1 stop */
};

struct connector {
	const uint8_t *route;   /* NULL, or the PROTO_ROUTE_LEN preamble to send first
	                           (read once the gate opened) */
	struct dial_gate *gate; /* NULL: no waiting */
	const _Atomic uint64_t *deadline; /* NULL: SESSION_AUTH_TIMEOUT_S from the
	                           handshake's start; else the dial's, which may be
	                           TLS_DEADLINE_LATER */
	const char *host;
	uint16_t port;
	int fd;                 /* a socket already connected (the thread's), or -1 */
	const struct proto_request *req;
	struct auth_data_mode mode;
	const uint8_t *k;
	uint16_t idx;
	uint8_t *pending;       /* NULL: confirm the listener now; else its proof, checked later */
	struct chan *ch;        /* result; owned by the connector until joined */
	struct pc_err err;
	pthread_t tid;
};

/* Waits up to SESSION_AUTH_TIMEOUT_S for the listener's proof to start
 * arriving on ch (at once if bytes wait inside it already), or a stop
 * signal (platform_poll): the read itself only has the chan's timeout,
 * which no signal shortens. Returns 0, -PC_E_TIMEOUT, -PC_E_INTERRUPTED
 * or -errno. */
static int session_await_proof(struct chan *ch)
{
	struct pollfd p = { .fd = chan_rfd(ch), .events = POLLIN };
	int n;

	if (chan_pending(ch))
		return 0;
	n = platform_poll(&p, 1, (int)SESSION_AUTH_TIMEOUT_S * 1000);
	return n > 0 ? 0 : n == 0 ? -PC_E_TIMEOUT : n;
}

/* Readies a data channel in clear: the handshake's timeout, our proof, the
 * listener's proof (unless c->pending defers it). Returns 0 or a negative
 * code. */
static int session_connect_clear(struct connector *c, struct chan *ch)
{
	uint8_t expect[PROTO_MAC_LEN];
	int ret = chan_set_timeout(ch, SESSION_AUTH_TIMEOUT_S);

	if (ret == 0)
		ret = auth_data_connect(ch, c->k, c->idx, expect);
	if (ret == 0 && c->pending == NULL)
		ret = session_await_proof(ch);
	if (ret == 0 && c->pending == NULL)
		ret = auth_data_confirm(ch, expect);
	else if (ret == 0)
		memcpy(c->pending, expect, sizeof(expect));
	return ret;
}

/* Makes c->ch of the connected socket fd: TLS or in clear. On failure fd
 * is closed. Returns 0 or a negative code, with a message in c->err for
 * TLS failures. */
static int session_connect_secure(struct connector *c, int fd)
{
	int ret;

	/* Blocks leave in single large writes: Nagle only delays the small
	 * END block, by a delayed-ACK timeout (40 ms) per transfer. */
	ret = net_set_nodelay(fd);
	if (ret == 0 && c->mode.tls && c->deadline != NULL) {
		ret = auth_data_tls_connect_until(fd, c->k, c->idx, c->mode.cipher, c->deadline,
						  &c->ch, &c->err);
	} else if (ret == 0 && c->mode.tls) {
		uint64_t deadline = platform_now_ns() + SESSION_AUTH_TIMEOUT_S * 1000000000ull;
		ret = auth_data_tls_connect(fd, c->k, c->idx, c->mode.cipher, deadline, &c->ch,
					    &c->err);
	} else if (ret == 0) {
		c->ch = chan_plain_new(fd, fd);
		ret = c->ch != NULL ? 0 : -ENOMEM;
		if (ret == 0) {
			fd = -1; /* the chan's now */
			ret = session_connect_clear(c, c->ch);
		}
	}
	if (ret == 0)
		return chan_set_timeout(c->ch, c->req->timeout_s);
	if (c->ch != NULL) {
		chan_free(c->ch);
		c->ch = NULL;
	} else if (fd >= 0) {
		close(fd);
	}
	return ret;
}

/* Sends the route preamble on a fresh socket (24 bytes: its buffer takes
 * them at once). Returns 0 or a negative code. */
static int session_send_route(int fd, const uint8_t route[PROTO_ROUTE_LEN])
{
	ssize_t w = send(fd, route, PROTO_ROUTE_LEN, MSG_NOSIGNAL);

	if (w == (ssize_t)PROTO_ROUTE_LEN)
		return 0;
	return w < 0 ? -errno : -PC_E_NET;
}

/* Waits at the gate; true: go on, false: stop. */
static bool session_gate_wait(struct dial_gate *g)
{
	int state;

	sync_lock(&g->lock);
	while (g->state == 0)
		sync_wait(&g->cond, &g->lock);
	state = g->state;
	sync_unlock(&g->lock);
	return state > 0;
}

static void *session_connect_one(void *arg)
{
	struct connector *c = arg;
	int fd = c->fd >= 0 ? c->fd : net_connect(c->host, c->port, c->req->family,
						  c->req->window, SESSION_CONNECT_TIMEOUT_S, &c->err);
	int ret;

	if (fd < 0)
		return NULL;
	if (c->gate != NULL && !session_gate_wait(c->gate)) {
		close(fd); /* stopped: the session never got that far */
		return NULL;
	}
	ret = c->route != NULL ? session_send_route(fd, c->route) : 0;
	if (ret < 0) {
		close(fd);
		pc_err_set(&c->err, -PC_E_NET, "data connection %u to %s port %u failed: %s",
			   (unsigned)c->idx, c->host, (unsigned)c->port, pc_strerror(ret));
		return NULL;
	}
	ret = session_connect_secure(c, fd);
	if (ret == 0)
		return NULL;
	char why[sizeof(c->err.msg)];
	int code = pc_err_get(&c->err, why, sizeof(why));
	if (code < 0) {
		/* TLS said why; say which connection. */
		pc_err_replace(&c->err, code, "data connection %u to %s port %u: %s",
			       (unsigned)c->idx, c->host, (unsigned)c->port, why);
	} else if (ret == -PC_E_INTERRUPTED) {
		pc_err_set(&c->err, ret, "interrupted while data connection %u to %s port %u "
			   "waited for the listener's proof", (unsigned)c->idx, c->host,
			   (unsigned)c->port);
	} else if (ret == -PC_E_TIMEOUT) {
		/* Reached, but nobody there proved the key in time. */
		pc_err_set(&c->err, ret, "data connection %u to %s port %u: connected, but no "
			   "answer to our handshake within %u s", (unsigned)c->idx, c->host,
			   (unsigned)c->port, SESSION_AUTH_TIMEOUT_S);
	} else {
		pc_err_set(&c->err, ret == -PC_E_AUTH ? ret : -PC_E_NET,
			   "data connection %u to %s port %u failed: %s", (unsigned)c->idx, c->host,
			   (unsigned)c->port, pc_strerror(ret));
	}
	return NULL;
}

struct session_dial {
	struct connector c[PROTO_MAX_STREAMS];
	unsigned started;           /* threads running */
	uint8_t route[PROTO_ROUTE_LEN]; /* set before the gate opens */
	uint8_t k[PROTO_KEY_LEN];   /* likewise */
	struct dial_gate gate;
	bool gated;                 /* gate initialised: the threads wait at it */
	_Atomic uint64_t deadline;  /* of the streams' handshakes */
};

/* Starts one connector thread per stream; routed: the threads wait at
 * the gate, then send the route preamble and run their handshakes until
 * d->deadline. Returns 0 or a negative code (the threads started are left
 * for session_dial_join). */
static int session_dial_begin(struct session_dial *d, const char *host, uint16_t port,
			      int *fds, const struct proto_request *req,
			      const uint8_t k[PROTO_KEY_LEN], uint8_t (*pending)[PROTO_MAC_LEN],
			      bool routed, struct pc_err *e)
{
	for (unsigned i = 0; i < req->streams; i++) {
		struct connector *c = &d->c[i];
		*c = (struct connector){ .fd = fds != NULL ? fds[i] : -1,
					 .route = routed ? d->route : NULL,
					 .gate = routed ? &d->gate : NULL,
					 .deadline = routed ? &d->deadline : NULL, .host = host,
					 .port = port, .req = req,
					 .mode = auth_data_mode(req->flags), .k = k,
					 .idx = (uint16_t)i,
					 .pending = pending ? pending[i] : NULL, .ch = NULL };
		pc_err_init(&c->err);
		int rc = pthread_create(&c->tid, NULL, session_connect_one, c);
		if (rc != 0) {
			pc_err_destroy(&c->err);
			/* The sockets no thread took are still ours. */
			for (unsigned j = i; fds != NULL && j < req->streams; j++)
				close(fds[j]);
			return pc_err_set(e, -rc, "cannot start thread: %s", strerror(rc));
		}
		d->started++;
	}
	return 0;
}

static void session_gate_set(struct session_dial *d, int state)
{
	sync_lock(&d->gate.lock);
	if (d->gate.state == 0)
		d->gate.state = state;
	sync_broadcast(&d->gate.cond);
	sync_unlock(&d->gate.lock);
}

/* Lets the threads go on to their handshakes with SESSION_AUTH_TIMEOUT_S
 * from now (go), or stops them; joins them, and collects their channels
 * into chans[] (all of them, or none on failure). Frees d. */
static int session_dial_join(struct session_dial *d, const struct proto_request *req, bool go,
			     int ret, struct chan **chans, struct pc_err *e)
{
	if (d->gated) {
		atomic_store(&d->deadline, go ? platform_now_ns() +
				     SESSION_AUTH_TIMEOUT_S * 1000000000ull : 1);
		session_gate_set(d, go ? 1 : -1);
	}
	for (unsigned i = 0; i < d->started; i++) {
		struct connector *c = &d->c[i];
		char msg[sizeof(c->err.msg)];
		if (pthread_join(c->tid, NULL) != 0 && ret == 0)
			ret = pc_err_set(e, -PC_E_NET, "cannot join connector thread");
		int code = pc_err_get(&c->err, msg, sizeof(msg));
		if (code < 0 && ret == 0 && go)
			ret = pc_err_set(e, code, "%s", msg);
		chans[i] = c->ch;
		pc_err_destroy(&c->err);
	}
	if (ret == 0 && !go)
		ret = -PC_E_ABORTED;
	if (ret == 0 && req->streams > 0)
		session_check_window(chan_wfd(chans[0]), req->window);
	if (ret < 0)
		session_close_chans(chans, d->started);
	if (d->gated) {
		sync_check("pthread_cond_destroy", pthread_cond_destroy(&d->gate.cond));
		sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&d->gate.lock));
	}
	crypto_wipe(d->route, sizeof(d->route));
	crypto_wipe(d->k, sizeof(d->k));
	free(d);
	return ret;
}

int session_connect_data(const char *host, uint16_t port, const struct proto_request *req,
			 const uint8_t k[PROTO_KEY_LEN], uint8_t (*pending)[PROTO_MAC_LEN],
			 struct chan **chans, struct pc_err *e)
{
	struct session_dial *d = calloc(1, sizeof(*d));

	if (d == NULL)
		return pc_err_set(e, -ENOMEM, "out of memory");
	int ret = session_dial_begin(d, host, port, NULL, req, k, pending, false, e);
	return session_dial_join(d, req, true, ret, chans, e);
}

int session_connect_fds(int *fds, const char *host, uint16_t port,
			const struct proto_request *req, const uint8_t k[PROTO_KEY_LEN],
			uint8_t (*pending)[PROTO_MAC_LEN], struct chan **chans, struct pc_err *e)
{
	struct session_dial *d = calloc(1, sizeof(*d));

	if (d == NULL) {
		for (unsigned i = 0; i < req->streams; i++)
			close(fds[i]);
		return pc_err_set(e, -ENOMEM, "out of memory");
	}
	int ret = session_dial_begin(d, host, port, fds, req, k, pending, false, e);
	return session_dial_join(d, req, true, ret, chans, e);
}

int session_dial_start(const char *host, uint16_t port, const struct proto_request *req,
		       struct session_dial **out, struct pc_err *e)
{
	struct session_dial *d = calloc(1, sizeof(*d));
	int ret;

	*out = NULL;
	if (d == NULL)
		return pc_err_set(e, -ENOMEM, "out of memory");
	atomic_init(&d->deadline, TLS_DEADLINE_LATER);
	int rc = pthread_mutex_init(&d->gate.lock, NULL);
	if (rc == 0) {
		rc = pthread_cond_init(&d->gate.cond, NULL);
		if (rc != 0)
			sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&d->gate.lock));
	}
	if (rc != 0) {
		free(d);
		return pc_err_set(e, -rc, "cannot set up the data connections: %s", strerror(rc));
	}
	d->gated = true;
	ret = session_dial_begin(d, host, port, NULL, req, d->k, NULL, true, e);
	if (ret < 0) {
		struct chan *none[PROTO_MAX_STREAMS];
		(void)session_dial_join(d, req, false, ret, none, e);
		return ret;
	}
	*out = d;
	return 0;
}

int session_dial_key(struct session_dial *d, const uint8_t k[PROTO_KEY_LEN], struct pc_err *e)
{
	uint8_t token[PROTO_ROUTE_TOKEN_LEN];
	int ret = auth_route_token(k, token);

	if (ret < 0)
		return pc_err_set(e, ret, "cannot derive the route token: %s", pc_strerror(ret));
	proto_route_encode(token, d->route);
	crypto_wipe(token, sizeof(token));
	memcpy(d->k, k, sizeof(d->k));
	session_gate_set(d, 1); /* the lock orders route and k before the threads' reads */
	return 0;
}

int session_dial_finish(struct session_dial *d, const struct proto_request *req, bool go,
			struct chan **chans, struct pc_err *e)
{
	return session_dial_join(d, req, go, 0, chans, e);
}

/* The filter of q's rules (*out NULL when it has none). Returns 0 or
 * -ENOMEM. The decoder has checked every rule's shape. */
static int session_filter(const struct proto_request *q, struct filter **out)
{
	*out = NULL;
	if (q->nfilters == 0)
		return 0;
	struct filter *f = filter_new();
	int ret = f != NULL ? 0 : -ENOMEM;
	for (unsigned i = 0; i < q->nfilters && ret == 0; i++) {
		const char *rule = proto_request_filter(q, i);
		ret = rule != NULL ? filter_add(f, rule) : -EINVAL;
	}
	if (ret < 0) {
		filter_free(f);
		return ret;
	}
	*out = f;
	return 0;
}

int session_transfer(struct session_run *run, struct pc_err *e)
{
	struct xfer x = {
		.streams = run->req->streams,
		.block_size = run->req->block_size,
		.ordered = (run->req->flags & PROTO_REQ_ORDERED) != 0,
		.report = run->report,
		.progress_s = run->progress_s,
		.hooks = run->hooks,
		.timeout_s = run->req->timeout_s,
		.bwlimit = run->req->bwlimit,
		.update = (run->req->sync & PROTO_SYNC_UPDATE) != 0,
		.verify = (run->req->sync & PROTO_SYNC_VERIFY) != 0,
		.delete = (run->req->sync & PROTO_SYNC_DELETE) != 0,
		.dry_run = (run->req->sync & PROTO_SYNC_DRY_RUN) != 0,
		.checksum = (run->req->sync & PROTO_SYNC_CHECKSUM) != 0,
		.resume = (run->req->sync & PROTO_SYNC_RESUME) != 0,
		.inplace = (run->req->sync & PROTO_SYNC_INPLACE) != 0,
		.peer = run->peer,
		.peer_local = run->peer_local,
		.ctl = run->ctl,
		.sigfd = run->sigfd,
		.err = e,
		.data = run->chans,
		.data_confirm = run->confirm,
		.skip_paths = run->skip_paths,
		.flat = !(run->req->flags & PROTO_REQ_RECURSIVE),
	};
	int ret = xfer_init(&x);

	if (ret < 0)
		return pc_err_set(e, ret, "out of memory");
	x.nchoices = 1; /* x.choices[0] is {CODEC_NONE, 0} */
	if (run->role == PROTO_ROLE_SOURCE && run->req->codec[0] != '\0') {
		ret = codec_parse(run->req->codec, x.choices, &x.nchoices, &x.codec_auto, e);
		if (ret < 0) {
			xfer_destroy(&x);
			return ret;
		}
	}
	uint16_t f = run->req->flags;
	struct filter *filter = NULL;
	ret = session_filter(run->req, &filter);
	if (ret < 0) {
		xfer_destroy(&x);
		return pc_err_set(e, ret, "out of memory");
	}
	x.filter = filter;
	if (run->role == PROTO_ROLE_SOURCE) {
		struct source_result r;
		run->input->walk = (struct walk_opts){
			.recursive = f & PROTO_REQ_RECURSIVE, .deref = f & PROTO_REQ_DEREF,
			.hardlinks = f & PROTO_REQ_HARDLINKS, .specials = f & PROTO_REQ_PRESERVE,
			.partials = (run->req->sync & PROTO_SYNC_RESUME) != 0, .filter = filter,
		};
		ret = source_run(&x, run->input, &r);
		run->self = r.self;
		run->other = r.peer;
		run->failed = r.failed + r.skipped;
		run->unverified = r.unverified;
		memcpy(run->streams, r.stream, sizeof(run->streams));
	} else {
		struct sink_result r;
		struct sink_opts o = { .preserve = f & PROTO_REQ_PRESERVE,
				       .numeric_ids = f & PROTO_REQ_NUMERIC_IDS,
				       .strip_setid = run->strip_setid };
		ret = sink_run(&x, run->target, &o, &r);
		run->self = r.self;
		run->other = r.peer;
		run->failed = r.failed;
		run->unverified = r.unverified;
	}
	filter_free(filter);
	xfer_destroy(&x);
	return ret;
}
