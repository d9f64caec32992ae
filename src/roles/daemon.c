/* SPDX-License-Identifier: Apache-2.0 */
/* daemon: pcopy --serve. Accepts every connection on one port and tells
 * them apart by their first byte (docs/PROTOCOL.md 6.2): a control
 * connection (TLS, or a frame in clear) gets a forked process of its own
 * for its session once its client proved the key, so one failing or
 * hostile session can neither crash nor stall the others; a data
 * connection names its session with a route preamble and is passed on to
 * that session's process over a Unix socket. The parent only polls: a
 * connection costs it no process or thread until it is handed on, and
 * what is not pcopy, or a session in clear that is not allowed, is
 * answered and closed by the parent itself. */
#include <pcopy/pcopy.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "roles/api.h"
#include "sys/crypto.h"
#include "wire/keyfile.h"
#include "sys/log.h"
#include "sys/loglimit.h"
#include "sys/net.h"
#include "transport/chan.h"
#include "sys/platform.h"
#include "wire/auth.h"
#include "roles/server.h"

/* Processes that tell a client the daemon is busy, at once; they are no
 * sessions, and a client beyond them only sees its connection closed. */
#define DAEMON_MAX_REFUSERS 8
/* Refused and dropped connections are logged one by one only once per
 * source address in this window; the rest are summarised (loglimit.h). */
#define DAEMON_LOG_WINDOW_S 5u
#define DAEMON_LOG_SOURCES 256u    /* addresses it keeps count of */
#define DAEMON_LOG_BUDGET 32u      /* addresses logged one by one per window */

/* What a session's process tells the parent on its Unix socket: its
 * route token, or why it refused its client (for the parent to log,
 * summarised). The first byte says which. */
#define DAEMON_MSG_TOKEN 'T'       /* + PROTO_ROUTE_TOKEN_LEN bytes */
#define DAEMON_MSG_REFUSED 'R'     /* + the reason, without a terminator */
#define DAEMON_MSG_MAX 512u

/* A connection refused with an ERROR is read from (so that our close does
 * not reset the connection under the ERROR) for this long at most. */
#define DAEMON_DRAIN_S 2u

/* A session's process. */
struct daemon_kid {
	pid_t pid;
	int sock;                      /* our end of its Unix socket; -1 once it closed */
	bool has_token;                /* it told us its route token */
	uint8_t token[PROTO_ROUTE_TOKEN_LEN];
	char who[NET_MAX_ADDR];        /* its client, "ADDR:PORT" */
	char src[NET_MAX_ADDR];        /* its client's ADDR */
};

/* A connection the parent holds until it knows where it goes. */
enum daemon_pend_state {
	PEND_FIRST,                    /* waiting for its first byte */
	PEND_TLS,                      /* in the control channel's TLS handshake */
	PEND_ROUTE,                    /* reading its route preamble */
	PEND_PARKED,                   /* preamble read; its session has not said its token yet */
	PEND_DRAIN,                    /* refused with an ERROR: read what it sends until it closes */
};

struct daemon_pend {
	int fd;
	enum daemon_pend_state state;
	uint64_t accepted_ns;          /* the oldest goes first when the table is full */
	uint64_t deadline_ns;          /* dropped then: SESSION_AUTH_TIMEOUT_S from accept,
	                                  DAEMON_DRAIN_S from an ERROR */
	uint8_t buf[PROTO_ROUTE_LEN];
	size_t got;
	struct tls_accepting *tls;     /* PEND_TLS and after: its handshake, driven here */
	short events;                  /* PEND_TLS: what the handshake waits for */
	char who[NET_MAX_ADDR];        /* "ADDR:PORT", for the log */
	char src[NET_MAX_ADDR];        /* ADDR alone: --max-per-source counts by it */
};

struct daemon {
	uint8_t key[PROTO_KEY_LEN];
	int rootfd;
	int lfd;
	int chldfd;                    /* signalfd for SIGCHLD */
	struct daemon_kid *kids;       /* max_sessions of them */
	unsigned nkids, max_sessions;  /* --max-sessions */
	pid_t refusers[DAEMON_MAX_REFUSERS]; /* busy answers under way (daemon_busy_child) */
	unsigned nrefusers;
	struct daemon_pend *pend;      /* max_startups of them */
	unsigned npend, max_startups;  /* --max-startups */
	unsigned max_per_source;       /* --max-per-source */
	struct pollfd *pfd;            /* 3 + max_sessions + max_startups, for daemon_step */
	struct loglimit *refusals;     /* summarises refused and dropped connections */
	char listen_host[NET_MAX_ADDR];
	bool allow_unencrypted;        /* --allow-unencrypted */
};

