/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for encoder and decoder: zero detection, holes, compression
 * only when it pays, the skip mode for incompressible files and its probes,
 * and decoding (round trips and refusal of bad payloads). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pipeline/bufpool.h"
#include "codec/codec.h"
#include "pipeline/decoder.h"
#include "pipeline/encoder.h"
#include "sys/err.h"

#define BLOCK (128u << 10)

/* ---- encoder_is_zero --------------------------------------------------- */

static void test_is_zero_small(void **state)
{
	uint8_t z[16] = { 0 };
	uint8_t one = 1;

	(void)state;
	assert_true(encoder_is_zero(z, 0));
	assert_true(encoder_is_zero(&one, 0));
	assert_true(encoder_is_zero(z, 1));
	assert_false(encoder_is_zero(&one, 1));
	/* Every position of every length below and at the 16-byte shortcut. */
	for (size_t len = 1; len <= sizeof(z); len++) {
		assert_true(encoder_is_zero(z, len));
		for (size_t i = 0; i < len; i++) {
			z[i] = 0x80;
			if (encoder_is_zero(z, len))
				fail_msg("len %zu: nonzero byte at %zu not seen", len, i);
			z[i] = 0;
		}
	}
}

static void test_is_zero_large(void **state)
{
	const size_t len = 1u << 20;
	const size_t pos[] = { 0, 1, 2, len / 2 - 1, len / 2, len / 2 + 1, 12345, len - 2,
			       len - 1 };
	uint8_t *z = calloc(1, len);

	(void)state;
	assert_non_null(z);
	assert_true(encoder_is_zero(z, len));
	for (size_t i = 0; i < sizeof(pos) / sizeof(pos[0]); i++) {
		z[pos[i]] = 1;
		if (encoder_is_zero(z, len))
			fail_msg("nonzero byte at %zu not seen", pos[i]);
		/* The byte just outside the range does not count. */
		if (pos[i] > 0 && !encoder_is_zero(z, pos[i]))
			fail_msg("byte at %zu seen in a range of %zu bytes", pos[i], pos[i]);
		z[pos[i]] = 0;
	}
	free(z);
}

/* ---- Helpers ----------------------------------------------------------- */

/* The pool buffer size for BLOCK: the largest codec bound. */
static size_t buf_cap(void)
{
	size_t cap = BLOCK;
	const struct codec *all[] = { &codec_none, &codec_zlib, &codec_lz4, &codec_bz2 };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		if (all[i]->bound(BLOCK) > cap)
			cap = all[i]->bound(BLOCK);
	return cap;
}

/* xorshift64: incompressible, reproducible. */
static void fill_random(uint8_t *p, size_t len, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;

	for (size_t i = 0; i < len; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)(x >> 32);
	}
}

/* Log-like text: compresses well with any codec. */
static void fill_text(uint8_t *p, size_t len, unsigned salt)
{
	static const char *const words[] = { "copy", "block", "stream", "file", "offset",
					     "socket", "thread", "queue" };
	size_t n = 0;
	unsigned line = 0;

	while (n < len) {
		char tmp[128];
		int w = snprintf(tmp, sizeof(tmp), "%06u %s %s: moved %u bytes of %s\n",
				 line + salt, words[line % 8], words[(line / 8) % 8],
				 (line * 37) % 4096, words[(line / 3) % 8]);
		size_t k = (size_t)w < len - n ? (size_t)w : len - n;

		memcpy(p + n, tmp, k);
		n += k;
		line++;
	}
}

struct fixture {
	struct encoder *enc;
	struct decoder *dec;
	struct enc_file ef;
	struct buf b;
	uint8_t *want;        /* the raw bytes of the last block loaded */
	size_t cap;
};

static int setup(void **state)
{
	struct fixture *fx = calloc(1, sizeof(*fx));

	if (fx == NULL)
		return -1;
	fx->cap = buf_cap();
	fx->enc = encoder_new(fx->cap);
	fx->dec = decoder_new(fx->cap);
	fx->b.data = bufpool_alloc_data(fx->cap);
	fx->b.cap = fx->cap;
	fx->want = malloc(BLOCK);
	if (fx->enc == NULL || fx->dec == NULL || fx->b.data == NULL || fx->want == NULL) {
		encoder_free(fx->enc);
		decoder_free(fx->dec);
		bufpool_free_data(fx->b.data);
		free(fx->want);
		free(fx);
		return -1;
	}
	enc_file_init(&fx->ef);
	*state = fx;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *fx = *state;

	encoder_free(fx->enc);
	decoder_free(fx->dec);
	/* Whatever area the buffer holds after the swaps. */
	bufpool_free_data(fx->b.data);
	free(fx->want);
	free(fx);
	return 0;
}

