// SPDX-License-Identifier: Apache-2.0
/* Unit tests for tls: TLS 1.3 PSK handshakes over socketpairs with the
 * client and the server in two threads. Round trips of 64 MiB in both
 * ciphers with a sender and a receiver on one chan at once (TSan), the
 * (EC)DHE group, wrong and unknown keys, a peer that does not speak TLS, a
 * trickling peer against the deadline, a replayed client flight, one byte
 * flipped in flight by a relay, chan_pending, chan_abort, the exporter,
 * ends of stream with and without close_notify, and no stale OpenSSL error
 * reported. The suite runs under ASan, so every error path is also checked
 * for leaks. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "sys/err.h"
#include "sys/platform.h"
#include "transport/chan.h"
#include "transport/tls.h"

#define SEC 1000000000ull

/* ---- keys ------------------------------------------------------------------ */

struct key {
	const char *id;
	uint8_t psk[TLS_PSK_LEN];
};

static struct key key_a = { "session-a", { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 } };
static struct key key_a_wrong = { "session-a", { 1, 2, 3, 4, 5, 6, 7, 8, 9, 11 } };
static struct key key_other = { "session-b", { 42 } };

/* The server's lookup: arg is the one key it knows. */
static int find_key(void *arg, const uint8_t *id, size_t idlen, uint8_t psk[TLS_PSK_LEN])
{
	const struct key *k = arg;

	if (idlen != strlen(k->id) || memcmp(id, k->id, idlen) != 0)
		return -ENOENT;
	memcpy(psk, k->psk, TLS_PSK_LEN);
	return 0;
}

/* ---- the two ends ---------------------------------------------------------- */

/* A server end running tls_accept in its own thread. */
struct acc {
	int fd;
	struct key *key;
	uint64_t deadline;
	struct chan *ch;
	int ret;
	struct pc_err e;
	uint8_t id[TLS_MAX_IDENTITY];
	size_t idlen;
	pthread_t t;
};

static void *acc_main(void *arg)
{
	struct acc *a = arg;

	a->ret = tls_accept(a->fd, find_key, a->key, a->deadline, a->id, &a->idlen, &a->ch, &a->e);
	return NULL;
}

static void acc_start(struct acc *a, int fd, struct key *key, uint64_t deadline)
{
	memset(a, 0, sizeof(*a));
	a->fd = fd;
	a->key = key;
	a->deadline = deadline;
	a->ret = 1;
	pc_err_init(&a->e);
	assert_int_equal(pthread_create(&a->t, NULL, acc_main, a), 0);
}

static void acc_join(struct acc *a)
{
	assert_int_equal(pthread_join(a->t, NULL), 0);
}

/* The client's side of one handshake, with its error message. */
struct con {
	struct chan *ch;
	int ret;
	struct pc_err e;
};

static void con_run(struct con *c, int fd, enum tls_cipher cipher, const struct key *key,
		    uint64_t deadline)
{
	memset(c, 0, sizeof(*c));
	pc_err_init(&c->e);
	c->ret = tls_connect(fd, cipher, (const uint8_t *)key->id, strlen(key->id), key->psk,
			     deadline, &c->ch, &c->e);
}

/* e's message, in one of four buffers (so two fit in one printf); main
 * thread only. */
static char *err_msg(struct pc_err *e)
{
	static char msg[4][1024];
	static unsigned next;
	char *m = msg[next++ % 4];

	pc_err_get(e, m, sizeof(msg[0]));
	return m;
}

