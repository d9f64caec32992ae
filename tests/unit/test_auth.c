/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for auth: the control MACs and session key against
 * docs/PROTOCOL.md, and the data handshake over a socketpair, with the
 * right key, a wrong key, an out-of-range stream index and garbage. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <unistd.h>

#include "wire/auth.h"
#include "sys/crypto.h"
#include "sys/err.h"
#include "sys/platform.h"
#include "transport/chan.h"
#include "wire/proto.h"

static void fill(uint8_t *p, size_t len, uint8_t start)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(start + i * 7);
}

/* HMAC(key, label | a | b), written out from the protocol text. */
static void spec_mac(const uint8_t key[PROTO_KEY_LEN], const char *label,
		     const uint8_t a[PROTO_NONCE_LEN], const uint8_t b[PROTO_NONCE_LEN],
		     uint8_t out[PROTO_MAC_LEN])
{
	char lbl[32];
	uint8_t na[PROTO_NONCE_LEN], nb[PROTO_NONCE_LEN];
	struct iovec iov[3];

	assert_true(strlen(label) < sizeof(lbl));
	strcpy(lbl, label);
	memcpy(na, a, sizeof(na));
	memcpy(nb, b, sizeof(nb));
	iov[0] = (struct iovec){ lbl, strlen(lbl) };
	iov[1] = (struct iovec){ na, sizeof(na) };
	iov[2] = (struct iovec){ nb, sizeof(nb) };
	assert_int_equal(crypto_hmac(key, PROTO_KEY_LEN, iov, 3, out), 0);
}

/* ---- Pure derivations -------------------------------------------------- */

static void test_ctl_mac(void **state)
{
	uint8_t K[PROTO_KEY_LEN], K2[PROTO_KEY_LEN], nc[PROTO_NONCE_LEN], ns[PROTO_NONCE_LEN];
	uint8_t c1[PROTO_MAC_LEN], c2[PROTO_MAC_LEN], s1[PROTO_MAC_LEN], x[PROTO_MAC_LEN];
	uint8_t want[PROTO_MAC_LEN];

	(void)state;
	fill(K, sizeof(K), 1);
	fill(nc, sizeof(nc), 50);
	fill(ns, sizeof(ns), 150);

	assert_int_equal(auth_ctl_mac(K, true, nc, ns, c1), 0);
	assert_int_equal(auth_ctl_mac(K, true, nc, ns, c2), 0);
	assert_memory_equal(c1, c2, PROTO_MAC_LEN);
	spec_mac(K, "pcopy ctl C", nc, ns, want);
	assert_memory_equal(c1, want, PROTO_MAC_LEN);

	assert_int_equal(auth_ctl_mac(K, false, nc, ns, s1), 0);
	assert_memory_not_equal(c1, s1, PROTO_MAC_LEN);
	spec_mac(K, "pcopy ctl S", nc, ns, want);
	assert_memory_equal(s1, want, PROTO_MAC_LEN);

	/* Swapped nonces, a changed nonce byte, another key: all differ. */
	assert_int_equal(auth_ctl_mac(K, true, ns, nc, x), 0);
	assert_memory_not_equal(c1, x, PROTO_MAC_LEN);
	nc[PROTO_NONCE_LEN - 1] ^= 1;
	assert_int_equal(auth_ctl_mac(K, true, nc, ns, x), 0);
	assert_memory_not_equal(c1, x, PROTO_MAC_LEN);
	nc[PROTO_NONCE_LEN - 1] ^= 1;
	ns[0] ^= 0x80;
	assert_int_equal(auth_ctl_mac(K, true, nc, ns, x), 0);
	assert_memory_not_equal(c1, x, PROTO_MAC_LEN);
	ns[0] ^= 0x80;
	memcpy(K2, K, sizeof(K2));
	K2[5] ^= 2;
	assert_int_equal(auth_ctl_mac(K2, true, nc, ns, x), 0);
	assert_memory_not_equal(c1, x, PROTO_MAC_LEN);
}

