// SPDX-License-Identifier: Apache-2.0
/* tls: TLS 1.3 with external PSKs, and the TLS backend of chan.
 *
 * Contexts: one SSL_CTX per role and cipher choice, made on first use under
 * a mutex and kept for the life of the process; one SSL per connection.
 * Every context: TLS 1.3 only, no tickets, no certificates (the client
 * still asks for verification, with an empty trust store, so that a server
 * that answers with a certificate instead of our PSK fails), kernel TLS
 * asked for, read-ahead into a large buffer, partial writes.
 * SSL_OP_ALLOW_NO_DHE_KEX is never set: psk_ke is neither offered nor
 * accepted, every handshake does an (EC)DHE exchange.
 *
 * I/O: the socket is non-blocking; every wait is a poll on it (POLLIN or
 * POLLOUT, as OpenSSL asks), never while holding the chan's mutex, which
 * guards the SSL object. So one thread can receive while another sends.
 * Each OpenSSL call starts with an empty error queue, and a failure drains
 * it: no stale error from another connection on the thread is reported. */
#include "transport/tls.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__aarch64__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/ssl.h>

#include "sys/net.h"
#include "sys/platform.h"
#include "sys/sync.h"
#include "transport/chan_int.h"

#define TLS_RECORD 16384u            /* the largest TLS plaintext record */
#define TLS_LATER_SLICE_MS 100       /* how often a TLS_DEADLINE_LATER is read again */
#define TLS_READ_BUF (128u * 1024u)  /* read buffer: several records per recv */
#define TLS_WRITE_BUF (256u * 1024u) /* write buffer: several records per send */

#define TLS_SUITE_AES "TLS_AES_128_GCM_SHA256"
#define TLS_SUITE_CHACHA "TLS_CHACHA20_POLY1305_SHA256"

/* ---- names, CPU, kernel ------------------------------------------------ */

static const char *const tls_cipher_names[] = {
	[TLS_CIPHER_AUTO] = "auto",
	[TLS_CIPHER_AES128_GCM] = "aes128-gcm",
	[TLS_CIPHER_CHACHA20] = "chacha20-poly1305",
};

int tls_cipher_parse(const char *s, enum tls_cipher *out, struct pc_err *e)
{
	for (size_t i = 0; i < sizeof(tls_cipher_names) / sizeof(tls_cipher_names[0]); i++) {
		if (s != NULL && strcmp(s, tls_cipher_names[i]) == 0) {
			*out = (enum tls_cipher)i;
			return 0;
		}
	}
	return pc_err_set(e, -PC_E_USAGE, "--cipher: unknown cipher '%s': use auto, "
			  "aes128-gcm or chacha20-poly1305", s != NULL ? s : "");
}

const char *tls_cipher_name(enum tls_cipher c)
{
	if ((unsigned)c >= sizeof(tls_cipher_names) / sizeof(tls_cipher_names[0]))
		return "?";
	return tls_cipher_names[c];
}

bool tls_cpu_has_aes(void)
{
#if defined(__x86_64__) || defined(__i386__)
	unsigned a, b, c, d;

	if (__get_cpuid(1, &a, &b, &c, &d) == 0)
		return false;
	return (c & bit_AES) != 0;
#elif defined(__aarch64__)
	return (getauxval(AT_HWCAP) & HWCAP_AES) != 0;
#else
	return false;
#endif
}

/* Whether the kernel offers the "tls" upper layer protocol: loaded (listed
 * in tcp_available_ulp, or present under /sys/module). */
static bool tls_kernel_has_tls(void)
{
	char buf[256];
	size_t n = 0;
	FILE *f;

	if (access("/sys/module/tls", F_OK) == 0)
		return true;
	f = fopen("/proc/sys/net/ipv4/tcp_available_ulp", "re");
	if (f == NULL)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* strtok_r: the data connections' threads ask this at once. */
	char *save = NULL;
	for (char *t = strtok_r(buf, " \n", &save); t != NULL; t = strtok_r(NULL, " \n", &save))
		if (strcmp(t, "tls") == 0)
			return true;
	return false;
}

const char *tls_ktls_status(void)
{
#ifdef OPENSSL_NO_KTLS
	return "this OpenSSL was built without it";
#else
	return tls_kernel_has_tls() ? "on" : "the kernel has no tls module";
#endif
}

/* ---- contexts ------------------------------------------------------------ */

enum tls_role { TLS_SERVER, TLS_CLIENT_AES, TLS_CLIENT_CHACHA, TLS_CLIENT_AES_FIRST,
		TLS_CLIENT_CHACHA_FIRST, TLS_ROLES };

static pthread_mutex_t tls_ctx_lock = PTHREAD_MUTEX_INITIALIZER;
static SSL_CTX *tls_ctx[TLS_ROLES];  /* guarded by tls_ctx_lock; never freed */

static const char *tls_role_suites(enum tls_role r)
{
	switch (r) {
	case TLS_CLIENT_AES: return TLS_SUITE_AES;
	case TLS_CLIENT_CHACHA: return TLS_SUITE_CHACHA;
	case TLS_CLIENT_CHACHA_FIRST: return TLS_SUITE_CHACHA ":" TLS_SUITE_AES;
	default: return TLS_SUITE_AES ":" TLS_SUITE_CHACHA;
	}
}

