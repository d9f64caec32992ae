/* SPDX-License-Identifier: Apache-2.0 */
/* auth: proving knowledge of a key, on the control channel of a daemon
 * session and on every data connection (docs/PROTOCOL.md, "Authentication").
 * Pure key derivation plus blocking handshakes on a data channel (a chan,
 * which the caller owns and on which it has set a timeout).
 * Thread-safe: no shared state. */
#ifndef PCOPY_AUTH_H
#define PCOPY_AUTH_H

#include <stdbool.h>
#include <stdint.h>
#include "transport/chan.h"
#include "sys/err.h"
#include "transport/chan.h"
#include "transport/tls.h"
#include "wire/proto.h"

/* MAC for the daemon control handshake: HMAC(K, label | nonce_c | nonce_s),
 * label "pcopy ctl C" when client is true, else "pcopy ctl S".
 * Returns 0 or a negative code. */
int auth_ctl_mac(const uint8_t K[PROTO_KEY_LEN], bool client,
		 const uint8_t nonce_c[PROTO_NONCE_LEN], const uint8_t nonce_s[PROTO_NONCE_LEN],
		 uint8_t mac[PROTO_MAC_LEN]);

/* Session key k = HMAC(K, "pcopy session" | nonce_c | nonce_s). */
int auth_session_key(const uint8_t K[PROTO_KEY_LEN], const uint8_t nonce_c[PROTO_NONCE_LEN],
		     const uint8_t nonce_s[PROTO_NONCE_LEN], uint8_t k[PROTO_KEY_LEN]);

/* Data handshake (docs/PROTOCOL.md 6.1), one flight each way: the
 * connector sends DHELLO and its proof, the listener checks it and answers
 * with its own proof, bound to the connector's fresh nonce.
 *
 * Connector side, on ch for stream index `stream` with session key k:
 * sends DHELLO and the proof in one write and does not wait, so a
 * connector that is the source may write blocks at once. expect receives
 * the proof the listener will send; the caller checks it with
 * auth_data_confirm before it trusts the connection: at once if it is
 * going to read from it, or after its last block if it only writes.
 * Returns 0 or a negative code. */
int auth_data_connect(struct chan *ch, const uint8_t k[PROTO_KEY_LEN], uint16_t stream,
		      uint8_t expect[PROTO_MAC_LEN]);

/* Connector side: reads the listener's proof and compares it with expect
 * in constant time. Returns 0, -PC_E_AUTH if it is wrong, or a negative I/O
 * code (-PC_E_NET if the listener hung up without one). */
int auth_data_confirm(struct chan *ch, const uint8_t expect[PROTO_MAC_LEN]);

/* Listener side: reads the connector's hello and proof and checks it; only
 * then proves itself. On success sets *stream (< nstreams) and returns 0;
 * -PC_E_AUTH for a wrong proof (nothing was sent), -PC_E_PROTO for garbage
 * or an index out of range, or a negative I/O code. The caller sets a
 * timeout on ch beforehand (chan_set_timeout) so a silent stranger cannot
 * stall it. */
int auth_data_accept(struct chan *ch, const uint8_t k[PROTO_KEY_LEN], unsigned nstreams,
		     uint16_t *stream);

/* ---- Version 4: TLS 1.3 with external PSKs (docs/PROTOCOL.md 5.3, 6.1) ---- */

#define AUTH_PSK_LEN 32u
/* The label of the TLS exporter that gives a daemon session its key k. */
#define AUTH_EXPORTER_SESSION "EXPORTER-pcopy/4 session key"

/* The PSK of a daemon's control channel: HKDF-SHA256(salt "pcopy/4",
 * IKM K, info "control psk"). Its identity is PROTO_MAGIC, version,
 * stream 0 (proto_psk_id). Returns 0 or a negative code. */
int auth_ctl_psk(const uint8_t K[PROTO_KEY_LEN], uint8_t psk[AUTH_PSK_LEN]);