/* Splits "[ADDR:]PORT" ("7000", "127.0.0.1:7000", "[::1]:7000"). */
static int daemon_parse_addr(const char *s, char *host, size_t cap, uint16_t *port,
			     struct pc_err *e)
{
	const char *colon = strrchr(s, ':'), *p = colon ? colon + 1 : s;
	char *end;
	unsigned long v;

	host[0] = '\0';
	if (colon != NULL) {
		size_t len = (size_t)(colon - s);
		if (len >= 2 && s[0] == '[' && s[len - 1] == ']') {
			s++;
			len -= 2;
		}
		if (len >= cap)
			return pc_err_set(e, -PC_E_USAGE, "--serve: address '%s' is too long", s);
		memcpy(host, s, len);
		host[len] = '\0';
	}
	errno = 0;
	v = strtoul(p, &end, 10);
	if (*p == '\0' || *end != '\0' || errno != 0 || v == 0 || v > 65535)
		return pc_err_set(e, -PC_E_USAGE,
				  "--serve: '%s' is not [ADDR:]PORT with a port from 1 to 65535", p);
	*port = (uint16_t)v;
	return 0;
}

static void daemon_reap(struct daemon *d)
{
	struct signalfd_siginfo si;
	int status;
	pid_t pid;

	while (read(d->chldfd, &si, sizeof(si)) > 0)
		;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		for (unsigned i = 0; i < d->nrefusers; i++) {
			if (d->refusers[i] == pid) {
				d->refusers[i] = d->refusers[--d->nrefusers];
				break;
			}
		}
		for (unsigned i = 0; i < d->nkids; i++) {
			if (d->kids[i].pid == pid) {
				if (d->kids[i].sock >= 0)
					close(d->kids[i].sock);
				d->kids[i] = d->kids[--d->nkids];
				break;
			}
		}
	}
}

/* In a session's process that refuses its client (who) before a session:
 * tells the parent why, on its Unix socket sock, so that the parent logs
 * it summarised with the other refusals of that address (a stranger's
 * flood would fill the log otherwise); logs it here if that fails. Does
 * not close sock. */
static void daemon_child_refused(int sock, const char *who, const char *why)
{
	char msg[DAEMON_MSG_MAX];
	int n = snprintf(msg, sizeof(msg), "%c%s", DAEMON_MSG_REFUSED, why);

	if (n < 0)
		n = 1;
	if ((size_t)n >= sizeof(msg))
		n = (int)sizeof(msg) - 1;
	if (sock < 0 || send(sock, msg, (size_t)n, MSG_NOSIGNAL) != (ssize_t)n)
		log_warn("refused %s: %s", who, why);
}

/* In a forked child: closes what belongs to the parent and to the other
 * sessions, keeping keep_fd and keep_sock (-1: none). */
static void daemon_child_close(struct daemon *d, int keep_fd, int keep_sock)
{
	close(d->lfd);
	close(d->chldfd);
	for (unsigned i = 0; i < d->npend; i++)
		if (d->pend[i].fd != keep_fd)
			close(d->pend[i].fd);
	for (unsigned i = 0; i < d->nkids; i++)
		if (d->kids[i].sock >= 0 && d->kids[i].sock != keep_sock)
			close(d->kids[i].sock);
}

/* After the control channel's TLS handshake: tells the parent the route
 * token of this session (from the session key), so that it passes on the
 * data connections that name it. Returns 0 or a negative code. */
static int daemon_child_register(struct chan *ch, int sock)
{
	uint8_t k[PROTO_KEY_LEN], token[PROTO_ROUTE_TOKEN_LEN];
	uint8_t msg[1 + PROTO_ROUTE_TOKEN_LEN] = { DAEMON_MSG_TOKEN };
	int ret = auth_session_key_tls(ch, k);

	if (ret == 0)
		ret = auth_route_token(k, token);
	if (ret == 0) {
		memcpy(msg + 1, token, sizeof(token));
		if (send(sock, msg, sizeof(msg), MSG_NOSIGNAL) != (ssize_t)sizeof(msg))
			ret = -errno;
	}
	crypto_wipe(k, sizeof(k));
	crypto_wipe(token, sizeof(token));
	crypto_wipe(msg, sizeof(msg));
	return ret;
}

/* In the forked child: serve the session of control connection fd (tls:
 * its TLS handshake, which the parent completed; NULL: in clear) and end
 * the process. sock is the child's end of its Unix socket to the parent. */