static SSL_CTX *tls_ctx_make(enum tls_role r)
{
	SSL_CTX *ctx = SSL_CTX_new(r == TLS_SERVER ? TLS_server_method() : TLS_client_method());

	if (ctx == NULL)
		return NULL;
	if (SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION) != 1 ||
	    SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION) != 1 ||
	    SSL_CTX_set_ciphersuites(ctx, tls_role_suites(r)) != 1 ||
	    SSL_CTX_set_num_tickets(ctx, 0) != 1 ||
	    SSL_CTX_set_max_early_data(ctx, 0) != 1) {
		SSL_CTX_free(ctx);
		return NULL;
	}
	/* No tickets, no resumption, no compression; kernel TLS if it can. */
	SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET | SSL_OP_NO_COMPRESSION | SSL_OP_ENABLE_KTLS);
	SSL_CTX_clear_options(ctx, SSL_OP_ALLOW_NO_DHE_KEX);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE |
			      SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
	SSL_CTX_set_read_ahead(ctx, 1);
	SSL_CTX_set_default_read_buffer_len(ctx, TLS_READ_BUF);
	/* A client that gets a certificate instead of our PSK must fail: verify
	 * it against an empty store. The server asks for none. */
	SSL_CTX_set_verify(ctx, r == TLS_SERVER ? SSL_VERIFY_NONE : SSL_VERIFY_PEER, NULL);
	return ctx;
}

/* The shared context for r, made on first use; NULL if OpenSSL fails. */
static SSL_CTX *tls_ctx_get(enum tls_role r)
{
	SSL_CTX *ctx;

	sync_lock(&tls_ctx_lock);
	if (tls_ctx[r] == NULL)
		tls_ctx[r] = tls_ctx_make(r);
	ctx = tls_ctx[r];
	sync_unlock(&tls_ctx_lock);
	return ctx;
}

/* ---- failures ------------------------------------------------------------ */

/* Before each OpenSSL call whose failure we read: nothing stale in the
 * thread's error queue or in errno. */
static void tls_call_begin(void)
{
	ERR_clear_error();
	errno = 0;
}

/* What an OpenSSL call that failed left behind, read at once. */
struct tls_fail {
	int sslerr;         /* SSL_get_error */
	int sys;            /* errno right after the call */
	int reason;         /* reason of the first SSL-library error queued, or 0 */
	char detail[96];    /* its text, or "" */
};

/* Fills f after r = an SSL call on ssl failed, and drains the queue.
 * Under the chan's mutex, on the thread that made the call. */
static void tls_fail_read(SSL *ssl, int r, struct tls_fail *f)
{
	unsigned long code, first = 0;

	f->sys = errno;
	f->sslerr = SSL_get_error(ssl, r);
	while ((code = ERR_get_error()) != 0)
		if (first == 0 && ERR_GET_LIB(code) == ERR_LIB_SSL)
			first = code;
	f->reason = first != 0 ? ERR_GET_REASON(first) : 0;
	f->detail[0] = '\0';
	if (first != 0 && ERR_reason_error_string(first) != NULL)
		snprintf(f->detail, sizeof(f->detail), "%s", ERR_reason_error_string(first));
	else if (f->sslerr == SSL_ERROR_SYSCALL && f->sys != 0)
		snprintf(f->detail, sizeof(f->detail), "%s", strerror(f->sys));
}

static bool tls_reason_is_mac(int reason)
{
	return reason == SSL_R_DECRYPTION_FAILED_OR_BAD_RECORD_MAC ||
	       reason == SSL_R_SSLV3_ALERT_BAD_RECORD_MAC;
}

/* Reasons a handshake fails when the two ends do not hold the same key. */
static bool tls_reason_is_key(int reason)
{
	switch (reason) {
	case SSL_R_BINDER_DOES_NOT_VERIFY:
	case SSL_R_TLSV1_ALERT_DECRYPT_ERROR:
	case SSL_R_SSLV3_ALERT_ILLEGAL_PARAMETER:  /* OpenSSL 3.0's answer to a bad binder */
	case SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE:
	case SSL_R_TLSV1_ALERT_UNKNOWN_PSK_IDENTITY:
	case SSL_R_DIGEST_CHECK_FAILED:
	case SSL_R_CERTIFICATE_VERIFY_FAILED:
	case SSL_R_NO_SUITABLE_SIGNATURE_ALGORITHM:
	case SSL_R_NO_SHARED_CIPHER:
		return true;
	default:
		return tls_reason_is_mac(reason);  /* in a handshake: not our keys */
	}
}

/* The code for a failure on an established chan; 0 for an orderly end. */
static int tls_io_code(const struct tls_fail *f)
{
	switch (f->sslerr) {
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	case SSL_ERROR_SYSCALL:
		if (f->reason == 0)
			return f->sys != 0 ? -f->sys : -PC_E_NET;  /* 0: EOF without close_notify */
		break;
	case SSL_ERROR_SSL:
		break;
	default:
		return -PC_E_PROTO;
	}
	if (tls_reason_is_mac(f->reason))
		return -PC_E_INTEGRITY;
	if (f->reason == SSL_R_UNEXPECTED_EOF_WHILE_READING)
		return -PC_E_NET;
	return -PC_E_PROTO;
}

