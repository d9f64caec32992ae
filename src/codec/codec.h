/* SPDX-License-Identifier: Apache-2.0 */
/* codec: block compression backends (none, zlib, lz4, bzip2) behind one
 * table of function pointers, and the -c option's grammar.
 *
 * A codec encodes one block at a time; every block is self-contained, so
 * blocks can be decoded in any order on any thread. The wire formats are
 * those of docs/PROTOCOL.md section 6.3: NONE is the raw bytes, ZLIB raw
 * deflate (RFC 1951, no header or Adler-32: XXH3 makes it redundant), LZ4
 * the LZ4 block format, and BZ2 one bzip2 stream. Only codec_<name>.c include the libraries' headers. */
#ifndef PCOPY_CODEC_H
#define PCOPY_CODEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sys/err.h"

enum codec_id { CODEC_NONE = 0, CODEC_ZLIB = 1, CODEC_LZ4 = 2, CODEC_BZ2 = 3, CODEC_COUNT };

/* One backend, a constant table. All functions are thread-safe given
 * distinct ctx objects; a ctx is used by one thread at a time. Lengths are
 * at most PROTO_MAX_BLOCK (64 MiB). */
struct codec {
	const char *name;            /* "none", "zlib", "lz4", "bz2" */
	enum codec_id id;            /* the id in block headers (PROTO_CODEC_* == these values) */
	int min_level, max_level, default_level; /* see codec_parse for their meaning */

	/* Worst-case encoded size of raw_len bytes. Pure. */
	size_t (*bound)(size_t raw_len);

	/* Per-thread state for compress and decompress at the given level,
	 * which must lie in [min_level, max_level] (out of range is clamped).
	 * The caller owns it and frees it with ctx_free. The big compressor
	 * and decompressor states are allocated on first use and then reused
	 * for every block. NULL on ENOMEM; none returns a dummy non-NULL. */
	void *(*ctx_new)(int level);

	/* Frees a ctx from this backend's ctx_new. NULL is a no-op. */
	void (*ctx_free)(void *ctx);

	/* Encodes src[0..len) into dst[0..cap) and sets *out to the encoded
	 * length. With cap >= bound(len) it always fits. A smaller cap is
	 * allowed (to try "compressed only if smaller"): if the output does
	 * not fit, returns -ENOBUFS and dst holds garbage, never more than
	 * cap bytes. Returns 0, -ENOBUFS, -ENOMEM or -EINVAL (len too big). */
	int (*compress)(void *ctx, const uint8_t *src, size_t len, uint8_t *dst, size_t cap,
			size_t *out);

	/* Decodes src[0..len) into dst, which must come out EXACTLY raw_len
	 * bytes: anything else (corrupt input, too short, too long, trailing
	 * garbage) returns -PC_E_INTEGRITY. Never reads past src[len-1] nor
	 * writes past dst[raw_len-1]; dst may be NULL if raw_len is 0. src is
	 * untrusted (it comes from the peer). Returns 0, -PC_E_INTEGRITY or
	 * -ENOMEM. */
	int (*decompress)(void *ctx, const uint8_t *src, size_t len, uint8_t *dst,
			  size_t raw_len);
};

/* The backends, one per codec_<name>.c. Callers use codec_by_id/name. */
extern const struct codec codec_none;
extern const struct codec codec_zlib;
extern const struct codec codec_lz4;
extern const struct codec codec_bz2;

/* The backend for a block header's codec id; NULL if unknown. Pure. */
const struct codec *codec_by_id(unsigned id);

/* The backend named exactly name ("zlib"; case matters); NULL if unknown.
 * Pure. */
const struct codec *codec_by_name(const char *name);

/* level clamped to [c->min_level, c->max_level]. Pure. */
int codec_level_clamp(const struct codec *c, int level);

/* A user's choice for one stream. */
struct codec_choice {
	enum codec_id id;
	int level;                   /* in the codec's [min_level, max_level]; 0 for none */
};

#define CODEC_MAX_CHOICES 64

/* Parses the -c option. The grammar (pcopy(1) documents it):
 *   N         0-9: zlib level N, with 0 meaning no compression
 *   none      no compression
 *   zlib[:N]  zlib level 1-9 (default 6); zlib:0 means none
 *   lz4[:N]   N = 1: LZ4 fast (the default); N = 2-12: LZ4 HC level N
 *   bz2[:N]   bzip2 with N * 100 kB blocks, 1-9 (default 9)
 *   auto      the caller adapts the codec; out[0] is none
 *   A,B,...   one item per stream (not auto), at most CODEC_MAX_CHOICES
 * Items have no spaces; a level is decimal digits only. Fills out[0..*n)
 * (out has room for CODEC_MAX_CHOICES) and sets *is_auto. Returns 0 or
 * -PC_E_USAGE with a message naming the bad item recorded in e (if not
 * NULL). Pure apart from e; thread-safe. */
int codec_parse(const char *spec, struct codec_choice *out, unsigned *n, bool *is_auto,
		struct pc_err *e);

/* Writes c as codec_parse reads it, for messages and summaries: "none",
 * "zlib:1", and the bare name at the default level ("lz4"); "?" for an
 * unknown id. Always NUL-terminates if cap > 0 (truncating). Pure. */
void codec_format(const struct codec_choice *c, char *buf, size_t cap);

#endif
