/* auth: control and data channel proofs of key possession. */
#include "auth.h"

#include <string.h>
#include <sys/uio.h>

#include "crypto.h"
#include "err.h"
#include "platform.h"

static int auth_mac3(const uint8_t key[PROTO_KEY_LEN], const char *label,
		     const uint8_t a[PROTO_NONCE_LEN], const uint8_t b[PROTO_NONCE_LEN],
		     const uint8_t *extra, size_t extra_len, uint8_t out[PROTO_MAC_LEN])
{
	struct iovec iov[4] = {
		{ .iov_base = (void *)(uintptr_t)label, .iov_len = strlen(label) },
		{ .iov_base = (void *)(uintptr_t)a, .iov_len = PROTO_NONCE_LEN },
		{ .iov_base = (void *)(uintptr_t)b, .iov_len = PROTO_NONCE_LEN },
		{ .iov_base = (void *)(uintptr_t)extra, .iov_len = extra_len },
	};

	return crypto_hmac(key, PROTO_KEY_LEN, iov, extra_len ? 4 : 3, out);
}

int auth_ctl_mac(const uint8_t K[PROTO_KEY_LEN], bool client,
		 const uint8_t nonce_c[PROTO_NONCE_LEN], const uint8_t nonce_s[PROTO_NONCE_LEN],
		 uint8_t mac[PROTO_MAC_LEN])
{
	return auth_mac3(K, client ? "pcopy ctl C" : "pcopy ctl S", nonce_c, nonce_s, NULL, 0,
			 mac);
}

int auth_session_key(const uint8_t K[PROTO_KEY_LEN], const uint8_t nonce_c[PROTO_NONCE_LEN],
		     const uint8_t nonce_s[PROTO_NONCE_LEN], uint8_t k[PROTO_KEY_LEN])
{
	return auth_mac3(K, "pcopy session", nonce_c, nonce_s, NULL, 0, k);
}

static int auth_data_mac(const uint8_t k[PROTO_KEY_LEN], bool connector,
			 const uint8_t nc[PROTO_NONCE_LEN], const uint8_t nl[PROTO_NONCE_LEN],
			 uint16_t stream, uint8_t mac[PROTO_MAC_LEN])
{
	uint8_t idx[2] = { (uint8_t)(stream >> 8), (uint8_t)stream };

	return auth_mac3(k, connector ? "pcopy data C" : "pcopy data L", nc, nl, idx,
			 sizeof(idx), mac);
}

int auth_data_connect(int fd, const uint8_t k[PROTO_KEY_LEN], uint16_t stream)
{
	struct proto_dhello h = { .magic = PROTO_DATA_MAGIC, .version = PROTO_VERSION,
				  .stream = stream };
	uint8_t hello[PROTO_DHELLO_LEN], reply[PROTO_NONCE_LEN + PROTO_MAC_LEN];
	uint8_t expect[PROTO_MAC_LEN], mac[PROTO_MAC_LEN];
	int ret;

	ret = crypto_random(h.nonce, sizeof(h.nonce));
	if (ret < 0)
		return ret;
	proto_dhello_encode(&h, hello);
	ret = platform_write_full(fd, hello, sizeof(hello));
	if (ret < 0)
		return ret;
	ret = platform_read_full(fd, reply, sizeof(reply), NULL);
	if (ret < 0)
		return ret;
	ret = auth_data_mac(k, false, h.nonce, reply, stream, expect);
	if (ret < 0)
		return ret;
	if (!crypto_equal(expect, reply + PROTO_NONCE_LEN, PROTO_MAC_LEN))
		return -PC_E_AUTH;
	ret = auth_data_mac(k, true, h.nonce, reply, stream, mac);
	if (ret < 0)
		return ret;
	return platform_write_full(fd, mac, sizeof(mac));
}

int auth_data_accept(int fd, const uint8_t k[PROTO_KEY_LEN], unsigned nstreams, uint16_t *stream)
{
	uint8_t hello[PROTO_DHELLO_LEN], reply[PROTO_NONCE_LEN + PROTO_MAC_LEN];
	uint8_t expect[PROTO_MAC_LEN], mac[PROTO_MAC_LEN];
	struct proto_dhello h;
	int ret;

	ret = platform_read_full(fd, hello, sizeof(hello), NULL);
	if (ret < 0)
		return ret;
	if (proto_dhello_decode(hello, &h) < 0 || h.stream >= nstreams)
		return -PC_E_PROTO;
	ret = crypto_random(reply, PROTO_NONCE_LEN);
	if (ret < 0)
		return ret;
	ret = auth_data_mac(k, false, h.nonce, reply, h.stream, reply + PROTO_NONCE_LEN);
	if (ret < 0)
		return ret;
	ret = platform_write_full(fd, reply, sizeof(reply));
	if (ret < 0)
		return ret;
	ret = platform_read_full(fd, mac, sizeof(mac), NULL);
	if (ret < 0)
		return ret;
	ret = auth_data_mac(k, true, h.nonce, reply, h.stream, expect);
	if (ret < 0)
		return ret;
	if (!crypto_equal(expect, mac, PROTO_MAC_LEN))
		return -PC_E_AUTH;
	*stream = h.stream;
	return 0;
}