/* ---- waiting ------------------------------------------------------------- */

/* Waits until fd is readable (want == SSL_ERROR_WANT_READ) or writable, for
 * at most timeout_ms (-1: forever). 0 when ready (or hung up: the next call
 * says what happened), -PC_E_TIMEOUT, or -errno. */
static int tls_poll(int fd, int want, int timeout_ms)
{
	struct pollfd p = { .fd = fd, .events = want == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT };
	int r;

	do
		r = poll(&p, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	return r == 0 ? -PC_E_TIMEOUT : 0;
}

/* Milliseconds left until deadline_ns (0: none, -1), rounded up; 0 when it
 * has passed. */
static int tls_ms_left(uint64_t deadline_ns)
{
	uint64_t now = platform_now_ns(), ms;

	if (deadline_ns == 0)
		return -1;
	if (now >= deadline_ns)
		return 0;
	ms = (deadline_ns - now + 999999u) / 1000000u;
	return ms > INT_MAX ? INT_MAX : (int)ms;
}

/* ---- the chan backend ---------------------------------------------------- */

struct chan_tls {
	struct chan c;            /* first: the common part */
	pthread_mutex_t lock;     /* guards ssl; never held in poll */
	SSL *ssl;                 /* guarded by lock */
	bool wbuf;                /* immutable: records wait in a BIO_f_buffer until a flush */
	uint8_t coalesce[TLS_RECORD];  /* sending thread only */
};

static const struct chan_ops chan_tls_ops;

static int tls_chan_timeout_ms(const struct chan_tls *t)
{
	if (t->c.timeout_s == 0)
		return -1;
	return t->c.timeout_s > INT_MAX / 1000 ? INT_MAX : (int)(t->c.timeout_s * 1000u);
}

/* Records f in c->error (under t->lock) in words for a user. */
static void tls_chan_note(struct chan_tls *t, int code, const struct tls_fail *f)
{
	const char *what = "the TLS connection failed";

	if (code == -PC_E_INTEGRITY)
		what = "a TLS record failed its integrity check: the data was altered on the way";
	else if (code == -PC_E_NET)
		what = "the peer closed the TLS connection without ending it";
	else if (code == -PC_E_PROTO)
		what = "the peer broke the TLS protocol";
	if (f->detail[0] != '\0')
		snprintf(t->c.error, sizeof(t->c.error), "%s (%s)", what, f->detail);
	else
		snprintf(t->c.error, sizeof(t->c.error), "%s", what);
}

/* After a failed call under t->lock: unlocks, and either waits (0: retry)
 * or returns the negative code, or 1 for an orderly end (recv only). */
static int tls_chan_after(struct chan_tls *t, int r)
{
	struct tls_fail f;
	int code;

	tls_fail_read(t->ssl, r, &f);
	if (f.sslerr == SSL_ERROR_WANT_READ || f.sslerr == SSL_ERROR_WANT_WRITE) {
		sync_unlock(&t->lock);
		code = tls_poll(t->c.rfd, f.sslerr, tls_chan_timeout_ms(t));
		if (atomic_load(&t->c.aborted))
			return -PC_E_ABORTED;
		return code;
	}
	code = tls_io_code(&f);
	if (code == 0) {
		sync_unlock(&t->lock);
		return 1;
	}
	tls_chan_note(t, code, &f);
	sync_unlock(&t->lock);
	return code;
}

/* Writes len bytes at p, at most TLS_WRITE_BUF per call, so that a
 * receiver on the same chan never waits long for the mutex. A retry after
 * WANT_WRITE repeats the same (p, chunk), as OpenSSL requires. */
static int tls_write_all(struct chan_tls *t, const uint8_t *p, size_t len)
{
	while (len > 0) {
		size_t w = 0, chunk = len < TLS_WRITE_BUF ? len : TLS_WRITE_BUF;
		int r;

		sync_lock(&t->lock);
		tls_call_begin();
		r = SSL_write_ex(t->ssl, p, chunk, &w);
		if (r == 1) {
			sync_unlock(&t->lock);
			p += w;
			len -= w;
			continue;
		}
		r = tls_chan_after(t, r);
		if (r == 1)
			return -PC_E_NET;  /* cannot happen on a write; no spin */
		if (r < 0)
			return r;
	}
	return 0;
}

/* Pushes the records waiting in the write buffer to the socket. */
static int tls_flush(struct chan_tls *t)
{
	while (t->wbuf) {
		BIO *w;
		int r, e;

		sync_lock(&t->lock);
		tls_call_begin();
		w = SSL_get_wbio(t->ssl);
		r = BIO_flush(w);
		if (r > 0) {
			sync_unlock(&t->lock);
			return 0;
		}
		e = errno;
		if (!BIO_should_retry(w)) {
			snprintf(t->c.error, sizeof(t->c.error), "sending TLS records: %s",
				 e != 0 ? strerror(e) : "the connection broke");
			ERR_clear_error();
			sync_unlock(&t->lock);
			return e != 0 ? -e : -PC_E_NET;
		}
		ERR_clear_error();
		sync_unlock(&t->lock);
		r = tls_poll(t->c.wfd, SSL_ERROR_WANT_WRITE, tls_chan_timeout_ms(t));
		if (atomic_load(&t->c.aborted))
			return -PC_E_ABORTED;
		if (r < 0)
			return r;
	}
	return 0;
}

/* Small leading vectors (a block header) travel in one record with the
 * first payload bytes: copied into t->coalesce up to TLS_RECORD bytes.
 * Every send ends with a flush: nothing stays behind in the buffer. */
static int tls_send(struct chan *c, const struct iovec *iov, int n)
{
	struct chan_tls *t = (struct chan_tls *)c;
	size_t fill = 0, skip = 0;  /* skip: bytes of iov[i] already coalesced */
	int i = 0, r;

	if (iov[0].iov_len < TLS_RECORD) {
		for (; i < n && fill < TLS_RECORD; i++) {
			size_t k = iov[i].iov_len;

			if (k > TLS_RECORD - fill) {
				k = TLS_RECORD - fill;
				skip = k;
			}
			if (k > 0)
				memcpy(t->coalesce + fill, iov[i].iov_base, k);
			fill += k;
			if (skip > 0)
				break;
		}
		r = tls_write_all(t, t->coalesce, fill);
		if (r < 0)
			return r;
	}
	for (; i < n; i++, skip = 0) {
		r = tls_write_all(t, (const uint8_t *)iov[i].iov_base + skip, iov[i].iov_len - skip);
		if (r < 0)
			return r;
	}
	return tls_flush(t);
}

static ssize_t tls_recv_some(struct chan *c, void *buf, size_t len)
{
	struct chan_tls *t = (struct chan_tls *)c;

	for (;;) {
		size_t got = 0;
		int r;

		sync_lock(&t->lock);
		tls_call_begin();
		r = SSL_read_ex(t->ssl, buf, len, &got);
		if (r == 1) {
			sync_unlock(&t->lock);
			return (ssize_t)got;
		}
		r = tls_chan_after(t, r);
		if (r == 1)
			return 0;  /* close_notify */
		if (r < 0)
			return r;
	}
}

static bool tls_pending(struct chan *c)
{
	struct chan_tls *t = (struct chan_tls *)c;
	bool p;

	sync_lock(&t->lock);
	/* Records may wait in OpenSSL or in the read buffer BIO. */
	p = SSL_pending(t->ssl) > 0 || SSL_has_pending(t->ssl) == 1 ||
	    BIO_pending(SSL_get_rbio(t->ssl)) > 0;
	sync_unlock(&t->lock);
	return p;
}

/* close_notify (retried until the socket takes it), then SHUT_WR. */
static int tls_close_send(struct chan *c)
{
	struct chan_tls *t = (struct chan_tls *)c;
	int r;

	for (;;) {
		sync_lock(&t->lock);
		tls_call_begin();
		r = SSL_shutdown(t->ssl);
		if (r >= 0) {
			sync_unlock(&t->lock);
			break;
		}
		r = tls_chan_after(t, r);
		if (r == 1)
			break;
		if (r < 0)
			return r;
	}
	r = tls_flush(t);
	if (r < 0)
		return r;
	return shutdown(c->wfd, SHUT_WR) == 0 ? 0 : -errno;
}

static void tls_destroy(struct chan *c)
{
	struct chan_tls *t = (struct chan_tls *)c;

	SSL_free(t->ssl);
	sync_check("pthread_mutex_destroy", pthread_mutex_destroy(&t->lock));
	OPENSSL_cleanse(t->coalesce, sizeof(t->coalesce));
	free(t);
}

static const struct chan_ops chan_tls_ops = {
	.send = tls_send,
	.recv_some = tls_recv_some,
	.pending = tls_pending,
	.close_send = tls_close_send,
	.destroy = tls_destroy,
	.wake = NULL,  /* shutdown(SHUT_RDWR) wakes every poll on the socket */
};

int tls_export(struct chan *c, const char *label, uint8_t *out, size_t len)
{
	struct chan_tls *t = (struct chan_tls *)c;
	int r;

	if (c == NULL || c->ops != &chan_tls_ops || label == NULL || out == NULL || len == 0)
		return -EINVAL;
	sync_lock(&t->lock);
	ERR_clear_error();
	r = SSL_export_keying_material(t->ssl, out, len, label, strlen(label), NULL, 0, 0);
	ERR_clear_error();
	sync_unlock(&t->lock);
	return r == 1 ? 0 : -PC_E_PROTO;
}

int tls_kex_group(struct chan *c, char *name, size_t cap)
{
	struct chan_tls *t = (struct chan_tls *)c;
	const char *s = NULL;
	int nid;

	if (c == NULL || c->ops != &chan_tls_ops)
		return -EINVAL;
	sync_lock(&t->lock);
#if OPENSSL_VERSION_NUMBER >= 0x30000000L
	nid = SSL_get_negotiated_group(t->ssl);
#else
	nid = SSL_get_shared_group(t->ssl, 0);
#endif
	sync_unlock(&t->lock);
	if (nid <= 0 || (nid & TLSEXT_nid_unknown) != 0)
		return -ENOENT;
	s = OBJ_nid2sn(nid);
	if (name != NULL && cap > 0)
		snprintf(name, cap, "%s", s != NULL ? s : "?");
	return 0;
}

/* ---- handshakes ---------------------------------------------------------- */

/* One handshake's state, the SSL's app data while it runs. */
struct tls_hs {
	const uint8_t *id;          /* client: the identity offered */
	size_t idlen;
	const uint8_t *psk;         /* client: its key (the caller's) */
	tls_find_psk find;          /* server */
	void *arg;
	uint8_t seen[TLS_MAX_IDENTITY];  /* server: the identity found */
	size_t seenlen;
	bool offered;               /* server: the client offered a PSK */
	bool unknown;               /* server: find knew none of it */
};

/* A TLS 1.3 session holding psk, for either end. NULL on failure. */
static SSL_SESSION *tls_psk_session(SSL *ssl, const uint8_t *psk)
{
	static const unsigned char aes128gcm[2] = { 0x13, 0x01 };
	const SSL_CIPHER *cipher = SSL_CIPHER_find(ssl, aes128gcm);
	SSL_SESSION *s = SSL_SESSION_new();

	if (s == NULL || cipher == NULL ||
	    SSL_SESSION_set1_master_key(s, psk, TLS_PSK_LEN) != 1 ||
	    SSL_SESSION_set_cipher(s, cipher) != 1 ||
	    SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION) != 1) {
		SSL_SESSION_free(s);
		return NULL;
	}
	return s;
}

