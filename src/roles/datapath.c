// SPDX-License-Identifier: Apache-2.0
/* datapath: direct data connections raced against streams through ssh
 * (datapath.h). */
#include "roles/datapath.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "roles/session.h"
#include "sys/crypto.h"
#include "sys/fault.h"
#include "sys/log.h"
#include "sys/net.h"
#include "sys/platform.h"

/* The race's state. */
struct race {
	const struct datapath_cfg *cfg;
	unsigned n;
	int fds[PROTO_MAX_STREAMS];  /* direct: a socket, or -errno once it failed */
	bool up[PROTO_MAX_STREAMS];  /* direct: connected */
	unsigned connected, failed;
	int why;                     /* the first direct failure (-errno), or 0 */
	struct sshdata *sd;          /* started: the ssh streams, ours */
	bool begun;                  /* our proofs are on their way on them */
	bool ssh_heard;              /* a proof came on one of them */
	bool late;                   /* test fault data_late: direct only after ssh_heard */
	uint64_t t0;
};

static uint64_t race_ms(const struct race *r)
{
	return (platform_now_ns() - r->t0) / 1000000u;
}

static void race_close_direct(struct race *r)
{
	for (unsigned i = 0; i < r->n; i++) {
		if (r->fds[i] >= 0)
			close(r->fds[i]);
		r->fds[i] = -ECANCELED;
	}
}

/* Starts the ssh streams and sends their proofs. */
static int race_start_ssh(struct race *r, struct pc_err *e)
{
	int ret = r->sd != NULL ? 0 : sshdata_start(r->cfg->ssh, &r->sd, e);

	if (ret == 0)
		ret = sshdata_begin(r->sd, r->cfg->k, e);
	if (ret < 0) {
		sshdata_end(r->sd, true);
		r->sd = NULL;
	}
	r->begun = ret == 0;
	return ret;
}

/* One direct connect's outcome, after poll said something of it. */
static void race_direct(struct race *r, unsigned i)
{
	int ret = net_connect_done(r->fds[i]);

	if (ret == -ENOTCONN || ret == -EINPROGRESS)
		return;
	if (ret == 0) {
		r->up[i] = true;
		r->connected++;
		return;
	}
	close(r->fds[i]);
	r->fds[i] = ret;
	r->failed++;
	if (r->why == 0)
		r->why = ret;
}

/* Waits, up to wait_ms, for what is under way: the direct connects not
 * done (POLLOUT), and the ssh streams' proofs until one has come. */
static int race_wait(struct race *r, int wait_ms)
{
	struct pollfd p[2 * PROTO_MAX_STREAMS];
	unsigned who[2 * PROTO_MAX_STREAMS], np = 0;
	unsigned nssh = r->begun && !r->ssh_heard ? sshdata_count(r->sd) : 0;
	bool direct = !r->late || r->ssh_heard; /* test fault data_late */

	for (unsigned i = 0; direct && i < r->n; i++)
		if (r->fds[i] >= 0 && !r->up[i]) {
			p[np] = (struct pollfd){ .fd = r->fds[i], .events = POLLOUT };
			who[np++] = i;
		}
	for (unsigned i = 0; i < nssh; i++) {
		p[np] = (struct pollfd){ .fd = sshdata_fd(r->sd, i), .events = POLLIN };
		who[np++] = PROTO_MAX_STREAMS + i;
	}
	int nr = platform_poll(p, np, wait_ms);
	if (nr <= 0)
		return nr;
	for (unsigned j = 0; j < np; j++) {
		if (p[j].revents == 0)
			continue;
		if (who[j] < PROTO_MAX_STREAMS)
			race_direct(r, who[j]);
		else
			r->ssh_heard = true;
	}
	return 0;
}

/* A wait of the race failed (ret from race_wait). */
static int race_poll_failed(int ret, const char *host, uint16_t port, struct pc_err *e)
{
	if (ret == -PC_E_INTERRUPTED)
		return pc_err_set(e, ret, "interrupted while connecting to %s port %u for data",
				  host, (unsigned)port);
	return pc_err_set(e, ret, "poll: %s", strerror(-ret));
}

