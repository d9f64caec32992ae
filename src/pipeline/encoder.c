/* SPDX-License-Identifier: Apache-2.0 */
/* encoder: holes, compression, and knowing when not to compress. */
#include "pipeline/encoder.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sys/err.h"
#include "sys/fault.h"
#include "sys/platform.h"

#define ENC_PROBE_LEN (64u << 10)   /* sample size for a probe */
#define ENC_PROBE_EVERY 16u          /* while skipping, probe every Nth block */
#define ENC_SKIP_BLOCKS 64u          /* blocks to skip after a bad streak */
#define ENC_BAD_STREAK 2u            /* incompressible blocks that start a skip */
#define ENC_MAX_CTX 16u

struct enc_ctx {
	struct codec_choice choice;
	void *ctx;
};

struct encoder {
	uint8_t *scratch;              /* same size and alignment as pool buffers */
	size_t cap;
	struct enc_ctx ctx[ENC_MAX_CTX]; /* lazily created, one per choice used */
	unsigned nctx;
	void *probe_ctx;               /* LZ4 at its fastest, for probes */
	struct enc_stats st;
};

void enc_file_init(struct enc_file *f)
{
	atomic_init(&f->skip, 0);
	atomic_init(&f->streak, 0);
}

struct encoder *encoder_new(size_t buf_cap)
{
	struct encoder *e;

	if (fault_fire(FAULT_ENCODER_NEW))
		return NULL; /* a test's stand-in for ENOMEM */
	e = calloc(1, sizeof(*e));
	if (e == NULL)
		return NULL;
	e->cap = buf_cap;
	e->scratch = bufpool_alloc_data(buf_cap);
	if (e->scratch == NULL) {
		free(e);
		return NULL;
	}
	return e;
}

void encoder_free(struct encoder *e)
{
	if (e == NULL)
		return;
	for (unsigned i = 0; i < e->nctx; i++)
		codec_by_id(e->ctx[i].choice.id)->ctx_free(e->ctx[i].ctx);
	if (e->probe_ctx != NULL)
		codec_by_id(CODEC_LZ4)->ctx_free(e->probe_ctx);
	bufpool_free_data(e->scratch);
	free(e);
}

const struct enc_stats *encoder_stats(const struct encoder *e)
{
	return &e->st;
}

bool encoder_is_zero(const uint8_t *p, size_t len)
{
	/* Random data fails on the first bytes; zeros cost one memcmp pass. */
	if (len == 0)
		return true;
	if (p[0] != 0 || (len >= 16 && (p[len / 2] != 0 || p[len - 1] != 0)))
		return false;
	return memcmp(p, p + 1, len - 1) == 0;
}

static void *enc_ctx_for(struct encoder *e, const struct codec_choice *c)
{
	for (unsigned i = 0; i < e->nctx; i++)
		if (e->ctx[i].choice.id == c->id && e->ctx[i].choice.level == c->level)
			return e->ctx[i].ctx;
	if (e->nctx == ENC_MAX_CTX) {
		/* More distinct choices than slots: recycle the oldest. */
		codec_by_id(e->ctx[0].choice.id)->ctx_free(e->ctx[0].ctx);
		memmove(&e->ctx[0], &e->ctx[1], sizeof(e->ctx[0]) * (ENC_MAX_CTX - 1));
		e->nctx--;
	}
	void *ctx = codec_by_id(c->id)->ctx_new(c->level);
	if (ctx != NULL)
		e->ctx[e->nctx++] = (struct enc_ctx){ *c, ctx };
	return ctx;
}

/* Does a 64 KiB sample of the block shrink by 10 % under LZ4? */
static bool enc_probe(struct encoder *e, const struct buf *b)
{
	const struct codec *lz4 = codec_by_id(CODEC_LZ4);
	size_t len = b->len < ENC_PROBE_LEN ? b->len : ENC_PROBE_LEN, out = 0;

	if (e->probe_ctx == NULL)
		e->probe_ctx = lz4->ctx_new(lz4->min_level);
	e->st.probes++;
	if (e->probe_ctx == NULL || len < 1024)
		return true; /* cannot tell: try the real thing */
	int ret = lz4->compress(e->probe_ctx, b->data, len, e->scratch, len - len / 10, &out);
	if (ret == -ENOBUFS)
		return false;
	return true; /* shrank by 10 %, or cannot tell: try the real thing */
}

/* Decides, from the file's recent history, whether to compress this block. */
static bool enc_should_try(struct encoder *e, const struct buf *b, struct enc_file *f)
{
	unsigned skip = atomic_load(&f->skip);

	if (skip == 0)
		return true;
	atomic_store(&f->skip, skip - 1);
	if ((skip - 1) % ENC_PROBE_EVERY != 0)
		return false;
	if (!enc_probe(e, b)) {
		if (skip == 1)
			atomic_store(&f->skip, ENC_SKIP_BLOCKS); /* still random: re-arm */
		return false;
	}
	atomic_store(&f->skip, 0);
	atomic_store(&f->streak, 0);
	return true;
}

int encoder_run(struct encoder *e, struct buf *b, const struct codec_choice *c,
		struct enc_file *f)
{
	const struct codec *codec;
	size_t out = 0;
	uint64_t t0;
	int ret;

	b->hdr.codec = CODEC_NONE;
	b->hdr.enc_len = (uint32_t)b->len;
	/* A PACK is never a hole: its statuses (all 0 when every file was
	 * read) must reach the sink, and small files of zeros make the whole
	 * payload zero. It is compressed, or sent raw, like any block. */
	if (b->hdr.type != PROTO_BLK_PACK && encoder_is_zero(b->data, b->len)) {
		b->hdr.flags |= PROTO_BLK_HOLE;
		b->hdr.enc_len = 0;
		b->len = 0;
		e->st.holes++;
		return 0;
	}
	if (c->id == CODEC_NONE)
		return 0;
	codec = codec_by_id(c->id);
	t0 = platform_thread_cpu_ns();
	if (!enc_should_try(e, b, f)) {
		e->st.raw++;
		e->st.cpu_ns += platform_thread_cpu_ns() - t0;
		return 0;
	}
	void *ctx = enc_ctx_for(e, c);
	if (ctx == NULL)
		return -ENOMEM;
	/* Saving under 1/32 is not worth the sink's decoding: the output may
	 * not reach that size, which also lets the codec give up early on
	 * data that does not compress. */
	ret = fault_fire(FAULT_COMPRESS)
		      ? -ENOMEM /* a test's stand-in for a codec failure */
		      : codec->compress(ctx, b->data, b->len, e->scratch, b->len - b->len / 32, &out);
	e->st.cpu_ns += platform_thread_cpu_ns() - t0;
	if (ret < 0 && ret != -ENOBUFS)
		return ret;
	if (ret == -ENOBUFS || out == 0) {
		e->st.raw++;
		if (atomic_fetch_add(&f->streak, 1) + 1 >= ENC_BAD_STREAK)
			atomic_store(&f->skip, ENC_SKIP_BLOCKS);
		return 0;
	}
	atomic_store(&f->streak, 0);
	uint8_t *raw = b->data;
	b->data = e->scratch;
	e->scratch = raw;
	b->hdr.codec = (uint8_t)c->id;
	b->hdr.enc_len = (uint32_t)out;
	b->len = out;
	e->st.compressed++;
	return 0;
}