static void daemon_child(struct daemon *d, int fd, struct tls_accepting *tls, int sock,
			 const char *who)
{
	char client[NET_MAX_ADDR] = "";
	struct server_cfg cfg = {
		.transport = SESSION_DAEMON, .key = d->key, .rootfd = d->rootfd, .beneath = true,
		.listen_host = d->listen_host, .self_host = d->listen_host,
		.client_host = client, .allow_stdout = false, .sigfd = api_sigfd(),
		.allow_unencrypted = d->allow_unencrypted, .route_fd = -1,
	};
	struct pc_err e;
	struct chan *ch = NULL;
	struct ctl *c;  /* owns ch */
	int ret;

	daemon_child_close(d, fd, sock);
	pc_err_init(&e);
	(void)net_set_nodelay(fd);
	/* Data connections in clear come to the address the client reached us on. */
	if (net_local_host(fd, d->listen_host, sizeof(d->listen_host)) < 0)
		cfg.listen_host = NULL;
	(void)net_peer_host(fd, client, sizeof(client));
	if (tls != NULL) {
		/* The parent ran the handshake: the client proved the key. */
		cfg.transport = SESSION_DAEMON_TLS;
		ch = tls_accept_chan(tls);
		ret = ch != NULL ? 0 : pc_err_set(&e, -ENOMEM, "out of memory");
		/* The client's data connections come to our port: without
		 * our token the daemon could not pass them on. */
		if (ret == 0) {
			ret = daemon_child_register(ch, sock);
			if (ret < 0) {
				pc_err_set(&e, ret, "cannot tell the daemon this session's route "
					   "token: %s", pc_strerror(ret));
				chan_free(ch);
				ch = NULL;
			} else {
				cfg.route_fd = sock;
			}
		}
	} else {
		ch = chan_plain_new(fd, fd);
		ret = ch != NULL ? 0 : -ENOMEM;
	}
	if (ret < 0) {
		char msg[sizeof(e.msg)];
		if (pc_err_get(&e, msg, sizeof(msg)) < 0)
			daemon_child_refused(sock, who, msg);
		else
			daemon_child_refused(sock, who, pc_strerror(ret));
		close(fd);
		_exit(pc_exit_code(ret));
	}
	c = ctl_new(ch, who, false);
	if (c == NULL) {
		chan_free(ch);
		_exit(PC_EXIT_FILEIO);
	}
	(void)chan_set_timeout(ch, SESSION_AUTH_TIMEOUT_S);
	if (cfg.route_fd < 0)
		close(sock); /* nothing comes that way: the session listens itself */
	ctl_set_intr(c, cfg.sigfd);
	/* The whole handshake, up to the client's proof, gets that long too:
	 * in clear the session holds a data listener from READY on. */
	ctl_set_deadline(c, SESSION_AUTH_TIMEOUT_S);
	ret = server_session(c, &cfg, &e);
	if (ret < 0) {
		char msg[sizeof(e.msg)];
		pc_err_get(&e, msg, sizeof(msg));
		log_warn("session from %s failed: %s", who, msg);
	} else {
		log_info("session from %s done", who);
	}
	ctl_free(c);
	crypto_wipe(d->key, sizeof(d->key));
	/* This process was forked for the session; the daemon is its parent. */
	_exit(pc_exit_code(ret));
}

/* Logs a refused or dropped connection from source address src, unless
 * that address had one logged in the last DAEMON_LOG_WINDOW_S: then it is
 * only counted, for daemon_log_summary. Parent only. */
__attribute__((format(printf, 3, 4)))
static void daemon_refused(struct daemon *d, const char *src, const char *fmt, ...)
{
	char line[1024];
	va_list ap;

	if (!loglimit_admit(d->refusals, src, platform_now_ns()))
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	log_warn("%s", line);
}

/* loglimit's report: what daemon_refused counted and did not log (src
 * NULL: from addresses past the budget, all together). */
static void daemon_log_summary(void *arg, const char *src, unsigned long more)
{
	(void)arg;
	if (src == NULL)
		log_warn("%lu more connection%s refused or dropped in the last %u s, from "
			 "addresses not logged (at most %u addresses are, every %u s)", more,
			 more == 1 ? "" : "s", DAEMON_LOG_WINDOW_S, DAEMON_LOG_BUDGET,
			 DAEMON_LOG_WINDOW_S);
	else
		log_warn("%s: %lu more connection%s refused or dropped in the last %u s "
			 "(logged once per address every %u s)", src, more, more == 1 ? "" : "s",
			 DAEMON_LOG_WINDOW_S, DAEMON_LOG_WINDOW_S);
}

/* In a forked child: tells the client of control connection fd (tls: its
 * TLS handshake, which the parent completed; NULL: in clear) that the
 * daemon runs all the sessions it may, and ends the process. It logs
 * nothing: the parent logged the refusal. */
