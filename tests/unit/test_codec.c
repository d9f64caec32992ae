/* SPDX-License-Identifier: Apache-2.0 */
/* Unit tests for codec: round trips of every backend, strict decoding of
 * damaged input, bounds, and the -c grammar. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "testutil.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "sys/err.h"
#include "wire/proto.h"

/* The ids in block headers are codec ids. */
_Static_assert((int)CODEC_NONE == (int)PROTO_CODEC_NONE, "none");
_Static_assert((int)CODEC_ZLIB == (int)PROTO_CODEC_ZLIB, "zlib");
_Static_assert((int)CODEC_LZ4 == (int)PROTO_CODEC_LZ4, "lz4");
_Static_assert((int)CODEC_BZ2 == (int)PROTO_CODEC_BZ2, "bz2");
_Static_assert((int)CODEC_COUNT == (int)PROTO_CODEC_MAX, "count");

#define GUARD 64                 /* bytes checked after every output */
#define GUARD_BYTE 0xa5
#define MIB (1u << 20)
#define DAMAGE_LEN (64u << 10)   /* raw bytes in the damaged-input tests */
#define SWEEP_FLIPS 256u         /* bit flips spread over one encoding */

enum data_kind { DATA_RANDOM, DATA_ZERO, DATA_TEXT, DATA_MIXED, DATA_KINDS };

static const char *const kind_names[DATA_KINDS] = { "random", "zero", "text", "mixed" };
static const size_t sizes[] = { 0, 1, 4095, 4096, MIB - 1, MIB };
static unsigned ids[CODEC_COUNT] = { CODEC_NONE, CODEC_ZLIB, CODEC_LZ4, CODEC_BZ2 };

/* ---- Test data ----------------------------------------------------------- */

static uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*s = x;
	return x;
}

static void fill_random(uint8_t *p, size_t len, uint64_t *s)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(rng_next(s) >> 24);
}

/* Lines of English words, the way logs and source code look. */
static void fill_text(uint8_t *p, size_t len, uint64_t *s)
{
	static const char *const words[] = {
		"the", "file", "copy", "stream", "block", "of", "data", "network",
		"window", "and", "a", "parallel", "to", "is", "compression", "error",
		"server", "client", "checksum", "sink", "source", "with", "in", "bytes",
	};
	size_t i = 0, on_line = 0;

	while (i < len) {
		const char *w = words[rng_next(s) % (sizeof(words) / sizeof(words[0]))];

		for (size_t k = 0; w[k] != '\0' && i < len; k++)
			p[i++] = (uint8_t)w[k];
		if (i < len)
			p[i++] = ++on_line % 12 == 0 ? '\n' : ' ';
	}
}

/* 1000-byte runs of random, text and zeros in turn. */
static void fill_mixed(uint8_t *p, size_t len, uint64_t *s)
{
	for (size_t at = 0, k = 0; at < len; at += 1000, k++) {
		size_t n = len - at < 1000 ? len - at : 1000;

		if (k % 3 == 0)
			fill_random(p + at, n, s);
		else if (k % 3 == 1)
			fill_text(p + at, n, s);
		else
			memset(p + at, 0, n);
	}
}

static void fill(enum data_kind kind, uint8_t *p, size_t len, uint64_t seed)
{
	uint64_t s = seed | 1;

	switch (kind) {
	case DATA_RANDOM: fill_random(p, len, &s); break;
	case DATA_ZERO: memset(p, 0, len); break;
	case DATA_TEXT: fill_text(p, len, &s); break;
	default: fill_mixed(p, len, &s); break;
	}
}

/* ---- Helpers ------------------------------------------------------------- */

static const struct codec *state_codec(void **state)
{
	const struct codec *c = codec_by_id(*(const unsigned *)*state);

	assert_non_null(c);
	return c;
}

static void assert_guard(const uint8_t *p)
{
	for (size_t i = 0; i < GUARD; i++)
		assert_int_equal(p[i], GUARD_BYTE);
}

/* Encodes src[len] into a fresh exactly-bound-sized buffer (+ guard);
 * the caller frees *enc. */
