/* SPDX-License-Identifier: Apache-2.0 */
/* journal: what -a (--resume) keeps of a file an interrupted run was
 * writing. The file's bytes so far stay in a partial file,
 * ".NAME.pcopy-part", beside its final name; its journal,
 * ".NAME.pcopy-jrnl", says which version of the source they are of (size,
 * modification time, block size) and which of its blocks were written
 * whole. A later run with -a hashes only those blocks and keeps the ones
 * the source proves to be its own; the journal is a hint, never trusted
 * for the bytes.
 *
 * The format (all integers big-endian), JOURNAL_HDR_LEN bytes of header:
 *   0  "PCOPYJRN"   magic
 *   8  u32          format, JOURNAL_FORMAT
 *  12  u32          block size
 *  16  u64          the source's size
 *  24  i64, u32     its modification time: seconds, nanoseconds
 *  36  u32          0
 *  40  u64          XXH3-64 of bytes 0..39
 * then the bitmap: bit k of byte k / 8 (least significant first) is block
 * k, one bit for each of the file's blocks, the bits past the last 0. The
 * file is exactly that long.
 *
 * A journal is written by one thread at a time (its owner serialises
 * journal_mark). */
#ifndef PCOPY_JOURNAL_H
#define PCOPY_JOURNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pipeline/tmpfile.h"

#define JOURNAL_FORMAT 1u
#define JOURNAL_HDR_LEN 48u
/* The largest bitmap: 128 Mi blocks (128 TiB at 1 MiB). A bigger file is
 * copied without a journal (-a cannot resume it). */
#define JOURNAL_MAX_BITMAP (16u << 20)

/* Which version of which source file a journal is for. */
struct journal_id {
	uint32_t block;      /* block size, > 0 */
	uint64_t size;       /* the source's size */
	int64_t mtime_s;     /* the source's modification time */
	uint32_t mtime_ns;
};

struct journal {
	int fd;              /* owned */
	uint64_t nblocks;
	uint64_t ndone;      /* bits set */
	uint8_t *bits;       /* (nblocks + 7) / 8 bytes, owned */
};

/* What journal_parse found wrong: a journal of another version of the
 * file (the source changed: copy afresh, quietly), or one that no run of
 * ours wrote (damaged or planted: say so). */
enum journal_verdict { JOURNAL_OK = 0, JOURNAL_STALE = 1, JOURNAL_BAD = 2 };

/* Whether a file of id's size gets a journal: its bitmap fits
 * JOURNAL_MAX_BITMAP. */
bool journal_fits(const struct journal_id *id);

/* Bytes of a journal for id (header and bitmap); id must fit. */
size_t journal_len(const struct journal_id *id);

/* Checks len bytes of a journal against want (which must fit). OK: the
 * bitmap (journal_len(want) - JOURNAL_HDR_LEN bytes) is copied to bits
 * and its set bits counted in *ndone. Else *why says what is wrong, for a
 * message ("is not a pcopy journal"). */
enum journal_verdict journal_parse(const uint8_t *buf, size_t len, const struct journal_id *want,
				   uint8_t *bits, uint64_t *ndone, const char **why);

/* Reads the journal open at fd (taken over: closed on failure too) and
 * checks it against want. OK: *out (journal_free). Else the verdict, with
 * *why, or -errno for a read that failed. */
int journal_load(int fd, const struct journal_id *want, struct journal **out, const char **why);

/* A fresh journal in fd (taken over: closed on failure too; an empty
 * file, opened for writing): the header for id, no block done. Returns 0
 * with *out, or -errno. */
int journal_create(int fd, const struct journal_id *id, struct journal **out);

/* Block idx (< nblocks) is written whole: sets its bit, on the disk too.
 * Returns 0 or -errno. */
int journal_mark(struct journal *j, uint64_t idx);

bool journal_has(const struct journal *j, uint64_t idx);

/* Closes and frees j; NULL is a no-op. */
void journal_free(struct journal *j);

/* The partial file's and the journal's names for the final name name,
 * each TMPFILE_NAME_CAP bytes: ".NAME.pcopy-part" and ".NAME.pcopy-jrnl",
 * NAME cut to 180 bytes and followed by a hash of the whole when longer. */
void journal_names(const char *name, char *part, char *jrnl);

/* Whether name has the form journal_names gives: ".*.pcopy-part" or
 * ".*.pcopy-jrnl". */
bool journal_name_reserved(const char *name);

#endif