/* The direct connections won: the rest of them may still be connecting
 * (each gets SESSION_CONNECT_TIMEOUT_S in all), then their handshakes. */
static int race_direct_won(struct race *r, const char *host, struct chan **chans,
			   struct pc_err *e)
{
	const struct datapath_cfg *cfg = r->cfg;
	uint64_t limit = (uint64_t)SESSION_CONNECT_TIMEOUT_S * 1000u;
	int ret = 0;

	sshdata_end(r->sd, true);
	r->sd = NULL;
	while (r->connected + r->failed < r->n && r->failed == 0) {
		uint64_t ms = race_ms(r);
		if (ms >= limit) {
			r->why = -ETIMEDOUT;
			r->failed++;
			break;
		}
		ret = race_wait(r, (int)(limit - ms));
		if (ret < 0) {
			race_close_direct(r);
			return race_poll_failed(ret, host, cfg->port, e);
		}
	}
	if (r->failed > 0) {
		race_close_direct(r);
		return pc_err_set(e, -PC_E_NET, "cannot reach %s port %u for data: %s", host,
				  (unsigned)cfg->port, strerror(-r->why));
	}
	/* Each socket goes to its handshake's thread. */
	int fds[PROTO_MAX_STREAMS];
	memcpy(fds, r->fds, sizeof(fds));
	for (unsigned i = 0; i < r->n; i++)
		r->fds[i] = -ECANCELED;
	return session_connect_fds(fds, host, cfg->port, cfg->req, cfg->k, cfg->pending, chans, e);
}

int datapath_open(const struct datapath_cfg *cfg, struct chan **chans, struct sshdata **sd,
		  struct pc_err *e)
{
	/* Early streams (the probe got no answer) hold their proofs until
	 * the direct connects have had DATAPATH_QUIET_MS: a listener that saw
	 * an ssh stream's proof first would drop a direct one of the same
	 * index as a duplicate. */
	struct race r = { .cfg = cfg, .n = cfg->req->streams, .sd = cfg->early,
			  .late = fault_fire(FAULT_DATA_LATE) };
	bool quiet = cfg->early != NULL;
	const char *cfg_host = cfg->host; /* where the direct connects go */
	struct pc_err e2;
	char why[sizeof(e2.msg)] = "";
	int ret;

