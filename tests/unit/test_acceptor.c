/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for acceptor: real TCP connections on loopback, real
 * handshakes, and a control channel over a socketpair. The peer side runs
 * in a thread of its own, as a remote connector would. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"
#include "testchan.h"
#include "testentries.h"

#include <netinet/in.h>
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <fcntl.h>
#include <unistd.h>

#include "wire/acceptor.h"
#include "wire/attach.h"
#include "wire/auth.h"
#include "wire/ctl.h"
#include "sys/err.h"
#include "sys/net.h"
#include "sys/platform.h"
#include "transport/chan.h"
#include "transport/tls.h"

#define NSTREAMS 3u

/* The connector's side: what it says on the control channel first, and
 * which connections it then opens. */
struct peer {
	struct ctl *ctl;            /* the peer's end of the control channel */
	uint16_t port;
	const struct proto_msg *first; /* sent before connecting; NULL: nothing */
	bool close_ctl;             /* close the control channel instead */
	bool stranger;              /* open one connection with a wrong key first */
	unsigned nconnect;          /* good connections to open, indexes 0.. */
	uint8_t k[PROTO_KEY_LEN];
	bool tls;                   /* connect with TLS (ENCRYPT) */
	bool trickle;               /* first a connection that sends a byte a second */
	unsigned via_attach;        /* bit i: stream i comes through the attach socket */
	uint8_t attach_id[PROTO_ATTACH_ID_LEN];
	const char *attach_path;    /* idle_attach: the attach socket */
	bool idle_attach;           /* first an attach connection that passes nothing */
	bool held_attach;           /* first a stream through ssh that holds its proof */
	int held_fds[3];            /* held_attach: its pipes' ends and connection */
	double idle_closed_s;       /* result: when the acceptor closed it; < 0: never */
	double trickle_closed_s;    /* result: when the acceptor closed it; < 0: never */
	struct chan *chans[NSTREAMS]; /* results, read after join */
	uint8_t expect[NSTREAMS][PROTO_MAC_LEN];
	int ret;
};

/* Connects and sends its proof for stream idx. Returns the channel, or
 * NULL on any failure. */
static struct chan *peer_connect(struct peer *p, const uint8_t *k, uint16_t idx,
				 uint8_t *expect)
{
	struct chan *ch = NULL;
	struct pc_err e;
	int fd;

	pc_err_init(&e);
	fd = net_connect("127.0.0.1", p->port, 4, 0, 5, &e);
	if (fd >= 0 && p->tls) {
		if (auth_data_tls_connect(fd, k, idx, TLS_CIPHER_AUTO,
					  platform_now_ns() + 5000000000ull, &ch, &e) < 0)
			close(fd);
		pc_err_destroy(&e);
		return ch;
	}
	pc_err_destroy(&e);
	if (fd >= 0 && (ch = chan_plain_new(fd, fd)) == NULL)
		close(fd);
	if (ch != NULL && auth_data_connect(ch, k, idx, expect) < 0) {
		chan_free(ch);
		ch = NULL;
	}
	return ch;
}

/* Stream idx through ssh, as `pcopy --attach` and the client's ssh child
 * would make it: two pipes, the session's ends passed over the attach
 * socket, the handshake in clear over ours (whatever the session's mode).
 * Returns the channel, or NULL on any failure. */
/* Makes the two pipes and passes the session's ends over the attach
 * socket: fds[0] reads from the session, fds[1] writes to it, fds[2] is
 * the attach connection (each -1 where it failed). Returns 0 or -1. */
static int peer_offer(struct peer *p, int fds[3])
{
	int to_sess[2], from_sess[2];
	struct pc_err e;

	fds[0] = fds[1] = fds[2] = -1;
	if (pipe2(to_sess, O_CLOEXEC) != 0)
		return -1;
	if (pipe2(from_sess, O_CLOEXEC) != 0) {
		close(to_sess[0]);
		close(to_sess[1]);
		return -1;
	}
	pc_err_init(&e);
	fds[2] = attach_offer(p->attach_id, 5, to_sess[0], from_sess[1], "test ssh", &e);
	pc_err_destroy(&e);
	/* The session has its own copies now. */
	close(to_sess[0]);
	close(from_sess[1]);
	fds[0] = from_sess[0];
	fds[1] = to_sess[1];
	return fds[2] >= 0 ? 0 : -1;
}

