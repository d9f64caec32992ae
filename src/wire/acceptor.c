/* SPDX-License-Identifier: Apache-2.0 */
/* acceptor: concurrent authentication of incoming data connections. */
#include "wire/acceptor.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wire/attach.h"
#include "wire/auth.h"
#include "wire/ctl.h"
#include "sys/log.h"
#include "sys/net.h"
#include "sys/platform.h"
#include "sys/sync.h"


struct acceptor;

/* Where a connection came from. */
enum acc_kind {
	ACC_TCP,                  /* our listener */
	ACC_PASSED,               /* a daemon's port, passed on to us */
	ACC_ATTACH,               /* our attach socket: a stream through ssh */
};

/* One connection being authenticated by its own thread. */
struct acc_job {
	struct acceptor *a;
	int fd;                   /* the accepted socket: the job's until ch owns it, and
	                             open until collected (so shutdown may cut it off) */
	struct chan *ch;          /* result: the channel over fd; owned by the job until
	                             collected */
	struct chan *live;        /* guarded by a->lock: an attach job's channel while its
	                             handshake runs, for a cut to abort (NULL: none) */
	enum acc_kind kind;       /* immutable */
	char who[NET_MAX_ADDR];   /* immutable */
	char why[256];            /* result: why the handshake failed, or "" */
	uint16_t idx;             /* result: the stream index */
	int ret;                  /* result; guarded by a->lock */
	bool done;                /* guarded by a->lock */
	bool cut;                 /* guarded by a->lock: cut off to make room */
	bool benign;              /* result: a failure that is no news (see acc_collect) */
	bool used;                /* accept loop only */
	uint64_t started_ns;      /* accept loop only */
	pthread_t tid;
};

struct acceptor {
	const uint8_t *k;         /* immutable */
	unsigned n, timeout_s;    /* immutable */
	uint32_t window;          /* immutable: req->window */
	struct auth_data_mode mode; /* immutable */
	int efd;                  /* eventfd: a job finished */
	pthread_mutex_t lock;
	struct acc_job jobs[ACCEPTOR_MAX_JOBS];
};

/* A stream through ssh: takes its pipes from the attach connection j->fd
 * (which the channel then holds: closing it ends the remote `pcopy
 * --attach`), and runs the handshake in clear over them, whatever the
 * session's mode: ssh encrypts them. Sets j->ch on success. */
static int acc_handshake_attach(struct acc_job *j)
{
	struct acceptor *a = j->a;
	uint64_t deadline = j->started_ns + (uint64_t)ACCEPTOR_AUTH_TIMEOUT_S * 1000000000u;
	char who[NET_MAX_ADDR];
	struct chan *ch;
	bool cut;
	int fds[2], ret;

	ret = attach_take(j->fd, deadline, fds, who, sizeof(who));
	if (ret < 0) {
		snprintf(j->why, sizeof(j->why), "%s", ret == -EPERM ? "a process of another user"
			 : ret == -EPROTO ? "it did not pass a stream" : pc_strerror(ret));
		return ret;
	}
	ch = chan_pipes_new(fds[0], fds[1], j->fd);
	if (ch == NULL) {
		ret = -errno;
		close(fds[0]);
		close(fds[1]);
		return ret;
	}
	sync_lock(&a->lock);
	j->live = ch;
	cut = j->cut;
	sync_unlock(&a->lock);
	ret = cut ? -PC_E_TIMEOUT : chan_set_timeout(ch, ACCEPTOR_AUTH_TIMEOUT_S);
	if (ret == 0)
		ret = auth_data_accept(ch, a->k, a->n, &j->idx);
	if (ret == 0)
		ret = chan_set_timeout(ch, a->timeout_s);
	sync_lock(&a->lock);
	j->live = NULL;
	sync_unlock(&a->lock);
	/* Closed before its proof: the client started it in case, and its
	 * direct connections won (roles/datapath.h); a stream that really
	 * failed fails the client, which says why. */
	j->benign = ret == -PC_E_NET;
	/* The channel holds j->fd now, whatever came of the handshake: it is
	 * closed when the job is collected (acc_job_close). */
	j->ch = ch;
	return ret;
}