static int tls_use_psk_cb(SSL *ssl, const EVP_MD *md, const unsigned char **id,
			  size_t *idlen, SSL_SESSION **sess)
{
	struct tls_hs *hs = SSL_get_app_data(ssl);
	SSL_SESSION *s = tls_psk_session(ssl, hs->psk);

	if (s == NULL)
		return 0;
	/* After a HelloRetryRequest md is the suite's hash: both are SHA-256. */
	if (md != NULL && EVP_MD_type(md) != NID_sha256) {
		SSL_SESSION_free(s);
		*sess = NULL;
		return 1;
	}
	*sess = s;
	*id = hs->id;
	*idlen = hs->idlen;
	return 1;
}

static int tls_find_psk_cb(SSL *ssl, const unsigned char *id, size_t idlen, SSL_SESSION **sess)
{
	struct tls_hs *hs = SSL_get_app_data(ssl);
	uint8_t psk[TLS_PSK_LEN];
	SSL_SESSION *s;

	hs->offered = true;
	*sess = NULL;
	if (idlen == 0 || idlen > TLS_MAX_IDENTITY || hs->find(hs->arg, id, idlen, psk) != 0) {
		/* Go on without a PSK: with no certificate the handshake then
		 * fails with a handshake_failure alert. */
		hs->unknown = true;
		return 1;
	}
	s = tls_psk_session(ssl, psk);
	OPENSSL_cleanse(psk, sizeof(psk));
	if (s == NULL)
		return 0;
	memcpy(hs->seen, id, idlen);
	hs->seenlen = idlen;
	*sess = s;
	return 1;
}

