// SPDX-License-Identifier: Apache-2.0
/*
 * evil_source: a hostile pcopy source for tests/e2e/t_tree_hostile.sh.
 *
 *   evil_source SCENARIO OUTSIDE [ARGS...]
 *
 * It stands in for `pcopy --server` at the far end of an ssh pull
 * (`pcopy -r --remote-pcopy WRAPPER 127.0.0.1:a ... DST`, where WRAPPER runs
 * `evil_source SCENARIO OUTSIDE "$@"`; the client's own arguments, such as
 * --server -q, are ignored). It speaks protocol version 14 over the pipe
 * transport (docs/PROTOCOL.md; the tree messages as
 * /work/notes/tree-contract.md section 1 gives them) with its own tiny
 * big-endian encoder, so it can send what pcopy's encoder refuses. It does
 * not link libpcopy.
 *
 * Session: read HELLO, KEY and REQUEST (role source, without CONNECT) from
 * stdin; answer HELLO and READY(port, "127.0.0.1"); accept REQUEST.streams
 * data connections on 127.0.0.1, checking each one's mac_c and answering
 * mac_l (section 6.1, with the session key of section 5.3, or
 * REQUEST.data_key); send the scenario's ENTRIES; send an END block on every
 * data connection and close them; send END; then read the sink's messages
 * until DONE, ERROR or EOF (at most 60 s). Every REG entry has size 0, so no
 * DATA block is ever needed.
 *
 * Scenarios (A and B are the last components of REQUEST.paths[0] and [1]):
 *   symlink   one batch: SYMLINK A -> OUTSIDE (absolute), REG A/passwd
 *             (LINKED), DIR A/sub, DIR_END A/sub, SYMLINK A/l -> passwd,
 *             HARDLINK A/h -> A/passwd, and, when there is a B, HARDLINK B ->
 *             A/passwd. Every entry is valid on the wire; a sink that writes
 *             through the symlink A writes into OUTSIDE.
 *   dotdot    DIR A in a first batch, then REG A/../../escape and DIR_END A;
 *   absolute  ... then REG OUTSIDE/abs (a leading '/');
 *   empty     ... then REG A//x (an empty component);
 *   dot       ... then REG A/./x;
 *   trailing  ... then REG A/x/ (a trailing '/').
 * The last five break the path rule, so the sink's decoder must refuse the
 * second batch as a protocol error.
 *   error-text  after HELLO, an ERROR (code -2) whose text holds a newline,
 *             an escape sequence and a carriage return: the client must
 *             print it escaped, on one line.
 *   benign    the control: DIR A, REG A/f, SYMLINK A/l -> OUTSIDE (a link
 *             may point anywhere; only writing through one is refused),
 *             DIR A/d, DIR_END A/d, DIR_END A. A sink must copy it all: this
 *             shows that the refusals above come from the hostile entries,
 *             not from a mistake in this encoder.
 *
 * Exit status: 0 when the session ran to its end (whatever the sink said),
 * 1 when this program could not play its part (bad arguments, a peer that
 * does not speak version 14, or asks for TLS: the client runs with
 * --no-encrypt, since what is tested is the entries, not the channel; a
 * data connection that never came); it says why
 * on stderr, which ssh passes to the client.
 */
#include <errno.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

enum {
	T_HELLO = 1, T_KEY = 3, T_REQUEST = 4, T_READY = 5, T_ENTRIES = 6, T_END = 9,
	T_DONE = 10, T_ERROR = 11,
	E_REG = 1, E_DIR = 2, E_SYMLINK = 3, E_HARDLINK = 4, E_DIR_END = 9,
	F_LINKED = 0x2,
	RQ_CONNECT = 0x08, RQ_DATA_KEY = 0x10, RQ_ENCRYPT = 0x400,
	VERSION = 14, MAGIC = 0x50435059, DMAGIC = 0x50434454,
	MAX_PAYLOAD = 65536, MAX_STREAMS = 64, KEYLEN = 32,
};

static const char *prog = "evil_source";

/* die FMT...: print why on stderr and exit 1. */
__attribute__((format(printf, 1, 2), noreturn)) static void die(const char *fmt, ...);
static void die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "%s: ", prog);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

/* ---------------------------------------------------------------- buffer */

/* An output buffer with big-endian appenders; overflow is a bug here. */
struct buf {
	uint8_t b[MAX_PAYLOAD];
	size_t n;
};