static size_t encode(const struct codec *c, void *ctx, const uint8_t *src, size_t len,
		     uint8_t **enc)
{
	size_t cap = c->bound(len), out = 0;

	*enc = malloc(cap + GUARD);
	assert_non_null(*enc);
	memset(*enc + cap, GUARD_BYTE, GUARD);
	assert_int_equal(c->compress(ctx, src, len, *enc, cap, &out), 0);
	assert_true(out <= cap);
	assert_guard(*enc + cap);
	return out;
}

/* Decodes enc[len] into a fresh buffer of raw_len bytes (+ guard), checks
 * that nothing was written past it, and returns the result code; *dec is
 * the output, freed by the caller. */
static int decode(const struct codec *c, void *ctx, const uint8_t *enc, size_t len,
		  size_t raw_len, uint8_t **dec)
{
	int ret;

	*dec = malloc(raw_len + GUARD);
	assert_non_null(*dec);
	memset(*dec, GUARD_BYTE, raw_len + GUARD);
	ret = c->decompress(ctx, enc, len, *dec, raw_len);
	assert_guard(*dec + raw_len);
	assert_true(ret == 0 || ret == -PC_E_INTEGRITY);
	return ret;
}

/* Decoding must fail. */
static void assert_rejects(const struct codec *c, void *ctx, const uint8_t *enc, size_t len,
			   size_t raw_len)
{
	uint8_t *dec;

	assert_int_equal(decode(c, ctx, enc, len, raw_len, &dec), -PC_E_INTEGRITY);
	free(dec);
}

/* Decoding must fail or give something other than want[raw_len]. */
static void assert_not_same(const struct codec *c, void *ctx, const uint8_t *enc, size_t len,
			    const uint8_t *want, size_t raw_len)
{
	uint8_t *dec;
	int ret = decode(c, ctx, enc, len, raw_len, &dec);

	assert_true(ret != 0 || memcmp(dec, want, raw_len) != 0);
	free(dec);
}

/* ---- Round trips --------------------------------------------------------- */

/* Every kind and size through one compress ctx (so streams are reset and
 * reused) and one decompress ctx at another level (decoding must not
 * depend on the level). */
static void roundtrip_level(const struct codec *c, int level, uint8_t *src)
{
	void *cctx = c->ctx_new(level);
	void *dctx = c->ctx_new(c->default_level == level ? c->max_level : c->default_level);

	assert_non_null(cctx);
	assert_non_null(dctx);
	for (int kind = 0; kind < DATA_KINDS; kind++) {
		for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
			size_t len = sizes[i], elen;
			uint8_t *enc, *dec;

			fill((enum data_kind)kind, src, len, len + (uint64_t)kind);
			elen = encode(c, cctx, src, len, &enc);
			if (decode(c, dctx, enc, elen, len, &dec) != 0 ||
			    memcmp(dec, src, len) != 0)
				fail_msg("%s:%d %s %zu bytes: no round trip", c->name, level,
					 kind_names[kind], len);
			/* The same ctx decodes what it encoded. */
			free(dec);
			assert_int_equal(decode(c, cctx, enc, elen, len, &dec), 0);
			assert_memory_equal(dec, src, len);
			free(dec);
			free(enc);
		}
	}
	c->ctx_free(cctx);
	c->ctx_free(dctx);
}

static void test_roundtrip(void **state)
{
	const struct codec *c = state_codec(state);
	const int levels[] = { c->min_level, c->default_level, c->max_level };
	uint8_t *src = malloc(MIB);

	assert_non_null(src);
	for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
		roundtrip_level(c, levels[i], src);
	free(src);
}

/* Compressible data shrinks (for all but none), so "send compressed only
 * if smaller" works. */