/* The handshake of one connection, TLS or in clear. Sets j->ch on
 * success. Returns 0 or a negative code (j->why may say more). */
static int acc_handshake(struct acc_job *j)
{
	struct acceptor *a = j->a;
	int ret;

	if (j->kind == ACC_ATTACH)
		return acc_handshake_attach(j);
	ret = net_set_nodelay(j->fd); /* as the connector does: no 40 ms END */
	if (ret == 0 && a->mode.tls) {
		/* One deadline for the whole handshake, whatever the peer
		 * trickles (acc_expire cuts it off then, in clear too). */
		uint64_t deadline = j->started_ns + (uint64_t)ACCEPTOR_AUTH_TIMEOUT_S * 1000000000u;
		struct pc_err e;
		pc_err_init(&e);
		ret = auth_data_tls_accept(j->fd, a->k, a->n, deadline, &j->idx, &j->ch, &e);
		if (ret < 0)
			(void)pc_err_get(&e, j->why, sizeof(j->why));
		pc_err_destroy(&e);
	} else if (ret == 0) {
		j->ch = chan_plain_new(j->fd, j->fd);
		ret = j->ch == NULL ? -ENOMEM : chan_set_timeout(j->ch, ACCEPTOR_AUTH_TIMEOUT_S);
		if (ret == 0)
			ret = auth_data_accept(j->ch, a->k, a->n, &j->idx);
	}
	if (ret == 0)
		ret = chan_set_timeout(j->ch, a->timeout_s);
	return ret;
}

static void *acc_job_main(void *arg)
{
	struct acc_job *j = arg;
	struct acceptor *a = j->a;
	int ret = acc_handshake(j);

	sync_lock(&a->lock);
	/* Cut off to make room: whatever came of it, it is not kept. */
	j->ret = j->cut && ret == 0 ? -PC_E_TIMEOUT : ret;
	j->done = true;
	sync_unlock(&a->lock);
	ret = platform_event_signal(a->efd);
	if (ret < 0)
		log_debug("acceptor eventfd: %s", strerror(-ret));
	return NULL;
}

/* Cuts job j off (a->lock held): its socket is shut down, and a stream
 * through ssh aborted, so that its thread ends at once. */
static void acc_cut(struct acc_job *j)
{
	j->cut = true;
	(void)shutdown(j->fd, SHUT_RDWR);
	if (j->live != NULL)
		chan_abort(j->live);
}

/* Closes what a job holds: its channel, or its bare socket. */
static void acc_job_close(struct acc_job *j)
{
	if (j->ch != NULL)
		chan_free(j->ch); /* closes fd */
	else
		close(j->fd);
	j->ch = NULL;
	j->fd = -1;
}

/* Joins every finished job and keeps its connection if it is good and
 * its stream index still free; with all, cuts off and joins the others
 * too (complete: every stream has arrived). Returns how many connections
 * it kept. */
static unsigned acc_collect(struct acceptor *a, struct chan **chans, bool all, bool complete)
{
	unsigned kept = 0;

	for (unsigned i = 0; i < ACCEPTOR_MAX_JOBS; i++) {
		struct acc_job *j = &a->jobs[i];
		if (!j->used)
			continue;
		sync_lock(&a->lock);
		bool done = j->done;
		sync_unlock(&a->lock);
		if (!done && !all)
			continue;
		/* Every stream is here and this one still owes its proof. Over
		 * TCP that is a silent stranger. Through ssh it is the session's
		 * own user's (the attach socket lets no one else in): a stream
		 * its client started in case, and stops now that direct won.
		 * When streams are missing, it may be why: that is no news to
		 * hide. */
		bool held = complete && !done && j->kind == ACC_ATTACH;
		if (!done) {
			sync_lock(&a->lock);
			acc_cut(j);
			sync_unlock(&a->lock);
		}
		if (pthread_join(j->tid, NULL) != 0)
			log_error("cannot join an acceptor thread");
		if (j->ret == 0 && chans[j->idx] == NULL && !all) {
			chans[j->idx] = j->ch;
			kept++;
		} else {
			if ((j->benign || held) && j->ret != 0)
				log_info("%s ended before its proof; the client took another path",
					 j->who);
			else if (!all || j->ret != 0)
				log_warn("dropped data connection from %s: %s", j->who,
					 j->why[0] ? j->why
					 : j->ret == -PC_E_AUTH ? "bad authentication"
					 : j->ret == 0 ? "duplicate stream" : pc_strerror(j->ret));
			acc_job_close(j);
		}
		j->used = false;
	}
	return kept;
}

