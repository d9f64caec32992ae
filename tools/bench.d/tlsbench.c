// SPDX-License-Identifier: Apache-2.0
/* tlsbench: throughput of one chan, in clear and in TLS 1.3 (AES-128-GCM,
 * ChaCha20-Poly1305), a sender thread and a receiver thread over a
 * socketpair (or loopback TCP with --tcp), 1 MiB sends of a 16-byte header
 * and the payload, as the data streams send blocks. Prints MB/s and the CPU
 * seconds per GiB of each thread. A benchmark, not a test: it asserts
 * nothing and is built only when asked (cmake --build B --target tlsbench).
 *
 *   tlsbench [--tcp] [--gib N] [plain|aes128-gcm|chacha20-poly1305 ...] */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sys/err.h"
#include "sys/net.h"
#include "sys/platform.h"
#include "transport/chan.h"
#include "transport/tls.h"

#define BLOCK (1u << 20)
#define HDR 16u

static const uint8_t bench_psk[TLS_PSK_LEN] = { 0x5a };

static int bench_find(void *arg, const uint8_t *id, size_t idlen, uint8_t psk[TLS_PSK_LEN])
{
	(void)arg;
	(void)id;
	(void)idlen;
	memcpy(psk, bench_psk, TLS_PSK_LEN);
	return 0;
}

struct side {
	struct chan *c;
	uint64_t bytes;
	uint64_t cpu_ns;
	int ret;
	/* server handshake */
	int fd;
	struct pc_err e;
};

static void *bench_accept(void *arg)
{
	struct side *s = arg;

	s->ret = tls_accept(s->fd, bench_find, NULL, platform_now_ns() + 10000000000ull, NULL,
			    NULL, &s->c, &s->e);
	return NULL;
}

static void *bench_send(void *arg)
{
	struct side *s = arg;
	uint8_t *hdr = calloc(1, HDR), *body = malloc(BLOCK - HDR);
	uint64_t t0 = platform_thread_cpu_ns();

	s->ret = -ENOMEM;
	if (hdr != NULL && body != NULL) {
		memset(body, 0xa5, BLOCK - HDR);
		s->ret = 0;
		for (uint64_t off = 0; off < s->bytes && s->ret == 0; off += BLOCK) {
			struct iovec iov[2] = { { hdr, HDR }, { body, BLOCK - HDR } };

			memcpy(hdr, &off, sizeof(off));
			s->ret = chan_send(s->c, iov, 2);
		}
	}
	s->cpu_ns = platform_thread_cpu_ns() - t0;
	free(hdr);
	free(body);
	return NULL;
}

static void *bench_recv(void *arg)
{
	struct side *s = arg;
	uint8_t *buf = malloc(BLOCK);
	uint64_t t0 = platform_thread_cpu_ns();

	s->ret = buf != NULL ? 0 : -ENOMEM;
	for (uint64_t off = 0; off < s->bytes && s->ret == 0; off += BLOCK)
		s->ret = chan_recv(s->c, buf, BLOCK, NULL);
	s->cpu_ns = platform_thread_cpu_ns() - t0;
	free(buf);
	return NULL;
}

/* A connected pair of sockets: a socketpair, or loopback TCP. */
static int bench_sockets(bool tcp, int sv[2])
{
	struct pc_err e;
	int lfd, r = 0;

	if (!tcp)
		return socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0 ? 0 : -errno;
	pc_err_init(&e);
	lfd = net_listen("127.0.0.1", 0, 0, 4, 0, &e);
	if (lfd < 0) {
		r = lfd;
		goto out;
	}
	sv[0] = net_connect("127.0.0.1", net_local_port(lfd), 4, 0, 5, &e);
	sv[1] = sv[0] >= 0 ? net_accept(lfd, 5000, NULL, 0) : -1;
	close(lfd);
	if (sv[0] < 0 || sv[1] < 0) {
		r = sv[0] < 0 ? sv[0] : sv[1];
		if (sv[0] >= 0)
			close(sv[0]);
	}
out:
	pc_err_destroy(&e);
	return r;
}