static void put(struct buf *o, const void *p, size_t n)
{
	if (n > sizeof(o->b) - o->n)
		die("internal: a payload outgrew %d bytes", MAX_PAYLOAD);
	memcpy(o->b + o->n, p, n);
	o->n += n;
}

static void put_u8(struct buf *o, uint8_t v) { put(o, &v, 1); }

static void put_be(struct buf *o, uint64_t v, int bytes)
{
	uint8_t t[8];

	for (int i = 0; i < bytes; i++)
		t[i] = (uint8_t)(v >> (8 * (bytes - 1 - i)));
	put(o, t, (size_t)bytes);
}

static void put_str(struct buf *o, const char *s)
{
	put_be(o, strlen(s), 2);
	put(o, s, strlen(s));
}

static uint64_t get_be(const uint8_t *p, int bytes)
{
	uint64_t v = 0;

	for (int i = 0; i < bytes; i++)
		v = v << 8 | p[i];
	return v;
}

/* ------------------------------------------------------------------- I/O */

static void write_all(int fd, const void *p, size_t n)
{
	const uint8_t *c = p;

	while (n > 0) {
		ssize_t w = write(fd, c, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			die("write to fd %d failed: %s", fd, w < 0 ? strerror(errno) : "0 bytes");
		c += w;
		n -= (size_t)w;
	}
}

/* read_all: exactly n bytes; 0 on success, -1 on EOF or error (errno). */
static int read_all(int fd, void *p, size_t n)
{
	uint8_t *c = p;

	while (n > 0) {
		ssize_t r = read(fd, c, n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (r == 0)
				errno = EPIPE;
			return -1;
		}
		c += r;
		n -= (size_t)r;
	}
	return 0;
}

/* send_frame: one control frame (type, flags 0, reserved 0, length). */
static void send_frame(int type, const struct buf *payload)
{
	struct buf h = { .n = 0 };

	put_u8(&h, (uint8_t)type);
	put_u8(&h, 0);
	put_be(&h, 0, 2);
	put_be(&h, payload->n, 4);
	write_all(STDOUT_FILENO, h.b, h.n);
	write_all(STDOUT_FILENO, payload->b, payload->n);
}

/* recv_frame: the next control frame into *p; returns its type, or -1 on
 * EOF. A header this program cannot take is fatal. */
static int recv_frame(struct buf *p)
{
	uint8_t h[8];

	if (read_all(STDIN_FILENO, h, sizeof(h)) != 0)
		return -1;
	uint64_t len = get_be(h + 4, 4);
	if (len > MAX_PAYLOAD)
		die("the client sent a frame of %llu bytes", (unsigned long long)len);
	if (read_all(STDIN_FILENO, p->b, (size_t)len) != 0)
		die("the control channel ended inside a frame: %s", strerror(errno));
	p->n = (size_t)len;
	return h[0];
}

/* ------------------------------------------------------------- handshake */

struct session {
	uint8_t nonce_c[32], nonce_s[32], key[KEYLEN], k[KEYLEN];
	unsigned streams;
	char paths[2][4097];   /* REQUEST.paths[0] and [1] */
	unsigned npaths;
};

/* mac: HMAC-SHA256(key, label | a | b) into out (32 bytes). */
static void mac(const uint8_t *key, const char *label, const uint8_t *a, size_t alen,
		const uint8_t *b, size_t blen, uint8_t out[32])
{
	uint8_t msg[128];
	size_t n = strlen(label);
	unsigned outlen = 32;

	memcpy(msg, label, n);
	memcpy(msg + n, a, alen);
	memcpy(msg + n + alen, b, blen);
	if (HMAC(EVP_sha256(), key, KEYLEN, msg, n + alen + blen, out, &outlen) == NULL)
		die("HMAC-SHA256 failed");
}

static const char *basename_of(const char *p)
{
	const char *s = strrchr(p, '/');

	return s != NULL && s[1] != '\0' ? s + 1 : p;
}

/* parse_request: the version 14 REQUEST layout, which is version 9's
 * (version 5's, with attach_id after connect_port and two ssh strings after
 * connect_host, as in versions 6 and 7, bwlimit and sync after attach_id as
 * in version 8, and the filter rules after the paths, which this program
 * ignores) (contract 1.1: flags is u16). */
static void parse_request(struct session *s, const struct buf *r)
{
	if (r->n < 88)
		die("REQUEST of %zu bytes is too short", r->n);
	unsigned role = r->b[0], flags = (unsigned)get_be(r->b + 1, 2);
	s->streams = (unsigned)get_be(r->b + 3, 2);
	if (role != 2)
		die("REQUEST role %u: this program only plays a source (2)", role);
	if (flags & RQ_ENCRYPT)
		die("REQUEST has ENCRYPT: this program speaks to its sink in clear (--no-encrypt)");
	if (flags & RQ_CONNECT)
		die("REQUEST has CONNECT: this program only listens");
	if (s->streams == 0 || s->streams > MAX_STREAMS)
		die("REQUEST asks for %u streams", s->streams);
	if (flags & RQ_DATA_KEY)
		memcpy(s->k, r->b + 26, KEYLEN);
	size_t off = 88; /* after connect_port, attach_id, bwlimit and sync (ignored) */
	for (int i = 0; i < 4; i++) { /* connect_host, _ssh, _pcopy, codec */
		if (off + 2 > r->n)
			die("REQUEST ends inside its strings");
		off += 2 + get_be(r->b + off, 2);
	}
	if (off + 2 > r->n)
		die("REQUEST ends before npaths");
	unsigned npaths = (unsigned)get_be(r->b + off, 2);
	off += 2;
	for (unsigned i = 0; i < npaths && i < 2; i++) {
		size_t len = off + 2 <= r->n ? get_be(r->b + off, 2) : SIZE_MAX;
		if (len == SIZE_MAX || len > 4096 || off + 2 + len > r->n)
			die("REQUEST path %u is malformed", i);
		memcpy(s->paths[i], r->b + off + 2, len);
		s->paths[i][len] = '\0';
		off += 2 + len;
	}
	s->npaths = npaths < 2 ? npaths : 2;
	if (s->npaths == 0)
		die("REQUEST has no path");
}

/* handshake: HELLO, KEY, REQUEST in; HELLO out. */
static void handshake(struct session *s)
{
	struct buf in, out = { .n = 0 };
	bool have_key = false, have_req = false, have_hello = false;

	while (!have_hello || !have_key || !have_req) {
		int t = recv_frame(&in);
		if (t == T_HELLO && in.n == 44 && get_be(in.b, 4) == MAGIC) {
			unsigned v = (unsigned)get_be(in.b + 4, 2), min = (unsigned)get_be(in.b + 6, 2);
			if (v < VERSION || min > VERSION)
				die("the client speaks versions %u to %u, this program only %d", min, v,
				    VERSION);
			memcpy(s->nonce_c, in.b + 12, 32);
			have_hello = true;
		} else if (t == T_KEY && in.n == KEYLEN) {
			memcpy(s->key, in.b, KEYLEN);
			have_key = true;
		} else if (t == T_REQUEST && have_key) {
			mac(s->key, "pcopy session", s->nonce_c, 32, s->nonce_s, 32, s->k);
			parse_request(s, &in);
			have_req = true;
		} else {
			die("unexpected message type %d (%zu bytes) in the handshake", t, in.n);
		}
		if (have_hello && out.n == 0) {
			put_be(&out, MAGIC, 4);
			put_be(&out, VERSION, 2);
			put_be(&out, VERSION, 2);
			put_be(&out, 0, 4);
			put(&out, s->nonce_s, 32);
			send_frame(T_HELLO, &out);
		}
	}
}

/* listen_local: a TCP listener on 127.0.0.1, an ephemeral port; sets *port. */
static int listen_local(unsigned *port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 64) != 0 ||
	    getsockname(fd, (struct sockaddr *)&a, &alen) != 0)
		die("cannot listen on 127.0.0.1: %s", strerror(errno));
	*port = ntohs(a.sin_port);
	return fd;
}