static void daemon_busy_child(struct daemon *d, int fd, struct tls_accepting *tls)
{
	char msg[128];
	uint8_t junk[4096];
	struct pc_err e;
	struct chan *ch = NULL;
	struct ctl *c = NULL;  /* owns ch */
	sigset_t none;
	int ret;

	/* No session to end cleanly: the daemon's SIGTERM ends it at once. */
	sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
	daemon_child_close(d, fd, -1);
	pc_err_init(&e);
	snprintf(msg, sizeof(msg), "daemon busy: %u session%s running, try again later",
		 d->max_sessions, d->max_sessions == 1 ? "" : "s");
	if (tls != NULL) {
		ch = tls_accept_chan(tls); /* the parent ran the handshake */
		ret = ch != NULL ? 0 : -ENOMEM;
	} else {
		ch = chan_plain_new(fd, fd);
		ret = ch != NULL ? 0 : -ENOMEM;
	}
	crypto_wipe(d->key, sizeof(d->key));
	if (ret < 0) {
		close(fd); /* a stranger, or too slow: it gets nothing */
		_exit(pc_exit_code(ret));
	}
	c = ctl_new(ch, "client", false);
	if (c == NULL) {
		chan_free(ch);
		_exit(PC_EXIT_FILEIO);
	}
	/* As daemon_refuse_clear: read what the client sent (its HELLO), so
	 * that our close does not reset the connection under the ERROR. */
	(void)chan_set_timeout(ch, 2);
	(void)ctl_send_error(c, -PC_E_BUSY, msg);
	(void)chan_close_send(ch);
	while (chan_recv_some(ch, junk, sizeof(junk)) > 0)
		;
	ctl_free(c);
	_exit(PC_EXIT_BUSY);
}

/* Forgets pending connection i (closing it unless handed on). */
static void daemon_pend_drop(struct daemon *d, unsigned i, bool close_it)
{
	/* A child forked for it goes on with its own copy of the handshake. */
	tls_accepting_free(d->pend[i].tls);
	if (close_it)
		close(d->pend[i].fd);
	d->pend[i] = d->pend[--d->npend];
}

/* A control connection while max_sessions run: a short-lived process
 * tells its client so, if fewer than DAEMON_MAX_REFUSERS do that already;
 * else it is closed. Either way it is logged as refused. */
static void daemon_busy(struct daemon *d, unsigned i)
{
	struct daemon_pend p = d->pend[i];
	pid_t pid = -1;

	if (d->nrefusers >= DAEMON_MAX_REFUSERS) {
		daemon_refused(d, p.src, "refused %s: %u sessions already running, and %u clients "
			       "are being told so already: closed it", p.who, d->max_sessions,
			       DAEMON_MAX_REFUSERS);
		daemon_pend_drop(d, i, true);
		return;
	}
	daemon_refused(d, p.src, "refused %s: %u sessions already running", p.who,
		       d->max_sessions);
	pid = fork();
	if (pid == 0)
		daemon_busy_child(d, p.fd, p.tls);
	daemon_pend_drop(d, i, true);
	if (pid < 0)
		log_warn("cannot tell %s the daemon is busy: fork: %s", p.who, strerror(errno));
	else
		d->refusers[d->nrefusers++] = pid;
}

/* A control connection: its session gets a process of its own. */
static void daemon_fork(struct daemon *d, unsigned i)
{
	struct daemon_pend p = d->pend[i];
	int sp[2];
	pid_t pid;

	if (d->nkids >= d->max_sessions) {
		daemon_busy(d, i);
		return;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) != 0) {
		log_warn("cannot serve %s: socketpair: %s", p.who, strerror(errno));
		daemon_pend_drop(d, i, true);
		return;
	}
	pid = fork();
	if (pid == 0)
		daemon_child(d, p.fd, p.tls, sp[1], p.who);
	close(sp[1]);
	daemon_pend_drop(d, i, true);
	if (pid < 0) {
		log_warn("cannot serve %s: fork: %s", p.who, strerror(errno));
		close(sp[0]);
		return;
	}
	struct daemon_kid *k = &d->kids[d->nkids++];
	*k = (struct daemon_kid){ .pid = pid, .sock = sp[0] };
	snprintf(k->who, sizeof(k->who), "%s", p.who);
	snprintf(k->src, sizeof(k->src), "%s", p.src);
}

/* Hands data connection i to the session whose token it named, if that
 * session has said it yet (else parks it). */
static void daemon_route(struct daemon *d, unsigned i)
{
	struct daemon_pend *p = &d->pend[i];
	uint8_t token[PROTO_ROUTE_TOKEN_LEN];

	if (proto_route_decode(p->buf, p->got, token) < 0) {
		daemon_refused(d, p->src, "dropped %s: not a pcopy data connection of version %u",
			       p->who, PROTO_VERSION);
		daemon_pend_drop(d, i, true);
		return;
	}
	for (unsigned j = 0; j < d->nkids; j++) {
		struct daemon_kid *k = &d->kids[j];
		if (k->sock < 0 || !k->has_token || !crypto_equal(k->token, token, sizeof(token)))
			continue;
		int ret = net_send_fd(k->sock, p->fd, p->who);
		if (ret == -EPIPE || ret == -ECONNRESET)
			/* Its session ended (it failed, say): its client's, not a
			 * stranger's, and nothing to summarise. */
			log_info("%s came after its session ended", p->who);
		else if (ret < 0)
			daemon_refused(d, p->src, "dropped data connection from %s: cannot pass it "
				       "on to its session: %s", p->who, strerror(-ret));
		daemon_pend_drop(d, i, true);
		return;
	}
	p->state = PEND_PARKED;
}

