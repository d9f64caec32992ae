/* SPDX-License-Identifier: Apache-2.0 */
/* codec_lz4: the LZ4 backend, LZ4 block format (no frame). The only file
 * that includes lz4.h and lz4hc.h. Level 1 is LZ4's fast compressor at
 * acceleration 1; levels 2-12 are LZ4 HC at that level. Decoding is the
 * same for both. */
#include "codec/codec.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include <lz4.h>
#include <lz4hc.h>

#define CODEC_LZ4_FAST 1        /* the level that means LZ4_compress_fast */

struct codec_lz4_ctx {
	int level;              /* 1-12 */
	void *state;            /* compressor state, allocated on first compress */
};

static size_t codec_lz4_bound(size_t raw_len)
{
	/* LZ4_COMPRESSBOUND in size_t arithmetic; compress refuses more than
	 * LZ4_MAX_INPUT_SIZE. */
	return raw_len + raw_len / 255 + 16;
}

static void *codec_lz4_ctx_new(int level)
{
	struct codec_lz4_ctx *z = calloc(1, sizeof(*z));

	if (z == NULL)
		return NULL;
	z->level = codec_level_clamp(&codec_lz4, level);
	return z;
}

static void codec_lz4_ctx_free(void *ctx)
{
	struct codec_lz4_ctx *z = ctx;

	if (z == NULL)
		return;
	free(z->state);
	free(z);
}

static int codec_lz4_compress(void *ctx, const uint8_t *src, size_t len, uint8_t *dst,
			      size_t cap, size_t *out)
{
	static const char empty;     /* LZ4 crashes on a NULL src, even empty */
	struct codec_lz4_ctx *z = ctx;
	const char *in = src != NULL ? (const char *)src : &empty;
	int icap = cap > INT_MAX ? INT_MAX : (int)cap;
	int n;

	if (len > LZ4_MAX_INPUT_SIZE)
		return -EINVAL;
	if (z->state == NULL) {
		/* malloc's alignment satisfies both states. */
		z->state = malloc((size_t)(z->level == CODEC_LZ4_FAST ? LZ4_sizeofState()
								 : LZ4_sizeofStateHC()));
		if (z->state == NULL)
			return -ENOMEM;
	}
	if (z->level == CODEC_LZ4_FAST)
		n = LZ4_compress_fast_extState(z->state, in, (char *)dst, (int)len, icap, 1);
	else
		n = LZ4_compress_HC_extStateHC(z->state, in, (char *)dst, (int)len, icap,
					       z->level);
	/* 0 is LZ4's only failure, and with a valid state and size it means
	 * the output did not fit. */
	if (n <= 0)
		return -ENOBUFS;
	*out = (size_t)n;
	return 0;
}

static int codec_lz4_decompress(void *ctx, const uint8_t *src, size_t len, uint8_t *dst,
				size_t raw_len)
{
	int n;

	(void)ctx;
	if (len > INT_MAX || raw_len > INT_MAX)
		return -PC_E_INTEGRITY;
	/* _safe never reads past src[len-1] nor writes past dst[raw_len-1],
	 * and fails unless the block ends exactly at src[len-1]. */
	n = LZ4_decompress_safe((const char *)src, (char *)dst, (int)len, (int)raw_len);
	if (n < 0 || (size_t)n != raw_len)
		return -PC_E_INTEGRITY;
	return 0;
}

const struct codec codec_lz4 = {
	.name = "lz4",
	.id = CODEC_LZ4,
	.min_level = 1,
	.max_level = LZ4HC_CLEVEL_MAX,
	.default_level = CODEC_LZ4_FAST,
	.bound = codec_lz4_bound,
	.ctx_new = codec_lz4_ctx_new,
	.ctx_free = codec_lz4_ctx_free,
	.compress = codec_lz4_compress,
	.decompress = codec_lz4_decompress,
};