static void test_session_key(void **state)
{
	uint8_t K[PROTO_KEY_LEN], nc[PROTO_NONCE_LEN], ns[PROTO_NONCE_LEN];
	uint8_t k1[PROTO_KEY_LEN], k2[PROTO_KEY_LEN], x[PROTO_KEY_LEN], mac[PROTO_MAC_LEN];
	uint8_t want[PROTO_MAC_LEN];

	(void)state;
	fill(K, sizeof(K), 9);
	fill(nc, sizeof(nc), 77);
	fill(ns, sizeof(ns), 200);
	assert_int_equal(auth_session_key(K, nc, ns, k1), 0);
	assert_int_equal(auth_session_key(K, nc, ns, k2), 0);
	assert_memory_equal(k1, k2, PROTO_KEY_LEN);
	spec_mac(K, "pcopy session", nc, ns, want);
	assert_memory_equal(k1, want, PROTO_KEY_LEN);

	nc[3] ^= 4;
	assert_int_equal(auth_session_key(K, nc, ns, x), 0);
	assert_memory_not_equal(k1, x, PROTO_KEY_LEN);
	nc[3] ^= 4;
	ns[31] ^= 4;
	assert_int_equal(auth_session_key(K, nc, ns, x), 0);
	assert_memory_not_equal(k1, x, PROTO_KEY_LEN);
	ns[31] ^= 4;
	assert_int_equal(auth_session_key(K, ns, nc, x), 0);
	assert_memory_not_equal(k1, x, PROTO_KEY_LEN);

	/* Not the same as either control MAC. */
	assert_int_equal(auth_ctl_mac(K, true, nc, ns, mac), 0);
	assert_memory_not_equal(k1, mac, PROTO_KEY_LEN);
	assert_int_equal(auth_ctl_mac(K, false, nc, ns, mac), 0);
	assert_memory_not_equal(k1, mac, PROTO_KEY_LEN);
}

/* ---- Data handshake ---------------------------------------------------- */

/* A connected pair with a generous receive timeout, so that a broken test
 * fails instead of hanging. The timeout never decides a passing run. */