/* An established pair over a socketpair: cli and srv. */
static void tls_pair(enum tls_cipher cipher, struct chan **cli, struct chan **srv)
{
	struct acc a;
	struct con c;
	int sv[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	acc_start(&a, sv[1], &key_a, platform_now_ns() + 10 * SEC);
	con_run(&c, sv[0], cipher, &key_a, platform_now_ns() + 10 * SEC);
	acc_join(&a);
	if (c.ret != 0 || a.ret != 0)
		fail_msg("handshake: client %d (%s), server %d (%s)", c.ret, err_msg(&c.e), a.ret,
			 err_msg(&a.e));
	assert_int_equal(a.idlen, strlen(key_a.id));
	assert_memory_equal(a.id, key_a.id, a.idlen);
	pc_err_destroy(&c.e);
	pc_err_destroy(&a.e);
	*cli = c.ch;
	*srv = a.ch;
}

static bool fd_open(int fd)
{
	return fcntl(fd, F_GETFD) >= 0;
}

static void settle(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
}

/* chan_send in its own thread. */
struct sender {
	struct chan *c;
	const struct iovec *iov;
	int n;
	int ret;
	pthread_t t;
};

static void *sender_main(void *arg)
{
	struct sender *s = arg;

	s->ret = chan_send(s->c, s->iov, s->n);
	return NULL;
}

static void sender_start(struct sender *s, struct chan *c, const struct iovec *iov, int n)
{
	s->c = c;
	s->iov = iov;
	s->n = n;
	s->ret = 1;
	assert_int_equal(pthread_create(&s->t, NULL, sender_main, s), 0);
}

static int sender_join(struct sender *s)
{
	assert_int_equal(pthread_join(s->t, NULL), 0);
	return s->ret;
}

/* ---- names ------------------------------------------------------------------ */

static void test_cipher_names(void **state)
{
	static const char *const names[] = { "auto", "aes128-gcm", "chacha20-poly1305" };
	enum tls_cipher c;
	struct pc_err e;
	const char *k;

	(void)state;
	for (int i = 0; i < 3; i++) {
		pc_err_init(&e);
		assert_int_equal(tls_cipher_parse(names[i], &c, &e), 0);
		assert_int_equal((int)c, i);
		assert_string_equal(tls_cipher_name(c), names[i]);
		pc_err_destroy(&e);
	}
	pc_err_init(&e);
	assert_int_equal(tls_cipher_parse("rc4", &c, &e), -PC_E_USAGE);
	assert_non_null(strstr(err_msg(&e), "--cipher"));
	assert_non_null(strstr(err_msg(&e), "rc4"));
	pc_err_destroy(&e);
	k = tls_ktls_status();
	assert_true(strcmp(k, "on") == 0 || strcmp(k, "the kernel has no tls module") == 0 ||
		    strcmp(k, "this OpenSSL was built without it") == 0);
	/* This build machine's kernel has no tls module. */
	if (access("/sys/module/tls", F_OK) != 0)
		assert_string_equal(k, "the kernel has no tls module");
}

/* tls_cpu_has_aes against the kernel's view of the CPU. */
static void test_cpu_has_aes(void **state)
{
	char line[4096];
	bool aes = false, seen = false;
	FILE *f = fopen("/proc/cpuinfo", "r");

	(void)state;
	if (f == NULL)
		testutil_skip("no /proc/cpuinfo to compare with");
	while (fgets(line, sizeof(line), f) != NULL) {
		if (strncmp(line, "flags", 5) == 0 || strncmp(line, "Features", 8) == 0) {
			seen = true;
			aes = strstr(line, " aes ") != NULL || strstr(line, " aes\n") != NULL;
			break;
		}
	}
	fclose(f);
	if (!seen)
		testutil_skip("/proc/cpuinfo lists no CPU flags");
	assert_int_equal(tls_cpu_has_aes(), aes);
}

/* ---- round trips ------------------------------------------------------------- */

#define RT_TOTAL (64u << 20)
#define RT_BLOCK (1u << 20)
#define RT_HDR 12u

static void rt_fill(uint8_t *p, size_t len, uint64_t off)
{
	for (size_t i = 0; i < len; i++) {
		uint64_t x = (off + i) * 0x9e3779b97f4a7c15ull;

		p[i] = (uint8_t)(x >> 56);
	}
}

/* Sends RT_TOTAL bytes as blocks of a small header and RT_BLOCK - RT_HDR
 * payload bytes (the coalescing path), the stream continuous. */
struct rt_send {
	struct chan *c;
	int ret;
};

static void *rt_send_main(void *arg)
{
	struct rt_send *s = arg;
	uint8_t *hdr = malloc(RT_HDR), *body = malloc(RT_BLOCK);

	s->ret = -ENOMEM;
	if (hdr == NULL || body == NULL)
		goto out;
	for (uint64_t off = 0; off < RT_TOTAL; off += RT_BLOCK) {
		struct iovec iov[2] = { { hdr, RT_HDR }, { body, RT_BLOCK - RT_HDR } };

		rt_fill(hdr, RT_HDR, off);
		rt_fill(body, RT_BLOCK - RT_HDR, off + RT_HDR);
		s->ret = chan_send(s->c, iov, 2);
		if (s->ret != 0)
			goto out;
	}
	s->ret = 0;
out:
	free(hdr);
	free(body);
	return NULL;
}

/* The server echoes everything back with recv_some-sized sends. */
static void *rt_echo_main(void *arg)
{
	struct rt_send *s = arg;
	uint8_t *buf = malloc(RT_BLOCK);
	uint64_t done = 0;

	s->ret = -ENOMEM;
	while (buf != NULL && done < RT_TOTAL) {
		ssize_t r = chan_recv_some(s->c, buf, RT_BLOCK);
		struct iovec iov = { buf, (size_t)r };

		if (r <= 0) {
			s->ret = r == 0 ? -PC_E_NET : (int)r;
			goto out;
		}
		s->ret = chan_send(s->c, &iov, 1);
		if (s->ret != 0)
			goto out;
		done += (uint64_t)r;
	}
	s->ret = buf != NULL ? 0 : -ENOMEM;
out:
	free(buf);
	return NULL;
}

static void round_trip(enum tls_cipher cipher, const char *suite)
{
	struct chan *cli, *srv;
	struct rt_send snd, echo;
	pthread_t ts, te;
	uint8_t *in = malloc(RT_BLOCK), *want = malloc(RT_BLOCK);
	char group[32];

	assert_non_null(in);
	assert_non_null(want);
	tls_pair(cipher, &cli, &srv);
	assert_true(chan_encrypted(cli));
	assert_true(chan_encrypted(srv));
	assert_non_null(strstr(chan_describe(cli), suite));
	assert_non_null(strstr(chan_describe(srv), suite));
	assert_non_null(strstr(chan_describe(cli), "TLS 1.3"));
	/* psk_dhe_ke: the handshake did an (EC)DHE exchange. */
	assert_int_equal(tls_kex_group(cli, group, sizeof(group)), 0);
	assert_true(group[0] != '\0');
	assert_int_equal(tls_kex_group(srv, NULL, 0), 0);

	snd = (struct rt_send){ .c = cli, .ret = 1 };
	echo = (struct rt_send){ .c = srv, .ret = 1 };
	assert_int_equal(pthread_create(&te, NULL, rt_echo_main, &echo), 0);
	assert_int_equal(pthread_create(&ts, NULL, rt_send_main, &snd), 0);
	/* This thread receives on cli while rt_send_main sends on it. */
	for (uint64_t off = 0; off < RT_TOTAL; off += RT_BLOCK) {
		assert_int_equal(chan_recv(cli, in, RT_BLOCK, NULL), 0);
		rt_fill(want, RT_BLOCK, off);
		if (memcmp(in, want, RT_BLOCK) != 0)
			fail_msg("bytes differ in the block at %llu", (unsigned long long)off);
	}
	assert_int_equal(pthread_join(ts, NULL), 0);
	assert_int_equal(pthread_join(te, NULL), 0);
	assert_int_equal(snd.ret, 0);
	assert_int_equal(echo.ret, 0);
	assert_false(chan_pending(cli));
	chan_free(cli);
	chan_free(srv);
	free(in);
	free(want);
}

static void test_round_trip_aes(void **state)
{
	(void)state;
	round_trip(TLS_CIPHER_AES128_GCM, "TLS_AES_128_GCM_SHA256");
}

static void test_round_trip_chacha(void **state)
{
	(void)state;
	round_trip(TLS_CIPHER_CHACHA20, "TLS_CHACHA20_POLY1305_SHA256");
}

static void test_auto_cipher(void **state)
{
	struct chan *cli, *srv;

	(void)state;
	tls_pair(TLS_CIPHER_AUTO, &cli, &srv);
	assert_non_null(strstr(chan_describe(cli), tls_cpu_has_aes() ? "TLS_AES_128_GCM_SHA256"
								      : "TLS_CHACHA20_POLY1305_SHA256"));
	chan_free(cli);
	chan_free(srv);
}

/* ---- keys that do not match ------------------------------------------------ */

static void failed_pair(const struct key *ckey, struct key *skey, struct con *c, struct acc *a,
			int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	acc_start(a, sv[1], skey, platform_now_ns() + 10 * SEC);
	con_run(c, sv[0], TLS_CIPHER_AUTO, ckey, platform_now_ns() + 10 * SEC);
	acc_join(a);
	assert_null(c->ch);
	assert_null(a->ch);
	/* On failure the fds are still the caller's, blocking as they came. */
	assert_true(fd_open(sv[0]) && fd_open(sv[1]));
	assert_int_equal(fcntl(sv[0], F_GETFL) & O_NONBLOCK, 0);
	assert_int_equal(fcntl(sv[1], F_GETFL) & O_NONBLOCK, 0);
}

static void failed_pair_end(struct con *c, struct acc *a, int sv[2])
{
	pc_err_destroy(&c->e);
	pc_err_destroy(&a->e);
	close(sv[0]);
	close(sv[1]);
}

static void wrong_key(const struct key *ckey, struct key *skey)
{
	struct con c;
	struct acc a;
	int sv[2];

	failed_pair(ckey, skey, &c, &a, sv);
	assert_int_equal(c.ret, -PC_E_AUTH);
	assert_int_equal(a.ret, -PC_E_AUTH);
	assert_non_null(strstr(err_msg(&c.e), "the peer proved a different key"));
	assert_non_null(strstr(err_msg(&a.e), "the peer proved a different key"));
	failed_pair_end(&c, &a, sv);
}

static void test_wrong_key(void **state)
{
	(void)state;
	wrong_key(&key_a_wrong, &key_a);  /* the client's key is wrong */
	wrong_key(&key_a, &key_a_wrong);  /* the server's */
}

static void test_unknown_identity(void **state)
{
	struct con c;
	struct acc a;
	int sv[2];

	(void)state;
	failed_pair(&key_other, &key_a, &c, &a, sv);
	assert_int_equal(c.ret, -PC_E_AUTH);
	assert_int_equal(a.ret, -PC_E_AUTH);
	assert_non_null(strstr(err_msg(&c.e), "the server does not know our key"));
	assert_non_null(strstr(err_msg(&a.e), "the client offered a key identity this end does "
					      "not know"));
	failed_pair_end(&c, &a, sv);
}

/* ---- a server that does not know the key, with a certificate ------------------- */

/* A TLS 1.3 server of plain OpenSSL with a self-signed certificate and no
 * PSK: what a man in the middle would run. Blocking; the handshake result
 * is ignored, the client's is what the test checks. */
struct cert_server {
	int fd;
	SSL_CTX *ctx;
};

static void *cert_server_main(void *arg)
{
	struct cert_server *cs = arg;
	SSL *ssl = SSL_new(cs->ctx);

	if (ssl != NULL && SSL_set_fd(ssl, cs->fd) == 1)
		(void)SSL_accept(ssl);
	SSL_free(ssl);
	ERR_clear_error();
	shutdown(cs->fd, SHUT_RDWR);
	return NULL;
}

static SSL_CTX *cert_server_ctx(void)
{
	EVP_PKEY *key = EVP_EC_gen("P-256");
	X509 *x = X509_new();
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());

	assert_non_null(key);
	assert_non_null(x);
	assert_non_null(ctx);
	assert_int_equal(ASN1_INTEGER_set(X509_get_serialNumber(x), 1), 1);
	assert_non_null(X509_gmtime_adj(X509_getm_notBefore(x), 0));
	assert_non_null(X509_gmtime_adj(X509_getm_notAfter(x), 3600));
	assert_int_equal(X509_set_pubkey(x, key), 1);
	assert_int_equal(X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
						    (const unsigned char *)"mitm", -1, -1, 0), 1);
	assert_int_equal(X509_set_issuer_name(x, X509_get_subject_name(x)), 1);
	assert_true(X509_sign(x, key, EVP_sha256()) > 0);
	assert_int_equal(SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION), 1);
	assert_int_equal(SSL_CTX_use_certificate(ctx, x), 1);
	assert_int_equal(SSL_CTX_use_PrivateKey(ctx, key), 1);
	X509_free(x);
	EVP_PKEY_free(key);
	return ctx;
}