enum kind { ZEROS, RANDOM, TEXT };

/* Fills the buffer with one raw block of len bytes, as a reader does. */
static void load(struct fixture *fx, enum kind k, size_t len, unsigned seed)
{
	assert_true(len <= BLOCK);
	if (k == ZEROS)
		memset(fx->want, 0, len);
	else if (k == RANDOM)
		fill_random(fx->want, len, seed);
	else
		fill_text(fx->want, len, seed);
	memcpy(fx->b.data, fx->want, len);
	fx->b.len = len;
	memset(&fx->b.hdr, 0, sizeof(fx->b.hdr));
	fx->b.hdr.type = PROTO_BLK_DATA;
	fx->b.hdr.raw_len = (uint32_t)len;
}

static int encode(struct fixture *fx, enum codec_id id, int level)
{
	const struct codec_choice c = { id, level };

	return encoder_run(fx->enc, &fx->b, &c, &fx->ef);
}

static void expect_raw(const struct fixture *fx, size_t len)
{
	assert_int_equal(fx->b.hdr.codec, CODEC_NONE);
	assert_int_equal(fx->b.hdr.flags & PROTO_BLK_HOLE, 0);
	assert_int_equal(fx->b.len, len);
	assert_int_equal(fx->b.hdr.enc_len, len);
	assert_memory_equal(fx->b.data, fx->want, len);
}

/* Decodes the buffer and compares it with the raw block. */
static void expect_round_trip(struct fixture *fx, size_t len)
{
	assert_int_equal(decoder_run(fx->dec, &fx->b), 0);
	assert_int_equal(fx->b.len, len);
	assert_memory_equal(fx->b.data, fx->want, len);
}

/* ---- encoder_run: holes and raw blocks --------------------------------- */

static void test_none_hole(void **state)
{
	struct fixture *fx = *state;

	load(fx, ZEROS, BLOCK, 0);
	assert_int_equal(encode(fx, CODEC_NONE, 0), 0);
	assert_true(fx->b.hdr.flags & PROTO_BLK_HOLE);
	assert_int_equal(fx->b.len, 0);
	assert_int_equal(fx->b.hdr.enc_len, 0);
	assert_int_equal(fx->b.hdr.codec, CODEC_NONE);
	assert_int_equal(fx->b.hdr.raw_len, BLOCK);
	assert_int_equal(encoder_stats(fx->enc)->holes, 1);

	/* A short zero block (a file's tail) too, and with a codec. */
	load(fx, ZEROS, 1000, 0);
	assert_int_equal(encode(fx, CODEC_ZLIB, 1), 0);
	assert_true(fx->b.hdr.flags & PROTO_BLK_HOLE);
	assert_int_equal(fx->b.len, 0);
	assert_int_equal(encoder_stats(fx->enc)->holes, 2);
	assert_int_equal(encoder_stats(fx->enc)->compressed, 0);
}

/* A PACK of small files all of zeros (their statuses are 0 too) is no
 * hole: the sink refuses HOLE on a PACK, and the statuses must arrive. It
 * is sent raw without a codec, and compressed with one. */
static void test_pack_of_zeros_is_no_hole(void **state)
{
	struct fixture *fx = *state;

	load(fx, ZEROS, 4 + 1, 0); /* one status and one byte 0x00 */
	fx->b.hdr.type = PROTO_BLK_PACK;
	fx->b.hdr.offset = 1;
	assert_int_equal(encode(fx, CODEC_NONE, 0), 0);
	expect_raw(fx, 5);
	assert_int_equal(encoder_stats(fx->enc)->holes, 0);

	load(fx, ZEROS, 4 * 100 + 100000, 0);
	fx->b.hdr.type = PROTO_BLK_PACK;
	fx->b.hdr.offset = 100;
	assert_int_equal(encode(fx, CODEC_ZLIB, 1), 0);
	assert_int_equal(fx->b.hdr.flags & PROTO_BLK_HOLE, 0);
	assert_int_equal(fx->b.hdr.codec, CODEC_ZLIB);
	assert_true(fx->b.len > 0 && fx->b.len < 4 * 100 + 100000);
	assert_int_equal(encoder_stats(fx->enc)->holes, 0);
	expect_round_trip(fx, 4 * 100 + 100000);
}