static struct chan *peer_attach(struct peer *p, uint16_t idx, uint8_t *expect)
{
	struct chan *ch = NULL;
	int fds[3];

	if (peer_offer(p, fds) == 0 && (ch = chan_pipes_new(fds[0], fds[1], fds[2])) == NULL)
		close(fds[2]);
	if (ch == NULL) {
		if (fds[0] >= 0)
			close(fds[0]);
		if (fds[1] >= 0)
			close(fds[1]);
		return NULL;
	}
	if (auth_data_connect(ch, p->k, idx, expect) < 0) {
		chan_free(ch);
		ch = NULL;
	}
	return ch;
}

/* A stream through ssh that passes its pipes and then holds its proof,
 * as an early stream does while the direct connects race (roles/
 * datapath.h): keeps its ends in p->held_fds (closed by rig_close).
 * Returns 0 or -1. */
static int peer_held_attach(struct peer *p)
{
	return peer_offer(p, p->held_fds);
}

/* An attach connection that passes no fds: returns the seconds until the
 * acceptor closed it (up to 15 s), or -1 if it never did. */
static double peer_idle_attach(struct peer *p)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	uint64_t t0 = platform_now_ns();
	double open_s = -1;
	int fd;

	if (strlen(p->attach_path) >= sizeof(sa.sun_path))
		return -1;
	memcpy(sa.sun_path, p->attach_path, strlen(p->attach_path) + 1);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		char junk;
		if (poll(&pf, 1, 15000) == 1 && recv(fd, &junk, 1, 0) <= 0)
			open_s = (double)(platform_now_ns() - t0) / 1e9;
	}
	close(fd);
	return open_s;
}

/* A stranger who sends a byte a second, each one in time for a timeout
 * per read, until the acceptor closes the connection (or 15 s). Returns
 * the seconds it stayed open, or -1 if it was never closed. */
static double peer_trickle(struct peer *p)
{
	struct pc_err e;
	uint64_t t0 = platform_now_ns();
	double open_s = -1;
	int fd;

	pc_err_init(&e);
	fd = net_connect("127.0.0.1", p->port, 4, 0, 5, &e);
	pc_err_destroy(&e);
	if (fd < 0)
		return -1;
	for (unsigned i = 0; i < 15 && open_s < 0; i++) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		uint8_t b = 'P';
		char junk[64];
		if (send(fd, &b, 1, MSG_NOSIGNAL) != 1 ||
		    (poll(&pf, 1, 1000) == 1 && recv(fd, junk, sizeof(junk), 0) <= 0))
			open_s = (double)(platform_now_ns() - t0) / 1e9;
	}
	close(fd);
	return open_s;
}

static void *peer_main(void *arg)
{
	struct peer *p = arg;
	uint8_t junk[PROTO_MAC_LEN];

	p->ret = 0;
	if (p->first != NULL)
		p->ret = ctl_send(p->ctl, p->first);
	if (p->close_ctl) {
		ctl_free(p->ctl);
		p->ctl = NULL;
	}
	/* Give the acceptor time to read the control channel before any
	 * connection exists: this is the order the tests are about. */
	usleep(100 * 1000);
	if (p->trickle)
		p->trickle_closed_s = peer_trickle(p);
	if (p->idle_attach)
		p->idle_closed_s = peer_idle_attach(p);
	if (p->held_attach && peer_held_attach(p) < 0)
		p->ret = -1;
	if (p->stranger) {
		uint8_t bad[PROTO_KEY_LEN];
		memcpy(bad, p->k, sizeof(bad));
		bad[7] ^= 0x40;
		struct chan *ch = peer_connect(p, bad, 0, junk);
		/* In clear the connector does not wait for the listener; in
		 * TLS its handshake must fail. */
		if ((ch == NULL) != p->tls)
			p->ret = -1;
		else
			chan_free(ch);
	}
	for (unsigned i = 0; i < p->nconnect; i++) {
		p->chans[i] = (p->via_attach & (1u << i))
				      ? peer_attach(p, (uint16_t)i, p->expect[i])
				      : peer_connect(p, p->k, (uint16_t)i, p->expect[i]);
		if (p->chans[i] == NULL)
			p->ret = -1;
	}
	return NULL;
}

struct rig {
	struct proto_request req;   /* what the acceptor is asked for */
	int lfd;
	struct ctl *ours;
	struct peer peer;
	pthread_t th;
};

