// SPDX-License-Identifier: Apache-2.0
/* libFuzzer target for the control channel as a peer feeds it: ctl's
 * framing over an fd (ctl_recv, ctl_expect) and the handshakes that read
 * what a stranger sends before it has proved anything: a daemon's (and a
 * server's over a pipe) session_server_open + session_server_auth, and the
 * client's session_client_hello + session_client_ready reading a server's
 * answers.
 *
 * Input: one byte choosing the mode (enum fuzz_mode, modulo FUZZ_MODES),
 * then the bytes the peer sends, served from a memfd as the channel's read
 * side; what we answer goes to /dev/null. Each call must end with 0 or a
 * negative pcopy code and, on failure, a message in its pc_err; a frame
 * stream must never yield a message ctl_recv did not fully check (a
 * REQUEST in the ctl's own storage, an ENTRIES whose every entry reads). The
 * handshakes use fixed keys, and the nonces are random, so a peer's proof
 * never matches: the paths after a good proof are the unit and end-to-end
 * tests' business. Anything else aborts. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "roles/session.h"
#include "sys/err.h"
#include "sys/log.h"
#include "sys/platform.h"
#include "transport/chan.h"
#include "wire/ctl.h"
#include "wire/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The replay driver of ordinary builds (replay.c) runs this many generated
 * inputs rather than its usual 200,000: each input here is read through a
 * control channel from a memfd, and 200,000 of them took 115 to 175 s under
 * ASan on a busy machine, against ctest's 300 s. libFuzzer (CI's fuzz step)
 * goes further. */
extern const size_t fuzz_replay_runs;
const size_t fuzz_replay_runs = 50000;

enum fuzz_mode {
	FUZZ_FRAMES,         /* ctl_recv until the stream ends or breaks */
	FUZZ_EXPECT,         /* ctl_expect each type in handshake order */
	FUZZ_SERVER_DAEMON,  /* a daemon hearing a stranger */
	FUZZ_SERVER_PIPE,    /* a server started over ssh hearing its client */
	FUZZ_CLIENT_DAEMON,  /* a client hearing a daemon */
	FUZZ_CLIENT_PIPE,    /* a client hearing the server it started */
	FUZZ_MODES
};

/* An eventfd never signalled: the channel's interrupt fd. */
static int fuzz_quiet_fd = -1;

static const uint8_t fuzz_key[PROTO_KEY_LEN] = { 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22, 0x22 };

static void fuzz_require(int cond)
{
	if (!cond)
		abort();
}

/* A pcopy error code: negative, and named by pc_strerror. */
static void fuzz_require_code(int ret)
{
	fuzz_require(ret <= 0);
	fuzz_require(pc_strerror(ret) != NULL);
}

/* After a failed call: the pc_err must say why. */
static void fuzz_require_message(int ret, struct pc_err *e)
{
	char msg[PROTO_MAX_MSG];

	fuzz_require_code(ret);
	if (ret < 0) {
		fuzz_require(pc_err_get(e, msg, sizeof(msg)) < 0);
		fuzz_require(msg[0] != '\0');
	}
}

/* A channel that reads data[size] and writes to /dev/null, or NULL. */
static struct ctl *fuzz_ctl_new(const uint8_t *data, size_t size)
{
	int rfd = memfd_create("fuzz_ctl", MFD_CLOEXEC);
	int wfd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	struct chan *ch = NULL;
	struct ctl *c = NULL;

	if (rfd >= 0 && wfd >= 0 && platform_write_full(rfd, data, size) == 0 &&
	    lseek(rfd, 0, SEEK_SET) == 0)
		ch = chan_plain_new(rfd, wfd);
	if (ch != NULL)
		c = ctl_new(ch, "fuzz peer", false);
	if (c == NULL && ch != NULL) {
		chan_free(ch); /* closes rfd and wfd */
	} else if (c == NULL) {
		if (rfd >= 0)
			close(rfd);
		if (wfd >= 0)
			close(wfd);
	}
	return c;
}

/* A received ENTRIES reads back whole, with consecutive ids. */
static void fuzz_entries_read(const struct proto_entries *es)
{
	static struct proto_entry e;
	size_t pos = 0;
	uint32_t n = 0;
	int ret;

	while ((ret = proto_entries_next(es, &pos, &e)) == 1)
		fuzz_require(e.id == es->first_id + n++);
	fuzz_require(ret == 0 && n == es->count);
}

static void fuzz_frames(struct ctl *c)
{
	static struct proto_msg m;
	int ret;

	while ((ret = ctl_recv(c, &m)) == 0) {
		fuzz_require(m.type > 0 && m.type < PROTO_TYPE_MAX);
		fuzz_require(strcmp(proto_type_name(m.type), "?") != 0);
		fuzz_require(!ctl_pending(c));
		if (m.type == PROTO_REQUEST) {
			fuzz_require(m.u.request != NULL);
			fuzz_require(m.u.request->npaths >= 1 &&
				     m.u.request->npaths <= PROTO_MAX_PATHS);
		}
		if (m.type == PROTO_ENTRIES)
			fuzz_entries_read(&m.u.entries);
		if (m.type == PROTO_SUMS) { /* borrowed: every hash byte is in the frame */
			static uint8_t copy[PROTO_MAX_SUMS * PROTO_SUM_LEN];
			size_t n = (size_t)m.u.sums.count * PROTO_SUM_LEN;
			fuzz_require(m.u.sums.count >= 1 && m.u.sums.count <= PROTO_MAX_SUMS);
			memcpy(copy, m.u.sums.hashes, n);
			fuzz_require(memcmp(copy, m.u.sums.hashes, n) == 0);
		}
	}
	fuzz_require(ret == -PC_E_NET || ret == -PC_E_PROTO);
}