/* The PSK of data channel `stream` of the session whose key is k:
 * HKDF-SHA256(salt "pcopy/4", IKM k, info "data psk" | stream as u16 BE).
 * Bound to the session (k) and to the index, so a connection proved for
 * one is useless for any other. */
int auth_data_psk(const uint8_t k[PROTO_KEY_LEN], uint16_t stream, uint8_t psk[AUTH_PSK_LEN]);

/* The token a data connection to a daemon names its session with (the
 * route preamble, proto_route_encode): the first PROTO_ROUTE_TOKEN_LEN
 * bytes of HKDF-SHA256(salt "pcopy/4", IKM k, info "route token"). It
 * travels in clear and proves nothing: only the stream's TLS handshake,
 * keyed by auth_data_psk, does. Returns 0 or a negative code. */
int auth_route_token(const uint8_t k[PROTO_KEY_LEN], uint8_t token[PROTO_ROUTE_TOKEN_LEN]);

/* How a session's data connections prove themselves and travel, from its
 * REQUEST's flags: TLS 1.3 with ENCRYPT (the connector offering the
 * cipher the flags name, or both), else in clear with the DHELLO proofs. */
struct auth_data_mode {
	bool tls;
	enum tls_cipher cipher;
};

struct auth_data_mode auth_data_mode(uint16_t req_flags);

/* The REQUEST flags that ask for mode m. */
uint16_t auth_data_flags(struct auth_data_mode m);

/* Data connection `stream` as the TLS client on the connected socket fd:
 * offers the stream's identity and PSK (auth_data_psk of k). On success
 * *out owns fd, and the listener has proved the same k and index; on
 * failure fd is still the caller's. Gives up at deadline_ns (absolute,
 * platform_now_ns). Errors as tls_connect, with the message in e. */
int auth_data_tls_connect(int fd, const uint8_t k[PROTO_KEY_LEN], uint16_t stream,
			  enum tls_cipher cipher, uint64_t deadline_ns, struct chan **out,
			  struct pc_err *e);
/* The same with a deadline another thread may set meanwhile
 * (tls_connect_until: TLS_DEADLINE_LATER until then). */
int auth_data_tls_connect_until(int fd, const uint8_t k[PROTO_KEY_LEN], uint16_t stream,
				enum tls_cipher cipher, const _Atomic uint64_t *deadline,
				struct chan **out, struct pc_err *e);

/* The listener's side: accepts only a data identity of our version whose
 * index is below nstreams, with the PSK of that index under k. *stream is
 * the index the client proved. Ownership, deadline and errors as
 * tls_accept. */
int auth_data_tls_accept(int fd, const uint8_t k[PROTO_KEY_LEN], unsigned nstreams,
			 uint64_t deadline_ns, uint16_t *stream, struct chan **out,
			 struct pc_err *e);

/* The PSK lookup of a daemon's control channel, for tls_accept_begin:
 * arg is the key file's key (PROTO_KEY_LEN bytes, outliving the
 * handshake). Accepts only the control identity of our version. */
int auth_ctl_find_psk(void *K, const uint8_t *id, size_t idlen, uint8_t psk[TLS_PSK_LEN]);

/* A daemon's control channel in TLS: the client offers the control
 * identity and auth_ctl_psk(K); the daemon accepts only that identity.
 * Ownership, deadline and errors as tls_connect/tls_accept. */
int auth_ctl_tls_connect(int fd, const uint8_t K[PROTO_KEY_LEN], enum tls_cipher cipher,
			 uint64_t deadline_ns, struct chan **out, struct pc_err *e);
int auth_ctl_tls_accept(int fd, const uint8_t K[PROTO_KEY_LEN], uint64_t deadline_ns,
			struct chan **out, struct pc_err *e);

/* The session key k of a daemon session whose control channel is TLS: the
 * TLS exporter with label AUTH_EXPORTER_SESSION. Both ends get the same
 * bytes, which depend on the (EC)DHE secret of this connection, so a later
 * theft of K does not reveal k. Returns 0 or a negative code. */
int auth_session_key_tls(struct chan *ctl, uint8_t k[PROTO_KEY_LEN]);

#endif