static void rig_start(struct rig *r, const struct proto_msg *first, unsigned nconnect)
{
	struct pc_err e;
	int sv[2];

	memset(r, 0, sizeof(*r));
	pc_err_init(&e);
	r->lfd = net_listen("127.0.0.1", 0, 0, 4, 0, &e);
	pc_err_destroy(&e);
	assert_true(r->lfd >= 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	r->ours = testchan_ctl(sv[0], sv[0], "peer", false);
	r->peer.ctl = testchan_ctl(sv[1], sv[1], "us", false);
	assert_non_null(r->ours);
	assert_non_null(r->peer.ctl);
	r->req.streams = NSTREAMS;
	r->req.timeout_s = 10;
	r->peer.port = net_local_port(r->lfd);
	r->peer.first = first;
	r->peer.nconnect = nconnect;
	for (unsigned i = 0; i < 3; i++)
		r->peer.held_fds[i] = -1;
	for (unsigned i = 0; i < PROTO_KEY_LEN; i++)
		r->peer.k[i] = (uint8_t)(i * 13 + 5);
}

static void rig_run_peer(struct rig *r)
{
	assert_int_equal(pthread_create(&r->th, NULL, peer_main, &r->peer), 0);
}

static void rig_join(struct rig *r)
{
	assert_int_equal(pthread_join(r->th, NULL), 0);
}

/* Stands for a daemon's parent: accepts n connections on lfd and passes
 * each on over sock (net_send_fd), then closes sock if close_after. */
struct forwarder {
	int lfd, sock;
	unsigned n;
	bool close_after;
	int ret;
	pthread_t th;
};

static void *forwarder_main(void *arg)
{
	struct forwarder *f = arg;

	f->ret = 0;
	for (unsigned i = 0; i < f->n; i++) {
		char who[NET_MAX_ADDR];
		int fd = net_accept(f->lfd, 5000, who, sizeof(who));
		if (fd < 0 || net_send_fd(f->sock, fd, who) < 0)
			f->ret = -1;
		if (fd >= 0)
			close(fd);
	}
	if (f->close_after)
		close(f->sock);
	return NULL;
}

/* After rig_join: closes everything, and chans[] unless NULL. */
static void rig_close(struct rig *r, struct chan **chans)
{
	for (unsigned i = 0; i < NSTREAMS; i++) {
		chan_free(r->peer.chans[i]);
		if (chans != NULL)
			chan_free(chans[i]);
	}
	for (unsigned i = 0; i < 3; i++)
		if (r->peer.held_fds[i] >= 0)
			close(r->peer.held_fds[i]);
	ctl_free(r->peer.ctl);
	ctl_free(r->ours);
	if (r->lfd >= 0)
		close(r->lfd);
}

/* A source that opened its connections sends ENTRIES at once: they may
 * come before any connection. The acceptor keeps it for the transfer and
 * still collects every connection, each answered with the right proof. */
static void test_file_overtakes_connections(void **state)
{
	static struct proto_batch batch;
	struct proto_msg file, m;
	struct proto_entry ent;
	size_t pos = 0;
	struct rig r;
	struct pc_err e;
	struct chan *chans[NSTREAMS];

	(void)state;
	assert_int_equal(testentries_one(&batch, &file, 0, "a", 12345, 0644, 0), 0);
	rig_start(&r, &file, NSTREAMS);
	rig_run_peer(&r);
	pc_err_init(&e);
	assert_int_equal(acceptor_run(r.lfd, -1, r.ours, &r.req, r.peer.k, "peer", chans, &e), 0);
	pc_err_destroy(&e);
	rig_join(&r);
	assert_int_equal(r.peer.ret, 0);
	for (unsigned i = 0; i < NSTREAMS; i++) {
		assert_non_null(chans[i]);
		assert_int_equal(auth_data_confirm(r.peer.chans[i], r.peer.expect[i]), 0);
	}
	assert_true(ctl_pending(r.ours));
	assert_int_equal(ctl_recv(r.ours, &m), 0);
	assert_int_equal(m.type, PROTO_ENTRIES);
	assert_int_equal(proto_entries_next(&m.u.entries, &pos, &ent), 1);
	assert_int_equal(ent.size, 12345);
	assert_false(ctl_pending(r.ours));
	rig_close(&r, chans);
}

/* The peer says `first` (or closes the channel if NULL) and opens no
 * connection: the acceptor must stop at once with `ret` (-PC_E_ABORTED: the
 * peer gave up), `want` in e, and no connection left; the peer's words, if
 * any, in msg. */
static void expect_stop(const struct proto_msg *first, int ret, int want, char msg[256])
{
	struct rig r;
	struct pc_err e;
	struct chan *chans[NSTREAMS];

	rig_start(&r, first, 0);
	r.peer.close_ctl = first == NULL;
	rig_run_peer(&r);
	pc_err_init(&e);
	assert_int_equal(acceptor_run(r.lfd, -1, r.ours, &r.req, r.peer.k, "peer", chans, &e),
			 ret);
	assert_int_equal(pc_err_get(&e, msg, 256), want);
	pc_err_destroy(&e);
	for (unsigned i = 0; i < NSTREAMS; i++)
		assert_null(chans[i]);
	rig_join(&r);
	rig_close(&r, NULL);
}

/* The peer's ERROR ends the wait at once, with its code and words; so
 * does a closed control channel. Anything but FILE or ERROR before the
 * connections is a protocol error, which the caller reports. */
static void test_peer_gives_up(void **state)
{
	struct proto_msg err = { .type = PROTO_ERROR }, end = { .type = PROTO_END };
	char msg[256];

	(void)state;
	err.u.error.code = -PC_E_PARTIAL;
	strcpy(err.u.error.msg, "cannot open 'x': No such file or directory");
	expect_stop(&err, -PC_E_ABORTED, -PC_E_PARTIAL, msg);
	assert_non_null(strstr(msg, "cannot open 'x'"));
	expect_stop(NULL, -PC_E_ABORTED, -PC_E_NET, msg);
	/* Not a peer that gave up: ours to report. */
	expect_stop(&end, -PC_E_PROTO, -PC_E_PROTO, msg);
	assert_non_null(strstr(msg, "END"));
}

/* A stranger with a wrong key is dropped without an answer; the good
 * connections that follow fill the set. */
static void test_stranger_dropped(void **state)
{
	struct rig r;
	struct pc_err e;
	struct chan *chans[NSTREAMS];

	(void)state;
	rig_start(&r, NULL, NSTREAMS);
	r.peer.stranger = true;
	rig_run_peer(&r);
	pc_err_init(&e);
	assert_int_equal(acceptor_run(r.lfd, -1, r.ours, &r.req, r.peer.k, "peer", chans, &e), 0);
	pc_err_destroy(&e);
	assert_false(ctl_pending(r.ours));
	rig_join(&r);
	assert_int_equal(r.peer.ret, 0);
	for (unsigned i = 0; i < NSTREAMS; i++) {
		assert_non_null(chans[i]);
		assert_int_equal(auth_data_confirm(r.peer.chans[i], r.peer.expect[i]), 0);
	}
	rig_close(&r, chans);
}

/* A stranger in clear who trickles a byte a second, each in time for a
 * timeout per read, is cut off 10 s after it was accepted all the same:
 * every handshake has a deadline from accept. (The session's own streams
 * come after it here, so that it is the acceptor's deadline that ends it,
 * not the end of the wait.) */
static void test_trickle_cut_at_deadline(void **state)
{
	struct rig r;
	struct pc_err e;
	struct chan *chans[NSTREAMS];

	(void)state;
	rig_start(&r, NULL, NSTREAMS);
	r.peer.trickle = true;
	rig_run_peer(&r);
	pc_err_init(&e);
	assert_int_equal(acceptor_run(r.lfd, -1, r.ours, &r.req, r.peer.k, "peer", chans, &e), 0);
	pc_err_destroy(&e);
	rig_join(&r);
	assert_int_equal(r.peer.ret, 0);
	assert_true(r.peer.trickle_closed_s >= ACCEPTOR_AUTH_TIMEOUT_S - 1);
	assert_true(r.peer.trickle_closed_s <= ACCEPTOR_AUTH_TIMEOUT_S + 1.5);
	rig_close(&r, chans);
}

/* In TLS (ENCRYPT) the handshake proves both ends: a stranger with a wrong
 * key is dropped, and each good connection lands at the index it proved. */
static void test_tls_connections(void **state)
{
	struct rig r;
	struct pc_err e;
	struct chan *chans[NSTREAMS];

	(void)state;
	rig_start(&r, NULL, NSTREAMS);
	r.req.flags = PROTO_REQ_ENCRYPT;
	r.peer.tls = true;
	r.peer.stranger = true;
	rig_run_peer(&r);
	pc_err_init(&e);
	assert_int_equal(acceptor_run(r.lfd, -1, r.ours, &r.req, r.peer.k, "peer", chans, &e), 0);
	pc_err_destroy(&e);
	rig_join(&r);
	assert_int_equal(r.peer.ret, 0); /* the stranger's handshake failed, as it should */
	for (unsigned i = 0; i < NSTREAMS; i++) {
		uint8_t b = (uint8_t)(0xa0 + i), got = 0;
		struct iovec iov = { .iov_base = &b, .iov_len = 1 };
		assert_non_null(chans[i]);
		assert_true(chan_encrypted(chans[i]));
		assert_int_equal(chan_send(r.peer.chans[i], &iov, 1), 0);
		assert_int_equal(chan_recv(chans[i], &got, 1, NULL), 0);
		assert_int_equal(got, b);
	}
	rig_close(&r, chans);
}

/* The peer's ERROR already inside the control channel's chan (as TLS
 * holds what it decrypted; poll on the socket shows nothing) ends the wait
 * at once too, rather than after ACCEPTOR_TIMEOUT_S. */
/* Passed on by a daemon's parent (acceptor_run_passed): the same as
 * accepted, a stranger dropped, each good connection at its index; and a
 * parent that stops passing them on ends the wait at once. */
static void test_passed_connections(void **state)
{
	struct forwarder f = { 0 };
	struct rig r;
	struct pc_err e;
	struct chan *chans[NSTREAMS];
	int sp[2];

	(void)state;
	rig_start(&r, NULL, NSTREAMS);
	r.req.flags = PROTO_REQ_ENCRYPT;
	r.peer.tls = true;
	r.peer.stranger = true;
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
	f = (struct forwarder){ .lfd = r.lfd, .sock = sp[0], .n = NSTREAMS + 1 };
	assert_int_equal(pthread_create(&f.th, NULL, forwarder_main, &f), 0);
	rig_run_peer(&r);
	pc_err_init(&e);
	assert_int_equal(acceptor_run_passed(sp[1], r.ours, &r.req, r.peer.k, "peer", chans, &e),
			 0);
	pc_err_destroy(&e);
	rig_join(&r);
	assert_int_equal(pthread_join(f.th, NULL), 0);
	assert_int_equal(f.ret, 0);
	assert_int_equal(r.peer.ret, 0);
	for (unsigned i = 0; i < NSTREAMS; i++) {
		uint8_t b = (uint8_t)(0xb0 + i), got = 0;
		struct iovec iov = { .iov_base = &b, .iov_len = 1 };
		assert_non_null(chans[i]);
		assert_int_equal(chan_send(r.peer.chans[i], &iov, 1), 0);
		assert_int_equal(chan_recv(chans[i], &got, 1, NULL), 0);
		assert_int_equal(got, b);
	}
	rig_close(&r, chans);
	close(sp[0]);
	close(sp[1]);

	/* One of three arrives, then the parent goes: -PC_E_NET, nothing kept. */
	rig_start(&r, NULL, 1);
	r.req.flags = PROTO_REQ_ENCRYPT;
	r.peer.tls = true;
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
	f = (struct forwarder){ .lfd = r.lfd, .sock = sp[0], .n = 1, .close_after = true };
	assert_int_equal(pthread_create(&f.th, NULL, forwarder_main, &f), 0);
	rig_run_peer(&r);
	pc_err_init(&e);
	uint64_t t0 = platform_now_ns();
	assert_int_equal(acceptor_run_passed(sp[1], r.ours, &r.req, r.peer.k, "peer", chans, &e),
			 -PC_E_NET);
	assert_true(platform_now_ns() - t0 < 5000000000ull);
	char msg[256];
	assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), -PC_E_NET);
	assert_non_null(strstr(msg, "stopped passing on data connections"));
	pc_err_destroy(&e);
	for (unsigned i = 0; i < NSTREAMS; i++)
		assert_null(chans[i]);
	rig_join(&r);
	assert_int_equal(pthread_join(f.th, NULL), 0);
	assert_int_equal(f.ret, 0);
	rig_close(&r, NULL);
	close(sp[1]);
}