/* Accepts one connection and starts its job. Returns 0 (also when the
 * connection went away before accept, or no thread could be had), or a
 * negative code for a listener that failed. */
static int acc_accept(struct acceptor *a, int lfd, enum acc_kind kind)
{
	struct acc_job *j = NULL;
	char who[NET_MAX_ADDR];
	int fd, rc;

	for (unsigned i = 0; i < ACCEPTOR_MAX_JOBS && j == NULL; i++)
		if (!a->jobs[i].used)
			j = &a->jobs[i];
	if (j == NULL)
		return 0; /* every slot busy: it waits in the backlog */
	if (kind == ACC_ATTACH) {
		fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		fd = fd >= 0 ? fd : -errno;
		snprintf(who, sizeof(who), "a stream through ssh");
	} else if (kind == ACC_PASSED) {
		fd = net_recv_fd(lfd, who, sizeof(who));
	} else {
		fd = net_accept(lfd, 0, who, sizeof(who));
	}
	if (fd == -PC_E_TIMEOUT || fd == -EAGAIN || fd == -ECONNABORTED || fd == -EINTR ||
	    fd == -EPROTO)
		return 0;
	if (fd < 0)
		return fd;
	/* Accepted by a daemon's listener, which could not know our window:
	 * without it the receive window would grow from the kernel's default,
	 * a round trip at a time (about 0.14 s of a 256 MiB copy over 50 ms). */
	if (kind == ACC_PASSED)
		net_set_window(fd, a->window);
	*j = (struct acc_job){ .a = a, .fd = fd, .used = true, .kind = kind,
			       .started_ns = platform_now_ns() };
	snprintf(j->who, sizeof(j->who), "%s", who);
	rc = pthread_create(&j->tid, NULL, acc_job_main, j);
	if (rc != 0) {
		log_warn("dropped data connection from %s: cannot start a thread: %s", who,
			 strerror(rc));
		close(fd);
		j->used = false;
	}
	return 0;
}

/* Whether a job cut off by acc_make_room has not been collected yet
 * (accept loop only: it alone sets cut). */
static bool acc_cutting(const struct acceptor *a)
{
	for (unsigned i = 0; i < ACCEPTOR_MAX_JOBS; i++)
		if (a->jobs[i].used && a->jobs[i].cut)
			return true;
	return false;
}

/* Every slot is taken and another connection waits: the oldest handshake
 * still running is cut off (its socket shut down, so its thread ends at
 * once, and its slot is free when it is collected), so that strangers who
 * hold the slots cannot keep a session's own streams out. */
static void acc_make_room(struct acceptor *a)
{
	struct acc_job *oldest = NULL;

	sync_lock(&a->lock);
	for (unsigned i = 0; i < ACCEPTOR_MAX_JOBS; i++) {
		struct acc_job *j = &a->jobs[i];
		if (j->used && !j->done && !j->cut &&
		    (oldest == NULL || j->started_ns < oldest->started_ns))
			oldest = j;
	}
	if (oldest != NULL) {
		acc_cut(oldest);
		log_debug("cut off the data connection from %s: every slot was taken", oldest->who);
	}
	sync_unlock(&a->lock);
}

/* Cuts off every handshake that has run ACCEPTOR_AUTH_TIMEOUT_S since its
 * accept: a timeout per read alone (in clear) would let a peer that sends
 * a byte at a time stay. Returns the ms until the next such deadline, or
 * -1 if no handshake is running. */