static void test_text_shrinks(void **state)
{
	const struct codec *c = state_codec(state);
	uint8_t *src = malloc(DAMAGE_LEN), *enc;
	void *ctx = c->ctx_new(c->default_level);
	size_t elen;

	assert_non_null(src);
	fill(DATA_TEXT, src, DAMAGE_LEN, 7);
	elen = encode(c, ctx, src, DAMAGE_LEN, &enc);
	if (c->id == CODEC_NONE)
		assert_int_equal(elen, DAMAGE_LEN);
	else
		assert_true(elen < DAMAGE_LEN / 2);
	free(enc);
	c->ctx_free(ctx);
	free(src);
}

/* ---- Bounds and short output buffers ------------------------------------- */

static void test_bound_random(void **state)
{
	static const size_t lens[] = { 0, 1, 15, 100, 4095, 4096, 65536, MIB };
	const struct codec *c = state_codec(state);
	const int levels[] = { c->min_level, c->default_level, c->max_level };
	uint8_t *src = malloc(MIB);

	assert_non_null(src);
	for (size_t l = 0; l < sizeof(levels) / sizeof(levels[0]); l++) {
		void *ctx = c->ctx_new(levels[l]);

		assert_non_null(ctx);
		for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
			size_t cap = c->bound(lens[i]), out = 0;
			uint8_t *dst = malloc(cap ? cap : 1); /* exact: ASan sees overruns */

			assert_non_null(dst);
			assert_true(cap >= lens[i]);
			fill(DATA_RANDOM, src, lens[i], 99 + i);
			assert_int_equal(c->compress(ctx, src, lens[i], dst, cap, &out), 0);
			assert_true(out <= cap);
			free(dst);
		}
		c->ctx_free(ctx);
	}
	free(src);
}

/* An output buffer too small gives -ENOBUFS, writes nothing past it, and
 * leaves the ctx usable. */
static void test_short_output(void **state)
{
	static const size_t caps[] = { 0, 1, 16, 100, 4095 };
	const struct codec *c = state_codec(state);
	void *ctx = c->ctx_new(c->default_level);
	uint8_t src[4096], dst[4096 + GUARD], *enc, *dec;
	size_t out = 0, elen;

	assert_non_null(ctx);
	fill(DATA_RANDOM, src, sizeof(src), 5);
	for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
		memset(dst, GUARD_BYTE, sizeof(dst));
		assert_int_equal(c->compress(ctx, src, sizeof(src), dst, caps[i], &out), -ENOBUFS);
		assert_guard(dst + caps[i]);
	}
	elen = encode(c, ctx, src, sizeof(src), &enc);
	assert_int_equal(decode(c, ctx, enc, elen, sizeof(src), &dec), 0);
	assert_memory_equal(dec, src, sizeof(src));
	free(dec);
	free(enc);
	c->ctx_free(ctx);
}

/* ---- Damaged input -------------------------------------------------------- */

/* Truncation, trailing bytes and wrong raw lengths must fail. */
static void damage_lengths(const struct codec *c, void *ctx, const uint8_t *src, size_t len)
{
	uint8_t *enc, *big;
	size_t elen = encode(c, ctx, src, len, &enc);
	const size_t cuts[] = { 0, 1, elen / 2, elen - 1 };

	for (size_t i = 0; i < sizeof(cuts) / sizeof(cuts[0]); i++)
		if (cuts[i] < elen)
			assert_rejects(c, ctx, enc, cuts[i], len);
	assert_rejects(c, ctx, enc, elen, len + 1);
	if (len > 0)
		assert_rejects(c, ctx, enc, elen, len - 1);
	/* One trailing byte, zero or not. */
	big = malloc(elen + 1);
	assert_non_null(big);
	memcpy(big, enc, elen);
	for (int b = 0; b < 2; b++) {
		big[elen] = b ? 0x5a : 0;
		assert_rejects(c, ctx, big, elen + 1, len);
	}
	free(big);
	free(enc);
}

static void test_reject_lengths(void **state)
{
	static const size_t lens[] = { 0, 1, 4096, DAMAGE_LEN };
	const struct codec *c = state_codec(state);
	void *ctx = c->ctx_new(c->default_level);
	uint8_t *src = malloc(DAMAGE_LEN);

	assert_non_null(src);
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		fill(DATA_TEXT, src, lens[i], 11);
		damage_lengths(c, ctx, src, lens[i]);
		fill(DATA_RANDOM, src, lens[i], 12);
		damage_lengths(c, ctx, src, lens[i]);
	}
	free(src);
	c->ctx_free(ctx);
}

