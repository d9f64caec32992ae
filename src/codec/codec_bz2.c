/* SPDX-License-Identifier: Apache-2.0 */
/* codec_bz2: the bzip2 backend, one bzip2 stream per block. The only file
 * that includes bzlib.h. The level is the block size in 100 kB (1-9).
 * libbz2 has no reset, so each block sets up and frees its own state and
 * the ctx only holds the level. */
#include "codec/codec.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <bzlib.h>

struct codec_bz2_ctx {
	int level;              /* 1-9 */
};

/* bzlib's prototypes take char * for input it only reads. */
static char *codec_bz2_in(const uint8_t *src)
{
	static const char empty;

	return (char *)(uintptr_t)(src != NULL ? (const char *)src : &empty);
}

static size_t codec_bz2_bound(size_t raw_len)
{
	/* bzlib's manual: 1% more than the input plus 600 bytes. */
	return raw_len + raw_len / 100 + 601;
}

static void *codec_bz2_ctx_new(int level)
{
	struct codec_bz2_ctx *z = malloc(sizeof(*z));

	if (z == NULL)
		return NULL;
	z->level = codec_level_clamp(&codec_bz2, level);
	return z;
}

static void codec_bz2_ctx_free(void *ctx)
{
	free(ctx);
}

static int codec_bz2_compress(void *ctx, const uint8_t *src, size_t len, uint8_t *dst,
			      size_t cap, size_t *out)
{
	struct codec_bz2_ctx *z = ctx;
	unsigned int n = cap > UINT_MAX ? UINT_MAX : (unsigned int)cap;
	int ret;

	if (len > UINT_MAX)
		return -EINVAL;
	/* workFactor 0: bzlib's default fallback threshold (30). */
	ret = BZ2_bzBuffToBuffCompress((char *)dst, &n, codec_bz2_in(src), (unsigned int)len,
				       z->level, 0, 0);
	switch (ret) {
	case BZ_OK:
		*out = n;
		return 0;
	case BZ_OUTBUFF_FULL:
		return -ENOBUFS;
	case BZ_MEM_ERROR:
		return -ENOMEM;
	default:
		return -EINVAL;
	}
}

/* The stream API rather than BZ2_bzBuffToBuffDecompress, which ignores
 * bytes after the end of the stream. */
static int codec_bz2_decompress(void *ctx, const uint8_t *src, size_t len, uint8_t *dst,
				size_t raw_len)
{
	bz_stream s;
	char nothing;
	int ret;

	(void)ctx;
	if (len > UINT_MAX || raw_len > UINT_MAX)
		return -PC_E_INTEGRITY;
	memset(&s, 0, sizeof(s));
	ret = BZ2_bzDecompressInit(&s, 0, 0);
	if (ret != BZ_OK)
		return ret == BZ_MEM_ERROR ? -ENOMEM : -EINVAL;
	s.next_in = codec_bz2_in(src);
	s.avail_in = (unsigned int)len;
	s.next_out = raw_len > 0 ? (char *)dst : &nothing;
	s.avail_out = (unsigned int)raw_len;
	ret = BZ2_bzDecompress(&s);
	BZ2_bzDecompressEnd(&s);
	if (ret == BZ_MEM_ERROR)
		return -ENOMEM;
	/* Exactly one stream, all input used, all output filled. */
	if (ret != BZ_STREAM_END || s.avail_in != 0 || s.avail_out != 0)
		return -PC_E_INTEGRITY;
	return 0;
}

const struct codec codec_bz2 = {
	.name = "bz2",
	.id = CODEC_BZ2,
	.min_level = 1,
	.max_level = 9,
	.default_level = 9,
	.bound = codec_bz2_bound,
	.ctx_new = codec_bz2_ctx_new,
	.ctx_free = codec_bz2_ctx_free,
	.compress = codec_bz2_compress,
	.decompress = codec_bz2_decompress,
};