/* "TLS handshake with 10.0.0.2" or "TLS handshake", into buf. */
static const char *tls_hs_where(int fd, char *buf, size_t cap)
{
	char host[NET_MAX_ADDR];

	if (net_peer_host(fd, host, sizeof(host)) == 0)
		snprintf(buf, cap, "TLS handshake with %s", host);
	else
		snprintf(buf, cap, "TLS handshake");
	return buf;
}

/* Records the failure of a handshake in e, in words for a user. */
static int tls_hs_fail(int fd, bool server, const struct tls_hs *hs, const struct tls_fail *f,
		       struct pc_err *e)
{
	char where[NET_MAX_ADDR + 32];
	const char *d = f->detail[0] != '\0' ? f->detail : "no detail";

	tls_hs_where(fd, where, sizeof(where));
	if (server && hs->unknown)
		return pc_err_set(e, -PC_E_AUTH, "%s: the client offered a key identity this end "
				  "does not know", where);
	if (server && !hs->offered && f->sslerr == SSL_ERROR_SSL &&
	    tls_reason_is_key(f->reason))
		return pc_err_set(e, -PC_E_AUTH, "%s: the client offered no pre-shared key (%s)",
				  where, d);
	if (f->sslerr == SSL_ERROR_ZERO_RETURN || f->reason == SSL_R_UNEXPECTED_EOF_WHILE_READING ||
	    (f->sslerr == SSL_ERROR_SYSCALL && f->reason == 0))
		return pc_err_set(e, -PC_E_NET, "%s: the peer closed the connection (%s)", where,
				  f->sys != 0 ? strerror(f->sys) : "end of stream");
	/* "altered on the way": client.c tells this from a wrong key by it. */
	if (f->sslerr == SSL_ERROR_SSL && tls_reason_is_mac(f->reason))
		return pc_err_set(e, -PC_E_AUTH, "%s: the peer's handshake did not decrypt with "
				  "this connection's keys (%s): replayed, or altered on the way",
				  where, d);
	if (!server && f->reason == SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE)
		return pc_err_set(e, -PC_E_AUTH, "%s: the server does not know our key (%s): "
				  "both ends must hold the same key", where, d);
	if (f->sslerr == SSL_ERROR_SSL && tls_reason_is_key(f->reason))
		return pc_err_set(e, -PC_E_AUTH, "%s: the peer proved a different key (%s): both "
				  "ends must hold the same key", where, d);
	return pc_err_set(e, -PC_E_PROTO, "%s: the peer does not speak TLS 1.3 (%s): is it an "
			  "older pcopy, or not pcopy at all?", where, d);
}