/* A flipped byte in the middle must not decode to the original data; and
 * flips anywhere must never crash or write out of bounds. */
static void test_reject_flips(void **state)
{
	const struct codec *c = state_codec(state);
	void *ctx = c->ctx_new(c->default_level);
	uint8_t *src = malloc(DAMAGE_LEN), *enc, *dec;
	size_t elen;

	assert_non_null(src);
	fill(DATA_TEXT, src, DAMAGE_LEN, 13);
	elen = encode(c, ctx, src, DAMAGE_LEN, &enc);
	for (unsigned bit = 0; bit < 8; bit++) {
		enc[elen / 2] ^= (uint8_t)(1u << bit);
		assert_not_same(c, ctx, enc, elen, src, DAMAGE_LEN);
		enc[elen / 2] ^= (uint8_t)(1u << bit);
	}
	for (unsigned i = 0; i < SWEEP_FLIPS; i++) {
		size_t at = (size_t)i * elen / SWEEP_FLIPS;

		enc[at] ^= (uint8_t)(1u << (i % 8));
		decode(c, ctx, enc, elen, DAMAGE_LEN, &dec); /* checks bounds */
		free(dec);
		enc[at] ^= (uint8_t)(1u << (i % 8));
	}
	/* Undamaged again: still decodes (the ctx recovered from failures). */
	assert_int_equal(decode(c, ctx, enc, elen, DAMAGE_LEN, &dec), 0);
	assert_memory_equal(dec, src, DAMAGE_LEN);
	free(dec);
	free(enc);
	free(src);
	c->ctx_free(ctx);
}

/* Random bytes, and other codecs' encodings, are refused. */
static void test_reject_garbage(void **state)
{
	static const size_t lens[] = { 1, 7, 100, 4096, DAMAGE_LEN + 1000 };
	const struct codec *c = state_codec(state);
	void *ctx = c->ctx_new(c->default_level);
	uint8_t *src = malloc(DAMAGE_LEN + 1000);
	uint64_t s = 17;

	assert_non_null(src);
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		fill_random(src, lens[i], &s);
		assert_rejects(c, ctx, src, lens[i], DAMAGE_LEN);
	}
	fill(DATA_TEXT, src, DAMAGE_LEN, 19);
	for (unsigned id = 0; id < CODEC_COUNT; id++) {
		const struct codec *other = codec_by_id(id);
		void *octx = other->ctx_new(other->default_level);
		uint8_t *enc;
		size_t elen = encode(other, octx, src, DAMAGE_LEN, &enc);

		if (id != c->id)
			assert_rejects(c, ctx, enc, elen, DAMAGE_LEN);
		free(enc);
		other->ctx_free(octx);
	}
	free(src);
	c->ctx_free(ctx);
}

/* NULL buffers are fine at length 0; ctx_free(NULL) is a no-op; an
 * out-of-range level is clamped. */
static void test_edges(void **state)
{
	const struct codec *c = state_codec(state);
	const int levels[] = { -1, 0, c->max_level + 1, 1000000 };
	uint8_t enc[1024];
	size_t elen = 0;

	c->ctx_free(NULL);
	for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
		void *ctx = c->ctx_new(levels[i]);

		assert_non_null(ctx);
		assert_true(c->bound(0) <= sizeof(enc));
		assert_int_equal(c->compress(ctx, NULL, 0, enc, c->bound(0), &elen), 0);
		assert_int_equal(c->decompress(ctx, enc, elen, NULL, 0), 0);
		if (c->id != CODEC_NONE)
			assert_int_equal(c->decompress(ctx, NULL, 0, NULL, 0), -PC_E_INTEGRITY);
		c->ctx_free(ctx);
	}
}

/* ---- Registry --------------------------------------------------------- */

