/* SPDX-License-Identifier: Apache-2.0 */
/* codec_zlib: the zlib backend, raw deflate (RFC 1951), as
 * docs/PROTOCOL.md specifies: no zlib header and no Adler-32, which cost 7 %
 * of the CPU and add nothing to our XXH3 block checksum. The only file that
 * includes
 * zlib.h. One deflate and one inflate stream per ctx, each set up on first
 * use and reset (not rebuilt) for every later block. */
#include "codec/codec.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#define ZLIB_CONST
#include <zlib.h>

struct codec_zlib_ctx {
	z_stream def;           /* valid once def_ready */
	z_stream inf;           /* valid once inf_ready */
	bool def_ready;
	bool inf_ready;
	int level;              /* 1-9 */
};

static size_t codec_zlib_bound(size_t raw_len)
{
	return compressBound((uLong)raw_len);
}

static void *codec_zlib_ctx_new(int level)
{
	struct codec_zlib_ctx *z = calloc(1, sizeof(*z));

	if (z == NULL)
		return NULL;
	z->level = codec_level_clamp(&codec_zlib, level);
	return z;
}

static void codec_zlib_ctx_free(void *ctx)
{
	struct codec_zlib_ctx *z = ctx;

	if (z == NULL)
		return;
	if (z->def_ready)
		deflateEnd(&z->def);
	if (z->inf_ready)
		inflateEnd(&z->inf);
	free(z);
}

/* A zlib init result as our code. */
static int codec_zlib_init_code(int zret)
{
	if (zret == Z_OK)
		return 0;
	return zret == Z_MEM_ERROR ? -ENOMEM : -EINVAL;
}

/* Makes z->def ready for a new stream. */
static int codec_zlib_def_start(struct codec_zlib_ctx *z)
{
	int ret;

	if (z->def_ready)
		return deflateReset(&z->def) == Z_OK ? 0 : -EINVAL;
	ret = codec_zlib_init_code(deflateInit2(&z->def, z->level, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY));
	z->def_ready = ret == 0;
	return ret;
}

/* Makes z->inf ready for a new stream. */
static int codec_zlib_inf_start(struct codec_zlib_ctx *z)
{
	int ret;

	if (z->inf_ready)
		return inflateReset(&z->inf) == Z_OK ? 0 : -EINVAL;
	ret = codec_zlib_init_code(inflateInit2(&z->inf, -MAX_WBITS));
	z->inf_ready = ret == 0;
	return ret;
}

static int codec_zlib_compress(void *ctx, const uint8_t *src, size_t len, uint8_t *dst,
			       size_t cap, size_t *out)
{
	struct codec_zlib_ctx *z = ctx;
	z_stream *s = &z->def;
	int ret;

	if (len > UINT_MAX)
		return -EINVAL;
	ret = codec_zlib_def_start(z);
	if (ret != 0)
		return ret;
	s->next_in = src;
	s->avail_in = (uInt)len;
	s->next_out = dst;
	s->avail_out = cap > UINT_MAX ? UINT_MAX : (uInt)cap;
	/* One call does the whole block; anything short of the end means
	 * the output did not fit. */
	ret = deflate(s, Z_FINISH);
	if (ret != Z_STREAM_END)
		return ret == Z_STREAM_ERROR ? -EINVAL : -ENOBUFS;
	*out = (size_t)(s->next_out - dst);
	return 0;
}

static int codec_zlib_decompress(void *ctx, const uint8_t *src, size_t len, uint8_t *dst,
				 size_t raw_len)
{
	struct codec_zlib_ctx *z = ctx;
	z_stream *s = &z->inf;
	uint8_t nothing;
	int ret;

	if (len > UINT_MAX || raw_len > UINT_MAX)
		return -PC_E_INTEGRITY;
	ret = codec_zlib_inf_start(z);
	if (ret != 0)
		return ret;
	s->next_in = src;
	s->avail_in = (uInt)len;
	/* zlib refuses a NULL next_out even with no room. */
	s->next_out = raw_len > 0 ? dst : &nothing;
	s->avail_out = (uInt)raw_len;
	ret = inflate(s, Z_FINISH);
	if (ret == Z_MEM_ERROR)
		return -ENOMEM;
	/* Exactly one stream, all input used, all output filled. */
	if (ret != Z_STREAM_END || s->avail_in != 0 || s->avail_out != 0)
		return -PC_E_INTEGRITY;
	return 0;
}

const struct codec codec_zlib = {
	.name = "zlib",
	.id = CODEC_ZLIB,
	.min_level = 1,
	.max_level = 9,
	.default_level = 6,
	.bound = codec_zlib_bound,
	.ctx_new = codec_zlib_ctx_new,
	.ctx_free = codec_zlib_ctx_free,
	.compress = codec_zlib_compress,
	.decompress = codec_zlib_decompress,
};
