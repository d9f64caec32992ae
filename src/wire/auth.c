/* SPDX-License-Identifier: Apache-2.0 */
/* auth: control and data channel proofs of key possession. */
#include "wire/auth.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/uio.h>

#include "sys/crypto.h"
#include "sys/err.h"

/* HMAC(key, label | a | b) */
static int auth_mac2(const uint8_t key[PROTO_KEY_LEN], const char *label,
		     const uint8_t a[PROTO_NONCE_LEN], const uint8_t b[PROTO_NONCE_LEN],
		     uint8_t out[PROTO_MAC_LEN])
{
	struct iovec iov[3] = {
		{ .iov_base = (void *)(uintptr_t)label, .iov_len = strlen(label) },
		{ .iov_base = (void *)(uintptr_t)a, .iov_len = PROTO_NONCE_LEN },
		{ .iov_base = (void *)(uintptr_t)b, .iov_len = PROTO_NONCE_LEN },
	};

	return crypto_hmac(key, PROTO_KEY_LEN, iov, 3, out);
}

int auth_ctl_mac(const uint8_t K[PROTO_KEY_LEN], bool client,
		 const uint8_t nonce_c[PROTO_NONCE_LEN], const uint8_t nonce_s[PROTO_NONCE_LEN],
		 uint8_t mac[PROTO_MAC_LEN])
{
	return auth_mac2(K, client ? "pcopy ctl C" : "pcopy ctl S", nonce_c, nonce_s, mac);
}

int auth_session_key(const uint8_t K[PROTO_KEY_LEN], const uint8_t nonce_c[PROTO_NONCE_LEN],
		     const uint8_t nonce_s[PROTO_NONCE_LEN], uint8_t k[PROTO_KEY_LEN])
{
	return auth_mac2(K, "pcopy session", nonce_c, nonce_s, k);
}

/* Sends len bytes of buf on ch in one write. Returns 0 or a negative code. */
static int auth_send(struct chan *ch, const void *buf, size_t len)
{
	const struct iovec iov = { .iov_base = (void *)(uintptr_t)buf, .iov_len = len };

	return chan_send(ch, &iov, 1);
}

static int auth_data_mac(const uint8_t k[PROTO_KEY_LEN], bool connector,
			 const uint8_t nc[PROTO_NONCE_LEN], uint16_t stream, uint8_t mac[PROTO_MAC_LEN])
{
	const char *label = connector ? "pcopy data C" : "pcopy data L";
	uint8_t idx[2] = { (uint8_t)(stream >> 8), (uint8_t)stream };
	struct iovec iov[3] = {
		{ .iov_base = (void *)(uintptr_t)label, .iov_len = strlen(label) },
		{ .iov_base = (void *)(uintptr_t)nc, .iov_len = PROTO_NONCE_LEN },
		{ .iov_base = idx, .iov_len = sizeof(idx) },
	};

	return crypto_hmac(k, PROTO_KEY_LEN, iov, 3, mac);
}

int auth_data_connect(struct chan *ch, const uint8_t k[PROTO_KEY_LEN], uint16_t stream,
		      uint8_t expect[PROTO_MAC_LEN])
{
	struct proto_dhello h = { .magic = PROTO_DATA_MAGIC, .version = PROTO_VERSION,
				  .stream = stream };
	uint8_t hello[PROTO_DHELLO_LEN + PROTO_MAC_LEN];
	int ret;

	ret = crypto_random(h.nonce, sizeof(h.nonce));
	if (ret < 0)
		return ret;
	proto_dhello_encode(&h, hello);
	ret = auth_data_mac(k, true, h.nonce, stream, hello + PROTO_DHELLO_LEN);
	if (ret == 0)
		ret = auth_data_mac(k, false, h.nonce, stream, expect);
	if (ret == 0)
		ret = auth_send(ch, hello, sizeof(hello));
	return ret;
}

int auth_data_confirm(struct chan *ch, const uint8_t expect[PROTO_MAC_LEN])
{
	uint8_t mac[PROTO_MAC_LEN];
	int ret = chan_recv(ch, mac, sizeof(mac), NULL);

	if (ret < 0)
		return ret;
	return crypto_equal(expect, mac, PROTO_MAC_LEN) ? 0 : -PC_E_AUTH;
}