/* The client refuses a server that answers with a certificate instead of
 * proving the PSK (it could be anyone). */
static void test_certificate_instead_of_key(void **state)
{
	struct cert_server cs;
	struct chan *ch = NULL;
	struct pc_err e;
	pthread_t t;
	int sv[2];

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	cs = (struct cert_server){ sv[1], cert_server_ctx() };
	assert_int_equal(pthread_create(&t, NULL, cert_server_main, &cs), 0);
	pc_err_init(&e);
	assert_int_equal(tls_connect(sv[0], TLS_CIPHER_AUTO, (const uint8_t *)key_a.id,
				     strlen(key_a.id), key_a.psk, platform_now_ns() + 10 * SEC,
				     &ch, &e), -PC_E_AUTH);
	assert_null(ch);
	pc_err_destroy(&e);
	shutdown(sv[0], SHUT_RDWR);
	assert_int_equal(pthread_join(t, NULL), 0);
	SSL_CTX_free(cs.ctx);
	close(sv[0]);
	close(sv[1]);
}

/* ---- a peer that does not speak TLS ------------------------------------------ */

struct garbage {
	int fd;
	const char *text;
};

/* Writes text, then reads until the other end closes. */
static void *garbage_main(void *arg)
{
	struct garbage *g = arg;
	char buf[4096];

	(void)!write(g->fd, g->text, strlen(g->text));
	while (read(g->fd, buf, sizeof(buf)) > 0)
		;
	return NULL;
}