static void test_registry(void **state)
{
	static const char *const names[CODEC_COUNT] = { "none", "zlib", "lz4", "bz2" };
	static const char *const unknown[] = {
		"", "zstd", "ZLIB", "zlib:1", "zli", "zlibx", "auto",
	};

	(void)state;
	for (unsigned id = 0; id < CODEC_COUNT; id++) {
		const struct codec *c = codec_by_id(id);

		assert_non_null(c);
		assert_int_equal(c->id, id);
		assert_string_equal(c->name, names[id]);
		assert_ptr_equal(codec_by_name(names[id]), c);
		assert_true(c->min_level <= c->default_level);
		assert_true(c->default_level <= c->max_level);
		assert_non_null(c->bound);
		assert_non_null(c->ctx_new);
		assert_non_null(c->ctx_free);
		assert_non_null(c->compress);
		assert_non_null(c->decompress);
	}
	assert_null(codec_by_id(CODEC_COUNT));
	assert_null(codec_by_id(255));
	assert_null(codec_by_id(~0u));
	for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++)
		assert_null(codec_by_name(unknown[i]));
	assert_int_equal(codec_level_clamp(&codec_lz4, 0), 1);
	assert_int_equal(codec_level_clamp(&codec_lz4, 13), 12);
	assert_int_equal(codec_level_clamp(&codec_lz4, 5), 5);
}

/* ---- The -c grammar ---------------------------------------------------- */

struct parse_case {
	const char *spec;
	unsigned n;                  /* 0: must fail */
	bool is_auto;
	enum codec_id id;            /* of the first choice */
	int level;
	const char *msg;             /* on failure: a part of the message */
};

static const struct parse_case parse_cases[] = {
	{ "0", 1, false, CODEC_NONE, 0, NULL },
	{ "1", 1, false, CODEC_ZLIB, 1, NULL },
	{ "9", 1, false, CODEC_ZLIB, 9, NULL },
	{ "none", 1, false, CODEC_NONE, 0, NULL },
	{ "zlib", 1, false, CODEC_ZLIB, 6, NULL },
	{ "zlib:6", 1, false, CODEC_ZLIB, 6, NULL },
	{ "zlib:1", 1, false, CODEC_ZLIB, 1, NULL },
	{ "zlib:0", 1, false, CODEC_NONE, 0, NULL },
	{ "lz4", 1, false, CODEC_LZ4, 1, NULL },
	{ "lz4:1", 1, false, CODEC_LZ4, 1, NULL },
	{ "lz4:9", 1, false, CODEC_LZ4, 9, NULL },
	{ "lz4:12", 1, false, CODEC_LZ4, 12, NULL },
	{ "bz2", 1, false, CODEC_BZ2, 9, NULL },
	{ "bz2:1", 1, false, CODEC_BZ2, 1, NULL },
	{ "bz2:9", 1, false, CODEC_BZ2, 9, NULL },
	{ "auto", 1, true, CODEC_NONE, 0, NULL },
	{ "1,1,6,6", 4, false, CODEC_ZLIB, 1, NULL },
	{ "lz4,zlib:9,bz2:1,0", 4, false, CODEC_LZ4, 1, NULL },
	{ "10", 0, false, 0, 0, "'10' is not a level" },
	{ "99999999999999999999", 0, false, 0, 0, "'99999999999999999999'" },
	{ "-1", 0, false, 0, 0, "'-1' is not a codec" },
	{ "zlib:10", 0, false, 0, 0, "'zlib:10': zlib levels are 0-9" },
	{ "zlib:", 0, false, 0, 0, "'zlib:': zlib levels are 0-9" },
	{ "zlib:-1", 0, false, 0, 0, "'zlib:-1'" },
	{ "zlib:+1", 0, false, 0, 0, "'zlib:+1'" },
	{ "zlib: 1", 0, false, 0, 0, "'zlib: 1'" },
	{ "zlib:1:2", 0, false, 0, 0, "'zlib:1:2'" },
	{ "lz4:0", 0, false, 0, 0, "'lz4:0': lz4 levels are 1-12" },
	{ "lz4:13", 0, false, 0, 0, "'lz4:13'" },
	{ "bz2:0", 0, false, 0, 0, "'bz2:0': bz2 levels are 1-9" },
	{ "none:1", 0, false, 0, 0, "'none:1': none takes no level" },
	{ "bz2:10", 0, false, 0, 0, "'bz2:10'" },
	{ "", 0, false, 0, 0, "'' has an empty item" },
	{ ",", 0, false, 0, 0, "',' has an empty item" },
	{ "1,", 0, false, 0, 0, "'1,' has an empty item" },
	{ ",1", 0, false, 0, 0, "',1' has an empty item" },
	{ "1,,2", 0, false, 0, 0, "'1,,2' has an empty item" },
	{ " 1", 0, false, 0, 0, "' 1' is not a codec" },
	{ "1 ", 0, false, 0, 0, "'1 ' is not a codec" },
	{ "ZLIB", 0, false, 0, 0, "'ZLIB' is not a codec" },
	{ "zstd", 0, false, 0, 0,
	  "-c: 'zstd' is not a codec (none, zlib[:0-9], lz4[:1-12], bz2[:1-9], auto or 0-9)" },
	{ "1,zstd,2", 0, false, 0, 0, "-c: 'zstd' is not a codec" },
	{ "auto:1", 0, false, 0, 0, "'auto:1' is not a codec" },
	{ "auto,1", 0, false, 0, 0, "'auto' cannot be mixed" },
	{ "1,auto", 0, false, 0, 0, "'auto' cannot be mixed" },
};