/* Strangers that connect and say nothing take every handshake slot; the
 * session's own streams still get in, well before the strangers' 10 s
 * are up: the oldest stalled handshake is cut off to make room. */
static void test_full_slots_make_room(void **state)
{
	int idle[ACCEPTOR_MAX_JOBS];
	struct pc_err e;
	struct chan *chans[NSTREAMS];
	struct rig r;

	(void)state;
	rig_start(&r, NULL, NSTREAMS);
	r.req.flags = PROTO_REQ_ENCRYPT;
	r.peer.tls = true;
	/* Room in the backlog for all of them, ahead of the peer's streams. */
	assert_int_equal(listen(r.lfd, 4 * ACCEPTOR_MAX_JOBS), 0);
	for (unsigned i = 0; i < ACCEPTOR_MAX_JOBS; i++) {
		struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(r.peer.port),
					  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		idle[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		assert_true(idle[i] >= 0);
		assert_true(connect(idle[i], (struct sockaddr *)&sa, sizeof(sa)) == 0 ||
			    errno == EINPROGRESS);
	}
	rig_run_peer(&r);
	pc_err_init(&e);
	uint64_t t0 = platform_now_ns();
	assert_int_equal(acceptor_run(r.lfd, -1, r.ours, &r.req, r.peer.k, "peer", chans, &e), 0);
	assert_true(platform_now_ns() - t0 < 5000000000ull);
	pc_err_destroy(&e);
	rig_join(&r);
	assert_int_equal(r.peer.ret, 0);
	for (unsigned i = 0; i < NSTREAMS; i++)
		assert_non_null(chans[i]);
	rig_close(&r, chans);
	for (unsigned i = 0; i < ACCEPTOR_MAX_JOBS; i++)
		close(idle[i]);
}

static void test_peer_gave_up_inside_chan(void **state)
{
	struct proto_msg err = { .type = PROTO_ERROR };
	struct chan *chans[NSTREAMS];
	struct pc_err e;
	char msg[256];
	int sv[2], lfd;

	(void)state;
	pc_err_init(&e);
	lfd = net_listen("127.0.0.1", 0, 0, 4, 0, &e);
	assert_true(lfd >= 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	err.u.error.code = -PC_E_PARTIAL;
	strcpy(err.u.error.msg, "cannot open 'x': No such file or directory");
	struct ctl *watch = testchan_held_ctl(sv[0], &err, "peer");
	uint64_t t0 = platform_now_ns();
	struct proto_request req = { .streams = NSTREAMS, .timeout_s = 10 };
	assert_int_equal(acceptor_run(lfd, -1, watch, &req,
				      (const uint8_t *)"0123456789abcdef0123456789abcdef", "peer",
				      chans, &e), -PC_E_ABORTED);
	assert_true(platform_now_ns() - t0 < 5000000000u);
	assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), -PC_E_PARTIAL);
	assert_non_null(strstr(msg, "cannot open 'x'"));
	for (unsigned i = 0; i < NSTREAMS; i++)
		assert_null(chans[i]);
	pc_err_destroy(&e);
	ctl_free(watch);
	close(sv[1]);
	close(lfd);
}