/* Logs why pending connection i failed (summarised) and drops it. */
static void daemon_pend_fail(struct daemon *d, unsigned i, int ret, struct pc_err *e)
{
	struct daemon_pend *p = &d->pend[i];
	char msg[sizeof(e->msg)];

	if (pc_err_get(e, msg, sizeof(msg)) >= 0)
		snprintf(msg, sizeof(msg), "%s", pc_strerror(ret));
	daemon_refused(d, p->src, "refused %s: %s", p->who, msg);
	daemon_pend_drop(d, i, true);
}

/* Runs the TLS handshake of pending connection i as far as it goes. Only
 * a client that proved the key gets a process. */
static void daemon_pend_handshake(struct daemon *d, unsigned i)
{
	struct daemon_pend *p = &d->pend[i];
	struct pc_err e;
	int ret;

	pc_err_init(&e);
	ret = tls_accept_step(p->tls, &p->events, &e);
	if (ret < 0)
		daemon_pend_fail(d, i, ret, &e);
	else if (ret == 1)
		daemon_fork(d, i);
	pc_err_destroy(&e);
}

/* A client in clear (--no-encrypt, or a pcopy older than protocol 4)
 * while this daemon requires TLS: pending connection i gets an ERROR that
 * says why, sent without blocking (a short frame, into an empty socket
 * buffer), and is read from until it closes (PEND_DRAIN). No process. */
static void daemon_refuse_clear(struct daemon *d, unsigned i)
{
	struct daemon_pend *p = &d->pend[i];
	struct proto_msg m = { .type = PROTO_ERROR };
	uint8_t frame[PROTO_FRAME_HDR_LEN + sizeof(m.u.error.msg) + 8];
	uint64_t drain = platform_now_ns() + DAEMON_DRAIN_S * 1000000000ull;
	int len;

	daemon_refused(d, p->src, "refused %s: it asked for a session in clear, and this daemon "
		       "requires encryption (--allow-unencrypted allows it)", p->who);
	m.u.error.code = -PC_E_AUTH;
	snprintf(m.u.error.msg, sizeof(m.u.error.msg), "this daemon requires encryption (TLS "
		 "1.3) and was started without --allow-unencrypted: do not use --no-encrypt "
		 "with it (or update this pcopy)");
	len = proto_encode(&m, frame, sizeof(frame));
	if (len < 0 || send(p->fd, frame, (size_t)len, MSG_DONTWAIT | MSG_NOSIGNAL) != len ||
	    shutdown(p->fd, SHUT_WR) != 0) {
		daemon_pend_drop(d, i, true);
		return;
	}
	p->state = PEND_DRAIN;
	if (drain < p->deadline_ns)
		p->deadline_ns = drain;
}

/* Pending connection i, refused, has bytes: they are thrown away, and
 * once it closes (or fails) it is dropped. */
static void daemon_pend_drain(struct daemon *d, unsigned i)
{
	uint8_t junk[4096];
	ssize_t r;

	do
		r = recv(d->pend[i].fd, junk, sizeof(junk), MSG_DONTWAIT);
	while (r > 0);
	if (r == 0 || (errno != EAGAIN && errno != EINTR))
		daemon_pend_drop(d, i, true);
}

