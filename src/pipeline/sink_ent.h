/* SPDX-License-Identifier: Apache-2.0 */
/* sink_ent: the sink's record of one announced entry, from its ENTRIES
 * message until it is finished (created, or failed) and the sink's
 * acknowledgement has passed it.
 *
 * A record holds the entry's attributes and strings in one allocation.
 * Entries with contents (a regular file of size > 0, or a stream) carry
 * the receiving state as well: the file being written, the blocks seen,
 * and a lock that guards them, because receivers, writers and the control
 * thread all touch it. Records are reference counted: the sink's table
 * holds one until the acknowledgement passes the entry; a block on its way
 * to a writer holds one. */
#ifndef PCOPY_SINK_ENT_H
#define PCOPY_SINK_ENT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "pipeline/dest.h"
#include "wire/proto.h"

struct dest_file;
struct journal;

/* How an entry's contents arrive: not yet known, in DATA blocks, or inside
 * a PACK. A file is carried one way only. */
enum sink_carry { SINK_CARRY_NONE = 0, SINK_CARRY_DATA, SINK_CARRY_PACK,
	SINK_CARRY_KEPT /* -u: unchanged here, so nothing may come */ };

/* What a data entry's file holds before the first of its blocks comes.
 * Anything but NONE: SAME blocks are in it already (those SUMS hashed),
 * and zeros must be written, not left as holes. */
enum sink_held {
	SINK_HELD_NONE,             /* a new, empty file */
	SINK_HELD_PARTIAL,          /* -a: the partial file an earlier run left */
	SINK_HELD_INPLACE,          /* --inplace: the destination's file itself */
	SINK_HELD_COPY,             /* --checksum: a new file, given the old one's
	                               bytes as they were hashed (sink_sums_send), or
	                               owed them (struct sink_owed) */
};

/* --checksum: a SAME block r's copy does not hold yet (sink_ent.owing):
 * which it is, and the checksum it came with, to check the old file's
 * bytes against when they are written into the copy after all. 16 bytes:
 * a block owed had its hash sent, and the hashes in flight are at most
 * PROTO_MAX_INFLIGHT_SUMS bytes (16 each), so all a sink owes takes no
 * more memory than they, and an index fits 32 bits. */
struct sink_owed {
	uint64_t sum;               /* proto_sum_low of its hash */
	uint32_t k;                 /* its index */
	uint32_t len;
};

struct sink_ent {
	/* The entry as announced; immutable. */
	uint32_t id;
	uint8_t type, flags;
	uint32_t mode, uid, gid;
	int64_t mtime_s, atime_s;
	uint32_t mtime_ns, atime_ns;
	uint64_t rdev;
	uint32_t link_id;
	char *path, *target, *user, *group; /* into str[] */
	bool data;                  /* has contents: a REG of size > 0 or a stream */

	atomic_uint refs;
	atomic_uint carry;          /* enum sink_carry, set once */
	bool ok;                    /* finished well; written before its done bit is set */

	/* Receiving state, data entries only. */
	pthread_mutex_t lock;       /* guards everything below */
	bool lock_ok;               /* lock was initialised */
	struct dest_file *df;       /* the file being written; NULL until the first block */
	int fd;                     /* its fd (stdout in ordered mode), -1 until opened */
	bool size_known;
	uint64_t size;
	uint64_t bytes;             /* raw bytes accounted, holes included */
	uint64_t max_end;           /* highest offset + length seen */
	uint64_t nblocks;           /* blocks accounted */
	uint64_t digest;            /* -e: the sum of the blocks' verify_mix (verify.h) */
	int base_fd;                /* --checksum: the file already at the destination, which
	                               SAME blocks are read from, open from the first of
	                               them until the entry is finished; else -1 */
	int copy_fd;                /* -e with SINK_HELD_COPY: the new file again, which the
	                               SAME blocks it holds are read back from, for the
	                               digest (the bytes hashed are there, whatever
	                               becomes of the old file); else -1. Closed with
	                               base_fd */
	unsigned base_users;        /* receivers reading base_fd or copy_fd now */
	uint64_t nsums;             /* --checksum, -a: blocks of it SUMS named so far */
	uint64_t copy_from, copied; /* SINK_HELD_COPY: of those, the ones the copy holds,
	                               copy_from .. copied - 1, written as hashed */
	bool owing;                 /* --checksum, an old file as big as the source's, and as
	                               old where a copy was made: until
	                               a block other than SAME comes, the SAME ones are not
	                               written into the copy (SINK_HELD_COPY; or none yet,
	                               where it could not be made) but owed (owed[]), so
	                               that a file every block of which matched costs no
	                               copy (sink_keep_same) */
	struct sink_owed *owed;     /* the blocks owed and not yet written, nowed of
	                               owed_cap (sink_owed_fill writes them) */
	size_t nowed, owed_cap;
	uint64_t matched, differed; /* of those, blocks that came as SAME, as DATA */
	bool old_known;             /* --checksum: old is the file SUMS hashed, as it was
	                               then (sink_sums_send); with --inplace, only its
	                               size */
	struct dest_ident old;
	struct journal *jr;         /* -a: the journal of the partial file df is, or NULL;
	                               freed when the entry is finished or dropped */
	bool device;                /* df is a device written into: zeros must be written,
	                               and it has no size to set (set once, before any
	                               block) */
	enum sink_held held;        /* what df holds before its first block (set once,
	                               before any block) */
	unsigned writing;           /* blocks claimed and still being written */
	uint8_t *seen;              /* bitmap of block indexes received */
	size_t seen_bytes;
	bool finishing;             /* claimed by whoever finishes it */
	bool failed;                /* given up: later blocks are dropped */
	int fail_code;              /* with failed, before it is finished: why */
	char *fail_msg;             /* ... and the words to report it with (owned; replaced
	                               with fail_code), or NULL: the finisher's own */

	char str[];
};

/* A record for e, with one reference (the table's). NULL on ENOMEM. */
struct sink_ent *sink_ent_new(const struct proto_entry *e);

/* Fills e (the caller's scratch, of which only the strings' lengths are
 * written) from r, for the destination's functions. */
void sink_ent_entry(const struct sink_ent *r, struct proto_entry *e);

void sink_ent_get(struct sink_ent *r);
/* Drops a reference; the last one frees r (its file must be closed). */
void sink_ent_put(struct sink_ent *r);

/* Keeps msg (at most PROTO_MAX_MSG bytes of it) as r's fail_msg, in place
 * of any it had, as fail_code is set with it; under r->lock. Out of
 * memory (or an empty msg), r keeps none, and its failure is reported in
 * the finisher's own words. */
void sink_ent_fail_msg(struct sink_ent *r, const char *msg);

#endif