/* ---- streams through ssh (the attach socket) ----------------------------- */

/* An attach socket for the rig's peer, in a directory of the test's own
 * (TMPDIR), with lfd kept (tcp) or closed and set to -1. */
struct attach_rig {
	char tmp[64];
	char path[256];
	int afd;
};

static void attach_rig_open(struct attach_rig *a, struct rig *r, bool tcp)
{
	struct pc_err e;

	snprintf(a->tmp, sizeof(a->tmp), "/tmp/t_acceptor.XXXXXX");
	assert_non_null(mkdtemp(a->tmp));
	assert_int_equal(setenv("TMPDIR", a->tmp, 1), 0);
	assert_int_equal(unsetenv("XDG_RUNTIME_DIR"), 0);
	for (unsigned i = 0; i < PROTO_ATTACH_ID_LEN; i++)
		r->peer.attach_id[i] = (uint8_t)(0x5a ^ (i * 7));
	pc_err_init(&e);
	a->afd = attach_listen(r->peer.attach_id, a->path, sizeof(a->path), &e);
	pc_err_destroy(&e);
	assert_true(a->afd >= 0);
	r->peer.attach_path = a->path;
	if (!tcp) {
		close(r->lfd);
		r->lfd = -1;
	}
}

static void attach_rig_close(struct attach_rig *a)
{
	attach_close(a->afd, a->path);
	assert_int_equal(testutil_rm_rf(a->tmp), 0);
}