static void parse_one(const struct parse_case *pc)
{
	struct codec_choice out[CODEC_MAX_CHOICES];
	struct pc_err e;
	char msg[sizeof(e.msg)];
	unsigned n = 99;
	bool is_auto = true;
	int ret;

	pc_err_init(&e);
	ret = codec_parse(pc->spec, out, &n, &is_auto, &e);
	if (pc->n == 0) {
		if (ret != -PC_E_USAGE)
			fail_msg("'%s' was accepted", pc->spec);
		assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), -PC_E_USAGE);
		if (strstr(msg, pc->msg) == NULL)
			fail_msg("'%s': message '%s' lacks '%s'", pc->spec, msg, pc->msg);
		assert_int_equal(n, 0);
		assert_false(is_auto);
		/* Without a pc_err it still fails. */
		assert_int_equal(codec_parse(pc->spec, out, &n, &is_auto, NULL), -PC_E_USAGE);
	} else {
		if (ret != 0)
			fail_msg("'%s' was refused", pc->spec);
		assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), 0);
		assert_int_equal(n, pc->n);
		assert_int_equal(is_auto, pc->is_auto);
		assert_int_equal(out[0].id, pc->id);
		assert_int_equal(out[0].level, pc->level);
	}
	pc_err_destroy(&e);
}

static void test_parse_table(void **state)
{
	(void)state;
	for (size_t i = 0; i < sizeof(parse_cases) / sizeof(parse_cases[0]); i++)
		parse_one(&parse_cases[i]);
}