/* Pending connection i has bytes (or hung up). */
static void daemon_pend_read(struct daemon *d, unsigned i)
{
	struct daemon_pend *p = &d->pend[i];
	uint8_t first;
	ssize_t r;

	if (p->state == PEND_PARKED) {
		/* Its client went away (its session failed, or it was stopped)
		 * before the session said its token: not a refusal, and no
		 * reason to hold the place for 10 s. */
		log_info("%s went away before its session took it", p->who);
		daemon_pend_drop(d, i, true);
		return;
	}
	if (p->state == PEND_FIRST) {
		r = recv(p->fd, &first, 1, MSG_PEEK | MSG_DONTWAIT);
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (r <= 0) {
			daemon_pend_drop(d, i, true); /* gone before a word */
			return;
		}
		if (proto_starts_tls(first)) {
			struct pc_err e;
			int ret;
			pc_err_init(&e);
			ret = tls_accept_begin(p->fd, auth_ctl_find_psk, d->key, &p->tls, &e);
			if (ret < 0)
				daemon_pend_fail(d, i, ret, &e);
			else
				p->state = PEND_TLS;
			pc_err_destroy(&e);
			if (ret < 0)
				return;
		} else if (proto_starts_route(first)) {
			p->state = PEND_ROUTE;
		} else if (first == PROTO_HELLO && d->allow_unencrypted) {
			daemon_fork(d, i); /* a control channel in clear */
			return;
		} else if (first == PROTO_HELLO) {
			daemon_refuse_clear(d, i);
			return;
		} else {
			daemon_refused(d, p->src, "dropped %s: not a pcopy connection (it began "
				       "with the byte 0x%02x)", p->who, first);
			daemon_pend_drop(d, i, true);
			return;
		}
	}
	if (p->state == PEND_DRAIN) {
		daemon_pend_drain(d, i);
		return;
	}
	if (p->state == PEND_TLS) {
		daemon_pend_handshake(d, i);
		return;
	}
	r = recv(p->fd, p->buf + p->got, sizeof(p->buf) - p->got, MSG_DONTWAIT);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (r <= 0) {
		daemon_pend_drop(d, i, true);
		return;
	}
	p->got += (size_t)r;
	if (p->got == sizeof(p->buf))
		daemon_route(d, i);
}

/* A session's process said something: its token (pass on what waits for
 * it), or why it refused its client (log it, summarised). */
static void daemon_kid_read(struct daemon *d, unsigned j)
{
	struct daemon_kid *k = &d->kids[j];
	char msg[DAEMON_MSG_MAX];
	ssize_t r = recv(k->sock, msg, sizeof(msg), MSG_DONTWAIT);

	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (r > 1 && msg[0] == DAEMON_MSG_REFUSED)
		daemon_refused(d, k->src, "refused %s: %.*s", k->who, (int)(r - 1), msg + 1);
	if (r != 1 + (ssize_t)PROTO_ROUTE_TOKEN_LEN || msg[0] != DAEMON_MSG_TOKEN ||
	    k->has_token) {
		/* Ended (0), failed, refused, or said something else: it
		 * gets no more. */
		close(k->sock);
		k->sock = -1;
		k->has_token = false;
		return;
	}
	memcpy(k->token, msg + 1, PROTO_ROUTE_TOKEN_LEN);
	k->has_token = true;
	for (unsigned i = d->npend; i-- > 0;)
		if (d->pend[i].state == PEND_PARKED)
			daemon_route(d, i);
}

/* The address of who ("ADDR:PORT" or "[ADDR]:PORT"), without the port. */
static void daemon_source(const char *who, char *src, size_t cap)
{
	const char *colon = strrchr(who, ':');
	size_t len = colon != NULL ? (size_t)(colon - who) : strlen(who);

	if (len >= 2 && who[0] == '[' && who[len - 1] == ']') {
		who++;
		len -= 2;
	}
	snprintf(src, cap, "%.*s", (int)len, who);
}

/* Pending connections from source address src. */
static unsigned daemon_count_source(const struct daemon *d, const char *src)
{
	unsigned n = 0;

	for (unsigned i = 0; i < d->npend; i++)
		n += strcmp(d->pend[i].src, src) == 0;
	return n;
}

static void daemon_accept(struct daemon *d)
{
	char who[NET_MAX_ADDR], src[NET_MAX_ADDR];
	int fd = net_accept(d->lfd, 0, who, sizeof(who));

	if (fd < 0)
		return;
	daemon_source(who, src, sizeof(src));
	/* One address cannot take all the places: the ones it holds stay,
	 * a new one goes at once. */
	if (daemon_count_source(d, src) >= d->max_per_source) {
		daemon_refused(d, src, "refused %s: %u connections from %s wait already "
			       "(--max-per-source)", who, d->max_per_source, src);
		close(fd);
		return;
	}
	if (d->npend >= d->max_startups) {
		/* Full: the oldest goes, so that a flood cannot keep new
		 * clients out for longer than it keeps connecting. */
		unsigned old = 0;
		for (unsigned i = 1; i < d->npend; i++)
			if (d->pend[i].accepted_ns < d->pend[old].accepted_ns)
				old = i;
		daemon_refused(d, d->pend[old].src, "dropped %s: %u connections wait already, "
			       "this was the oldest", d->pend[old].who, d->max_startups);
		daemon_pend_drop(d, old, true);
	}
	struct daemon_pend *p = &d->pend[d->npend++];
	uint64_t now = platform_now_ns();
	*p = (struct daemon_pend){ .fd = fd, .state = PEND_FIRST, .accepted_ns = now,
				   .deadline_ns = now + SESSION_AUTH_TIMEOUT_S * 1000000000ull };
	snprintf(p->who, sizeof(p->who), "%s", who);
	snprintf(p->src, sizeof(p->src), "%s", src);
}

/* Drops what is past its deadline; returns the poll timeout (ms) until
 * the next deadline, or -1. */