/* Each stream at its index, and data both ways on it; the streams in
 * clear (bits of owed) first read the listener's proof they are owed. */
static void expect_streams(struct rig *r, struct chan **chans, unsigned owed)
{
	for (unsigned i = 0; i < NSTREAMS; i++) {
		uint8_t b = (uint8_t)(0xc0 + i), got = 0;
		struct iovec iov = { .iov_base = &b, .iov_len = 1 };
		assert_non_null(chans[i]);
		assert_non_null(r->peer.chans[i]);
		if (owed & (1u << i))
			assert_int_equal(auth_data_confirm(r->peer.chans[i], r->peer.expect[i]),
					 0);
		assert_int_equal(chan_send(r->peer.chans[i], &iov, 1), 0);
		assert_int_equal(chan_recv(chans[i], &got, 1, NULL), 0);
		assert_int_equal(got, b);
		b = (uint8_t)(0xd0 + i);
		assert_int_equal(chan_send(chans[i], &iov, 1), 0);
		assert_int_equal(chan_recv(r->peer.chans[i], &got, 1, NULL), 0);
		assert_int_equal(got, b);
	}
}

/* Every stream through ssh, no TCP listener: each lands at its index,
 * its handshake in clear although the session asked for ENCRYPT. */
static void test_attach_streams(void **state)
{
	struct attach_rig a;
	struct rig r;
	struct pc_err e;
	struct chan *chans[NSTREAMS];

	(void)state;
	rig_start(&r, NULL, NSTREAMS);
	r.req.flags = PROTO_REQ_ENCRYPT;
	r.peer.via_attach = (1u << NSTREAMS) - 1;
	attach_rig_open(&a, &r, false);
	rig_run_peer(&r);
	pc_err_init(&e);
	assert_int_equal(acceptor_run(-1, a.afd, r.ours, &r.req, r.peer.k, "peer", chans, &e), 0);
	pc_err_destroy(&e);
	rig_join(&r);
	assert_int_equal(r.peer.ret, 0);
	expect_streams(&r, chans, (1u << NSTREAMS) - 1);
	for (unsigned i = 0; i < NSTREAMS; i++)
		assert_false(chan_encrypted(chans[i]));
	rig_close(&r, chans);
	attach_rig_close(&a);
}