static void test_none_leaves_data_raw(void **state)
{
	struct fixture *fx = *state;
	const struct enc_stats *st = encoder_stats(fx->enc);

	load(fx, RANDOM, BLOCK, 1);
	assert_int_equal(encode(fx, CODEC_NONE, 0), 0);
	expect_raw(fx, BLOCK);
	/* Text too: NONE never compresses, and does not count as "raw
	 * although compression was on". */
	load(fx, TEXT, BLOCK, 0);
	assert_int_equal(encode(fx, CODEC_NONE, 0), 0);
	expect_raw(fx, BLOCK);
	assert_int_equal(st->holes, 0);
	assert_int_equal(st->compressed, 0);
	assert_int_equal(st->raw, 0);
	/* A raw block decodes to itself. */
	expect_round_trip(fx, BLOCK);
}

/* ---- encoder_run + decoder_run: compression ---------------------------- */

static void round_trip_codec(struct fixture *fx, enum codec_id id, int level)
{
	const struct enc_stats *st = encoder_stats(fx->enc);
	uint64_t before = st->compressed;

	load(fx, TEXT, BLOCK, (unsigned)id);
	assert_int_equal(encode(fx, id, level), 0);
	if (fx->b.hdr.codec != id)
		fail_msg("%s:%d: text block not compressed", codec_by_id(id)->name, level);
	assert_int_equal(fx->b.hdr.flags & PROTO_BLK_HOLE, 0);
	assert_int_equal(fx->b.hdr.raw_len, BLOCK);
	assert_int_equal(fx->b.len, fx->b.hdr.enc_len);
	assert_true(fx->b.hdr.enc_len > 0);
	assert_true(fx->b.hdr.enc_len < BLOCK);
	assert_int_equal(st->compressed, before + 1);
	expect_round_trip(fx, BLOCK);
}

static void test_zlib_round_trip(void **state)
{
	struct fixture *fx = *state;

	round_trip_codec(fx, CODEC_ZLIB, 1);
	/* Again on the same encoder and decoder: their contexts are reused
	 * and the swapped data areas still work. */
	round_trip_codec(fx, CODEC_ZLIB, 1);
	round_trip_codec(fx, CODEC_ZLIB, 9);
}

static void test_other_codecs_round_trip(void **state)
{
	struct fixture *fx = *state;

	round_trip_codec(fx, CODEC_LZ4, 1);
	round_trip_codec(fx, CODEC_LZ4, 9);
	round_trip_codec(fx, CODEC_BZ2, 1);
	round_trip_codec(fx, CODEC_ZLIB, 6);
}

/* A short tail block compresses and decodes too. */
static void test_short_block_round_trip(void **state)
{
	struct fixture *fx = *state;

	load(fx, TEXT, 5000, 3);
	assert_int_equal(encode(fx, CODEC_ZLIB, 1), 0);
	assert_int_equal(fx->b.hdr.codec, CODEC_ZLIB);
	assert_true(fx->b.len < 5000);
	expect_round_trip(fx, 5000);
}

static void test_random_stays_raw(void **state)
{
	struct fixture *fx = *state;
	const struct enc_stats *st = encoder_stats(fx->enc);

	load(fx, RANDOM, BLOCK, 7);
	assert_int_equal(encode(fx, CODEC_ZLIB, 1), 0);
	expect_raw(fx, BLOCK);
	assert_int_equal(st->raw, 1);
	assert_int_equal(st->compressed, 0);
	expect_round_trip(fx, BLOCK);

	load(fx, RANDOM, BLOCK, 8);
	assert_int_equal(encode(fx, CODEC_LZ4, 1), 0);
	expect_raw(fx, BLOCK);
	assert_int_equal(st->raw, 2);
}

/* ---- Skip mode and probes ---------------------------------------------- */

