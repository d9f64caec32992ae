/* SPDX-License-Identifier: Apache-2.0 */
/* session: what both ends of a session do before and around the transfer:
 * the HELLO/KEY/AUTH handshake, REQUEST/READY, opening and authenticating
 * the data connections, and running the source or sink over them.
 * See docs/PROTOCOL.md for the message flow. Thread-safety: one session per
 * thread; the functions start and join any threads they need. */
#ifndef PCOPY_SESSION_H
#define PCOPY_SESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "wire/ctl.h"
#include "sys/err.h"
#include "wire/proto.h"
#include "pipeline/sink.h"
#include "pipeline/source.h"
#include "pipeline/srcfile.h"
#include "transport/chan.h"

/* How the control channel reached the server. */
enum session_transport {
	SESSION_PIPE = 1,   /* a private pipe/socketpair to a process we started: trusted */
	SESSION_DAEMON,     /* TCP to a daemon in clear (--no-encrypt): both prove knowledge
	                       of the key file's key with AUTH */
	SESSION_DAEMON_TLS, /* TCP to a daemon inside TLS 1.3 keyed by the key file's key:
	                       the TLS handshake proved both ends; no AUTH */
};

#define SESSION_CONNECT_TIMEOUT_S 30u /* to reach a peer */
#define SESSION_AUTH_TIMEOUT_S 10u   /* for a data connection's handshake */

/* A handshake's state between its two halves, on either side. */
struct session_hs {
	enum session_transport t;
	uint8_t nc[PROTO_NONCE_LEN], ns[PROTO_NONCE_LEN];
	uint8_t key[PROTO_KEY_LEN];   /* K or the pipe's KEY; wiped by the second half */
};

/* Client side, first half: sends HELLO, then KEY (pipe: a fresh random
 * key; K is ignored) and the REQUEST, all at once, and keeps in hs what
 * the second half needs. On the daemon transport K is the shared key. The
 * caller may do other work while the far end answers (the probe of the
 * direct path waits there). req is only read (it is not const because the
 * REQUEST message points at it), and must be final. Returns 0 or a
 * negative code with the detail in e (hs then holds no key). */
int session_client_hello(struct ctl *c, enum session_transport t,
			 const uint8_t K[PROTO_KEY_LEN], struct proto_request *req,
			 struct session_hs *hs, struct pc_err *e);

/* Client side, second half: reads the server's HELLO; on the daemon
 * transport its AUTH must prove K before ours goes out. Waits for READY.
 * On success *ready is the server's answer (its data port and address)
 * and k the session key. Wipes hs->key (the nonces are public). Returns 0
 * or a negative code with the detail in e. A daemon that fails after READY
 * (it could not open a path) says so with ERROR, later. */
int session_client_ready(struct ctl *c, struct session_hs *hs, struct proto_ready *ready,
			 uint8_t k[PROTO_KEY_LEN], struct pc_err *e);

/* Server side, first half: reads HELLO and answers it, reads KEY (pipe)
 * and the REQUEST, and on the daemon transport sends AUTH proving K. Nothing in
 * *req is trusted yet: the caller may only open the data listener it asks
 * for and send READY, which shortens the set-up by a round trip, before
 * session_server_auth. On failure an ERROR has been sent where that makes
 * sense, and hs holds no key. */
int session_server_open(struct ctl *c, enum session_transport t,
			const uint8_t K[PROTO_KEY_LEN], struct proto_request *req,
			struct session_hs *hs, struct pc_err *e);

/* Server side, second half: on the daemon transport, reads the client's
 * AUTH and checks it (ERROR(-1005) to a wrong one). Sets the session key k
 * and wipes hs. Returns 0 or a negative code. */
int session_server_auth(struct ctl *c, struct session_hs *hs, uint8_t k[PROTO_KEY_LEN],
			struct pc_err *e);

/* Opens req->streams data connections to host:port (in parallel), each
 * with req->window and req->family, secured as req->flags say
 * (auth_data_mode): TLS 1.3 keyed from k, the listener proved by the
 * handshake; or in clear with the DHELLO proofs of k. chans[0..n-1]
 * receive them, owned by the caller (session_close_chans), each with a
 * timeout of req->timeout_s. In clear, with pending NULL (a side that reads
 * them: the sink) it also waits for each listener's proof; a source passes
 * pending[n]: it does not wait, so its blocks follow the proof in the same
 * flight, and pending[i] receives the proof listener i owes, for the
 * source to confirm after its last block (session_run.confirm). In TLS
 * pending is not used (set it NULL). Returns 0 or a negative code (nothing
 * left open). */