/* Both at once: stream 1 through ssh, 0 and 2 over TCP in TLS. */
static void test_attach_and_tcp(void **state)
{
	struct attach_rig a;
	struct rig r;
	struct pc_err e;
	struct chan *chans[NSTREAMS];

	(void)state;
	rig_start(&r, NULL, NSTREAMS);
	r.req.flags = PROTO_REQ_ENCRYPT;
	r.peer.tls = true;
	r.peer.via_attach = 1u << 1;
	attach_rig_open(&a, &r, true);
	rig_run_peer(&r);
	pc_err_init(&e);
	assert_int_equal(acceptor_run(r.lfd, a.afd, r.ours, &r.req, r.peer.k, "peer", chans, &e),
			 0);
	pc_err_destroy(&e);
	rig_join(&r);
	assert_int_equal(r.peer.ret, 0);
	for (unsigned i = 0; i < NSTREAMS; i += 2)
		assert_true(chan_encrypted(chans[i]));
	assert_false(chan_encrypted(chans[1]));
	/* Only the stream in clear has the listener's proof to read. */
	expect_streams(&r, chans, 1u << 1);
	rig_close(&r, chans);
	attach_rig_close(&a);
}

/* An attach connection that never passes its fds is cut off
 * ACCEPTOR_AUTH_TIMEOUT_S after it was accepted; the good streams that
 * follow it still arrive. */
static void test_attach_idle_cut(void **state)
{
	struct attach_rig a;
	struct rig r;
	struct pc_err e;
	struct chan *chans[NSTREAMS];

	(void)state;
	rig_start(&r, NULL, NSTREAMS);
	r.peer.via_attach = (1u << NSTREAMS) - 1;
	r.peer.idle_attach = true;
	attach_rig_open(&a, &r, false);
	rig_run_peer(&r);
	pc_err_init(&e);
	assert_int_equal(acceptor_run(-1, a.afd, r.ours, &r.req, r.peer.k, "peer", chans, &e), 0);
	pc_err_destroy(&e);
	rig_join(&r);
	assert_int_equal(r.peer.ret, 0);
	assert_true(r.peer.idle_closed_s >= ACCEPTOR_AUTH_TIMEOUT_S - 1);
	assert_true(r.peer.idle_closed_s <= ACCEPTOR_AUTH_TIMEOUT_S + 1.5);
	expect_streams(&r, chans, (1u << NSTREAMS) - 1);
	rig_close(&r, chans);
	attach_rig_close(&a);
}

