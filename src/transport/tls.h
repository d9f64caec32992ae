/* SPDX-License-Identifier: Apache-2.0 */
/* tls: TLS 1.3 channels keyed by external pre-shared keys (RFC 8446 4.2.11),
 * so that there are no certificates to manage. Only TLS 1.3, only
 * psk_dhe_ke (every connection does an (EC)DHE exchange: forward secrecy),
 * no session tickets, no early data, only the two SHA-256 suites. The
 * module knows nothing of pcopy's keys: the caller gives the identity and
 * the key (client) or a function that finds the key for an identity
 * (server). The only file besides sys/crypto.c that includes OpenSSL.
 * Thread-safe: contexts are shared, each connection is its own.
 * OpenSSL writes to the socket with write(2): a process using this module
 * ignores SIGPIPE (platform_signals_setup does), or a peer that vanishes
 * kills it instead of giving -EPIPE. */
#ifndef PCOPY_TLS_H
#define PCOPY_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sys/err.h"
#include "transport/chan.h"

#define TLS_PSK_LEN 32u
#define TLS_MAX_IDENTITY 64u

enum tls_cipher {
	TLS_CIPHER_AUTO = 0,    /* AES-128-GCM first where the CPU has AES instructions */
	TLS_CIPHER_AES128_GCM,
	TLS_CIPHER_CHACHA20,    /* ChaCha20-Poly1305 */
};

/* "auto", "aes128-gcm" or "chacha20-poly1305" (--cipher). An unknown name
 * is -PC_E_USAGE with a message that names the option and the choices. */
int tls_cipher_parse(const char *s, enum tls_cipher *out, struct pc_err *e);

/* The name tls_cipher_parse takes for c. */
const char *tls_cipher_name(enum tls_cipher c);

/* Whether this CPU has AES instructions (x86 AES-NI, Armv8 AES). */
bool tls_cpu_has_aes(void);

/* The server's side of PSK selection: fills psk for the identity id[idlen]
 * the client offered and returns 0, or returns a negative code when it
 * knows no such identity (the handshake then fails). Runs on the thread
 * inside tls_accept. */
typedef int (*tls_find_psk)(void *arg, const uint8_t *id, size_t idlen,
			    uint8_t psk[TLS_PSK_LEN]);

/* Client handshake on the connected socket fd, offering the one PSK
 * identity id[idlen] (at most TLS_MAX_IDENTITY bytes) with key psk.
 * cipher AUTO offers both suites in the order that suits this CPU; another
 * value offers only that one. Gives up at deadline_ns (platform_now_ns
 * clock; 0: never) however the peer trickles its bytes. On success *out
 * owns fd; on failure fd is still the caller's. Errors, each with a message
 * in e: -PC_E_AUTH (the server does not know our key, or proved another),
 * -PC_E_PROTO (the peer does not speak TLS 1.3: an older pcopy, or not
 * pcopy), -PC_E_TIMEOUT, -PC_E_NET (closed or reset). */
int tls_connect(int fd, enum tls_cipher cipher, const uint8_t *id, size_t idlen,
		const uint8_t psk[TLS_PSK_LEN], uint64_t deadline_ns, struct chan **out,
		struct pc_err *e);

/* The same, with a deadline another thread may set while the handshake
 * runs: TLS_DEADLINE_LATER means none yet (the waits look again every
 * 100 ms), and setting a past time (1) ends it with -PC_E_TIMEOUT. For
 * data connections that say their ClientHello before the far end may
 * answer (it is still opening the files), and must not give up meanwhile. */
#define TLS_DEADLINE_LATER UINT64_MAX
int tls_connect_until(int fd, enum tls_cipher cipher, const uint8_t *id, size_t idlen,
		      const uint8_t psk[TLS_PSK_LEN], const _Atomic uint64_t *deadline,
		      struct chan **out, struct pc_err *e);

/* Server handshake on the accepted socket fd; find(arg, ...) gives the key
 * for the identity offered. id_out (TLS_MAX_IDENTITY bytes, may be NULL)
 * and *idlen_out receive the identity the client proved. Deadline,
 * ownership and errors as tls_connect. */
int tls_accept(int fd, tls_find_psk find, void *arg, uint64_t deadline_ns,
	       uint8_t *id_out, size_t *idlen_out, struct chan **out, struct pc_err *e);

/* A server handshake driven by its owner's poll, for a process that must
 * not wait on one peer (the daemon's parent, with many strangers at once):
 * - tls_accept_begin makes it on the accepted socket fd (made
 *   non-blocking), find and arg as tls_accept's, which must outlive it;
 * - tls_accept_step runs it as far as it goes without waiting: 1 when it
 *   is done and the peer proved the key, 0 when it waits (*events says
 *   for POLLIN or POLLOUT on fd), or a negative code with the reason in e
 *   (as tls_accept's);
 * - tls_accept_chan, after step returned 1, makes the chan (it owns fd and
 *   the connection; a is freed), or NULL on ENOMEM (a untouched);
 * - tls_accepting_free drops a, sending nothing and leaving fd open: for
 *   a failed or abandoned handshake, and in a parent that forked a child
 *   to go on with its copy of a.
 * The deadline is the owner's to keep. */
struct tls_accepting;
int tls_accept_begin(int fd, tls_find_psk find, void *arg, struct tls_accepting **a,
		     struct pc_err *e);
int tls_accept_step(struct tls_accepting *a, short *events, struct pc_err *e);
struct chan *tls_accept_chan(struct tls_accepting *a);
void tls_accepting_free(struct tls_accepting *a);

/* Keying material exported from the TLS session (RFC 8446 7.5, no
 * context): both ends get the same bytes, which nobody else can compute,
 * even one who later learns the PSK. -EINVAL for a channel in clear. */
int tls_export(struct chan *c, const char *label, uint8_t *out, size_t len);

/* The (EC)DHE group the handshake of c used ("X25519"), into name[cap]:
 * 0, -ENOENT if it did none (psk_ke: never offered nor accepted here), or
 * -EINVAL for a channel in clear. For -v and the tests. */
int tls_kex_group(struct chan *c, char *name, size_t cap);

/* Kernel TLS on this machine, for -v: "on", or why not ("the kernel has no
 * tls module", "this OpenSSL was built without it"). */
const char *tls_ktls_status(void);

#endif