static int daemon_expire(struct daemon *d)
{
	uint64_t now = platform_now_ns(), next = UINT64_MAX;

	for (unsigned i = d->npend; i-- > 0;) {
		struct daemon_pend *p = &d->pend[i];
		if (now >= p->deadline_ns && p->state == PEND_DRAIN) {
			daemon_pend_drop(d, i, true); /* logged when refused */
		} else if (now >= p->deadline_ns) {
			daemon_refused(d, p->src, "dropped %s: %s within %u s", p->who,
				 p->state == PEND_PARKED ? "no session of this daemon had its token"
				 : p->state == PEND_ROUTE ? "its route preamble did not arrive"
				 : p->state == PEND_TLS ? "its TLS handshake did not end"
				 : "it sent nothing", SESSION_AUTH_TIMEOUT_S);
			daemon_pend_drop(d, i, true);
		} else if (p->deadline_ns < next) {
			next = p->deadline_ns;
		}
	}
	if (next == UINT64_MAX)
		return -1;
	return (int)((next - now) / 1000000u) + 1;
}

/* One round of the loop: polls everything, handles what is ready.
 * Returns 0, 1 on a stop signal, or a negative code. */
static int daemon_step(struct daemon *d, struct pc_err *e)
{
	struct pollfd *p = d->pfd;
	unsigned np = 0, kid0, pend0, nkids = d->nkids;
	int timeout = daemon_expire(d);
	uint64_t summary = loglimit_flush(d->refusals, platform_now_ns());

	/* The next summary of refusals is due in that many ns. */
	if (summary != UINT64_MAX && (timeout < 0 || summary / 1000000u + 1 < (uint64_t)timeout))
		timeout = (int)(summary / 1000000u) + 1;

	p[np++] = (struct pollfd){ .fd = d->lfd, .events = POLLIN };
	p[np++] = (struct pollfd){ .fd = d->chldfd, .events = POLLIN };
	p[np++] = (struct pollfd){ .fd = api_sigfd(), .events = POLLIN };
	kid0 = np;
	for (unsigned j = 0; j < d->nkids; j++)
		p[np++] = (struct pollfd){ .fd = d->kids[j].sock, .events = POLLIN };
	pend0 = np;
	for (unsigned i = 0; i < d->npend; i++)
		/* A parked one is watched for its client's going only: what
		 * it sends is its session's to read. */
		p[np++] = (struct pollfd){ .fd = d->pend[i].fd,
					   .events = d->pend[i].state == PEND_TLS ? d->pend[i].events
						     : d->pend[i].state == PEND_PARKED ? POLLRDHUP
										       : POLLIN };
	int n = poll(p, np, timeout);
	if (n < 0 && errno == EINTR)
		return 0;
	if (n < 0)
		return pc_err_set(e, -errno, "poll: %s", strerror(errno));
	if (p[2].revents & POLLIN) {
		log_info("stopping on signal");
		return 1;
	}
	/* Pending connections first, highest index first: dropping i moves
	 * the last one into its place, which has been looked at already. */
	for (unsigned i = d->npend; i-- > 0;)
		if (p[pend0 + i].revents & (POLLIN | POLLOUT | POLLHUP | POLLERR | POLLRDHUP))
			daemon_pend_read(d, i);
	/* Only the sessions polled: those forked just now come after them. */
	for (unsigned j = 0; j < nkids; j++)
		if (p[kid0 + j].fd >= 0 && (p[kid0 + j].revents & (POLLIN | POLLHUP | POLLERR)))
			daemon_kid_read(d, j);
	if (p[1].revents & POLLIN)
		daemon_reap(d);
	if (p[0].revents & POLLIN)
		daemon_accept(d);
	return 0;
}

/* One limit: 0 takes def; above max is a usage error naming opt. */
static int daemon_limit(unsigned v, unsigned def, unsigned max, const char *opt,
			unsigned *out, struct pc_err *e)
{
	if (v > max)
		return pc_err_set(e, -PC_E_USAGE, "%s must be 1 to %u, not %u", opt, max, v);
	*out = v != 0 ? v : def;
	return 0;
}

/* Takes --max-sessions, --max-startups and --max-per-source, and sizes the
 * tables (kids, pend, pfd) for them. */