	*sd = NULL;
	pc_err_init(&e2);
	ret = net_connect_start(cfg->host, cfg->port, cfg->req->family, cfg->req->window, r.fds,
				r.n, &e2);
	/* A name only our ssh configuration knows: the address the listener
	 * says it has. */
	if (ret < 0 && ret != -PC_E_INTERRUPTED && cfg->alt_host != NULL &&
	    cfg->alt_host[0] != '\0' && strcmp(cfg->alt_host, cfg->host) != 0) {
		pc_err_destroy(&e2);
		pc_err_init(&e2);
		ret = net_connect_start(cfg->alt_host, cfg->port, cfg->req->family,
					cfg->req->window, r.fds, r.n, &e2);
		if (ret == 0)
			cfg_host = cfg->alt_host;
	}
	if (ret == -PC_E_INTERRUPTED) {
		pc_err_destroy(&e2);
		sshdata_end(r.sd, true);
		return pc_err_set(e, ret, "interrupted while looking up %s", cfg->host);
	}
	if (ret < 0) {
		/* Nothing direct to try. */
		pc_err_get(&e2, why, sizeof(why));
		for (unsigned i = 0; i < r.n; i++)
			r.fds[i] = -ECANCELED;
		r.failed = r.n;
	} else {
		for (unsigned i = 0; i < r.n; i++)
			if (r.fds[i] < 0) {
				r.failed++;
				r.why = r.why != 0 ? r.why : r.fds[i];
			}
	}
	pc_err_destroy(&e2);
	/* The race's clock starts with the SYNs, after the name look-up. */
	r.t0 = platform_now_ns();
	for (;;) {
		uint64_t ms = race_ms(&r);
		bool dead = r.failed == r.n;
		/* A direct connect wins, unless an ssh stream has the
		 * listener's proof already: the listener holds that stream,
		 * and would drop a direct one of its index as a duplicate. */
		if (r.connected > 0 && !r.ssh_heard)
			return race_direct_won(&r, cfg_host, chans, e);
		if (quiet && (dead || ms >= DATAPATH_QUIET_MS))
			break;
		if (!quiet && !r.begun && (dead || ms >= DATAPATH_HEAD_START_MS)) {
			ret = race_start_ssh(&r, e);
			if (ret < 0) {
				race_close_direct(&r);
				return ret;
			}
		}
		if (!quiet && (dead || r.ssh_heard || ms >= DATAPATH_CAP_MS))
			break;
		/* Until the next moment that changes what we do. */
		uint64_t next = quiet ? DATAPATH_QUIET_MS
			      : !r.begun ? DATAPATH_HEAD_START_MS : DATAPATH_CAP_MS;
		ret = race_wait(&r, (int)(next > ms ? next - ms : 0) + 1);
		if (ret < 0) {
			race_close_direct(&r);
			sshdata_end(r.sd, true);
			return race_poll_failed(ret, cfg_host, cfg->port, e);
		}
	}
	/* Through ssh. Early streams that failed meanwhile (their ssh ran in
	 * BatchMode while the control ssh may have asked the user to accept
	 * the host's key) are started again, once. */
	race_close_direct(&r);
	ret = 0;
	if (!r.begun && (ret = race_start_ssh(&r, e)) < 0 && quiet)
		ret = race_start_ssh(&r, e);
	if (ret < 0)
		return ret;
	if (why[0] == '\0' && r.why != 0)
		snprintf(why, sizeof(why), "%s", strerror(-r.why));
	else if (why[0] == '\0')
		snprintf(why, sizeof(why), "no answer within %.1f s%s",
			 (double)race_ms(&r) / 1000.0, quiet ? ", nor to an earlier probe" : "");
	log_notice("no direct data connection to %s port %u (%s); the data goes through ssh",
		   cfg_host, (unsigned)cfg->port, why);
	if (cfg->why != NULL && cfg->why_cap > 0)
		snprintf(cfg->why, cfg->why_cap, "no direct data connection to %s port %u (%s)",
			 cfg_host, (unsigned)cfg->port, why);
	ret = sshdata_finish(r.sd, cfg->req, chans, e);
	if (ret < 0 && quiet && ret != -PC_E_INTERRUPTED && ret != -PC_E_AUTH) {
		sshdata_end(r.sd, true);
		r.sd = NULL;
		ret = race_start_ssh(&r, e);
		if (ret == 0)
			ret = sshdata_finish(r.sd, cfg->req, chans, e);
	}
	if (ret < 0) {
		sshdata_end(r.sd, true);
		return ret;
	}
	*sd = r.sd;
	return 0;
}

/* ---- The probe --------------------------------------------------------- */

/* The test fault data_probe_slow: when the probe's answer is seen. */
#define PROBE_SLOW_MS 500u

/* Linux's default ip_local_port_range: where a listener of ours on port 0
 * gets its port. */
#define PROBE_EPHEMERAL_LO 32768u
#define PROBE_EPHEMERAL_HI 60999u

/* What a connect's outcome (0 or -errno) says of the path. */
static int probe_state_of(int ret)
{
	if (ret == 0 || ret == -ECONNREFUSED || ret == -ECONNRESET)
		return DATAPATH_PROBE_ANSWERED;
	if (ret == -ENETUNREACH || ret == -EHOSTUNREACH || ret == -EACCES || ret == -EPERM)
		return DATAPATH_PROBE_BLOCKED;
	return DATAPATH_PROBE_OFF; /* says nothing we can use */
}

static void probe_close(struct datapath_probe *p)
{
	if (p->fd >= 0)
		close(p->fd);
	p->fd = -1;
}