/* accept_streams: one authenticated connection per stream index. */
static void accept_streams(struct session *s, int lfd, int *conns)
{
	unsigned got = 0;

	for (unsigned i = 0; i < s->streams; i++)
		conns[i] = -1;
	while (got < s->streams) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		int pr = poll(&p, 1, 30000);
		if (pr <= 0)
			die("only %u of %u data connections came in 30 s", got, s->streams);
		int c = accept(lfd, NULL, NULL);
		if (c < 0)
			die("accept failed: %s", strerror(errno));
		uint8_t dh[72], want[32], mac_l[32];
		if (read_all(c, dh, sizeof(dh)) != 0 || get_be(dh, 4) != DMAGIC ||
		    get_be(dh + 6, 2) >= s->streams || conns[get_be(dh + 6, 2)] >= 0) {
			close(c);
			continue;
		}
		mac(s->k, "pcopy data C", dh + 8, 32, dh + 6, 2, want);
		if (CRYPTO_memcmp(want, dh + 40, 32) != 0)
			die("a data connection's mac_c is wrong: the session key differs");
		mac(s->k, "pcopy data L", dh + 8, 32, dh + 6, 2, mac_l);
		write_all(c, mac_l, 32);
		conns[get_be(dh + 6, 2)] = c;
		got++;
	}
}