static void test_not_tls(void **state)
{
	struct garbage g;
	struct chan *ch = NULL;
	struct pc_err e;
	pthread_t t;
	int sv[2];

	(void)state;
	/* A server that greets like an old pcopy or an ssh server. */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	g = (struct garbage){ sv[1], "SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n" };
	assert_int_equal(pthread_create(&t, NULL, garbage_main, &g), 0);
	pc_err_init(&e);
	assert_int_equal(tls_connect(sv[0], TLS_CIPHER_AUTO, (const uint8_t *)"x", 1, key_a.psk,
				     platform_now_ns() + 10 * SEC, &ch, &e), -PC_E_PROTO);
	assert_null(ch);
	assert_non_null(strstr(err_msg(&e), "does not speak TLS 1.3"));
	pc_err_destroy(&e);
	close(sv[0]);
	assert_int_equal(pthread_join(t, NULL), 0);
	close(sv[1]);

	/* A client that sends something else to the server. */
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	g = (struct garbage){ sv[0], "GET / HTTP/1.1\r\nHost: x\r\n\r\n" };
	assert_int_equal(pthread_create(&t, NULL, garbage_main, &g), 0);
	pc_err_init(&e);
	assert_int_equal(tls_accept(sv[1], find_key, &key_a, platform_now_ns() + 10 * SEC, NULL,
				    NULL, &ch, &e), -PC_E_PROTO);
	assert_null(ch);
	pc_err_destroy(&e);
	close(sv[1]);
	assert_int_equal(pthread_join(t, NULL), 0);
	close(sv[0]);
}

