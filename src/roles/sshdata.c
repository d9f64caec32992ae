// SPDX-License-Identifier: Apache-2.0
/* sshdata: data streams through ssh, the connecting end (sshdata.h). */
#include "roles/sshdata.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "roles/api.h"
#include "roles/loc.h"
#include "roles/session.h"
#include "roles/spawn.h"
#include "sys/crypto.h"
#include "sys/log.h"
#include "sys/platform.h"
#include "transport/tls.h"
#include "wire/attach.h"
#include "wire/auth.h"

#define SSHDATA_MAX_ARGV 96
#define SSHDATA_REAP_MS 5000   /* for ssh to end once its stream is closed */
#define SSHDATA_RETRIES 1      /* a stream whose ssh was reset before it began */

/* Ours, right after ssh's name: the first value of an option wins. */
static const char *const sshdata_opts[] = {
	"-T", "-o", "BatchMode=yes", "-o", "ControlPath=none", "-o", "ClearAllForwardings=yes",
	"-o", "RemoteCommand=none", "-o", "PermitLocalCommand=no", "-o", "ForwardAgent=no",
	"-o", "ForwardX11=no",
};

struct sshdata_stream {
	pid_t pid;                 /* -1 once reaped */
	int rfd, wfd;              /* its stdout, stdin: ours until a channel takes them */
	int efd;                   /* its stderr (non-blocking) */
	unsigned retries;
};

struct sshdata {
	struct sshdata_cfg cfg;    /* strings borrowed but target; attach_id and route copied */
	struct sshroute route;
	char target[LOC_MAX_USER + LOC_MAX_HOST + 2]; /* a stream started again needs it
	                                                 after the caller's copy is gone */
	char dial[PATH_MAX + 128]; /* "ProxyCommand=... --ssh-dial ...", or "": ssh connects */
	char ciphers[SSHROUTE_MAX_CIPHERS + 16]; /* "Ciphers=..." (sshroute_aes_first), or "" */
	uint8_t attach_id[PROTO_ATTACH_ID_LEN];
	uint8_t k[PROTO_KEY_LEN];  /* set by sshdata_hello */
	unsigned n;
	struct sshdata_stream s[PROTO_MAX_STREAMS];
	struct chan *ch[PROTO_MAX_STREAMS]; /* after sshdata_hello: ours until handed over */
	uint8_t expect[PROTO_MAX_STREAMS][PROTO_MAC_LEN]; /* the far end's proofs */
};

bool sshdata_is_ssh(const char *rsh)
{
	const char *w = rsh != NULL ? rsh : "ssh";
	size_t len;

	w += strspn(w, " \t");
	len = strcspn(w, " \t");
	/* The word's last path component. */
	for (size_t i = len; i-- > 0;) {
		if (w[i] == '/') {
			w += i + 1;
			len -= i + 1;
			break;
		}
	}
	return len == 3 && strncmp(w, "ssh", 3) == 0;
}

/* argv of one stream's ssh in argv[], its words cut from cmd[cap] and the
 * remote command in remote[rcap]. Returns 0 or -PC_E_USAGE. */
static int sshdata_argv(const struct sshdata *d, char **argv, char *cmd, size_t cap,
			char *remote, size_t rcap)
{
	char *words[SSHDATA_MAX_ARGV];
	char hex[ATTACH_ID_HEX + 1];
	int nw = 0, argc = 0;
	size_t n;

	snprintf(cmd, cap, "%s", d->cfg.rsh != NULL ? d->cfg.rsh : "ssh");
	if (spawn_split(cmd, words, &nw, SSHDATA_MAX_ARGV - 32) < 0)
		return -PC_E_USAGE;
	argv[argc++] = words[0];
	if (sshdata_is_ssh(d->cfg.rsh))
		for (size_t i = 0; i < sizeof(sshdata_opts) / sizeof(sshdata_opts[0]); i++)
			argv[argc++] = (char *)(uintptr_t)sshdata_opts[i];
	if (d->ciphers[0] != '\0') {
		argv[argc++] = (char *)(uintptr_t)"-o";
		argv[argc++] = (char *)(uintptr_t)d->ciphers;
	}
	if (d->dial[0] != '\0') {
		argv[argc++] = (char *)(uintptr_t)"-o";
		argv[argc++] = (char *)(uintptr_t)d->dial;
		argv[argc++] = (char *)(uintptr_t)"-o";
		argv[argc++] = (char *)(uintptr_t)"ProxyUseFdpass=yes";
	}
	for (int i = 1; i < nw; i++)
		argv[argc++] = words[i];
	argv[argc++] = (char *)(uintptr_t)d->cfg.target;
	attach_id_format(d->attach_id, hex);
	n = spawn_quote(d->cfg.remote_pcopy != NULL ? d->cfg.remote_pcopy : "pcopy", remote, rcap);
	snprintf(remote + n, rcap - n, " --attach %s", hex);
	argv[argc++] = remote;
	argv[argc] = NULL;
	return 0;
}