static void fuzz_expect(struct ctl *c)
{
	static const uint8_t order[] = { PROTO_HELLO, PROTO_KEY, PROTO_REQUEST, PROTO_AUTH,
					 PROTO_READY, PROTO_ENTRIES, PROTO_FILE_FAIL,
					 PROTO_FILE_END, PROTO_END, PROTO_FILE_DONE, PROTO_ACK,
					 PROTO_DONE };
	static struct proto_msg m;
	struct pc_err e;
	int ret = 0;

	pc_err_init(&e);
	static struct proto_msg again;

	for (size_t i = 0; i < sizeof(order) && ret == 0; i++) {
		ret = ctl_expect(c, order[i], &m, &e);
		fuzz_require_message(ret, &e);
		if (ret != 0)
			break;
		fuzz_require(m.type == order[i]);
		/* Put back, as the acceptor does with an early ENTRIES: the
		 * next receive gives it again without reading (what it borrows
		 * included). */
		ctl_unread(c, &m);
		fuzz_require(ctl_pending(c));
		fuzz_require(ctl_recv(c, &again) == 0 && !ctl_pending(c));
		fuzz_require(memcmp(&m, &again, sizeof(m)) == 0);
	}
	pc_err_destroy(&e);
}

static void fuzz_server(struct ctl *c, enum session_transport t)
{
	static struct proto_request req;
	struct session_hs hs;
	uint8_t k[PROTO_KEY_LEN];
	struct pc_err e;
	int ret;

	pc_err_init(&e);
	ret = session_server_open(c, t, fuzz_key, &req, &hs, &e);
	fuzz_require_message(ret, &e);
	if (ret == 0) {
		fuzz_require(req.npaths >= 1 && req.npaths <= PROTO_MAX_PATHS);
		fuzz_require(proto_request_path(&req, req.npaths - 1) != NULL);
		ret = session_server_auth(c, &hs, k, &e);
		fuzz_require_message(ret, &e);
		/* The daemon's nonce is fresh: no input can prove the key. */
		fuzz_require(t == SESSION_PIPE || ret < 0);
	}
	pc_err_destroy(&e);
}

static void fuzz_client(struct ctl *c, enum session_transport t)
{
	static struct proto_request req;
	static const uint8_t zero[PROTO_KEY_LEN];
	struct proto_ready ready;
	struct session_hs hs;
	uint8_t k[PROTO_KEY_LEN];
	struct pc_err e;
	int ret;

	memset(&req, 0, sizeof(req));
	req.role = PROTO_ROLE_SINK;
	req.streams = 2;
	req.block_size = 1u << 20;
	fuzz_require(proto_request_add_path(&req, "dst") == 0);
	pc_err_init(&e);
	ret = session_client_hello(c, t, fuzz_key, &req, &hs, &e);
	if (ret == 0)
		ret = session_client_ready(c, &hs, &ready, k, &e);
	/* Whatever came of it, no key is left in hs. */
	fuzz_require(memcmp(hs.key, zero, sizeof(zero)) == 0);
	fuzz_require_message(ret, &e);
	/* Our nonce is fresh: no daemon's proof in the input can match it. */
	fuzz_require(t == SESSION_PIPE || ret < 0);
	pc_err_destroy(&e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ctl *c;

	if (fuzz_quiet_fd < 0) {
		log_setup(LOG_QUIET, "fuzz_ctl");
		fuzz_quiet_fd = platform_event_new();
		fuzz_require(fuzz_quiet_fd >= 0);
	}
	if (size < 1)
		return 0;
	c = fuzz_ctl_new(data + 1, size - 1);
	fuzz_require(c != NULL);
	/* As a daemon bounds a stranger's handshake, and as every role
	 * watches its signalfd: a deadline that never comes, an fd that never
	 * becomes readable. */
	ctl_set_deadline(c, 600);
	ctl_set_intr(c, fuzz_quiet_fd);
	switch (data[0] % FUZZ_MODES) {
	case FUZZ_FRAMES: fuzz_frames(c); break;
	case FUZZ_EXPECT: fuzz_expect(c); break;
	case FUZZ_SERVER_DAEMON: fuzz_server(c, SESSION_DAEMON); break;
	case FUZZ_SERVER_PIPE: fuzz_server(c, SESSION_PIPE); break;
	case FUZZ_CLIENT_DAEMON: fuzz_client(c, SESSION_DAEMON); break;
	default: fuzz_client(c, SESSION_PIPE); break;
	}
	ctl_free(c);
	return 0;
}