/* The two chans of one mode: tx (client) and rx (server). */
static int bench_pair(const char *mode, bool tcp, struct chan **tx, struct chan **rx)
{
	enum tls_cipher cipher;
	struct side srv = { 0 };
	struct pc_err e;
	pthread_t t;
	int sv[2], r;

	r = bench_sockets(tcp, sv);
	if (r < 0)
		return r;
	if (strcmp(mode, "plain") == 0) {
		*tx = chan_plain_new(sv[0], sv[0]);
		*rx = chan_plain_new(sv[1], sv[1]);
		return *tx != NULL && *rx != NULL ? 0 : -ENOMEM;
	}
	pc_err_init(&e);
	pc_err_init(&srv.e);
	r = tls_cipher_parse(mode, &cipher, &e);
	srv.fd = sv[1];
	if (r == 0 && pthread_create(&t, NULL, bench_accept, &srv) == 0) {
		r = tls_connect(sv[0], cipher, (const uint8_t *)"bench", 5, bench_psk,
				platform_now_ns() + 10000000000ull, tx, &e);
		if (pthread_join(t, NULL) != 0 || srv.ret != 0)
			r = r != 0 ? r : srv.ret;
		*rx = srv.c;
	}
	if (r != 0) {
		char msg[1024];

		if (pc_err_get(&e, msg, sizeof(msg)) != 0 || pc_err_get(&srv.e, msg, sizeof(msg)) != 0)
			fprintf(stderr, "tlsbench: %s: %s\n", mode, msg);
	}
	pc_err_destroy(&e);
	pc_err_destroy(&srv.e);
	return r;
}

static int bench_mode(const char *mode, bool tcp, uint64_t bytes)
{
	struct side tx = { .bytes = bytes }, rx = { .bytes = bytes };
	pthread_t ts, tr;
	uint64_t t0, wall;
	double gib = (double)bytes / (1u << 30);
	int r;

	r = bench_pair(mode, tcp, &tx.c, &rx.c);
	if (r != 0) {
		fprintf(stderr, "tlsbench: %s: cannot connect: %s\n", mode, pc_strerror(r));
		return 1;
	}
	t0 = platform_now_ns();
	if (pthread_create(&tr, NULL, bench_recv, &rx) != 0 ||
	    pthread_create(&ts, NULL, bench_send, &tx) != 0) {
		fprintf(stderr, "tlsbench: pthread_create failed\n");
		exit(1);
	}
	if (pthread_join(ts, NULL) != 0 || pthread_join(tr, NULL) != 0) {
		fprintf(stderr, "tlsbench: pthread_join failed\n");
		exit(1);
	}
	wall = platform_now_ns() - t0;
	if (tx.ret != 0 || rx.ret != 0) {
		fprintf(stderr, "tlsbench: %s: send %s, receive %s\n", mode, pc_strerror(tx.ret),
			pc_strerror(rx.ret));
		return 1;
	}
	printf("%-18s %-40s %9.0f MB/s   sender %5.2f CPU s/GiB   receiver %5.2f CPU s/GiB\n",
	       mode, chan_describe(tx.c), (double)bytes / 1e6 / ((double)wall / 1e9),
	       (double)tx.cpu_ns / 1e9 / gib, (double)rx.cpu_ns / 1e9 / gib);
	chan_free(tx.c);
	chan_free(rx.c);
	return 0;
}

int main(int argc, char **argv)
{
	static const char *const all[] = { "plain", "aes128-gcm", "chacha20-poly1305" };
	uint64_t bytes = 2ull << 30;
	bool tcp = false;
	int i = 1, bad = 0;

	signal(SIGPIPE, SIG_IGN);
	for (; i < argc && argv[i][0] == '-'; i++) {
		if (strcmp(argv[i], "--tcp") == 0) {
			tcp = true;
		} else if (strcmp(argv[i], "--gib") == 0 && i + 1 < argc) {
			bytes = (uint64_t)(strtod(argv[++i], NULL) * (1u << 30));
			bytes -= bytes % BLOCK;
			if (bytes == 0)
				bytes = BLOCK;
		} else {
			fprintf(stderr, "usage: tlsbench [--tcp] [--gib N] "
					"[plain|aes128-gcm|chacha20-poly1305 ...]\n");
			return 1;
		}
	}
	printf("one chan over %s, %.2f GiB in 1 MiB sends; kernel TLS: %s; CPU AES: %s\n",
	       tcp ? "loopback TCP" : "a socketpair", (double)bytes / (1u << 30),
	       tls_ktls_status(), tls_cpu_has_aes() ? "yes" : "no");
	if (i == argc) {
		for (size_t k = 0; k < sizeof(all) / sizeof(all[0]); k++)
			bad |= bench_mode(all[k], tcp, bytes);
	}
	for (; i < argc; i++)
		bad |= bench_mode(argv[i], tcp, bytes);
	return bad;
}
