/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for what a daemon and a data listener parse before
 * anyone has proved a key, in protocol version 7 (as in 4, 5 and 6): a TLS ClientHello (parsed
 * by OpenSSL), and in it the PSK identity, which pcopy's lookup
 * (auth_find_psk in wire/auth.c, through proto_psk_id_decode) reads to
 * choose a key.
 *
 * The first input byte picks the listener: even, a daemon's control
 * channel (auth_ctl_tls_accept); odd, a data listener of 8 streams
 * (auth_data_tls_accept). The rest is what the client sends, written into
 * a socketpair whose other end runs the server's handshake; then the
 * client's end hangs up. Both keys are fixed, but a handshake cannot
 * complete without the client's Finished, which needs the server's fresh
 * random: every input must be refused, promptly, and leave nothing open.
 * The seeds (seeds/fuzz_tls) are real ClientHellos of tls_connect for the
 * control identity and data identities 0 and 7 (fuzz_mkseeds). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sys/err.h"
#include "sys/platform.h"
#include "transport/chan.h"
#include "wire/auth.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The replay driver of ordinary builds (replay.c) runs this many generated
 * inputs rather than its usual 200,000: each input here makes a socketpair
 * and runs a server's TLS handshake on it, some 100 times slower than a
 * parser (200,000 took 26 s in a release build, and ran past ctest's 300 s
 * under ASan on a busy machine). */
extern const size_t fuzz_replay_runs;
const size_t fuzz_replay_runs = 50000;

/* What a ClientHello can be; larger inputs are cut. */
#define FUZZ_TLS_MAX 16384u

static void fuzz_require(int cond)
{
	if (!cond)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint8_t key[PROTO_KEY_LEN] = {
		0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
		0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
		0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
	};
	struct chan *ch = NULL;
	uint16_t stream = 0xffff;
	struct pc_err e;
	int sv[2], ret;

	if (size < 1)
		return 0;
	bool ctl = (data[0] & 1) == 0;
	size_t len = size - 1 < FUZZ_TLS_MAX ? size - 1 : FUZZ_TLS_MAX;
	fuzz_require(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0);
	fuzz_require(platform_write_full(sv[0], data + 1, len) == 0);
	fuzz_require(shutdown(sv[0], SHUT_WR) == 0);
	pc_err_init(&e);
	uint64_t deadline = platform_now_ns() + 2000000000ull;
	if (ctl)
		ret = auth_ctl_tls_accept(sv[1], key, deadline, &ch, &e);
	else
		ret = auth_data_tls_accept(sv[1], key, 8, deadline, &stream, &ch, &e);
	/* No proof of the key without the server's random: always refused,
	 * with a reason, before the deadline, and the fd back to us. */
	fuzz_require(ret < 0 && ret != -PC_E_TIMEOUT && ch == NULL && stream == 0xffff);
	fuzz_require(pc_err_get(&e, NULL, 0) < 0);
	pc_err_destroy(&e);
	close(sv[1]);
	close(sv[0]);
	return 0;
}