static void make_pair(int sv[2])
{
	struct timeval tv = { .tv_sec = 20, .tv_usec = 0 };

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(setsockopt(sv[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
}

struct listener {
	int fd;                 /* closed by the thread when it is done */
	const uint8_t *key;
	unsigned nstreams;
	uint16_t stream;        /* written by the thread, read after join */
	int ret;                /* written by the thread, read after join */
};

static void *listener_main(void *arg)
{
	struct listener *l = arg;

	struct chan *ch = chan_plain_new(l->fd, l->fd);

	l->stream = 0xffff;
	if (ch == NULL) {
		l->ret = -ENOMEM;
		close(l->fd);
		return NULL;
	}
	l->ret = auth_data_accept(ch, l->key, l->nstreams, &l->stream);
	chan_free(ch); /* closes l->fd */
	return NULL;
}

static void listener_start(struct listener *l, int fd, const uint8_t *key, unsigned nstreams,
			   pthread_t *th)
{
	l->fd = fd;
	l->key = key;
	l->nstreams = nstreams;
	l->ret = 99;
	assert_int_equal(pthread_create(th, NULL, listener_main, l), 0);
}

/* The data MACs as docs/PROTOCOL.md 6.1 writes them:
 * HMAC(k, label | nonce_c | stream as two big-endian bytes). */
static void spec_data_mac(const uint8_t k[PROTO_KEY_LEN], const char *label,
			  const uint8_t nonce[PROTO_NONCE_LEN], uint16_t stream,
			  uint8_t out[PROTO_MAC_LEN])
{
	uint8_t msg[32 + PROTO_NONCE_LEN + 2];
	size_t n = strlen(label);
	struct iovec iov = { msg, n + PROTO_NONCE_LEN + 2 };

	assert_true(n <= 32);
	memcpy(msg, label, n);
	memcpy(msg + n, nonce, PROTO_NONCE_LEN);
	msg[n + PROTO_NONCE_LEN] = (uint8_t)(stream >> 8);
	msg[n + PROTO_NONCE_LEN + 1] = (uint8_t)stream;
	assert_int_equal(crypto_hmac(k, PROTO_KEY_LEN, &iov, 1, out), 0);
}

/* Runs the real connector against the real listener: the connector sends,
 * then confirms the listener's answer. */
static void handshake(const uint8_t *kc, const uint8_t *kl, uint16_t stream,
		      unsigned nstreams, int *cret, struct listener *l)
{
	uint8_t expect[PROTO_MAC_LEN];
	struct chan *ch;
	pthread_t th;
	int sv[2];

	make_pair(sv);
	listener_start(l, sv[1], kl, nstreams, &th);
	ch = chan_plain_new(sv[0], sv[0]);
	assert_non_null(ch);
	*cret = auth_data_connect(ch, kc, stream, expect);
	if (*cret == 0)
		*cret = auth_data_confirm(ch, expect);
	chan_free(ch); /* closes sv[0] */
	assert_int_equal(pthread_join(th, NULL), 0);
}

/* Runs the real listener on `in` as everything a connector sends (then
 * EOF). Returns how many bytes the listener answered; the first
 * PROTO_MAC_LEN of them are copied to reply. */
static size_t feed_listener(const uint8_t *k, unsigned nstreams, const void *in, size_t len,
			    struct listener *l, uint8_t reply[PROTO_MAC_LEN])
{
	uint8_t got[PROTO_MAC_LEN + 1];
	size_t n = 0;
	pthread_t th;
	ssize_t r;
	int sv[2];

	make_pair(sv);
	listener_start(l, sv[1], k, nstreams, &th);
	assert_int_equal(platform_write_full(sv[0], in, len), 0);
	assert_int_equal(shutdown(sv[0], SHUT_WR), 0);
	assert_int_equal(pthread_join(th, NULL), 0); /* the listener closed its end */
	while (n < sizeof(got) && (r = read(sv[0], got + n, sizeof(got) - n)) > 0)
		n += (size_t)r;
	close(sv[0]);
	memcpy(reply, got, n < PROTO_MAC_LEN ? n : PROTO_MAC_LEN);
	return n;
}

static void test_data_same_key(void **state)
{
	static const uint16_t streams[] = { 0, 1, 7, 63 };
	uint8_t k[PROTO_KEY_LEN];
	struct listener l;
	int cret;

	(void)state;
	fill(k, sizeof(k), 33);
	for (size_t i = 0; i < sizeof(streams) / sizeof(streams[0]); i++) {
		handshake(k, k, streams[i], 64, &cret, &l);
		assert_int_equal(cret, 0);
		assert_int_equal(l.ret, 0);
		assert_int_equal(l.stream, streams[i]);
	}
	/* The last index in range. */
	handshake(k, k, 2, 3, &cret, &l);
	assert_int_equal(cret, 0);
	assert_int_equal(l.ret, 0);
	assert_int_equal(l.stream, 2);
}

static void test_data_wrong_key(void **state)
{
	uint8_t k1[PROTO_KEY_LEN], k2[PROTO_KEY_LEN];
	struct listener l;
	int cret;

	(void)state;
	fill(k1, sizeof(k1), 1);
	memcpy(k2, k1, sizeof(k2));
	k2[PROTO_KEY_LEN - 1] ^= 1;
	handshake(k1, k2, 3, 8, &cret, &l);
	/* The listener refuses the connector's proof and answers nothing, so
	 * the connector never gets a proof at all. */
	assert_int_equal(l.ret, -PC_E_AUTH);
	assert_int_equal(l.stream, 0xffff);
	assert_int_equal(cret, -PC_E_NET);
}

/* A connector that speaks the protocol by hand. The listener refuses a
 * wrong proof without a byte in answer, refuses a right proof replayed for
 * another stream index, and answers a right one with the MAC of the
 * protocol text. */
static void test_data_listener_checks_proof(void **state)
{
	uint8_t k[PROTO_KEY_LEN], bad[PROTO_KEY_LEN], hello[PROTO_DHELLO_LEN + PROTO_MAC_LEN];
	uint8_t reply[PROTO_MAC_LEN], want[PROTO_MAC_LEN];
	struct proto_dhello h = { .magic = PROTO_DATA_MAGIC, .version = PROTO_VERSION,
				  .stream = 5 };
	struct listener l;

	(void)state;
	fill(k, sizeof(k), 10);
	memcpy(bad, k, sizeof(bad));
	bad[0] ^= 0xff;
	fill(h.nonce, sizeof(h.nonce), 90);
	proto_dhello_encode(&h, hello);

	spec_data_mac(bad, "pcopy data C", h.nonce, 5, hello + PROTO_DHELLO_LEN);
	assert_int_equal(feed_listener(k, 8, hello, sizeof(hello), &l, reply), 0);
	assert_int_equal(l.ret, -PC_E_AUTH);
	assert_int_equal(l.stream, 0xffff);

	/* The right proof for stream 5, presented as stream 6. */
	spec_data_mac(k, "pcopy data C", h.nonce, 5, hello + PROTO_DHELLO_LEN);
	h.stream = 6;
	proto_dhello_encode(&h, hello);
	assert_int_equal(feed_listener(k, 8, hello, sizeof(hello), &l, reply), 0);
	assert_int_equal(l.ret, -PC_E_AUTH);

	/* The listener's own label is no proof for a connector. */
	h.stream = 5;
	proto_dhello_encode(&h, hello);
	spec_data_mac(k, "pcopy data L", h.nonce, 5, hello + PROTO_DHELLO_LEN);
	assert_int_equal(feed_listener(k, 8, hello, sizeof(hello), &l, reply), 0);
	assert_int_equal(l.ret, -PC_E_AUTH);

	/* The right proof is accepted, and answered as the protocol says. */
	spec_data_mac(k, "pcopy data C", h.nonce, 5, hello + PROTO_DHELLO_LEN);
	assert_int_equal(feed_listener(k, 8, hello, sizeof(hello), &l, reply), PROTO_MAC_LEN);
	assert_int_equal(l.ret, 0);
	assert_int_equal(l.stream, 5);
	spec_data_mac(k, "pcopy data L", h.nonce, 5, want);
	assert_memory_equal(reply, want, PROTO_MAC_LEN);
}

/* The connector's single flight is DHELLO and the proof of the protocol
 * text, and it refuses a listener that answers with a wrong proof. */
static void test_data_connector(void **state)
{
	uint8_t k[PROTO_KEY_LEN], sent[PROTO_DHELLO_LEN + PROTO_MAC_LEN];
	uint8_t expect[PROTO_MAC_LEN], want[PROTO_MAC_LEN], zero[PROTO_MAC_LEN] = { 0 };
	struct proto_dhello h;
	struct chan *ch;
	int sv[2];

	(void)state;
	fill(k, sizeof(k), 20);
	make_pair(sv);
	ch = chan_plain_new(sv[0], sv[0]);
	assert_non_null(ch);
	assert_int_equal(auth_data_connect(ch, k, 9, expect), 0);
	assert_int_equal(platform_read_full(sv[1], sent, sizeof(sent), NULL), 0);
	assert_int_equal(proto_dhello_decode(sent, &h), 0);
	assert_int_equal(h.stream, 9);
	assert_int_equal(h.version, PROTO_VERSION);
	spec_data_mac(k, "pcopy data C", h.nonce, 9, want);
	assert_memory_equal(sent + PROTO_DHELLO_LEN, want, PROTO_MAC_LEN);
	spec_data_mac(k, "pcopy data L", h.nonce, 9, want);
	assert_memory_equal(expect, want, PROTO_MAC_LEN);

	/* A zero MAC is refused; so is a listener that hangs up. */
	assert_int_equal(platform_write_full(sv[1], zero, sizeof(zero)), 0);
	assert_int_equal(auth_data_confirm(ch, expect), -PC_E_AUTH);
	close(sv[1]);
	assert_int_equal(auth_data_confirm(ch, expect), -PC_E_NET);
	chan_free(ch); /* closes sv[0] */

	/* Every connection has a fresh nonce. */
	uint8_t expect2[PROTO_MAC_LEN];
	make_pair(sv);
	ch = chan_plain_new(sv[0], sv[0]);
	assert_non_null(ch);
	assert_int_equal(auth_data_connect(ch, k, 9, expect2), 0);
	assert_memory_not_equal(expect, expect2, PROTO_MAC_LEN);
	chan_free(ch);
	close(sv[1]);
}

static void test_data_stream_out_of_range(void **state)
{
	uint8_t k[PROTO_KEY_LEN];
	struct listener l;
	int cret;

	(void)state;
	fill(k, sizeof(k), 44);
	handshake(k, k, 4, 4, &cret, &l);
	assert_int_equal(l.ret, -PC_E_PROTO);
	assert_int_equal(l.stream, 0xffff);
	assert_true(cret < 0);

	handshake(k, k, 0xffff, 64, &cret, &l);
	assert_int_equal(l.ret, -PC_E_PROTO);
	assert_true(cret < 0);

	handshake(k, k, 0, 0, &cret, &l);
	assert_int_equal(l.ret, -PC_E_PROTO);
	assert_true(cret < 0);
}

static void test_data_garbage(void **state)
{
	uint8_t k[PROTO_KEY_LEN], junk[PROTO_DHELLO_LEN + PROTO_MAC_LEN], reply[PROTO_MAC_LEN];
	struct proto_dhello h = { .magic = PROTO_MAGIC, .version = PROTO_VERSION };
	struct listener l;

	(void)state;
	fill(k, sizeof(k), 55);

	/* 72 bytes that are not a hello: an HTTP request, say. */
	memset(junk, ' ', sizeof(junk));
	memcpy(junk, "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27);
	assert_int_equal(feed_listener(k, 4, junk, sizeof(junk), &l, reply), 0);
	assert_int_equal(l.ret, -PC_E_PROTO);

	/* A control-channel magic on a data connection. */
	proto_dhello_encode(&h, junk);
	assert_int_equal(feed_listener(k, 4, junk, sizeof(junk), &l, reply), 0);
	assert_int_equal(l.ret, -PC_E_PROTO);

	/* A stranger that sends a few bytes and hangs up. */
	assert_int_equal(feed_listener(k, 4, "PCD", 3, &l, reply), 0);
	assert_int_equal(l.ret, -PC_E_NET);
}

/* Version 4's PSKs: deterministic, and different for every key, stream
 * index and channel, so a connection proved for one is no use for another. */
static void test_psks(void **state)
{
	uint8_t k1[PROTO_KEY_LEN], k2[PROTO_KEY_LEN];
	uint8_t a[AUTH_PSK_LEN], b[AUTH_PSK_LEN], c[AUTH_PSK_LEN];

	(void)state;
	memset(k1, 0x11, sizeof(k1));
	memset(k2, 0x11, sizeof(k2));
	k2[31] ^= 1;
	assert_int_equal(auth_data_psk(k1, 0, a), 0);
	assert_int_equal(auth_data_psk(k1, 0, b), 0);
	assert_memory_equal(a, b, sizeof(a));
	assert_int_equal(auth_data_psk(k1, 1, b), 0);
	assert_memory_not_equal(a, b, sizeof(a));
	assert_int_equal(auth_data_psk(k1, 256, c), 0); /* both bytes of the index count */
	assert_memory_not_equal(a, c, sizeof(a));
	assert_memory_not_equal(b, c, sizeof(b));
	assert_int_equal(auth_data_psk(k2, 0, b), 0);
	assert_memory_not_equal(a, b, sizeof(a));
	assert_int_equal(auth_ctl_psk(k1, b), 0);
	assert_memory_not_equal(a, b, sizeof(a));
	assert_memory_not_equal(b, k1, sizeof(b));
	assert_int_equal(auth_ctl_psk(k2, c), 0);
	assert_memory_not_equal(b, c, sizeof(b));
}

/* ---- Version 4: the TLS handshakes keyed by PSKs ---- */

/* A client handshake run on its own thread against the test's server. */
struct tls_client {
	int fd;
	bool ctl;               /* the control identity, else data stream idx */
	uint16_t idx;
	uint8_t key[PROTO_KEY_LEN];
	struct chan *ch;        /* result */
	int ret;
	pthread_t tid;
};

static void *tls_client_main(void *arg)
{
	struct tls_client *c = arg;
	uint64_t deadline = platform_now_ns() + 5000000000ull;
	struct pc_err e;

	pc_err_init(&e);
	c->ret = c->ctl ? auth_ctl_tls_connect(c->fd, c->key, TLS_CIPHER_AUTO, deadline, &c->ch, &e)
			: auth_data_tls_connect(c->fd, c->key, c->idx, TLS_CIPHER_AUTO, deadline,
						&c->ch, &e);
	pc_err_destroy(&e);
	if (c->ret < 0)
		close(c->fd);
	return NULL;
}

/* Runs one handshake: a client offering (ctl or data idx, ckey) against a
 * server that is a daemon (ctl) or a data listener of nstreams (skey).
 * Returns the server's result; *stream gets the index it proved, *client
 * the client's result. */
static int tls_pair(bool cctl, uint16_t idx, const uint8_t ckey[PROTO_KEY_LEN], bool sctl,
		    unsigned nstreams, const uint8_t skey[PROTO_KEY_LEN], uint16_t *stream,
		    int *client)
{
	struct tls_client c = { .ctl = cctl, .idx = idx };
	struct chan *ch = NULL;
	struct pc_err e;
	int sv[2], ret;

	memcpy(c.key, ckey, sizeof(c.key));
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	c.fd = sv[0];
	assert_int_equal(pthread_create(&c.tid, NULL, tls_client_main, &c), 0);
	pc_err_init(&e);
	uint64_t deadline = platform_now_ns() + 5000000000ull;
	ret = sctl ? auth_ctl_tls_accept(sv[1], skey, deadline, &ch, &e)
		   : auth_data_tls_accept(sv[1], skey, nstreams, deadline, stream, &ch, &e);
	pc_err_destroy(&e);
	if (ret < 0)
		close(sv[1]); /* the client's handshake ends now too */
	assert_int_equal(pthread_join(c.tid, NULL), 0);
	*client = c.ret;
	chan_free(ch);
	chan_free(c.ch);
	return ret;
}

/* The data listener accepts exactly the indices below its count, each
 * at the index proved; the session key must match; a control identity
 * is no data stream, and a data identity no control channel. */
static void test_tls_identities(void **state)
{
	uint8_t k[PROTO_KEY_LEN], other[PROTO_KEY_LEN];
	uint16_t stream = 0xffff;
	int client = 0;

	(void)state;
	memset(k, 0x11, sizeof(k));
	memcpy(other, k, sizeof(other));
	other[0] ^= 1;
	assert_int_equal(tls_pair(false, 7, k, false, 8, k, &stream, &client), 0);
	assert_int_equal(client, 0);
	assert_int_equal(stream, 7);
	stream = 0xffff;
	assert_int_equal(tls_pair(false, 0, k, false, 1, k, &stream, &client), 0);
	assert_int_equal(stream, 0);
	/* The first index past the count. */
	stream = 0xffff;
	assert_true(tls_pair(false, 8, k, false, 8, k, &stream, &client) < 0);
	assert_true(client < 0);
	assert_int_equal(stream, 0xffff);
	/* Another session's key (a stream replayed from another session). */
	assert_true(tls_pair(false, 1, other, false, 8, k, &stream, &client) < 0);
	assert_int_equal(client, -PC_E_AUTH);
	/* Control and data identities are not interchangeable. */
	assert_true(tls_pair(true, 0, k, false, 8, k, &stream, &client) < 0);
	assert_true(client < 0);
	assert_true(tls_pair(false, 0, k, true, 0, k, &stream, &client) < 0);
	assert_true(client < 0);
	assert_int_equal(tls_pair(true, 0, k, true, 0, k, &stream, &client), 0);
	assert_int_equal(client, 0);
	assert_int_equal(tls_pair(true, 0, other, true, 0, k, &stream, &client), -PC_E_AUTH);
	assert_int_equal(client, -PC_E_AUTH);
}

/* Both ends of a daemon's control channel export the same session key,
 * and a new connection with the same K gets another one. */
static void test_tls_session_key(void **state)
{
	(void)state;
	/* Done in test_tls (tls_export); here through auth_session_key_tls. */
	uint8_t K[PROTO_KEY_LEN];
	memset(K, 0x22, sizeof(K));
	uint8_t k1[2][PROTO_KEY_LEN], k2[2][PROTO_KEY_LEN];
	for (int round = 0; round < 2; round++) {
		struct tls_client c = { .ctl = true };
		struct chan *ch = NULL;
		struct pc_err e;
		int sv[2];
		memcpy(c.key, K, sizeof(K));
		assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
		c.fd = sv[0];
		assert_int_equal(pthread_create(&c.tid, NULL, tls_client_main, &c), 0);
		pc_err_init(&e);
		assert_int_equal(auth_ctl_tls_accept(sv[1], K, platform_now_ns() + 5000000000ull,
						     &ch, &e), 0);
		pc_err_destroy(&e);
		assert_int_equal(pthread_join(c.tid, NULL), 0);
		assert_int_equal(c.ret, 0);
		assert_int_equal(auth_session_key_tls(ch, round ? k2[0] : k1[0]), 0);
		assert_int_equal(auth_session_key_tls(c.ch, round ? k2[1] : k1[1]), 0);
		chan_free(ch);
		chan_free(c.ch);
	}
	assert_memory_equal(k1[0], k1[1], PROTO_KEY_LEN);
	assert_memory_equal(k2[0], k2[1], PROTO_KEY_LEN);
	assert_memory_not_equal(k1[0], k2[0], PROTO_KEY_LEN);
	assert_memory_not_equal(k1[0], K, PROTO_KEY_LEN);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_psks),
		cmocka_unit_test(test_tls_identities),
		cmocka_unit_test(test_tls_session_key),
		cmocka_unit_test(test_ctl_mac),
		cmocka_unit_test(test_session_key),
		cmocka_unit_test(test_data_same_key),
		cmocka_unit_test(test_data_wrong_key),
		cmocka_unit_test(test_data_listener_checks_proof),
		cmocka_unit_test(test_data_connector),
		cmocka_unit_test(test_data_stream_out_of_range),
		cmocka_unit_test(test_data_garbage),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