/* Starts stream i's ssh. */
static int sshdata_spawn(struct sshdata *d, unsigned i, struct pc_err *e)
{
	char cmd[1024], remote[PROTO_MAX_PATH + 64];
	char *argv[SSHDATA_MAX_ARGV];
	struct sshdata_stream *st = &d->s[i];

	if (sshdata_argv(d, argv, cmd, sizeof(cmd), remote, sizeof(remote)) < 0)
		return pc_err_set(e, -PC_E_USAGE, "--rsh '%s' is not a command", d->cfg.rsh);
	return spawn_piped(argv, &st->pid, &st->rfd, &st->wfd, &st->efd, e);
}

static void sshdata_close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* Waits up to ms for stream st's ssh to end, then kills it; reaps it.
 * Returns its exit status (spawn_wait's), or -1 if it was gone. */
static int sshdata_reap(struct sshdata_stream *st, int ms)
{
	int ret = st->pid > 0 ? spawn_reap(st->pid, ms) : -1;

	st->pid = -1;
	return ret;
}

/* d->dial: the ProxyCommand option that has `pcopy --ssh-dial` (this very
 * binary) connect for ssh, with the window; "" where ssh connects by
 * itself: no window asked for, a route pcopy may not dial (sshroute.h),
 * or no binary of ours to name. */
static void sshdata_set_dial(struct sshdata *d)
{
	char exe[PATH_MAX], quoted[PATH_MAX + 8];
	const struct sshroute *r = &d->route;
	int family = d->cfg.family != 0 ? d->cfg.family : r->family;
	ssize_t n;

	d->dial[0] = '\0';
	if (!r->dial || d->cfg.window == 0 || !sshdata_is_ssh(d->cfg.rsh))
		return;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0 || (size_t)n >= sizeof(exe) - 1)
		return;
	exe[n] = '\0';
	/* ssh expands %-tokens in a ProxyCommand, and the shell runs it: a
	 * path with '%', a quote or a line break is left to ssh's own connect
	 * rather than escaped twice. */
	if (strstr(exe, " (deleted)") != NULL || strpbrk(exe, "%'\n") != NULL ||
	    spawn_quote(exe, quoted, sizeof(quoted)) == 0)
		return;
	int len = snprintf(d->dial, sizeof(d->dial), "ProxyCommand=%s --ssh-dial -w %" PRIu32
			   "%s --timeout %u %s %u", quoted, d->cfg.window,
			   family == 4 ? " -4" : family == 6 ? " -6" : "", r->connect_timeout_s,
			   r->host, (unsigned)r->port);
	if (len < 0 || (size_t)len >= sizeof(d->dial))
		d->dial[0] = '\0';
}

int sshdata_start(const struct sshdata_cfg *cfg, struct sshdata **out, struct pc_err *e)
{
	struct sshdata *d = calloc(1, sizeof(*d));
	int ret = 0;

	if (d == NULL)
		return pc_err_set(e, -ENOMEM, "out of memory");
	d->cfg = *cfg;
	if (strlen(cfg->target) >= sizeof(d->target)) {
		free(d);
		return pc_err_set(e, -PC_E_USAGE, "ssh destination '%.64s...' is too long",
				  cfg->target);
	}
	snprintf(d->target, sizeof(d->target), "%s", cfg->target);
	d->cfg.target = d->target;
	memcpy(d->attach_id, cfg->attach_id, sizeof(d->attach_id));
	if (cfg->route != NULL)
		d->route = *cfg->route;
	d->cfg.route = &d->route;
	sshdata_set_dial(d);
	if (tls_cpu_has_aes() && sshdata_is_ssh(cfg->rsh))
		sshroute_aes_first(&d->route, d->ciphers, sizeof(d->ciphers));
	if (d->dial[0] != '\0')
		log_debug("data streams through ssh to %s: pcopy connects them, window %" PRIu32,
			  cfg->peer, cfg->window);
	for (unsigned i = 0; i < PROTO_MAX_STREAMS; i++)
		d->s[i] = (struct sshdata_stream){ .pid = -1, .rfd = -1, .wfd = -1, .efd = -1 };
	for (unsigned i = 0; i < cfg->streams && ret == 0; i++) {
		ret = sshdata_spawn(d, i, e);
		if (ret == 0)
			d->n++;
	}
	if (ret < 0) {
		sshdata_end(d, true);
		return ret;
	}
	*out = d;
	return 0;
}