static int daemon_setup_limits(struct daemon *d, const struct pcopy_opts *o, struct pc_err *e)
{
	int ret = daemon_limit(o->max_sessions, PCOPY_DEFAULT_MAX_SESSIONS,
			       PCOPY_MAX_MAX_SESSIONS, "--max-sessions", &d->max_sessions, e);

	if (ret == 0)
		ret = daemon_limit(o->max_startups, PCOPY_DEFAULT_MAX_STARTUPS,
				   PCOPY_MAX_MAX_STARTUPS, "--max-startups", &d->max_startups, e);
	if (ret == 0)
		ret = daemon_limit(o->max_per_source, PCOPY_DEFAULT_MAX_PER_SOURCE,
				   PCOPY_MAX_MAX_PER_SOURCE, "--max-per-source", &d->max_per_source, e);
	if (ret < 0)
		return ret;
	d->kids = calloc(d->max_sessions, sizeof(*d->kids));
	d->pend = calloc(d->max_startups, sizeof(*d->pend));
	d->pfd = calloc(3 + (size_t)d->max_sessions + d->max_startups, sizeof(*d->pfd));
	d->refusals = loglimit_new(DAEMON_LOG_SOURCES, DAEMON_LOG_BUDGET,
				   DAEMON_LOG_WINDOW_S * 1000000000ull, daemon_log_summary, d);
	if (d->kids == NULL || d->pend == NULL || d->pfd == NULL || d->refusals == NULL)
		return pc_err_set(e, -ENOMEM, "out of memory for %u sessions and %u waiting "
				  "connections", d->max_sessions, d->max_startups);
	return 0;
}

static int daemon_setup(struct daemon *d, const struct pcopy_opts *o, struct pc_err *e)
{
	char host[NET_MAX_ADDR];
	uint16_t port = 0;
	sigset_t set;
	int ret;

	d->allow_unencrypted = o->allow_unencrypted;
	/* What only a client chooses would be ignored here: say so. */
	if (o->cipher != NULL || o->encrypt != PCOPY_ENCRYPT_DEFAULT)
		return pc_err_set(e, -PC_E_USAGE, "%s is a client's choice: a daemon takes the "
				  "cipher its client offers, and serves clear text only with "
				  "--allow-unencrypted",
				  o->cipher != NULL ? "--cipher"
				  : o->encrypt == PCOPY_ENCRYPT_ON ? "--encrypt" : "--no-encrypt");
	if (o->root == NULL || o->key_file == NULL)
		return pc_err_set(e, -PC_E_USAGE, "--serve needs --root DIR and --key-file KEY");
	ret = daemon_setup_limits(d, o, e);
	if (ret == 0)
		ret = daemon_parse_addr(o->serve_addr, host, sizeof(host), &port, e);
	if (ret == 0)
		ret = keyfile_load(o->key_file, d->key, e);
	if (ret < 0)
		return ret;
	d->rootfd = open(o->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (d->rootfd < 0)
		return pc_err_set(e, -errno, "--root '%s': %s", o->root, strerror(errno));
	d->lfd = net_listen(host, port, port, 0, 0, e);
	if (d->lfd == -EADDRINUSE) /* net_listen speaks of data ports */
		return pc_err_replace(e, d->lfd, "--serve: port %u is in use on %s (another "
				      "daemon?)", (unsigned)port, host[0] ? host : "this host");
	if (d->lfd < 0)
		return d->lfd;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &set, NULL) != 0 ||
	    (d->chldfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK)) < 0)
		return pc_err_set(e, -errno, "signalfd: %s", strerror(errno));
	log_info("serving '%s' on %s port %u", o->root, host[0] ? host : "*", (unsigned)port);
	return 0;
}

int pcopy_serve(const struct pcopy_opts *o, struct pcopy_result *r)
{
	struct daemon d = { .rootfd = -1, .lfd = -1, .chldfd = -1 };
	struct pc_err e;
	int ret;

	memset(r, 0, sizeof(*r));
	pc_err_init(&e);
	ret = daemon_setup(&d, o, &e);
	while (ret == 0)
		ret = daemon_step(&d, &e);
	if (ret == 1)
		ret = 0;
	while (d.npend > 0)
		daemon_pend_drop(&d, d.npend - 1, true);
	/* Sessions in progress end cleanly: they remove their temporary files. */
	for (unsigned i = 0; i < d.nkids; i++) {
		kill(d.kids[i].pid, SIGTERM);
		if (d.kids[i].sock >= 0)
			close(d.kids[i].sock);
	}
	for (unsigned i = 0; i < d.nrefusers; i++)
		kill(d.refusers[i], SIGTERM);
	d.nkids += d.nrefusers;
	while (d.nkids > 0 && waitpid(-1, NULL, 0) > 0)
		d.nkids--;
	/* What was counted and not yet said. */
	if (d.refusals != NULL)
		(void)loglimit_flush(d.refusals, UINT64_MAX);
	loglimit_free(d.refusals);
	free(d.kids);
	free(d.pend);
	free(d.pfd);
	crypto_wipe(d.key, sizeof(d.key));
	if (d.lfd >= 0)
		close(d.lfd);
	if (d.rootfd >= 0)
		close(d.rootfd);
	if (d.chldfd >= 0)
		close(d.chldfd);
	return api_result(r, &e, ret);
}