int session_connect_data(const char *host, uint16_t port, const struct proto_request *req,
			 const uint8_t k[PROTO_KEY_LEN], uint8_t (*pending)[PROTO_MAC_LEN],
			 struct chan **chans, struct pc_err *e);

/* The same over sockets already connected to host:port (fds[0..streams-1],
 * all taken over, whatever happens): the handshakes only. */
int session_connect_fds(int *fds, const char *host, uint16_t port,
			const struct proto_request *req, const uint8_t k[PROTO_KEY_LEN],
			uint8_t (*pending)[PROTO_MAC_LEN], struct chan **chans, struct pc_err *e);

/* Data connections to a daemon's own port (version 5, TLS, the client
 * connecting; docs/PROTOCOL.md 6.2), opened alongside the control channel
 * so that neither their TCP connects nor their TLS handshakes cost a round
 * trip of their own:
 * - session_dial_start, once the control connection is up: starts
 *   req->streams threads, each of which connects to host:port and waits;
 * - session_dial_key, once the control channel's TLS handshake gave the
 *   session key k: each sends the route preamble of k's token and its
 *   ClientHello, and its handshake waits for the daemon, with no deadline
 *   yet (the daemon may be waiting for a FIFO's writer before it answers);
 * - session_dial_finish(go = true), once READY came: their handshakes get
 *   SESSION_AUTH_TIMEOUT_S from now, and their channels are collected in
 *   chans[0..n-1] (owned by the caller; none on failure); go = false stops
 *   and closes them all (-PC_E_ABORTED), keyed or not. d is freed either
 *   way, and req must stay valid until then.
 * All return 0 or a negative code with the detail in e; after a failed
 * start there is nothing to finish. */
struct session_dial;
int session_dial_start(const char *host, uint16_t port, const struct proto_request *req,
		       struct session_dial **d, struct pc_err *e);
int session_dial_key(struct session_dial *d, const uint8_t k[PROTO_KEY_LEN], struct pc_err *e);
int session_dial_finish(struct session_dial *d, const struct proto_request *req, bool go,
			struct chan **chans, struct pc_err *e);

/* Frees chans[0..n-1] that are set (chan_free closes their sockets) and
 * sets them to NULL. */
void session_close_chans(struct chan **chans, unsigned n);

/* Warns once if the kernel granted less socket buffer than asked for on
 * the data socket fd (chan_wfd of a data channel). */
void session_check_window(int fd, uint32_t window);

/* One side of a transfer, ready to run over connected data channels. */
struct session_run {
	enum proto_role role;         /* this side's role */
	const struct proto_request *req; /* the negotiated parameters */
	struct ctl *ctl;              /* borrowed */
	struct chan **chans;          /* [req->streams] data channels; borrowed */
	/* source that connected: [req->streams] proofs its listeners still owe
	 * (session_connect_data's pending); NULL if none. Borrowed. */
	const uint8_t (*confirm)[PROTO_MAC_LEN];
	int sigfd;                    /* -1: not watching signals */
	bool report;                  /* this side is the client: progress and per-file messages */
	unsigned progress_s;
	const struct pcopy_hooks *hooks; /* the client's display hooks; NULL: none. Borrowed */
	const char *peer;             /* names the other side in messages */
	bool peer_local;              /* the other side is our own child process */
	struct source_input *input;   /* source: what to send, borrowed; its walk options
	                                 are set from the REQUEST's flags */
	struct sink_target *target;   /* sink: borrowed */
	bool strip_setid;             /* sink: a daemon, which applies no set-id bits and
	                                 makes no devices */
	uint32_t skip_paths;          /* sink: paths of the REQUEST the peer (a server acting
	                                 as source) may SKIP; 0: the peer may not send SKIP */
	/* results */
	struct proto_stats self, other;
	unsigned failed;              /* entries not copied: failed, or skipped by the source */
	unsigned unverified;          /* of those, files -e read back other than sent */
	struct source_stream_stats streams[PROTO_MAX_STREAMS]; /* source: per stream */
};

/* Runs the source or the sink. Returns 0, -PC_E_PARTIAL, or the first fatal
 * error, with the detail in e. */
int session_transfer(struct session_run *run, struct pc_err *e);

#endif