/* -------------------------------------------------------------- entries */

struct entry {
	int type, flags;
	unsigned mode;
	uint32_t link_id;
	char path[8200];
	const char *target;
};

/* put_entry: one entry in the layout of contract section 1.2: every REG of
 * size 0, times fixed, owner root (names empty: unknown). */
static void put_entry(struct buf *o, const struct entry *e)
{
	put_u8(o, (uint8_t)e->type);
	put_u8(o, (uint8_t)e->flags);
	put_be(o, e->mode, 4);
	put_be(o, 0, 4);          /* uid */
	put_be(o, 0, 4);          /* gid */
	put_be(o, 1234567890, 8); /* mtime_s */
	put_be(o, 0, 4);
	put_be(o, 1234567890, 8); /* atime_s */
	put_be(o, 0, 4);
	put_be(o, 0, 8);          /* size */
	put_be(o, 0, 8);          /* rdev */
	put_be(o, e->link_id, 4);
	put_str(o, e->path);
	put_str(o, e->target != NULL ? e->target : "");
	put_str(o, "");
	put_str(o, "");
}

/* send_entries: one ENTRIES message of n entries, the first with id first. */
static void send_entries(uint32_t first, const struct entry *e, unsigned n)
{
	struct buf o = { .n = 0 };

	put_be(&o, first, 4);
	put_be(&o, n, 2);
	for (unsigned i = 0; i < n; i++)
		put_entry(&o, &e[i]);
	send_frame(T_ENTRIES, &o);
}

static void set_entry(struct entry *e, int type, int flags, unsigned mode, const char *a,
		      const char *rest, const char *target, uint32_t link_id)
{
	*e = (struct entry){ .type = type, .flags = flags, .mode = mode, .target = target,
			     .link_id = link_id };
	snprintf(e->path, sizeof(e->path), "%s%s", a, rest);
}

/* scenario_symlink: the valid entries that write through a symlink. */
static void scenario_symlink(const struct session *s, const char *outside)
{
	static struct entry e[7];
	const char *a = basename_of(s->paths[0]);
	unsigned n = 0;

	set_entry(&e[n++], E_SYMLINK, 0, 0777, a, "", outside, 0);
	set_entry(&e[n++], E_REG, F_LINKED, 0644, a, "/passwd", NULL, 0);
	set_entry(&e[n++], E_DIR, 0, 0755, a, "/sub", NULL, 0);
	set_entry(&e[n++], E_DIR_END, 0, 0755, a, "/sub", NULL, 0);
	set_entry(&e[n++], E_SYMLINK, 0, 0777, a, "/l", "passwd", 0);
	set_entry(&e[n++], E_HARDLINK, 0, 0644, a, "/h", NULL, 1);
	if (s->npaths > 1)
		set_entry(&e[n++], E_HARDLINK, 0, 0644, basename_of(s->paths[1]), "", NULL, 1);
	send_entries(0, e, n);
}

/* scenario_badpath: DIR A alone, then a batch of a REG whose path breaks a
 * rule and DIR_END A (so that only the path can be the reason to refuse). */
static void scenario_badpath(const struct session *s, const char *name, const char *outside)
{
	static struct entry e[2];
	const char *a = basename_of(s->paths[0]);

	set_entry(&e[0], E_DIR, 0, 0755, a, "", NULL, 0);
	send_entries(0, e, 1);
	if (strcmp(name, "dotdot") == 0)
		set_entry(&e[0], E_REG, 0, 0644, a, "/../../escape", NULL, 0);
	else if (strcmp(name, "absolute") == 0)
		set_entry(&e[0], E_REG, 0, 0644, outside, "/abs", NULL, 0);
	else if (strcmp(name, "empty") == 0)
		set_entry(&e[0], E_REG, 0, 0644, a, "//x", NULL, 0);
	else if (strcmp(name, "dot") == 0)
		set_entry(&e[0], E_REG, 0, 0644, a, "/./x", NULL, 0);
	else
		set_entry(&e[0], E_REG, 0, 0644, a, "/x/", NULL, 0);
	set_entry(&e[1], E_DIR_END, 0, 0755, a, "", NULL, 0);
	send_entries(1, e, 2);
}