/* What stream st's ssh said on its stderr, the first line, escaped (it
 * may hold what the far host said), into buf[cap]. */
static void sshdata_said(struct sshdata_stream *st, char *buf, size_t cap)
{
	char raw[1024];
	ssize_t r = st->efd >= 0 ? read(st->efd, raw, sizeof(raw) - 1) : -1;

	buf[0] = '\0';
	if (r <= 0)
		return;
	raw[r] = '\0';
	raw[strcspn(raw, "\r\n")] = '\0';
	log_escape(buf, cap, raw);
}

/* Stream i failed before its handshake was over (ret): if its ssh was
 * reset before it began (sshd's MaxStartups drops connections at random
 * when many start at once), starts it again once and returns 1; else sets
 * e from what ssh said and returns the code. */
static int sshdata_failed(struct sshdata *d, unsigned i, int ret, struct pc_err *e)
{
	struct sshdata_stream *st = &d->s[i];
	char said[512];
	int status;

	status = sshdata_reap(st, ret == -PC_E_NET ? SSHDATA_REAP_MS : 0);
	sshdata_said(st, said, sizeof(said));
	sshdata_close_fd(&st->efd);
	if (status == 255 && st->retries < SSHDATA_RETRIES &&
	    strstr(said, "kex_exchange_identification") != NULL) {
		st->retries++;
		log_debug("data stream %u through ssh to %s: %s; starting it again", i,
			  d->cfg.peer, said);
		return sshdata_spawn(d, i, e) == 0 ? 1 : pc_err_get(e, NULL, 0);
	}
	if (ret == -PC_E_INTERRUPTED)
		return pc_err_set(e, ret, "interrupted while data streams through ssh to %s "
				  "were starting", d->cfg.peer);
	if (status == 255 || status == 5)
		return pc_err_set(e, -PC_E_LAUNCH, "data stream %u through ssh to %s failed: %s%s",
				  i, d->cfg.peer, said[0] ? said : "ssh exited with status 255",
				  status == 255 ? " (data streams log in with BatchMode=yes: they "
				  "need a key in ssh-agent or without a passphrase)" : "");
	return pc_err_set(e, ret == -PC_E_AUTH ? ret : -PC_E_NET,
			  "data stream %u through ssh to %s failed: %s", i, d->cfg.peer,
			  said[0] ? said : pc_strerror(ret));
}

/* Stream i's channel over its pipes, with our proof sent. */
static int sshdata_hello(struct sshdata *d, unsigned i, const uint8_t k[PROTO_KEY_LEN],
			 struct chan **ch, uint8_t expect[PROTO_MAC_LEN])
{
	struct sshdata_stream *st = &d->s[i];
	int ret;

	*ch = chan_pipes_new(st->rfd, st->wfd, -1);
	if (*ch == NULL)
		return -errno;
	st->rfd = st->wfd = -1; /* the channel's now */
	ret = chan_set_timeout(*ch, SESSION_AUTH_TIMEOUT_S);
	if (ret == 0)
		ret = auth_data_connect(*ch, k, (uint16_t)i, expect);
	return ret;
}

/* Stream i's handshake from the start (again after a restart). */
static int sshdata_hello_one(struct sshdata *d, unsigned i, struct pc_err *e)
{
	int ret;

	chan_free(d->ch[i]);
	d->ch[i] = NULL;
	ret = sshdata_hello(d, i, d->k, &d->ch[i], d->expect[i]);
	return ret < 0 ? sshdata_failed(d, i, ret, e) : 0;
}

int sshdata_begin(struct sshdata *d, const uint8_t k[PROTO_KEY_LEN], struct pc_err *e)
{
	int ret = 0;

	if (k != d->k) /* a restarted stream's handshake passes d->k */
		memcpy(d->k, k, sizeof(d->k));
	for (unsigned i = 0; i < d->n && ret >= 0; i++)
		if (d->s[i].rfd >= 0)
			ret = sshdata_hello_one(d, i, e);
	return ret;
}