/* A stream through ssh that still holds its proof when every stream has
 * come over TCP (an early stream the client started in case, and stops
 * now that direct won) is closed without a warning: it is the session's
 * own user's, and no news (it was logged as a dropped connection). */
static void test_attach_held_when_direct_won(void **state)
{
	struct attach_rig a;
	struct rig r;
	struct pc_err e;
	struct chan *chans[NSTREAMS];
	struct testutil_stderr cap;
	char err[4096];

	(void)state;
	rig_start(&r, NULL, NSTREAMS);
	r.req.flags = PROTO_REQ_ENCRYPT;
	r.peer.tls = true;
	r.peer.held_attach = true;
	attach_rig_open(&a, &r, true);
	/* The acceptor's messages, for the look below. */
	testutil_stderr_begin(&cap);
	rig_run_peer(&r);
	pc_err_init(&e);
	int ret = acceptor_run(r.lfd, a.afd, r.ours, &r.req, r.peer.k, "peer", chans, &e);
	pc_err_destroy(&e);
	testutil_stderr_end(&cap, err, sizeof(err));
	assert_int_equal(ret, 0);
	rig_join(&r);
	assert_int_equal(r.peer.ret, 0);
	for (unsigned i = 0; i < NSTREAMS; i++)
		assert_true(chan_encrypted(chans[i]));
	/* The held stream's connection is closed: the session let it go. */
	struct pollfd pf = { .fd = r.peer.held_fds[2], .events = POLLIN };
	assert_int_equal(poll(&pf, 1, 5000), 1);
	if (strstr(err, "dropped") != NULL)
		fail_msg("the held stream was logged as dropped: %s", err);
	rig_close(&r, chans);
	attach_rig_close(&a);
}

/* The stop signals' signalfd, set up by main before any thread exists, as
 * pcopy_init does. */
static int g_sigfd = -1;

/* A stop signal ends the wait for connections that do not come (it used
 * to last ACCEPTOR_TIMEOUT_S), and is left for the caller to read. */
static void test_interrupted(void **state)
{
	struct signalfd_siginfo si;
	struct pc_err e;
	struct rig r;
	char msg[256];
	struct chan *chans[NSTREAMS];

	(void)state;
	assert_true(g_sigfd >= 0);
	rig_start(&r, NULL, 0);
	assert_int_equal(kill(getpid(), SIGTERM), 0);
	pc_err_init(&e);
	assert_int_equal(acceptor_run(r.lfd, -1, r.ours, &r.req, r.peer.k, "peer", chans, &e),
			 -PC_E_INTERRUPTED);
	assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), -PC_E_INTERRUPTED);
	assert_string_equal(msg, "interrupted while waiting for data connections from peer");
	pc_err_destroy(&e);
	for (unsigned i = 0; i < NSTREAMS; i++)
		assert_null(chans[i]);
	assert_int_equal(read(g_sigfd, &si, sizeof(si)), (ssize_t)sizeof(si));
	assert_int_equal(si.ssi_signo, SIGTERM);
	rig_close(&r, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_file_overtakes_connections),
		cmocka_unit_test(test_peer_gives_up),
		cmocka_unit_test(test_stranger_dropped),
		cmocka_unit_test(test_trickle_cut_at_deadline),
		cmocka_unit_test(test_tls_connections),
		cmocka_unit_test(test_passed_connections),
		cmocka_unit_test(test_full_slots_make_room),
		cmocka_unit_test(test_peer_gave_up_inside_chan),
		cmocka_unit_test(test_interrupted),
		cmocka_unit_test(test_attach_streams),
		cmocka_unit_test(test_attach_and_tcp),
		cmocka_unit_test(test_attach_idle_cut),
		cmocka_unit_test(test_attach_held_when_direct_won),
	};

	g_sigfd = platform_signals_setup();
	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