int auth_data_accept(struct chan *ch, const uint8_t k[PROTO_KEY_LEN], unsigned nstreams,
		     uint16_t *stream)
{
	uint8_t hello[PROTO_DHELLO_LEN + PROTO_MAC_LEN], expect[PROTO_MAC_LEN];
	struct proto_dhello h;
	int ret;

	ret = chan_recv(ch, hello, sizeof(hello), NULL);
	if (ret < 0)
		return ret;
	if (proto_dhello_decode(hello, &h) < 0 || h.stream >= nstreams)
		return -PC_E_PROTO;
	ret = auth_data_mac(k, true, h.nonce, h.stream, expect);
	if (ret < 0)
		return ret;
	/* Not a byte for a connector that has not proved the key. */
	if (!crypto_equal(expect, hello + PROTO_DHELLO_LEN, PROTO_MAC_LEN))
		return -PC_E_AUTH;
	ret = auth_data_mac(k, false, h.nonce, h.stream, expect);
	if (ret == 0)
		ret = auth_send(ch, expect, sizeof(expect));
	if (ret == 0)
		*stream = h.stream;
	return ret;
}

/* HKDF-SHA256(salt "pcopy/4", IKM key, info label | suffix) */
static int auth_psk(const uint8_t key[PROTO_KEY_LEN], const char *label, const uint8_t *suffix,
		    size_t suffix_len, uint8_t psk[AUTH_PSK_LEN])
{
	static const char salt[] = "pcopy/4";
	uint8_t info[32];
	size_t n = strlen(label);

	if (n + suffix_len > sizeof(info))
		return -EINVAL;
	memcpy(info, label, n);
	if (suffix_len > 0)
		memcpy(info + n, suffix, suffix_len);
	return crypto_hkdf(key, PROTO_KEY_LEN, (const uint8_t *)salt, sizeof(salt) - 1, info,
			   n + suffix_len, psk, AUTH_PSK_LEN);
}

int auth_route_token(const uint8_t k[PROTO_KEY_LEN], uint8_t token[PROTO_ROUTE_TOKEN_LEN])
{
	uint8_t out[AUTH_PSK_LEN];
	int ret = auth_psk(k, "route token", NULL, 0, out);

	if (ret == 0)
		memcpy(token, out, PROTO_ROUTE_TOKEN_LEN);
	crypto_wipe(out, sizeof(out));
	return ret;
}

int auth_ctl_psk(const uint8_t K[PROTO_KEY_LEN], uint8_t psk[AUTH_PSK_LEN])
{
	return auth_psk(K, "control psk", NULL, 0, psk);
}

int auth_data_psk(const uint8_t k[PROTO_KEY_LEN], uint16_t stream, uint8_t psk[AUTH_PSK_LEN])
{
	uint8_t idx[2] = { (uint8_t)(stream >> 8), (uint8_t)stream };

	return auth_psk(k, "data psk", idx, sizeof(idx), psk);
}

struct auth_data_mode auth_data_mode(uint16_t req_flags)
{
	struct auth_data_mode m = { .tls = (req_flags & PROTO_REQ_ENCRYPT) != 0,
				    .cipher = TLS_CIPHER_AUTO };

	if (req_flags & PROTO_REQ_CIPHER_AES)
		m.cipher = TLS_CIPHER_AES128_GCM;
	else if (req_flags & PROTO_REQ_CIPHER_CHACHA)
		m.cipher = TLS_CIPHER_CHACHA20;
	return m;
}

uint16_t auth_data_flags(struct auth_data_mode m)
{
	if (!m.tls)
		return 0;
	return PROTO_REQ_ENCRYPT | (m.cipher == TLS_CIPHER_AES128_GCM ? PROTO_REQ_CIPHER_AES
				    : m.cipher == TLS_CIPHER_CHACHA20 ? PROTO_REQ_CIPHER_CHACHA
				    : 0);
}

/* Identity and PSK for the control channel (k NULL-free, stream 0) or a
 * data stream, then the client handshake. */