/* Runs the handshake of ssl on fd to its end or *deadline (read again at
 * each wait: another thread may set it while it is TLS_DEADLINE_LATER). */
static int tls_hs_run(SSL *ssl, int fd, bool server, const struct tls_hs *hs,
		      const _Atomic uint64_t *deadline, struct pc_err *e)
{
	char where[NET_MAX_ADDR + 32];
	struct tls_fail f;
	int r;

	for (;;) {
		tls_call_begin();
		r = SSL_do_handshake(ssl);
		if (r == 1)
			break;
		tls_fail_read(ssl, r, &f);
		if (f.sslerr != SSL_ERROR_WANT_READ && f.sslerr != SSL_ERROR_WANT_WRITE)
			return tls_hs_fail(fd, server, hs, &f, e);
		uint64_t deadline_ns = atomic_load(deadline);
		bool later = deadline_ns == TLS_DEADLINE_LATER;
		r = later ? TLS_LATER_SLICE_MS : tls_ms_left(deadline_ns);
		if (r != 0) {
			/* A stop signal ends the handshake too (platform_poll),
			 * as it ends a connect or a wait for a proof in clear. */
			struct pollfd p = { .fd = fd, .events = f.sslerr == SSL_ERROR_WANT_READ
								? POLLIN : POLLOUT };
			r = platform_poll(&p, 1, r);
			r = r > 0 || (r == 0 && later) ? 0 : r == 0 ? -PC_E_TIMEOUT : r;
		} else {
			r = -PC_E_TIMEOUT;
		}
		if (r == -PC_E_INTERRUPTED)
			return pc_err_set(e, r, "%s: interrupted during the TLS handshake",
					  tls_hs_where(fd, where, sizeof(where)));
		if (r == -PC_E_TIMEOUT)
			return pc_err_set(e, -PC_E_TIMEOUT, "%s: the peer did not finish the "
					  "handshake in time", tls_hs_where(fd, where, sizeof(where)));
		if (r < 0)
			return pc_err_set(e, r, "%s: poll: %s", tls_hs_where(fd, where, sizeof(where)),
					  strerror(-r));
	}
	/* Only a handshake that used our PSK counts (the client also refuses a
	 * certificate, but says so here in plain words). */
	if (SSL_session_reused(ssl) != 1 || SSL_version(ssl) != TLS1_3_VERSION)
		return pc_err_set(e, -PC_E_AUTH, "%s: the peer did not prove the pre-shared key",
				  tls_hs_where(fd, where, sizeof(where)));
	return 0;
}

/* Gives ssl its BIOs on fd. Where the kernel may take over the record
 * layer, the socket itself (kernel TLS wants it), with OpenSSL's read-ahead.
 * Elsewhere a BIO_f_buffer on each side of the socket, and no read-ahead:
 * - writing, 256 KiB wait there until a flush, so that a large write is one
 *   syscall per 16 records rather than one per record;
 * - reading, one recv fills 128 KiB, and OpenSSL takes each record's header
 *   and body from there. Its own read-ahead would do the recv, but it moves
 *   whatever is left in its buffer to the front before each record (payload
 *   alignment, ssl3_read_n), about 4 bytes moved per byte received with a
 *   128 KiB buffer, where the buffer BIO copies each byte once.
 * *buffered says which. Returns 0 or -ENOMEM. */
static int tls_set_bios(SSL *ssl, int fd, bool *buffered)
{
	BIO *sock = NULL, *rbuf = NULL, *wbuf = NULL;

	*buffered = false;
	if (tls_kernel_has_tls())
		return SSL_set_fd(ssl, fd) == 1 ? 0 : -ENOMEM;
	sock = BIO_new_socket(fd, BIO_NOCLOSE);
	rbuf = BIO_new(BIO_f_buffer());
	wbuf = BIO_new(BIO_f_buffer());
	if (sock == NULL || rbuf == NULL || wbuf == NULL ||
	    BIO_set_read_buffer_size(rbuf, TLS_READ_BUF) != 1 ||
	    BIO_set_write_buffer_size(wbuf, TLS_WRITE_BUF) != 1 || BIO_up_ref(sock) != 1) {
		BIO_free(sock);
		BIO_free(rbuf);
		BIO_free(wbuf);
		return -ENOMEM;
	}
	/* sock is in both: SSL_free's BIO_free_all of each drops one reference. */
	SSL_set_bio(ssl, BIO_push(rbuf, sock), BIO_push(wbuf, sock));
	SSL_set_read_ahead(ssl, 0);
	*buffered = true;
	return 0;
}