/* scenario_benign: a valid little tree (the control). */
static void scenario_benign(const struct session *s, const char *outside)
{
	static struct entry e[6];
	const char *a = basename_of(s->paths[0]);
	unsigned n = 0;

	set_entry(&e[n++], E_DIR, 0, 0755, a, "", NULL, 0);
	set_entry(&e[n++], E_REG, 0, 0644, a, "/f", NULL, 0);
	set_entry(&e[n++], E_SYMLINK, 0, 0777, a, "/l", outside, 0);
	set_entry(&e[n++], E_DIR, 0, 0755, a, "/d", NULL, 0);
	set_entry(&e[n++], E_DIR_END, 0, 0755, a, "/d", NULL, 0);
	set_entry(&e[n++], E_DIR_END, 0, 0755, a, "", NULL, 0);
	send_entries(0, e, n);
}

/* finish: END blocks, END, then wait for the sink's DONE or ERROR. */
static void finish(const struct session *s, int *conns)
{
	uint8_t end_block[40] = { 2 };
	struct buf o = { .n = 0 }, in;
	time_t until = time(NULL) + 60;

	for (unsigned i = 0; i < s->streams; i++) {
		write_all(conns[i], end_block, sizeof(end_block));
		close(conns[i]);
	}
	for (int i = 0; i < 10; i++)
		put_be(&o, 0, 8);
	for (int i = 0; i < 6; i++) { /* version 7: the stage times, none */
		put_be(&o, 0, 4);
		for (int j = 0; j < 4; j++)
			put_be(&o, 0, 8);
	}
	put_be(&o, 0, 8); /* version 8: unchanged files, and their bytes */
	put_be(&o, 0, 8);
	put_be(&o, 0, 8); /* version 9: deleted entries */
	put_be(&o, 0, 8); /* version 11: resumed files */
	send_frame(T_END, &o);
	while (time(NULL) < until) {
		int t = recv_frame(&in);
		if (t < 0 || t == T_DONE || t == T_ERROR)
			return;
	}
}

static bool known_scenario(const char *n)
{
	static const char *const names[] = { "symlink", "dotdot", "absolute", "empty", "dot",
					     "trailing", "benign", "error-text" };

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(n, names[i]) == 0)
			return true;
	return false;
}

int main(int argc, char **argv)
{
	static struct session s;
	int conns[MAX_STREAMS];
	unsigned port;

	if (argc < 3 || !known_scenario(argv[1]) || argv[2][0] != '/')
		die("usage: evil_source symlink|dotdot|absolute|empty|dot|trailing|benign|error-text "
		    "/OUTSIDE [ARGS...]");
	if (getrandom(s.nonce_s, sizeof(s.nonce_s), 0) != (ssize_t)sizeof(s.nonce_s))
		die("getrandom failed: %s", strerror(errno));
	handshake(&s);
	if (strcmp(argv[1], "error-text") == 0) {
		/* An ERROR whose text would forge a line of its own and
		 * steer the terminal, were it printed raw. */
		static const char text[] = "no such file\n\x1b[2Jpcopy: 0 bytes in 0 files, done\r";
		struct buf err = { .n = 0 };
		put_be(&err, (uint32_t)-2, 4);
		put_str(&err, text);
		send_frame(T_ERROR, &err);
		return 0;
	}
	int lfd = listen_local(&port);
	struct buf ready = { .n = 0 };
	put_be(&ready, port, 2);
	put_str(&ready, "127.0.0.1");
	send_frame(T_READY, &ready);
	accept_streams(&s, lfd, conns);
	close(lfd);
	if (strcmp(argv[1], "symlink") == 0)
		scenario_symlink(&s, argv[2]);
	else if (strcmp(argv[1], "benign") == 0)
		scenario_benign(&s, argv[2]);
	else
		scenario_badpath(&s, argv[1], argv[2]);
	finish(&s, conns);
	return 0;
}
