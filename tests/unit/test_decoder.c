// SPDX-License-Identifier: Apache-2.0
/* Unit tests for decoder: what a receiver does with a block's payload, and
 * every bound it enforces on what the peer sent (codec id, raw_len against
 * the buffer, exact decoded length, checksum). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "codec/codec.h"
#include "pipeline/bufpool.h"
#include "pipeline/decoder.h"
#include "sys/err.h"
#include "wire/proto.h"
#include "testutil.h"

#define CAP 8192u          /* the decoder's and the buffer's size */

struct fixture {
	struct decoder *d;
	struct buf b;
	uint8_t raw[CAP];
};

static int setup(void **state)
{
	static struct fixture f;

	memset(&f, 0, sizeof(f));
	f.d = decoder_new(CAP);
	f.b.data = bufpool_alloc_data(CAP);
	f.b.cap = CAP;
	if (f.d == NULL || f.b.data == NULL)
		return -1;
	for (size_t i = 0; i < CAP; i++)
		f.raw[i] = (uint8_t)("pcopy decoder "[i % 14] + i / 512);
	*state = &f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	decoder_free(f->d);
	bufpool_free_data(f->b.data);
	return 0;
}

/* Puts in f->b the first raw_len bytes of f->raw as the peer sends them in
 * codec id, with a right header (checksum included). */
static void make_block(struct fixture *f, unsigned id, uint32_t raw_len)
{
	const struct codec *c = codec_by_id(id);
	size_t n = 0;
	void *ctx = c->ctx_new(c->default_level);
	uint8_t enc[2 * CAP];

	assert_non_null(ctx);
	if (id == CODEC_NONE) {
		memcpy(enc, f->raw, raw_len);
		n = raw_len;
	} else {
		assert_int_equal(c->compress(ctx, f->raw, raw_len, enc, sizeof(enc), &n), 0);
	}
	c->ctx_free(ctx);
	assert_true(n <= CAP);
	memset(&f->b.hdr, 0, sizeof(f->b.hdr));
	f->b.hdr.type = PROTO_BLK_DATA;
	f->b.hdr.codec = (uint8_t)id;
	f->b.hdr.raw_len = raw_len;
	f->b.hdr.enc_len = (uint32_t)n;
	f->b.hdr.checksum = proto_checksum(f->raw, raw_len);
	memcpy(f->b.data, enc, n);
	f->b.len = 0;
}

static void test_every_codec(void **state)
{
	struct fixture *f = *state;

	for (unsigned id = 0; id < CODEC_COUNT; id++) {
		make_block(f, id, CAP);
		assert_int_equal(decoder_verify(f->d, &f->b), 0);
		assert_int_equal(f->b.len, CAP);
		assert_memory_equal(f->b.data, f->raw, CAP);
	}
}

static void test_hole(void **state)
{
	struct fixture *f = *state;

	memset(&f->b.hdr, 0, sizeof(f->b.hdr));
	f->b.hdr.type = PROTO_BLK_DATA;
	f->b.hdr.flags = PROTO_BLK_HOLE;
	f->b.hdr.raw_len = CAP;
	assert_int_equal(decoder_verify(f->d, &f->b), 0);
	assert_int_equal(f->b.len, CAP);
}

/* A codec id the decoder does not know. */
static void test_unknown_codec(void **state)
{
	struct fixture *f = *state;

	make_block(f, CODEC_ZLIB, 100);
	f->b.hdr.codec = CODEC_COUNT;
	assert_int_equal(decoder_verify(f->d, &f->b), -PC_E_PROTO);
	f->b.hdr.codec = 0xff;
	assert_int_equal(decoder_verify(f->d, &f->b), -PC_E_PROTO);
}

/* raw_len larger than the buffers: refused before anything is written. */
static void test_raw_len_over_cap(void **state)
{
	struct fixture *f = *state;

	for (unsigned id = 0; id < CODEC_COUNT; id++) {
		make_block(f, id, CAP);
		f->b.hdr.raw_len = CAP + 1;
		if (id == CODEC_NONE)
			f->b.hdr.enc_len = CAP + 1;
		assert_int_equal(decoder_verify(f->d, &f->b), -PC_E_PROTO);
	}
}

/* NONE: the payload is the raw bytes, so the lengths must agree. */
static void test_none_lengths(void **state)
{
	struct fixture *f = *state;

	make_block(f, CODEC_NONE, 100);
	f->b.hdr.enc_len = 99;
	assert_int_equal(decoder_verify(f->d, &f->b), -PC_E_INTEGRITY);
	f->b.hdr.enc_len = 101;
	assert_int_equal(decoder_verify(f->d, &f->b), -PC_E_INTEGRITY);
}

/* A compressed payload must decode to exactly raw_len bytes. */
static void test_decoded_length(void **state)
{
	struct fixture *f = *state;

	for (unsigned id = CODEC_ZLIB; id < CODEC_COUNT; id++) {
		make_block(f, id, 1000);
		f->b.hdr.raw_len = 999;
		assert_int_equal(decoder_verify(f->d, &f->b), -PC_E_INTEGRITY);
		make_block(f, id, 1000);
		f->b.hdr.raw_len = 1001;
		assert_int_equal(decoder_verify(f->d, &f->b), -PC_E_INTEGRITY);
		make_block(f, id, 1000);
		f->b.hdr.enc_len--;
		assert_int_equal(decoder_verify(f->d, &f->b), -PC_E_INTEGRITY);
	}
}

/* Bytes that decode fine but are not what the header's checksum says. */
static void test_checksum(void **state)
{
	struct fixture *f = *state;

	for (unsigned id = 0; id < CODEC_COUNT; id++) {
		make_block(f, id, 1000);
		f->b.hdr.checksum ^= 1;
		assert_int_equal(decoder_verify(f->d, &f->b), -PC_E_INTEGRITY);
	}
	make_block(f, CODEC_NONE, 1000);
	f->b.data[999] ^= 0x80;
	assert_int_equal(decoder_verify(f->d, &f->b), -PC_E_INTEGRITY);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_codec),
		cmocka_unit_test(test_hole),
		cmocka_unit_test(test_unknown_codec),
		cmocka_unit_test(test_raw_len_over_cap),
		cmocka_unit_test(test_none_lengths),
		cmocka_unit_test(test_decoded_length),
		cmocka_unit_test(test_checksum),
	};

	return testutil_status(cmocka_run_group_tests(tests, setup, teardown));
}