static void test_parse_lists(void **state)
{
	struct codec_choice out[CODEC_MAX_CHOICES];
	char spec[8 * (CODEC_MAX_CHOICES + 1)];
	size_t at = 0;
	unsigned n = 0;
	bool is_auto = true;
	struct pc_err e;
	char msg[sizeof(e.msg)];

	(void)state;
	assert_int_equal(codec_parse("lz4,zlib:9,bz2:1,0", out, &n, &is_auto, NULL), 0);
	assert_int_equal(n, 4);
	assert_int_equal(out[1].id, CODEC_ZLIB);
	assert_int_equal(out[1].level, 9);
	assert_int_equal(out[2].id, CODEC_BZ2);
	assert_int_equal(out[2].level, 1);
	assert_int_equal(out[3].id, CODEC_NONE);

	/* 64 items (the longest level too) fit, and within REQUEST's limit. */
	for (unsigned i = 0; i < CODEC_MAX_CHOICES; i++)
		at += (size_t)sprintf(spec + at, "%slz4:%u", i ? "," : "", 1 + i % 12);
	assert_true(at <= PROTO_MAX_CODEC_SPEC);
	assert_int_equal(codec_parse(spec, out, &n, &is_auto, NULL), 0);
	assert_int_equal(n, CODEC_MAX_CHOICES);
	assert_false(is_auto);
	for (unsigned i = 0; i < CODEC_MAX_CHOICES; i++) {
		assert_int_equal(out[i].id, CODEC_LZ4);
		assert_int_equal(out[i].level, (int)(1 + i % 12));
	}
	/* 65 are too many. */
	sprintf(spec + at, ",1");
	pc_err_init(&e);
	assert_int_equal(codec_parse(spec, out, &n, &is_auto, &e), -PC_E_USAGE);
	assert_int_equal(n, 0);
	assert_int_equal(pc_err_get(&e, msg, sizeof(msg)), -PC_E_USAGE);
	assert_non_null(strstr(msg, "-c: more than 64 items (one per stream)"));
	pc_err_destroy(&e);
}

static void test_format(void **state)
{
	static const struct {
		struct codec_choice c;
		const char *want;
	} cases[] = {
		{ { CODEC_NONE, 0 }, "none" },   { { CODEC_ZLIB, 1 }, "zlib:1" },
		{ { CODEC_ZLIB, 6 }, "zlib" },   { { CODEC_LZ4, 1 }, "lz4" },
		{ { CODEC_LZ4, 9 }, "lz4:9" },   { { CODEC_BZ2, 9 }, "bz2" },
		{ { CODEC_BZ2, 1 }, "bz2:1" },   { { CODEC_COUNT, 1 }, "?" },
	};
	char buf[32];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		codec_format(&cases[i].c, buf, sizeof(buf));
		assert_string_equal(buf, cases[i].want);
	}
	codec_format(&cases[1].c, buf, 4);
	assert_string_equal(buf, "zli");
	buf[0] = 'x';
	codec_format(&cases[1].c, buf, 0);
	assert_int_equal(buf[0], 'x');
}

/* Whatever codec_format writes, codec_parse reads back to the same choice. */
static void test_format_parses_back(void **state)
{
	(void)state;
	for (unsigned id = 0; id < CODEC_COUNT; id++) {
		const struct codec *c = codec_by_id(id);

		for (int level = c->min_level; level <= c->max_level; level++) {
			struct codec_choice in = { c->id, level }, out;
			unsigned n = 0;
			bool is_auto = true;
			char buf[32];

			codec_format(&in, buf, sizeof(buf));
			assert_int_equal(codec_parse(buf, &out, &n, &is_auto, NULL), 0);
			assert_int_equal(n, 1);
			assert_false(is_auto);
			assert_int_equal(out.id, in.id);
			assert_int_equal(out.level, in.level);
		}
	}
}

#define PER_CODEC(f)                                                          \
	cmocka_unit_test_prestate(f, (void *)&ids[CODEC_NONE]),              \
	cmocka_unit_test_prestate(f, (void *)&ids[CODEC_ZLIB]),              \
	cmocka_unit_test_prestate(f, (void *)&ids[CODEC_LZ4]),               \
	cmocka_unit_test_prestate(f, (void *)&ids[CODEC_BZ2])

int main(void)
{
	const struct CMUnitTest tests[] = {
		PER_CODEC(test_roundtrip),
		PER_CODEC(test_text_shrinks),
		PER_CODEC(test_bound_random),
		PER_CODEC(test_short_output),
		PER_CODEC(test_reject_lengths),
		PER_CODEC(test_reject_flips),
		PER_CODEC(test_reject_garbage),
		PER_CODEC(test_edges),
		cmocka_unit_test(test_registry),
		cmocka_unit_test(test_parse_table),
		cmocka_unit_test(test_parse_lists),
		cmocka_unit_test(test_format),
		cmocka_unit_test(test_format_parses_back),
	};

	return testutil_status(cmocka_run_group_tests(tests, NULL, NULL));
}