/* ---- a trickling peer ---------------------------------------------------------- */

struct trickle {
	int fd;
	atomic_bool stop;
};

/* A record header promising 16 KiB, then one byte every 200 ms. */
static void *trickle_main(void *arg)
{
	static const uint8_t head[5] = { 0x16, 0x03, 0x01, 0x40, 0x00 };
	struct trickle *tr = arg;
	char buf[4096];

	(void)!write(tr->fd, head, sizeof(head));
	for (int i = 0; i < 50 && !atomic_load(&tr->stop); i++) {
		settle(200);
		if (write(tr->fd, "\x01", 1) != 1)
			break;
		while (recv(tr->fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
			;
	}
	return NULL;
}

static void trickle(bool server)
{
	struct trickle tr;
	struct chan *ch = NULL;
	struct pc_err e;
	pthread_t t;
	uint64_t t0;
	int sv[2], r;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	tr.fd = sv[1];
	atomic_init(&tr.stop, false);
	assert_int_equal(pthread_create(&t, NULL, trickle_main, &tr), 0);
	pc_err_init(&e);
	t0 = platform_now_ns();
	if (server)
		r = tls_accept(sv[0], find_key, &key_a, t0 + SEC, NULL, NULL, &ch, &e);
	else
		r = tls_connect(sv[0], TLS_CIPHER_AUTO, (const uint8_t *)key_a.id,
				strlen(key_a.id), key_a.psk, t0 + SEC, &ch, &e);
	assert_int_equal(r, -PC_E_TIMEOUT);
	assert_true(platform_now_ns() - t0 < 2 * SEC);
	assert_true(platform_now_ns() - t0 >= SEC - SEC / 100);
	assert_non_null(strstr(err_msg(&e), "in time"));
	atomic_store(&tr.stop, true);
	assert_int_equal(pthread_join(t, NULL), 0);
	pc_err_destroy(&e);
	close(sv[0]);
	close(sv[1]);
}

static void test_trickle_deadline(void **state)
{
	(void)state;
	trickle(false);
	trickle(true);
}

/* ---- a relay between two socketpairs ---------------------------------------- */

/* Forwards a <-> b; the bytes from a (the client) are counted from 0, byte
 * flip_at of them is inverted, and all of them are recorded. */
struct relay {
	int a, b;
	uint64_t flip_at;   /* UINT64_MAX: none */
	uint8_t *rec;       /* the client's bytes, up to reccap: relay thread until joined */
	atomic_size_t reclen;  /* how many */
	size_t reccap;
	int stop[2];        /* a pipe: writing to stop[1] ends the relay */
	pthread_t t;
};

static void *relay_main(void *arg)
{
	struct relay *rl = arg;
	uint64_t from_a = 0;
	bool a_open = true, b_open = true;
	uint8_t buf[65536];

	while (a_open || b_open) {
		struct pollfd p[3] = {
			{ .fd = a_open ? rl->a : -1, .events = POLLIN },
			{ .fd = b_open ? rl->b : -1, .events = POLLIN },
			{ .fd = rl->stop[0], .events = POLLIN },
		};

		if (poll(p, 3, -1) < 0 || (p[2].revents & POLLIN))
			break;
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t n = read(rl->a, buf, sizeof(buf));

			if (n <= 0) {
				a_open = false;
				shutdown(rl->b, SHUT_WR);
			} else {
				if (rl->flip_at >= from_a && rl->flip_at < from_a + (uint64_t)n)
					buf[rl->flip_at - from_a] ^= 0xff;
				size_t k = atomic_load(&rl->reclen);

				for (ssize_t i = 0; i < n && k < rl->reccap; i++)
					rl->rec[k++] = buf[i];
				atomic_store(&rl->reclen, k);
				from_a += (uint64_t)n;
				if (send(rl->b, buf, (size_t)n, MSG_NOSIGNAL) != n)
					a_open = false;
			}
		}
		if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t n = read(rl->b, buf, sizeof(buf));

			if (n <= 0 || send(rl->a, buf, (size_t)n, MSG_NOSIGNAL) != n) {
				b_open = false;
				shutdown(rl->a, SHUT_WR);
			}
		}
	}
	return NULL;
}