/* The chan around an established ssl on fd. NULL on ENOMEM. */
static struct chan *tls_chan_new(SSL *ssl, int fd, bool buffered)
{
	struct chan_tls *t = calloc(1, sizeof(*t));
	char describe[sizeof(t->c.describe)];
	bool ksend = BIO_get_ktls_send(SSL_get_wbio(ssl));
	bool krecv = BIO_get_ktls_recv(SSL_get_rbio(ssl));

	if (t == NULL)
		return NULL;
	if (pthread_mutex_init(&t->lock, NULL) != 0) {
		free(t);
		return NULL;
	}
	snprintf(describe, sizeof(describe), "TLS 1.3, %s%s", SSL_get_cipher_name(ssl),
		 ksend && krecv ? ", kernel TLS" : ksend ? ", kernel TLS (send)" :
		 krecv ? ", kernel TLS (receive)" : "");
	chan_init(&t->c, &chan_tls_ops, fd, fd, describe);
	t->ssl = ssl;
	t->wbuf = buffered;
	return &t->c;
}

/* Makes the SSL of role on fd (made non-blocking; *flags receives its old
 * file flags, or -1 if they were not changed), hs as its app data, ready
 * to run its handshake. Returns 0 or a negative code with a message in e;
 * on failure fd is as it came. */
static int tls_setup(int fd, enum tls_role role, struct tls_hs *hs, bool lean, SSL **out,
		     bool *buffered, int *flags, struct pc_err *e)
{
	SSL_CTX *ctx = tls_ctx_get(role);
	SSL *ssl = NULL;

	*out = NULL;
	*flags = -1;
	*buffered = false;
	if (ctx == NULL) {
		ERR_clear_error();
		return pc_err_set(e, -ENOMEM, "TLS: cannot make a TLS 1.3 context (OpenSSL)");
	}
	int old = fcntl(fd, F_GETFL);
	if (old < 0 || fcntl(fd, F_SETFL, old | O_NONBLOCK) != 0)
		return pc_err_set(e, -errno, "TLS: cannot make the socket non-blocking: %s",
				  strerror(errno));
	ssl = SSL_new(ctx);
	if (ssl == NULL || (lean ? SSL_set_fd(ssl, fd) != 1 : tls_set_bios(ssl, fd, buffered) != 0) ||
	    SSL_set_app_data(ssl, hs) != 1) {
		ERR_clear_error();
		SSL_free(ssl);
		(void)fcntl(fd, F_SETFL, old);
		return pc_err_set(e, -ENOMEM, "TLS: cannot make a connection (OpenSSL)");
	}
	if (lean) {
		/* No buffers beyond one record's while a stranger may be at
		 * the other end; tls_accept_chan gives it the real ones. */
		SSL_set_read_ahead(ssl, 0);
		SSL_set_mode(ssl, SSL_MODE_RELEASE_BUFFERS);
	}
	if (role == TLS_SERVER) {
		SSL_set_psk_find_session_callback(ssl, tls_find_psk_cb);
		SSL_set_accept_state(ssl);
	} else {
		SSL_set_psk_use_session_callback(ssl, tls_use_psk_cb);
		SSL_set_connect_state(ssl);
	}
	*flags = old;
	*out = ssl;
	return 0;
}

/* The common part of tls_connect and tls_accept: ssl made from role's
 * context, hs as its app data; on success *out owns fd and ssl. */
static int tls_start(int fd, enum tls_role role, struct tls_hs *hs,
		     const _Atomic uint64_t *deadline, struct chan **out, struct pc_err *e)
{
	bool buffered;
	int flags, ret;
	SSL *ssl;

	*out = NULL;
	ret = tls_setup(fd, role, hs, false, &ssl, &buffered, &flags, e);
	if (ret < 0)
		return ret;
	ret = tls_hs_run(ssl, fd, role == TLS_SERVER, hs, deadline, e);
	if (ret < 0)
		goto out;
	SSL_set_app_data(ssl, NULL);  /* hs lives on the caller's stack */
	*out = tls_chan_new(ssl, fd, buffered);
	if (*out == NULL) {
		ret = pc_err_set(e, -ENOMEM, "TLS: out of memory");
		goto out;
	}
	ssl = NULL;
	ret = 0;
out:
	ERR_clear_error();
	SSL_free(ssl);
	if (ret < 0)
		(void)fcntl(fd, F_SETFL, flags);  /* the fd goes back as it came */
	return ret;
}

int tls_connect(int fd, enum tls_cipher cipher, const uint8_t *id, size_t idlen,
		const uint8_t psk[TLS_PSK_LEN], uint64_t deadline_ns, struct chan **out,
		struct pc_err *e)
{
	_Atomic uint64_t d;