/* Two incompressible blocks put the file in skip mode: even a text block
 * right after is sent raw without a compression attempt. */
static void test_skip_after_two_random(void **state)
{
	struct fixture *fx = *state;
	const struct enc_stats *st = encoder_stats(fx->enc);
	const struct codec_choice c = { CODEC_ZLIB, 1 };
	struct enc_file other;

	for (unsigned i = 0; i < 2; i++) {
		assert_int_equal(atomic_load(&fx->ef.skip), 0);
		load(fx, RANDOM, BLOCK, 100 + i);
		assert_int_equal(encode(fx, CODEC_ZLIB, 1), 0);
		expect_raw(fx, BLOCK);
	}
	assert_true(atomic_load(&fx->ef.skip) > 0);
	assert_int_equal(st->raw, 2);
	assert_int_equal(st->probes, 0);

	load(fx, TEXT, BLOCK, 0);
	assert_int_equal(encode(fx, CODEC_ZLIB, 1), 0);
	expect_raw(fx, BLOCK);
	assert_int_equal(st->raw, 3);
	assert_int_equal(st->compressed, 0);

	/* Another file is not affected. */
	enc_file_init(&other);
	load(fx, TEXT, BLOCK, 1);
	assert_int_equal(encoder_run(fx->enc, &fx->b, &c, &other), 0);
	assert_int_equal(fx->b.hdr.codec, CODEC_ZLIB);
	assert_int_equal(st->compressed, 1);
	expect_round_trip(fx, BLOCK);
}

/* One compressible block between random ones resets the streak. */
static void test_streak_reset(void **state)
{
	struct fixture *fx = *state;

	load(fx, RANDOM, BLOCK, 1);
	assert_int_equal(encode(fx, CODEC_ZLIB, 1), 0);
	load(fx, TEXT, BLOCK, 0);
	assert_int_equal(encode(fx, CODEC_ZLIB, 1), 0);
	assert_int_equal(fx->b.hdr.codec, CODEC_ZLIB);
	expect_round_trip(fx, BLOCK);
	load(fx, RANDOM, BLOCK, 2);
	assert_int_equal(encode(fx, CODEC_ZLIB, 1), 0);
	assert_int_equal(atomic_load(&fx->ef.skip), 0);
	assert_int_equal(encoder_stats(fx->enc)->raw, 2);
}

#define SKIP_RUN 128u

/* A file that stays random keeps skipping: every block goes raw, probes
 * happen now and then, and they are cheap (far fewer than the blocks). */
static void test_skip_probes_random(void **state)
{
	struct fixture *fx = *state;
	const struct enc_stats *st = encoder_stats(fx->enc);

	for (unsigned i = 0; i < 2 + SKIP_RUN; i++) {
		load(fx, RANDOM, BLOCK, 200 + i);
		assert_int_equal(encode(fx, CODEC_ZLIB, 1), 0);
		expect_raw(fx, BLOCK);
	}
	assert_int_equal(st->raw, 2 + SKIP_RUN);
	assert_int_equal(st->compressed, 0);
	assert_true(st->probes >= 1);
	if (st->probes * 4 > SKIP_RUN)
		fail_msg("%llu probes in %u skipped blocks", (unsigned long long)st->probes,
			 SKIP_RUN);
	assert_true(atomic_load(&fx->ef.skip) > 0);
}

/* A skipping file whose data turns compressible is compressed again after
 * a probe, within ENC_PROBE_EVERY (16) blocks. */
static void test_skip_recovers_on_text(void **state)
{
	struct fixture *fx = *state;
	const struct enc_stats *st = encoder_stats(fx->enc);
	unsigned n;

	for (unsigned i = 0; i < 2; i++) {
		load(fx, RANDOM, BLOCK, 300 + i);
		assert_int_equal(encode(fx, CODEC_ZLIB, 1), 0);
	}
	assert_true(atomic_load(&fx->ef.skip) > 0);
	for (n = 1; n <= 16; n++) {
		load(fx, TEXT, BLOCK, n);
		assert_int_equal(encode(fx, CODEC_ZLIB, 1), 0);
		if (fx->b.hdr.codec == CODEC_ZLIB)
			break;
		expect_raw(fx, BLOCK);
	}
	if (n > 16)
		fail_msg("text still sent raw after 16 blocks in skip mode");
	assert_true(st->probes >= 1);
	assert_int_equal(st->compressed, 1);
	assert_int_equal(atomic_load(&fx->ef.skip), 0);
	expect_round_trip(fx, BLOCK);

	/* And it stays out of skip mode. */
	load(fx, TEXT, BLOCK, 99);
	assert_int_equal(encode(fx, CODEC_ZLIB, 1), 0);
	assert_int_equal(fx->b.hdr.codec, CODEC_ZLIB);
	expect_round_trip(fx, BLOCK);
}