/* cfd, sfd: the client's and the server's sockets, joined through rl. */
static void relay_start(struct relay *rl, uint64_t flip_at, int *cfd, int *sfd)
{
	int s1[2], s2[2];

	memset(rl, 0, sizeof(*rl));
	atomic_init(&rl->reclen, 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s1), 0);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s2), 0);
	assert_int_equal(pipe(rl->stop), 0);
	rl->flip_at = flip_at;
	rl->reccap = 64 * 1024;
	rl->rec = malloc(rl->reccap);
	assert_non_null(rl->rec);
	*cfd = s1[0];
	rl->a = s1[1];
	rl->b = s2[0];
	*sfd = s2[1];
	assert_int_equal(pthread_create(&rl->t, NULL, relay_main, rl), 0);
}

/* Ends the relay; rl->rec stays readable until relay_free. */
static void relay_stop(struct relay *rl)
{
	assert_int_equal(write(rl->stop[1], "x", 1), 1);
	assert_int_equal(pthread_join(rl->t, NULL), 0);
	close(rl->a);
	close(rl->b);
	close(rl->stop[0]);
	close(rl->stop[1]);
}

static void relay_free(struct relay *rl)
{
	free(rl->rec);
}

/* A byte flipped in an application record: the receiver says integrity. */
static void test_flipped_byte(void **state)
{
	enum { LEN = 1 << 20, FLIP = 20000 };
	uint8_t *buf = calloc(1, LEN), *in = malloc(LEN);
	struct iovec iov = { buf, LEN };
	struct sender snd;
	struct relay rl;
	struct acc a;
	struct con c;
	size_t got = 0;
	int cfd, sfd;

	(void)state;
	assert_non_null(buf);
	assert_non_null(in);
	relay_start(&rl, FLIP, &cfd, &sfd);
	acc_start(&a, sfd, &key_a, platform_now_ns() + 10 * SEC);
	con_run(&c, cfd, TLS_CIPHER_AUTO, &key_a, platform_now_ns() + 10 * SEC);
	acc_join(&a);
	assert_int_equal(c.ret, 0);
	assert_int_equal(a.ret, 0);
	assert_true(atomic_load(&rl.reclen) < FLIP);  /* the flip falls after the handshake */

	sender_start(&snd, c.ch, &iov, 1);
	assert_int_equal(chan_recv(a.ch, in, LEN, &got), -PC_E_INTEGRITY);
	assert_true(got < FLIP);
	assert_memory_equal(in, buf, got);  /* what came before is intact */
	assert_non_null(strstr(chan_error(a.ch), "a TLS record failed its integrity check: the "
					       "data was altered on the way"));
	chan_abort(c.ch);  /* the sender may be blocked on full buffers */
	(void)sender_join(&snd);
	chan_free(c.ch);
	chan_free(a.ch);
	pc_err_destroy(&c.e);
	pc_err_destroy(&a.e);
	relay_stop(&rl);
	relay_free(&rl);
	free(buf);
	free(in);
}

/* The client's flight of a good handshake, recorded and replayed to a fresh
 * server with the same key, gets nowhere: the server's new key share makes
 * the recorded Finished worthless. */
static void test_replayed_flight(void **state)
{
	struct relay rl;
	struct acc a;
	struct con c;
	int cfd, sfd, sv[2];

	(void)state;
	relay_start(&rl, UINT64_MAX, &cfd, &sfd);
	acc_start(&a, sfd, &key_a, platform_now_ns() + 10 * SEC);
	con_run(&c, cfd, TLS_CIPHER_AUTO, &key_a, platform_now_ns() + 10 * SEC);
	acc_join(&a);
	assert_int_equal(c.ret, 0);
	assert_int_equal(a.ret, 0);
	chan_free(c.ch);
	chan_free(a.ch);
	pc_err_destroy(&c.e);
	pc_err_destroy(&a.e);
	relay_stop(&rl);  /* what it recorded is now ours to read */
	assert_true(atomic_load(&rl.reclen) > 100);

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	acc_start(&a, sv[1], &key_a, platform_now_ns() + 10 * SEC);
	assert_int_equal(write(sv[0], rl.rec, atomic_load(&rl.reclen)),
			 (ssize_t)atomic_load(&rl.reclen));
	assert_int_equal(shutdown(sv[0], SHUT_WR), 0);
	acc_join(&a);  /* its answer, a few hundred bytes, waits in the socket buffer */
	assert_int_equal(a.ret, -PC_E_AUTH);
	assert_null(a.ch);
	assert_non_null(strstr(err_msg(&a.e), "replayed"));
	pc_err_destroy(&a.e);
	close(sv[0]);
	close(sv[1]);
	relay_free(&rl);
}

/* ---- the established chan ------------------------------------------------------ */