	atomic_init(&d, deadline_ns);
	return tls_connect_until(fd, cipher, id, idlen, psk, &d, out, e);
}

int tls_connect_until(int fd, enum tls_cipher cipher, const uint8_t *id, size_t idlen,
		      const uint8_t psk[TLS_PSK_LEN], const _Atomic uint64_t *deadline,
		      struct chan **out, struct pc_err *e)
{
	struct tls_hs hs = { .id = id, .idlen = idlen, .psk = psk };
	enum tls_role role;

	if (out == NULL)
		return -EINVAL;
	*out = NULL;
	if (fd < 0 || id == NULL || idlen == 0 || idlen > TLS_MAX_IDENTITY || psk == NULL)
		return pc_err_set(e, -EINVAL, "TLS: bad arguments to tls_connect");
	switch (cipher) {
	case TLS_CIPHER_AES128_GCM: role = TLS_CLIENT_AES; break;
	case TLS_CIPHER_CHACHA20: role = TLS_CLIENT_CHACHA; break;
	case TLS_CIPHER_AUTO:
		role = tls_cpu_has_aes() ? TLS_CLIENT_AES_FIRST : TLS_CLIENT_CHACHA_FIRST;
		break;
	default:
		return pc_err_set(e, -EINVAL, "TLS: unknown cipher %d", (int)cipher);
	}
	return tls_start(fd, role, &hs, deadline, out, e);
}

int tls_accept(int fd, tls_find_psk find, void *arg, uint64_t deadline_ns,
	       uint8_t *id_out, size_t *idlen_out, struct chan **out, struct pc_err *e)
{
	struct tls_hs hs = { .find = find, .arg = arg };
	int r;

	if (out == NULL)
		return -EINVAL;
	*out = NULL;
	if (fd < 0 || find == NULL)
		return pc_err_set(e, -EINVAL, "TLS: bad arguments to tls_accept");
	_Atomic uint64_t d;

	atomic_init(&d, deadline_ns);
	r = tls_start(fd, TLS_SERVER, &hs, &d, out, e);
	if (r == 0) {
		if (id_out != NULL)
			memcpy(id_out, hs.seen, hs.seenlen);
		if (idlen_out != NULL)
			*idlen_out = hs.seenlen;
	}
	return r;
}

/* ---- a server handshake driven by its owner's poll ----------------------- */

struct tls_accepting {
	SSL *ssl;
	int fd;
	bool buffered;
	struct tls_hs hs;   /* the SSL's app data: it must not move */
};

int tls_accept_begin(int fd, tls_find_psk find, void *arg, struct tls_accepting **out,
		     struct pc_err *e)
{
	struct tls_accepting *a;
	int flags, ret;

	*out = NULL;
	if (fd < 0 || find == NULL)
		return pc_err_set(e, -EINVAL, "TLS: bad arguments to tls_accept_begin");
	a = calloc(1, sizeof(*a));
	if (a == NULL)
		return pc_err_set(e, -ENOMEM, "TLS: out of memory");
	a->hs = (struct tls_hs){ .find = find, .arg = arg };
	a->fd = fd;
	ret = tls_setup(fd, TLS_SERVER, &a->hs, true, &a->ssl, &a->buffered, &flags, e);
	if (ret < 0) {
		free(a);
		return ret;
	}
	*out = a;
	return 0;
}

int tls_accept_step(struct tls_accepting *a, short *events, struct pc_err *e)
{
	char where[NET_MAX_ADDR + 32];
	struct tls_fail f;
	int r;

	tls_call_begin();
	r = SSL_do_handshake(a->ssl);
	if (r == 1) {
		ERR_clear_error();
		if (SSL_session_reused(a->ssl) != 1 || SSL_version(a->ssl) != TLS1_3_VERSION)
			return pc_err_set(e, -PC_E_AUTH, "%s: the peer did not prove the "
					  "pre-shared key", tls_hs_where(a->fd, where, sizeof(where)));
		return 1;
	}
	tls_fail_read(a->ssl, r, &f);
	if (f.sslerr == SSL_ERROR_WANT_READ || f.sslerr == SSL_ERROR_WANT_WRITE) {
		*events = f.sslerr == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT;
		return 0;
	}
	return tls_hs_fail(a->fd, true, &a->hs, &f, e);
}

struct chan *tls_accept_chan(struct tls_accepting *a)
{
	struct chan *ch;

	/* The handshake read exactly its records (no read-ahead), so nothing
	 * of the client's waits in the old BIO: the new ones take over. */
	SSL_clear_mode(a->ssl, SSL_MODE_RELEASE_BUFFERS);
	if (tls_set_bios(a->ssl, a->fd, &a->buffered) != 0)
		return NULL;
	SSL_set_app_data(a->ssl, NULL);
	ch = tls_chan_new(a->ssl, a->fd, a->buffered);
	if (ch == NULL)
		return NULL;
	a->ssl = NULL;
	free(a);
	return ch;
}

void tls_accepting_free(struct tls_accepting *a)
{
	if (a == NULL)
		return;
	ERR_clear_error();
	SSL_free(a->ssl); /* sends nothing; the socket BIO does not own fd */
	free(a);
}