static int acc_expire(struct acceptor *a)
{
	const uint64_t limit = (uint64_t)ACCEPTOR_AUTH_TIMEOUT_S * 1000000000u;
	uint64_t now = platform_now_ns(), next = UINT64_MAX;

	sync_lock(&a->lock);
	for (unsigned i = 0; i < ACCEPTOR_MAX_JOBS; i++) {
		struct acc_job *j = &a->jobs[i];
		if (!j->used || j->done || j->cut)
			continue;
		if (now - j->started_ns >= limit) {
			acc_cut(j);
			log_debug("cut off the data connection from %s: no proof within %u s", j->who,
				  ACCEPTOR_AUTH_TIMEOUT_S);
		} else if (j->started_ns + limit < next) {
			next = j->started_ns + limit;
		}
	}
	sync_unlock(&a->lock);
	return next == UINT64_MAX ? -1 : (int)((next - now) / 1000000u) + 1;
}

static unsigned acc_in_flight(const struct acceptor *a)
{
	unsigned n = 0;

	for (unsigned i = 0; i < ACCEPTOR_MAX_JOBS; i++)
		n += a->jobs[i].used;
	return n;
}

/* The peer spoke on the control channel while no handshake was in flight.
 * A source that opened its connections starts the transfer at once, so its
 * first ENTRIES may overtake the last of them: keep it for the transfer and
 * go on waiting (returns 0). The peer's ERROR or a closed channel means it
 * gave up: -PC_E_ABORTED with its reason and code in e. Anything else is
 * our own failure to report (-PC_E_PROTO, -ENOMEM). */
static int acc_hear(struct ctl *watch, struct pc_err *e)
{
	struct proto_msg *m = malloc(sizeof(*m));
	int ret;

	if (m == NULL)
		return pc_err_set(e, -ENOMEM, "out of memory");
	m->type = 0;
	ret = ctl_expect(watch, PROTO_ENTRIES, m, e);
	if (ret == 0)
		ctl_unread(watch, m);
	else if (m->type == PROTO_ERROR || ret == -PC_E_NET)
		ret = -PC_E_ABORTED;
	free(m);
	return ret;
}

/* lfd: our listener (-1: none), or with passed the daemon's socket that
 * passes connections on; afd: our attach socket (-1: none). */
static int acc_run(int lfd, bool passed, int afd, struct ctl *watch,
		   const struct proto_request *req, const uint8_t k[PROTO_KEY_LEN], const char *peer,
		   struct chan **chans, struct pc_err *e)
{
	unsigned n = req->streams;
	uint64_t deadline = platform_now_ns() + (uint64_t)ACCEPTOR_TIMEOUT_S * 1000000000u;
	struct acceptor *a = calloc(1, sizeof(*a));
	unsigned have = 0;
	bool started = false; /* the peer's ENTRIES came */
	int ret = 0;