void datapath_probe_start(struct datapath_probe *p, const char *host, uint16_t port_lo,
			  int family)
{
	uint16_t port = port_lo;
	struct pc_err e;
	int fd = -1;

	*p = (struct datapath_probe){ .fd = -1, .state = DATAPATH_PROBE_OFF,
				      .t0 = platform_now_ns() };
	if (fault_fire(FAULT_DATA_PROBE)) {
		p->state = DATAPATH_PROBE_PENDING; /* as if dropped: nothing will answer */
		return;
	}
	if (fault_fire(FAULT_DATA_PROBE_SLOW))
		p->held_ms = PROBE_SLOW_MS;
	if (port == 0) {
		uint32_t rnd;
		if (crypto_random(&rnd, sizeof(rnd)) < 0)
			return;
		port = (uint16_t)(PROBE_EPHEMERAL_LO +
				  rnd % (PROBE_EPHEMERAL_HI - PROBE_EPHEMERAL_LO + 1));
	}
	pc_err_init(&e);
	int ret = net_connect_start(host, port, family, 0, &fd, 1, &e);
	pc_err_destroy(&e);
	if (ret < 0) /* no address here (a name only ssh knows), or stopped */
		return;
	p->t0 = platform_now_ns(); /* its wait counts from the SYN, not the look-up */
	p->fd = fd >= 0 ? fd : -1;
	p->state = fd >= 0 ? DATAPATH_PROBE_PENDING : probe_state_of(fd);
}

/* Waits for the probe's answer until limit_ms from its start (-1: no
 * limit, 0: a look only) or until watch (-1: none) is readable or hung up,
 * or a stop signal comes; p->state says what it learnt. */
static void probe_wait(struct datapath_probe *p, int watch, int64_t limit_ms)
{
	while (p->state == DATAPATH_PROBE_PENDING && p->fd >= 0) {
		int64_t ms = (int64_t)((platform_now_ns() - p->t0) / 1000000u);
		int left = limit_ms < 0 ? -1 : ms < limit_ms ? (int)(limit_ms - ms) : 0;
		bool held = ms < (int64_t)p->held_ms;
		if (held && (left < 0 || (int64_t)p->held_ms - ms < left))
			left = (int)((int64_t)p->held_ms - ms);
		/* poll ignores a negative fd: a held answer is not seen */
		struct pollfd pf[2] = { { .fd = held ? -1 : p->fd, .events = POLLOUT },
					{ .fd = watch, .events = POLLIN } };
		int r = platform_poll(pf, watch >= 0 ? 2 : 1, left);
		if (r < 0)
			break; /* a stop signal: the caller's next wait sees it */
		if (r == 0) {
			if (held && (limit_ms < 0 || ms + left < limit_ms))
				continue; /* the hold is over, not the wait */
			break; /* no answer yet */
		}
		/* The probe's own answer first: the watch may have spoken at
		 * the same time, or long before this look (-3's second host). */
		int ret = pf[0].revents != 0 ? net_connect_done(p->fd) : -EINPROGRESS;
		if (ret == -ENOTCONN || ret == -EINPROGRESS) {
			if (pf[1].revents != 0 || left == 0)
				break; /* the watch spoke; or a look only, or the time
				          is up: no spinning */
			continue;
		}
		p->state = probe_state_of(ret);
		probe_close(p);
	}
}

bool datapath_probe_quiet(struct datapath_probe *p, int watch)
{
	probe_wait(p, watch, watch >= 0 ? DATAPATH_PROBE_MS : 0);
	return p->state == DATAPATH_PROBE_PENDING || p->state == DATAPATH_PROBE_BLOCKED;
}

bool datapath_probe_answered(struct datapath_probe *p, int watch)
{
	probe_wait(p, watch, watch >= 0 ? -1 : 0);
	return p->state == DATAPATH_PROBE_ANSWERED;
}

void datapath_probe_end(struct datapath_probe *p)
{
	probe_close(p);
	p->state = DATAPATH_PROBE_OFF;
}