static void test_pending(void **state)
{
	uint8_t out[100], in[100];
	struct iovec iov = { out, sizeof(out) };
	struct chan *cli, *srv;
	struct pollfd p;

	(void)state;
	tls_pair(TLS_CIPHER_AUTO, &cli, &srv);
	for (size_t i = 0; i < sizeof(out); i++)
		out[i] = (uint8_t)i;
	assert_false(chan_pending(srv));
	assert_int_equal(chan_send(cli, &iov, 1), 0);  /* one record */
	assert_int_equal(chan_recv(srv, in, 10, NULL), 0);
	/* The rest of the record waits decrypted inside the chan, while the
	 * socket has nothing more. */
	assert_true(chan_pending(srv));
	p = (struct pollfd){ .fd = chan_rfd(srv), .events = POLLIN };
	assert_int_equal(poll(&p, 1, 0), 0);
	assert_int_equal(chan_recv(srv, in + 10, 90, NULL), 0);
	assert_memory_equal(in, out, sizeof(out));
	assert_false(chan_pending(srv));
	chan_free(cli);
	chan_free(srv);
}

/* chan_recv in its own thread. */
struct receiver {
	struct chan *c;
	uint8_t *buf;
	size_t len, got;
	int ret;
	atomic_bool done;
	pthread_t t;
};

static void *receiver_main(void *arg)
{
	struct receiver *r = arg;

	r->ret = chan_recv(r->c, r->buf, r->len, &r->got);
	atomic_store(&r->done, true);
	return NULL;
}

static void receiver_start(struct receiver *r, struct chan *c, uint8_t *buf, size_t len)
{
	r->c = c;
	r->buf = buf;
	r->len = len;
	r->got = 0;
	r->ret = 1;
	atomic_init(&r->done, false);
	assert_int_equal(pthread_create(&r->t, NULL, receiver_main, r), 0);
}

static int receiver_join(struct receiver *r)
{
	assert_int_equal(pthread_join(r->t, NULL), 0);
	return r->ret;
}

/* A receiver and a sender blocked on one TLS chan (no timeout) both wake
 * with -PC_E_ABORTED; later calls fail at once. */
static void test_abort_wakes(void **state)
{
	enum { BIG = 32 << 20 };
	uint8_t *big = calloc(1, BIG), b[16];
	struct iovec iov = { big, BIG };
	struct chan *cli, *srv;
	struct receiver rcv;
	struct sender snd;

	(void)state;
	assert_non_null(big);
	tls_pair(TLS_CIPHER_AUTO, &cli, &srv);
	receiver_start(&rcv, cli, b, sizeof(b));  /* srv sends nothing */
	sender_start(&snd, cli, &iov, 1);          /* srv reads nothing */
	settle(300);
	assert_false(atomic_load(&rcv.done));
	chan_abort(cli);
	chan_abort(cli);
	assert_int_equal(receiver_join(&rcv), -PC_E_ABORTED);
	assert_int_equal(sender_join(&snd), -PC_E_ABORTED);
	assert_int_equal(chan_recv(cli, b, 1, NULL), -PC_E_ABORTED);
	assert_int_equal(chan_send(cli, &iov, 1), -PC_E_ABORTED);
	chan_free(cli);
	chan_free(srv);
	free(big);
}

/* No progress within the chan's timeout: -PC_E_TIMEOUT, both ways. */
static void test_timeouts(void **state)
{
	enum { BIG = 32 << 20 };
	uint8_t *big = calloc(1, BIG), b;
	struct iovec iov = { big, BIG };
	struct chan *cli, *srv;
	uint64_t t0;

	(void)state;
	assert_non_null(big);
	tls_pair(TLS_CIPHER_AUTO, &cli, &srv);
	assert_int_equal(chan_set_timeout(cli, 1), 0);
	t0 = platform_now_ns();
	assert_int_equal(chan_recv(cli, &b, 1, NULL), -PC_E_TIMEOUT);
	assert_true(platform_now_ns() - t0 >= SEC - SEC / 100);
	assert_true(platform_now_ns() - t0 < 5 * SEC);
	assert_int_equal(chan_send(cli, &iov, 1), -PC_E_TIMEOUT);
	chan_free(cli);
	chan_free(srv);
	free(big);
}

/* close_notify is the end of the stream (got == 0 at a boundary); a socket
 * closed without it is -PC_E_NET, however the end falls. Before each, a
 * stale "bad record mac" waits in this thread's OpenSSL error queue: it
 * must not be reported. */