int sshdata_fd(const struct sshdata *d, unsigned i)
{
	return i < d->n ? chan_rfd(d->ch[i]) : -1;
}

unsigned sshdata_count(const struct sshdata *d)
{
	return d->n;
}

int sshdata_finish(struct sshdata *d, const struct proto_request *req, struct chan **chans,
		   struct pc_err *e)
{
	uint64_t deadline = platform_now_ns() + SESSION_CONNECT_TIMEOUT_S * 1000000000ull;
	bool done[PROTO_MAX_STREAMS] = { false };
	unsigned left = d->n;
	int ret = 0;

	while (ret >= 0 && left > 0) {
		struct pollfd p[PROTO_MAX_STREAMS];
		unsigned idx[PROTO_MAX_STREAMS], np = 0;
		uint64_t now = platform_now_ns();
		if (ret == 1) { /* a stream started again: its handshake anew */
			ret = sshdata_begin(d, d->k, e);
			continue;
		}
		if (now >= deadline) {
			ret = pc_err_set(e, -PC_E_TIMEOUT, "%u of %u data streams through ssh to %s "
					 "did not start within %u s", left, d->n, d->cfg.peer,
					 SESSION_CONNECT_TIMEOUT_S);
			break;
		}
		for (unsigned i = 0; i < d->n; i++)
			if (!done[i]) {
				p[np] = (struct pollfd){ .fd = chan_rfd(d->ch[i]), .events = POLLIN };
				idx[np++] = i;
			}
		int nr = platform_poll(p, np, (int)((deadline - now) / 1000000u) + 1);
		if (nr < 0) {
			ret = nr == -PC_E_INTERRUPTED ? sshdata_failed(d, idx[0], nr, e)
				: pc_err_set(e, nr, "poll: %s", strerror(-nr));
			break;
		}
		for (unsigned j = 0; j < np && ret == 0; j++) {
			unsigned i = idx[j];
			if (!(p[j].revents & (POLLIN | POLLHUP | POLLERR)))
				continue;
			ret = auth_data_confirm(d->ch[i], d->expect[i]);
			if (ret == 0)
				ret = chan_set_timeout(d->ch[i], req->timeout_s);
			if (ret < 0) {
				ret = sshdata_failed(d, i, ret, e);
				continue;
			}
			done[i] = true;
			left--;
			log_debug("data stream %u through ssh to %s: up (%u to come)", i,
				  d->cfg.peer, left);
		}
	}
	for (unsigned i = 0; i < d->n; i++) {
		chans[i] = ret >= 0 ? d->ch[i] : NULL;
		if (ret < 0)
			chan_free(d->ch[i]);
		d->ch[i] = NULL;
	}
	crypto_wipe(d->expect, sizeof(d->expect));
	crypto_wipe(d->k, sizeof(d->k));
	return ret < 0 ? ret : 0;
}

int sshdata_open(struct sshdata *d, const struct proto_request *req,
		 const uint8_t k[PROTO_KEY_LEN], struct chan **chans, struct pc_err *e)
{
	int ret = sshdata_begin(d, k, e);

	if (ret < 0) {
		for (unsigned i = 0; i < d->n; i++) {
			chan_free(d->ch[i]);
			d->ch[i] = chans[i] = NULL;
		}
		return ret;
	}
	return sshdata_finish(d, req, chans, e);
}

void sshdata_end(struct sshdata *d, bool stop)
{
	if (d == NULL)
		return;
	for (unsigned i = 0; i < PROTO_MAX_STREAMS; i++) {
		struct sshdata_stream *st = &d->s[i];
		chan_free(d->ch[i]); /* a stream begun and never handed over */
		d->ch[i] = NULL;
		sshdata_close_fd(&st->rfd);
		sshdata_close_fd(&st->wfd);
		if (stop && st->pid > 0)
			(void)kill(st->pid, SIGTERM);
	}
	for (unsigned i = 0; i < PROTO_MAX_STREAMS; i++) {
		(void)sshdata_reap(&d->s[i], stop ? 1000 : SSHDATA_REAP_MS);
		sshdata_close_fd(&d->s[i].efd);
	}
	crypto_wipe(d->k, sizeof(d->k));
	free(d);
}