/* ---- decoder_run refusals ---------------------------------------------- */

static void test_decode_corrupt_payload(void **state)
{
	struct fixture *fx = *state;

	load(fx, TEXT, BLOCK, 5);
	assert_int_equal(encode(fx, CODEC_ZLIB, 1), 0);
	assert_int_equal(fx->b.hdr.codec, CODEC_ZLIB);
	fx->b.data[fx->b.len / 2] ^= 0x55;
	assert_int_equal(decoder_run(fx->dec, &fx->b), -PC_E_INTEGRITY);

	/* A truncated payload. */
	load(fx, TEXT, BLOCK, 6);
	assert_int_equal(encode(fx, CODEC_LZ4, 1), 0);
	assert_int_equal(fx->b.hdr.codec, CODEC_LZ4);
	fx->b.hdr.enc_len -= 10;
	assert_int_equal(decoder_run(fx->dec, &fx->b), -PC_E_INTEGRITY);
}

static void test_decode_wrong_raw_len(void **state)
{
	struct fixture *fx = *state;

	load(fx, TEXT, BLOCK, 7);
	assert_int_equal(encode(fx, CODEC_ZLIB, 1), 0);
	assert_int_equal(fx->b.hdr.codec, CODEC_ZLIB);
	fx->b.hdr.raw_len = BLOCK - 1;
	assert_int_equal(decoder_run(fx->dec, &fx->b), -PC_E_INTEGRITY);

	load(fx, TEXT, BLOCK, 8);
	assert_int_equal(encode(fx, CODEC_ZLIB, 1), 0);
	fx->b.hdr.raw_len = BLOCK + 1;
	assert_int_equal(decoder_run(fx->dec, &fx->b), -PC_E_INTEGRITY);

	/* The failures left the decoder usable. */
	load(fx, TEXT, BLOCK, 9);
	assert_int_equal(encode(fx, CODEC_ZLIB, 1), 0);
	expect_round_trip(fx, BLOCK);
}

static void test_decode_unknown_codec(void **state)
{
	struct fixture *fx = *state;

	load(fx, TEXT, 100, 0);
	fx->b.hdr.codec = CODEC_COUNT;
	fx->b.hdr.enc_len = 100;
	assert_true(decoder_run(fx->dec, &fx->b) < 0);
}

/* Per decoder.h, a payload that does not decode to exactly raw_len bytes is
 * -PC_E_INTEGRITY; for NONE the payload is its own decoding. */
static void test_decode_none_length_mismatch(void **state)
{
	struct fixture *fx = *state;

	load(fx, RANDOM, 1000, 1);
	fx->b.hdr.codec = CODEC_NONE;
	fx->b.hdr.enc_len = 1000;
	fx->b.hdr.raw_len = 2000;
	assert_int_equal(decoder_run(fx->dec, &fx->b), -PC_E_INTEGRITY);
}

#define FX_TEST(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_is_zero_small),
		cmocka_unit_test(test_is_zero_large),
		FX_TEST(test_none_hole),
		FX_TEST(test_pack_of_zeros_is_no_hole),
		FX_TEST(test_none_leaves_data_raw),
		FX_TEST(test_zlib_round_trip),
		FX_TEST(test_other_codecs_round_trip),
		FX_TEST(test_short_block_round_trip),
		FX_TEST(test_random_stays_raw),
		FX_TEST(test_skip_after_two_random),
		FX_TEST(test_streak_reset),
		FX_TEST(test_skip_probes_random),
		FX_TEST(test_skip_recovers_on_text),
		FX_TEST(test_decode_corrupt_payload),
		FX_TEST(test_decode_wrong_raw_len),
		FX_TEST(test_decode_unknown_codec),
		FX_TEST(test_decode_none_length_mismatch),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
