/* SPDX-License-Identifier: Apache-2.0 */
/* libFuzzer target for codec: block payloads as a hostile peer sends them.
 *
 * Input: codec id (u8; ids past the last codec must be unknown to
 * codec_by_id and are then taken modulo CODEC_COUNT), raw_len (u24,
 * big-endian, capped at FUZZ_MAX_RAW), then the encoded payload. It is
 * decoded into a buffer of raw_len bytes followed by a guard: AddressSanitizer
 * sees the guard as poisoned (so for instrumented code the buffer is exactly
 * raw_len), and its pattern is checked afterwards, which also catches writes
 * by the system's uninstrumented zlib, liblz4 and libbz2. Decoding may only
 * succeed or return -PC_E_INTEGRITY; when it succeeds, encoding the output
 * and decoding that again must give the same bytes. Anything else aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "sys/err.h"

#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_ASAN 1
#endif
#endif
#ifdef FUZZ_ASAN
#include <sanitizer/asan_interface.h>
#else
#define ASAN_POISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#define ASAN_UNPOISON_MEMORY_REGION(p, n) ((void)(p), (void)(n))
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The replay driver of ordinary builds (replay.c) runs this many generated
 * inputs rather than its usual 200,000: each input here may decode and
 * then compress and decode again up to 256 KiB (bzip2 among the codecs),
 * and 200,000 of them took 150 to 200 s under ASan, next to ctest's 300 s,
 * which a busy CI machine passed. libFuzzer (CI's fuzz step) goes further. */
extern const size_t fuzz_replay_runs;
const size_t fuzz_replay_runs = 50000;

#define FUZZ_HDR_LEN 4u
#define FUZZ_MAX_RAW (256u << 10)
#define FUZZ_GUARD 64u
#define FUZZ_GUARD_BYTE 0xa5

/* One ctx per codec, kept across inputs as a worker thread keeps its own. */
static void *fuzz_ctx[CODEC_COUNT];

static void fuzz_require(int cond)
{
	if (!cond)
		abort();
}

/* raw[raw_len] decoded fine: it must survive a round trip. */
static void fuzz_recode(const struct codec *c, void *ctx, const uint8_t *raw, size_t raw_len)
{
	size_t cap = c->bound(raw_len), elen = 0;
	uint8_t *enc = malloc(cap);
	uint8_t *dec = raw_len > 0 ? malloc(raw_len) : NULL;

	if (enc != NULL && (dec != NULL || raw_len == 0)) {
		fuzz_require(c->compress(ctx, raw, raw_len, enc, cap, &elen) == 0);
		fuzz_require(elen <= cap);
		fuzz_require(c->decompress(ctx, enc, elen, dec, raw_len) == 0);
		fuzz_require(raw_len == 0 || memcmp(dec, raw, raw_len) == 0);
	}
	free(enc);
	free(dec);
}

/* Decodes into buf[raw_len] with the guard behind it; checks the guard. */
static int fuzz_decode(const struct codec *c, void *ctx, const uint8_t *src, size_t len,
		       uint8_t *buf, size_t raw_len)
{
	uint8_t *guard = buf + raw_len;
	int ret;

	memset(guard, FUZZ_GUARD_BYTE, FUZZ_GUARD);
	ASAN_POISON_MEMORY_REGION(guard, FUZZ_GUARD);
	/* dst may be NULL when raw_len is 0: pass NULL to check that. */
	ret = c->decompress(ctx, src, len, raw_len > 0 ? buf : NULL, raw_len);
	ASAN_UNPOISON_MEMORY_REGION(guard, FUZZ_GUARD);
	for (size_t i = 0; i < FUZZ_GUARD; i++)
		fuzz_require(guard[i] == FUZZ_GUARD_BYTE);
	fuzz_require(ret == 0 || ret == -PC_E_INTEGRITY);
	return ret;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const struct codec *c;
	uint8_t *dst;
	size_t raw_len;
	void *ctx;

	if (size < FUZZ_HDR_LEN)
		return 0;
	c = codec_by_id(data[0]);
	fuzz_require((c == NULL) == (data[0] >= CODEC_COUNT));
	if (c == NULL)
		c = codec_by_id(data[0] % CODEC_COUNT);
	raw_len = (size_t)data[1] << 16 | (size_t)data[2] << 8 | data[3];
	if (raw_len > FUZZ_MAX_RAW)
		raw_len = FUZZ_MAX_RAW;
	if (fuzz_ctx[c->id] == NULL)
		fuzz_ctx[c->id] = c->ctx_new(c->default_level);
	ctx = fuzz_ctx[c->id];
	dst = malloc(raw_len + FUZZ_GUARD);
	if (ctx != NULL && dst != NULL &&
	    fuzz_decode(c, ctx, data + FUZZ_HDR_LEN, size - FUZZ_HDR_LEN, dst, raw_len) == 0)
		fuzz_recode(c, ctx, dst, raw_len);
	free(dst);
	return 0;
}