	for (unsigned i = 0; i < n; i++)
		chans[i] = NULL;
	if (a == NULL)
		return pc_err_set(e, -ENOMEM, "out of memory");
	*a = (struct acceptor){ .k = k, .n = n, .timeout_s = req->timeout_s, .window = req->window,
				.mode = auth_data_mode(req->flags) };
	a->efd = platform_event_new();
	int rc = a->efd < 0 ? -a->efd : pthread_mutex_init(&a->lock, NULL);
	if (rc != 0) {
		ret = pc_err_set(e, -rc, "%s: %s", a->efd < 0 ? "eventfd" : "pthread_mutex_init",
				 strerror(rc));
		if (a->efd >= 0)
			close(a->efd);
		free(a);
		return ret;
	}
	while (have < n) {
		int expire_ms = acc_expire(a);
		uint64_t now = platform_now_ns();
		if (now >= deadline)
			break;
		/* The control channel counts only while no handshake is in
		 * flight: a peer that finished its side of every handshake may
		 * rightly speak (ENTRIES...) before our threads are done checking,
		 * and that is no reason to give up. */
		unsigned busy = acc_in_flight(a);
		/* With every slot taken, a new connection still wakes us (to
		 * make room), unless room is being made already. */
		bool full = busy >= ACCEPTOR_MAX_JOBS;
		bool hold = full && acc_cutting(a);
		struct pollfd p[4] = { { .fd = hold ? -1 : lfd, .events = POLLIN },
				       { .fd = a->efd, .events = POLLIN },
				       { .fd = busy || !watch ? -1 : ctl_rfd(watch), .events = POLLIN },
				       { .fd = hold ? -1 : afd, .events = POLLIN } };
		/* A message already inside the ctl is not seen by poll. */
		bool heard = !busy && watch != NULL && ctl_pending(watch);
		/* A stop signal ends the wait too (platform_poll). */
		int wait_ms = (int)((deadline - now) / 1000000u) + 1;
		if (expire_ms >= 0 && expire_ms < wait_ms)
			wait_ms = expire_ms;
		int nr = platform_poll(p, 4, heard ? 0 : wait_ms);
		if (nr == -PC_E_INTERRUPTED) {
			ret = pc_err_set(e, nr, "interrupted while waiting for data connections "
					 "from %s", peer);
			break;
		}
		if (nr < 0) {
			ret = pc_err_set(e, nr, "poll: %s", strerror(-nr));
			break;
		}
		bool knock = nr > 0 && ((p[0].revents | p[3].revents) & POLLIN);
		if ((heard || (nr > 0 && p[2].revents)) && !knock) {
			ret = acc_hear(watch, e);
			if (ret < 0)
				break;
			/* The peer has opened every connection: the rest are on
			 * their way, and we no longer hear it give up. */
			watch = NULL;
			started = true;
			uint64_t soon = platform_now_ns() +
					(uint64_t)ACCEPTOR_AUTH_TIMEOUT_S * 1000000000u;
			deadline = soon < deadline ? soon : deadline;
			continue;
		}
		if (nr > 0 && (p[1].revents & POLLIN)) {
			int err = platform_event_drain(a->efd);
			if (err < 0)
				log_debug("acceptor eventfd: %s", strerror(-err));
			have += acc_collect(a, chans, false, false);
		}
		if (knock && full) {
			acc_make_room(a);
		} else if (nr > 0 && (p[3].revents & POLLIN)) {
			ret = acc_accept(a, afd, ACC_ATTACH);
			if (ret < 0) {
				pc_err_set(e, ret, "accepting data streams through ssh: %s",
					   pc_strerror(ret));
				break;
			}
		} else if (nr > 0 && (p[0].revents & POLLIN)) {
			ret = acc_accept(a, lfd, passed ? ACC_PASSED : ACC_TCP);
			if (ret == -PC_E_NET && passed) {
				pc_err_set(e, ret, "the daemon stopped passing on data connections");
				break;
			}
			if (ret < 0) {
				pc_err_set(e, ret, "accepting data connections: %s", pc_strerror(ret));
				break;
			}
		}
	}
	/* Cut off and join whoever is left. */
	acc_collect(a, chans, true, ret == 0 && have == n);
	if (ret == 0 && have < n && started)
		ret = pc_err_set(e, -PC_E_TIMEOUT,
				 "only %u of %u data connections from %s arrived, though it had "
				 "opened them all and started", have, n, peer);
	else if (ret == 0 && have < n)
		ret = pc_err_set(e, -PC_E_TIMEOUT,
				 "only %u of %u data connections from %s arrived within %u s; "
				 "is a firewall blocking them?", have, n, peer, ACCEPTOR_TIMEOUT_S);
	if (ret < 0)
		for (unsigned i = 0; i < n; i++) {
			chan_free(chans[i]);
			chans[i] = NULL;
		}
	sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&a->lock));
	close(a->efd);
	free(a);
	return ret;
}

int acceptor_run(int lfd, int afd, struct ctl *watch, const struct proto_request *req,
		 const uint8_t k[PROTO_KEY_LEN], const char *peer, struct chan **chans,
		 struct pc_err *e)
{
	return acc_run(lfd, false, afd, watch, req, k, peer, chans, e);
}

int acceptor_run_passed(int sock, struct ctl *watch, const struct proto_request *req,
			const uint8_t k[PROTO_KEY_LEN], const char *peer, struct chan **chans,
			struct pc_err *e)
{
	return acc_run(sock, true, -1, watch, req, k, peer, chans, e);
}