static void test_ends_and_stale_errors(void **state)
{
	uint8_t out[50] = { 7 }, in[100];
	struct iovec iov = { out, sizeof(out) };
	struct chan *cli, *srv;
	size_t got = 99;

	(void)state;
	tls_pair(TLS_CIPHER_AUTO, &cli, &srv);
	assert_int_equal(chan_send(cli, &iov, 1), 0);
	assert_int_equal(chan_close_send(cli), 0);
	ERR_raise(ERR_LIB_SSL, SSL_R_DECRYPTION_FAILED_OR_BAD_RECORD_MAC);
	assert_int_equal(chan_recv(srv, in, sizeof(out), NULL), 0);
	assert_int_equal(chan_recv(srv, in, 10, &got), -PC_E_NET);
	assert_int_equal(got, 0);
	assert_int_equal(chan_recv_some(srv, in, sizeof(in)), 0);
	/* The other direction still carries data. */
	assert_int_equal(chan_send(srv, &iov, 1), 0);
	assert_int_equal(chan_recv(cli, in, sizeof(out), NULL), 0);
	assert_memory_equal(in, out, sizeof(out));
	chan_free(cli);
	chan_free(srv);

	/* Truncation: the peer's socket closes without close_notify. */
	tls_pair(TLS_CIPHER_AUTO, &cli, &srv);
	assert_int_equal(chan_send(cli, &iov, 1), 0);
	assert_int_equal(shutdown(chan_wfd(cli), SHUT_WR), 0);
	ERR_raise(ERR_LIB_SSL, SSL_R_DECRYPTION_FAILED_OR_BAD_RECORD_MAC);
	assert_int_equal(chan_recv(srv, in, sizeof(in), &got), -PC_E_NET);
	assert_int_equal(got, sizeof(out));
	assert_null(strstr(chan_error(srv), "integrity"));
	chan_free(cli);
	chan_free(srv);
	ERR_clear_error();
}

static void test_export(void **state)
{
	uint8_t c1[32], s1[32], c2[32], s2[32], other[32];
	struct chan *cli, *srv, *plain;
	int sv[2];

	(void)state;
	tls_pair(TLS_CIPHER_AUTO, &cli, &srv);
	assert_int_equal(tls_export(cli, "EXPORTER-pcopy test", c1, sizeof(c1)), 0);
	assert_int_equal(tls_export(srv, "EXPORTER-pcopy test", s1, sizeof(s1)), 0);
	assert_memory_equal(c1, s1, sizeof(c1));
	assert_int_equal(tls_export(cli, "EXPORTER-pcopy other", other, sizeof(other)), 0);
	assert_memory_not_equal(c1, other, sizeof(c1));
	chan_free(cli);
	chan_free(srv);

	tls_pair(TLS_CIPHER_AUTO, &cli, &srv);
	assert_int_equal(tls_export(cli, "EXPORTER-pcopy test", c2, sizeof(c2)), 0);
	assert_int_equal(tls_export(srv, "EXPORTER-pcopy test", s2, sizeof(s2)), 0);
	assert_memory_equal(c2, s2, sizeof(c2));
	assert_memory_not_equal(c1, c2, sizeof(c1));  /* same key, another connection */
	chan_free(cli);
	chan_free(srv);

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	plain = chan_plain_new(sv[0], sv[0]);
	assert_non_null(plain);
	assert_int_equal(tls_export(plain, "EXPORTER-pcopy test", c1, sizeof(c1)), -EINVAL);
	assert_int_equal(tls_kex_group(plain, NULL, 0), -EINVAL);
	chan_free(plain);
	close(sv[1]);
}

static void test_bad_arguments(void **state)
{
	struct chan *ch = (struct chan *)&ch;
	struct pc_err e;
	int sv[2];

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	pc_err_init(&e);
	assert_int_equal(tls_connect(sv[0], TLS_CIPHER_AUTO, (const uint8_t *)"x", 0, key_a.psk,
				     0, &ch, &e), -EINVAL);
	assert_null(ch);
	assert_int_equal(tls_connect(sv[0], TLS_CIPHER_AUTO, (const uint8_t *)"x",
				     TLS_MAX_IDENTITY + 1, key_a.psk, 0, &ch, &e), -EINVAL);
	assert_int_equal(tls_connect(sv[0], (enum tls_cipher)7, (const uint8_t *)"x", 1,
				     key_a.psk, 0, &ch, &e), -EINVAL);
	assert_int_equal(tls_accept(sv[1], NULL, NULL, 0, NULL, NULL, &ch, &e), -EINVAL);
	pc_err_destroy(&e);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cipher_names),
		cmocka_unit_test(test_cpu_has_aes),
		cmocka_unit_test(test_round_trip_aes),
		cmocka_unit_test(test_round_trip_chacha),
		cmocka_unit_test(test_auto_cipher),
		cmocka_unit_test(test_wrong_key),
		cmocka_unit_test(test_unknown_identity),
		cmocka_unit_test(test_certificate_instead_of_key),
		cmocka_unit_test(test_not_tls),
		cmocka_unit_test(test_trickle_deadline),
		cmocka_unit_test(test_flipped_byte),
		cmocka_unit_test(test_replayed_flight),
		cmocka_unit_test(test_pending),
		cmocka_unit_test(test_abort_wakes),
		cmocka_unit_test(test_timeouts),
		cmocka_unit_test(test_ends_and_stale_errors),
		cmocka_unit_test(test_export),
		cmocka_unit_test(test_bad_arguments),
	};
	int failed;

	signal(SIGPIPE, SIG_IGN);  /* as pcopy does */
	failed = cmocka_run_group_tests(tests, NULL, NULL);
	return testutil_status(failed);
}
