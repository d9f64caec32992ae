/* SPDX-License-Identifier: Apache-2.0 */
/* decoder: compressed payloads back to raw bytes. */
#include "pipeline/decoder.h"

#include <errno.h>
#include <stdlib.h>

#include "codec/codec.h"
#include "sys/err.h"
#include "sys/platform.h"

struct decoder {
	uint8_t *scratch;              /* same size and alignment as pool buffers */
	size_t cap;
	void *ctx[CODEC_COUNT];        /* lazily created, one per codec */
	uint64_t cpu_ns;
};

struct decoder *decoder_new(size_t buf_cap)
{
	struct decoder *d = calloc(1, sizeof(*d));

	if (d == NULL)
		return NULL;
	d->cap = buf_cap;
	d->scratch = bufpool_alloc_data(buf_cap);
	if (d->scratch == NULL) {
		free(d);
		return NULL;
	}
	return d;
}

void decoder_free(struct decoder *d)
{
	if (d == NULL)
		return;
	for (unsigned i = 0; i < CODEC_COUNT; i++)
		if (d->ctx[i] != NULL)
			codec_by_id(i)->ctx_free(d->ctx[i]);
	bufpool_free_data(d->scratch);
	free(d);
}

uint64_t decoder_cpu_ns(const struct decoder *d)
{
	return d->cpu_ns;
}

int decoder_run(struct decoder *d, struct buf *b)
{
	const struct codec *c = codec_by_id(b->hdr.codec);
	uint64_t t0;
	int ret;

	if (c == NULL || b->hdr.raw_len > d->cap)
		return -PC_E_PROTO;
	if (b->hdr.codec == CODEC_NONE) {
		if (b->hdr.enc_len != b->hdr.raw_len)
			return -PC_E_INTEGRITY;
		b->len = b->hdr.raw_len;
		return 0;
	}
	if (d->ctx[c->id] == NULL) {
		d->ctx[c->id] = c->ctx_new(c->default_level);
		if (d->ctx[c->id] == NULL)
			return -ENOMEM;
	}
	t0 = platform_thread_cpu_ns();
	ret = c->decompress(d->ctx[c->id], b->data, b->hdr.enc_len, d->scratch, b->hdr.raw_len);
	d->cpu_ns += platform_thread_cpu_ns() - t0;
	if (ret < 0)
		return ret == -ENOMEM ? ret : -PC_E_INTEGRITY;
	uint8_t *enc = b->data;
	b->data = d->scratch;
	d->scratch = enc;
	b->len = b->hdr.raw_len;
	return 0;
}

int decoder_verify(struct decoder *d, struct buf *b)
{
	const struct proto_block *h = &b->hdr;
	int ret;

	b->len = h->raw_len;
	if (h->flags & PROTO_BLK_HOLE)
		return 0;
	ret = decoder_run(d, b);
	if (ret < 0)
		return ret;
	if (proto_checksum(b->data, h->raw_len) != h->checksum)
		return -PC_E_INTEGRITY;
	return 0;
}
