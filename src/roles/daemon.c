/* SPDX-License-Identifier: Apache-2.0 */
/* daemon: pcopy --serve. Accepts control connections and serves each
 * session in its own forked process, so one failing or hostile session can
 * neither crash nor stall the others. */
#include <pcopy/pcopy.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
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
#include "sys/net.h"
#include "transport/chan.h"
#include "sys/platform.h"
#include "wire/auth.h"
#include "roles/server.h"

#define DAEMON_MAX_SESSIONS 64

struct daemon {
	uint8_t key[PROTO_KEY_LEN];
	int rootfd;
	int lfd;
	int chldfd;                    /* signalfd for SIGCHLD */
	pid_t kids[DAEMON_MAX_SESSIONS];
	unsigned nkids;
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
		for (unsigned i = 0; i < d->nkids; i++) {
			if (d->kids[i] == pid) {
				d->kids[i] = d->kids[--d->nkids];
				break;
			}
		}
	}
}

/* Waits (until deadline_ns, or a stop signal) for the client's first byte,
 * without reading it, and tells TLS from a control frame in clear. Returns
 * 0 or a negative code. */
static int daemon_sniff(int fd, uint64_t deadline_ns, bool *tls)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	uint64_t now = platform_now_ns();
	uint8_t first;
	int n = now >= deadline_ns ? 0
		: platform_poll(&p, 1, (int)((deadline_ns - now) / 1000000u) + 1);

	if (n == 0)
		return -PC_E_TIMEOUT;
	if (n < 0)
		return n;
	ssize_t r = recv(fd, &first, 1, MSG_PEEK);
	if (r == 0)
		return -PC_E_NET;
	if (r < 0)
		return -errno;
	*tls = proto_starts_tls(first);
	return 0;
}

/* A client in clear (--no-encrypt, or a pcopy older than protocol 4) to a
 * daemon that requires TLS: tell it why, let it read that (we read what it
 * sent, so closing does not reset the connection under its reply), end the
 * process. */
static void daemon_refuse_clear(struct ctl *c, struct chan *ch, const char *who)
{
	uint8_t junk[4096];

	(void)ctl_send_error(c, -PC_E_AUTH, "this daemon requires encryption (TLS 1.3) and was "
			     "started without --allow-unencrypted: do not use --no-encrypt with it "
			     "(or update this pcopy)");
	(void)chan_close_send(ch);
	(void)chan_set_timeout(ch, 2);
	while (chan_recv_some(ch, junk, sizeof(junk)) > 0)
		;
	log_warn("refused %s: it asked for a session in clear, and this daemon requires "
		 "encryption (--allow-unencrypted allows it)", who);
	ctl_free(c);
	_exit(pc_exit_code(-PC_E_AUTH));
}

/* In the forked child: serve one session and end the process. */
static void daemon_child(struct daemon *d, int fd, const char *who)
{
	char client[NET_MAX_ADDR] = "";
	struct server_cfg cfg = {
		.transport = SESSION_DAEMON, .key = d->key, .rootfd = d->rootfd, .beneath = true,
		.listen_host = d->listen_host, .self_host = d->listen_host,
		.client_host = client, .allow_stdout = false, .sigfd = api_sigfd(),
		.allow_unencrypted = d->allow_unencrypted,
	};
	struct pc_err e;
	struct chan *ch;
	struct ctl *c;  /* owns ch */
	int ret;

	close(d->lfd);
	close(d->chldfd);
	pc_err_init(&e);
	(void)net_set_nodelay(fd);
	/* Data connections come to the address the client reached us on. */
	if (net_local_host(fd, d->listen_host, sizeof(d->listen_host)) < 0)
		cfg.listen_host = NULL;
	(void)net_peer_host(fd, client, sizeof(client));
	/* A stranger gets SESSION_AUTH_TIMEOUT_S from accept to complete the
	 * handshake, TLS and ours. */
	uint64_t deadline = platform_now_ns() + SESSION_AUTH_TIMEOUT_S * 1000000000ull;
	bool tls = false;
	ret = daemon_sniff(fd, deadline, &tls);
	if (ret == 0 && tls) {
		cfg.transport = SESSION_DAEMON_TLS;
		ret = auth_ctl_tls_accept(fd, d->key, deadline, &ch, &e);
	} else if (ret == 0) {
		ch = chan_plain_new(fd, fd);
		ret = ch != NULL ? 0 : -ENOMEM;
	}
	if (ret < 0) {
		char msg[sizeof(e.msg)];
		if (pc_err_get(&e, msg, sizeof(msg)) < 0)
			log_warn("refused %s: %s", who, msg);
		else
			log_warn("refused %s: %s", who, pc_strerror(ret));
		close(fd);
		_exit(pc_exit_code(ret));
	}
	c = ctl_new(ch, who, false);
	if (c == NULL) {
		chan_free(ch);
		_exit(PC_EXIT_FILEIO);
	}
	(void)chan_set_timeout(ch, SESSION_AUTH_TIMEOUT_S);
	if (!tls && !d->allow_unencrypted)
		daemon_refuse_clear(c, ch, who); /* does not return */
	ctl_set_intr(c, cfg.sigfd);
	/* The whole handshake, up to the client's proof, gets that long too:
	 * the session holds a data listener from READY on. */
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

static void daemon_accept(struct daemon *d)
{
	char who[NET_MAX_ADDR];
	int fd = net_accept(d->lfd, 0, who, sizeof(who));
	pid_t pid;

	if (fd < 0)
		return;
	if (d->nkids >= DAEMON_MAX_SESSIONS) {
		log_warn("refused %s: %d sessions already running", who, DAEMON_MAX_SESSIONS);
		close(fd);
		return;
	}
	pid = fork();
	if (pid == 0)
		daemon_child(d, fd, who);
	close(fd);
	if (pid < 0)
		log_warn("cannot serve %s: fork: %s", who, strerror(errno));
	else
		d->kids[d->nkids++] = pid;
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
	ret = daemon_parse_addr(o->serve_addr, host, sizeof(host), &port, e);
	if (ret == 0)
		ret = keyfile_load(o->key_file, d->key, e);
	if (ret < 0)
		return ret;
	d->rootfd = open(o->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (d->rootfd < 0)
		return pc_err_set(e, -errno, "--root '%s': %s", o->root, strerror(errno));
	d->lfd = net_listen(host, port, port, 0, 0, e);
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
	while (ret == 0) {
		struct pollfd p[3] = { { .fd = d.lfd, .events = POLLIN },
				       { .fd = d.chldfd, .events = POLLIN },
				       { .fd = api_sigfd(), .events = POLLIN } };
		int n = poll(p, 3, -1);
		if (n < 0 && errno != EINTR)
			ret = pc_err_set(&e, -errno, "poll: %s", strerror(errno));
		if (n > 0 && (p[2].revents & POLLIN)) {
			log_info("stopping on signal");
			break;
		}
		if (n > 0 && (p[1].revents & POLLIN))
			daemon_reap(&d);
		if (n > 0 && (p[0].revents & POLLIN))
			daemon_accept(&d);
	}
	/* Sessions in progress end cleanly: they remove their temporary files. */
	for (unsigned i = 0; i < d.nkids; i++)
		kill(d.kids[i], SIGTERM);
	while (d.nkids > 0 && waitpid(-1, NULL, 0) > 0)
		d.nkids--;
	crypto_wipe(d.key, sizeof(d.key));
	if (d.lfd >= 0)
		close(d.lfd);
	if (d.rootfd >= 0)
		close(d.rootfd);
	if (d.chldfd >= 0)
		close(d.chldfd);
	return api_result(r, &e, ret);
}