static int auth_tls_connect(int fd, uint32_t magic, const uint8_t key[PROTO_KEY_LEN],
			    uint16_t stream, enum tls_cipher cipher,
			    const _Atomic uint64_t *deadline, struct chan **out, struct pc_err *e)
{
	struct proto_psk_id pid = { .magic = magic, .version = PROTO_VERSION, .stream = stream };
	uint8_t id[PROTO_PSK_ID_LEN], psk[AUTH_PSK_LEN];
	int ret = magic == PROTO_MAGIC ? auth_ctl_psk(key, psk) : auth_data_psk(key, stream, psk);

	if (ret < 0)
		return pc_err_set(e, ret, "cannot derive a key: %s", pc_strerror(ret));
	proto_psk_id_encode(&pid, id);
	ret = tls_connect_until(fd, cipher, id, sizeof(id), psk, deadline, out, e);
	crypto_wipe(psk, sizeof(psk));
	return ret;
}

int auth_data_tls_connect(int fd, const uint8_t k[PROTO_KEY_LEN], uint16_t stream,
			  enum tls_cipher cipher, uint64_t deadline_ns, struct chan **out,
			  struct pc_err *e)
{
	_Atomic uint64_t d;

	atomic_init(&d, deadline_ns);
	return auth_tls_connect(fd, PROTO_DATA_MAGIC, k, stream, cipher, &d, out, e);
}

int auth_data_tls_connect_until(int fd, const uint8_t k[PROTO_KEY_LEN], uint16_t stream,
				enum tls_cipher cipher, const _Atomic uint64_t *deadline,
				struct chan **out, struct pc_err *e)
{
	return auth_tls_connect(fd, PROTO_DATA_MAGIC, k, stream, cipher, deadline, out, e);
}

int auth_ctl_tls_connect(int fd, const uint8_t K[PROTO_KEY_LEN], enum tls_cipher cipher,
			 uint64_t deadline_ns, struct chan **out, struct pc_err *e)
{
	_Atomic uint64_t d;

	atomic_init(&d, deadline_ns);
	return auth_tls_connect(fd, PROTO_MAGIC, K, 0, cipher, &d, out, e);
}

/* What the server's PSK lookup knows: the key, what it accepts, and the
 * index the client offered. */
struct auth_find {
	const uint8_t *key;
	uint32_t magic;          /* PROTO_MAGIC or PROTO_DATA_MAGIC */
	unsigned nstreams;       /* data: indices below it */
	uint16_t stream;         /* result */
};

/* tls_find_psk: the identity is parsed here, before anyone has proved a
 * key (fuzzed through proto_psk_id_decode in fuzz_proto). */
static int auth_find_psk(void *arg, const uint8_t *id, size_t idlen, uint8_t psk[TLS_PSK_LEN])
{
	struct auth_find *f = arg;
	struct proto_psk_id pid;

	if (proto_psk_id_decode(id, idlen, &pid) < 0 || pid.magic != f->magic)
		return -PC_E_PROTO;
	if (f->magic == PROTO_MAGIC)
		return auth_ctl_psk(f->key, psk);
	if (pid.stream >= f->nstreams)
		return -PC_E_PROTO;
	f->stream = pid.stream;
	return auth_data_psk(f->key, pid.stream, psk);
}

int auth_data_tls_accept(int fd, const uint8_t k[PROTO_KEY_LEN], unsigned nstreams,
			 uint64_t deadline_ns, uint16_t *stream, struct chan **out,
			 struct pc_err *e)
{
	struct auth_find f = { .key = k, .magic = PROTO_DATA_MAGIC, .nstreams = nstreams };
	int ret = tls_accept(fd, auth_find_psk, &f, deadline_ns, NULL, NULL, out, e);

	if (ret == 0)
		*stream = f.stream;
	return ret;
}

int auth_ctl_find_psk(void *K, const uint8_t *id, size_t idlen, uint8_t psk[TLS_PSK_LEN])
{
	struct auth_find f = { .key = K, .magic = PROTO_MAGIC };

	return auth_find_psk(&f, id, idlen, psk);
}

int auth_ctl_tls_accept(int fd, const uint8_t K[PROTO_KEY_LEN], uint64_t deadline_ns,
			struct chan **out, struct pc_err *e)
{
	struct auth_find f = { .key = K, .magic = PROTO_MAGIC };

	return tls_accept(fd, auth_find_psk, &f, deadline_ns, NULL, NULL, out, e);
}

int auth_session_key_tls(struct chan *ctl, uint8_t k[PROTO_KEY_LEN])
{
	return tls_export(ctl, AUTH_EXPORTER_SESSION, k, PROTO_KEY_LEN);
}
