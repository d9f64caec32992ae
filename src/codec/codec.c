/* SPDX-License-Identifier: Apache-2.0 */
/* codec: the backend registry, the "none" backend, and the -c grammar. */
#include "codec/codec.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* Appended to every -c error so the user sees what is allowed. */
#define CODEC_SPEC_HELP "none, zlib[:0-9], lz4[:1-12], bz2[:1-9], auto or 0-9"
#define CODEC_LEVEL_DIGITS 5    /* longer levels are out of range anyway */

/* ---- none: the raw bytes ----------------------------------------------- */

/* ctx_new must not return NULL on success, and none has no state. */
static char codec_none_ctx;

static size_t codec_none_bound(size_t raw_len)
{
	return raw_len;
}

static void *codec_none_ctx_new(int level)
{
	(void)level;
	return &codec_none_ctx;
}

static void codec_none_ctx_free(void *ctx)
{
	(void)ctx;
}

static int codec_none_compress(void *ctx, const uint8_t *src, size_t len, uint8_t *dst,
			       size_t cap, size_t *out)
{
	(void)ctx;
	if (cap < len)
		return -ENOBUFS;
	if (len > 0)
		memcpy(dst, src, len);
	*out = len;
	return 0;
}

static int codec_none_decompress(void *ctx, const uint8_t *src, size_t len, uint8_t *dst,
				 size_t raw_len)
{
	(void)ctx;
	if (len != raw_len)
		return -PC_E_INTEGRITY;
	if (len > 0)
		memcpy(dst, src, len);
	return 0;
}

const struct codec codec_none = {
	.name = "none",
	.id = CODEC_NONE,
	.min_level = 0,
	.max_level = 0,
	.default_level = 0,
	.bound = codec_none_bound,
	.ctx_new = codec_none_ctx_new,
	.ctx_free = codec_none_ctx_free,
	.compress = codec_none_compress,
	.decompress = codec_none_decompress,
};

/* ---- Registry ---------------------------------------------------------- */

static const struct codec *const codec_table[CODEC_COUNT] = {
	[CODEC_NONE] = &codec_none,
	[CODEC_ZLIB] = &codec_zlib,
	[CODEC_LZ4] = &codec_lz4,
	[CODEC_BZ2] = &codec_bz2,
};

const struct codec *codec_by_id(unsigned id)
{
	return id < CODEC_COUNT ? codec_table[id] : NULL;
}

/* The backend whose name is exactly s[0..len). */
static const struct codec *codec_by_name_len(const char *s, size_t len)
{
	for (unsigned i = 0; i < CODEC_COUNT; i++) {
		const char *name = codec_table[i]->name;

		if (strlen(name) == len && memcmp(name, s, len) == 0)
			return codec_table[i];
	}
	return NULL;
}

const struct codec *codec_by_name(const char *name)
{
	return codec_by_name_len(name, strlen(name));
}

int codec_level_clamp(const struct codec *c, int level)
{
	if (level < c->min_level)
		return c->min_level;
	return level > c->max_level ? c->max_level : level;
}

/* ---- The -c grammar ---------------------------------------------------- */

static int codec_fail(struct pc_err *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static int codec_fail(struct pc_err *e, const char *fmt, ...)
{
	va_list ap;

	if (e == NULL)
		return -PC_E_USAGE;
	va_start(ap, fmt);
	pc_err_vset(e, -PC_E_USAGE, fmt, ap);
	va_end(ap);
	return -PC_E_USAGE;
}

/* s[0..len) as a decimal level: 1 to CODEC_LEVEL_DIGITS digits. -1 if not. */
static int codec_parse_level(const char *s, size_t len)
{
	int v = 0;

	if (len == 0 || len > CODEC_LEVEL_DIGITS)
		return -1;
	for (size_t i = 0; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

/* Sets *c from a level for codec k; zlib level 0 means none. */
static int codec_parse_set(const struct codec *k, int level, struct codec_choice *c)
{
	if (k->id == CODEC_ZLIB && level == 0)
		k = &codec_none;
	else if (level < k->min_level || level > k->max_level)
		return -1;
	c->id = k->id;
	c->level = level;
	return 0;
}

/* One item p[0..len) of a spec: "N", "auto", "name" or "name:N". */
static int codec_parse_item(const char *p, size_t len, struct codec_choice *c, bool *is_auto,
			    struct pc_err *e)
{
	const char *colon = memchr(p, ':', len);
	size_t name_len = colon ? (size_t)(colon - p) : len;
	const struct codec *k;
	int level;

	*is_auto = false;
	level = codec_parse_level(p, len);
	if (level >= 0) {
		if (level > 9 || codec_parse_set(&codec_zlib, level, c) != 0)
			return codec_fail(e, "-c: '%.*s' is not a level: a bare number "
					  "is a zlib level, 0-9 (%s)", (int)len, p, CODEC_SPEC_HELP);
		return 0;
	}
	if (len == 4 && memcmp(p, "auto", 4) == 0) {
		*is_auto = true;
		c->id = CODEC_NONE;
		c->level = 0;
		return 0;
	}
	k = codec_by_name_len(p, name_len);
	if (k == NULL)
		return codec_fail(e, "-c: '%.*s' is not a codec (%s)", (int)len, p,
				  CODEC_SPEC_HELP);
	if (colon && k->id == CODEC_NONE)
		return codec_fail(e, "-c: '%.*s': none takes no level (%s)", (int)len, p,
				  CODEC_SPEC_HELP);
	level = colon ? codec_parse_level(colon + 1, len - name_len - 1) : k->default_level;
	if (level < 0 || codec_parse_set(k, level, c) != 0)
		return codec_fail(e, "-c: '%.*s': %s levels are %d-%d (%s)", (int)len, p, k->name,
				  k->id == CODEC_ZLIB ? 0 : k->min_level, k->max_level,
				  CODEC_SPEC_HELP);
	return 0;
}

int codec_parse(const char *spec, struct codec_choice *out, unsigned *n, bool *is_auto,
		struct pc_err *e)
{
	const char *p = spec;
	unsigned count = 0;
	bool any_auto = false;

	*n = 0;
	*is_auto = false;
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t len = comma ? (size_t)(comma - p) : strlen(p);
		bool item_auto;

		if (len == 0)
			return codec_fail(e, "-c: '%s' has an empty item (%s)", spec,
					  CODEC_SPEC_HELP);
		if (count == CODEC_MAX_CHOICES)
			return codec_fail(e, "-c: more than %d items (one per stream) in '%s'",
					  CODEC_MAX_CHOICES, spec);
		if (codec_parse_item(p, len, &out[count], &item_auto, e) != 0)
			return -PC_E_USAGE;
		any_auto |= item_auto;
		count++;
		if (comma == NULL)
			break;
		p = comma + 1;
	}
	if (any_auto && count > 1)
		return codec_fail(e, "-c: 'auto' cannot be mixed with other items in '%s'", spec);
	*n = count;
	*is_auto = any_auto;
	return 0;
}

void codec_format(const struct codec_choice *c, char *buf, size_t cap)
{
	const struct codec *k = codec_by_id(c->id);

	if (cap == 0)
		return;
	if (k == NULL)
		snprintf(buf, cap, "?");
	else if (k->id == CODEC_NONE || c->level == k->default_level)
		snprintf(buf, cap, "%s", k->name);
	else
		snprintf(buf, cap, "%s:%d", k->name, c->level);
}
