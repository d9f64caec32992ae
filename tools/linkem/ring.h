/* SPDX-License-Identifier: Apache-2.0 */
/* ring: a FIFO of packets packed into one contiguous byte arena.
 *
 * Packets are read straight into the arena (no copy) and written out from
 * it, oldest first. The arena is allocated and touched once up front and
 * never grows. Not thread-safe: one worker owns a ring. */
#ifndef LINKEM_RING_H
#define LINKEM_RING_H

#include <stddef.h>
#include <stdint.h>

/* Header in front of every packet in the arena. */
struct ring_rec {
	uint64_t depart_ns;   /* leaves the shaper (end of serialisation) */
	uint64_t due_ns;      /* depart_ns + delay: when it is written out */
	uint32_t len;         /* packet bytes that follow the header */
	uint32_t wire;        /* bytes on the emulated wire */
	uint32_t segs;        /* segments on the emulated wire */
	uint32_t pad;
};

struct ring;

/* Allocates an arena of about capacity bytes whose largest packet is room
 * bytes. Returns NULL on ENOMEM or when capacity < 4 * room. */
struct ring *ring_new(size_t capacity, size_t room);

/* Frees the ring. NULL is a no-op. */
void ring_free(struct ring *r);

/* Returns room contiguous free bytes at the tail for the next packet, or
 * NULL when the arena is too full. The bytes stay reserved until the next
 * ring_reserve or ring_commit; reserving and not committing is allowed
 * (the packet was dropped). */
uint8_t *ring_reserve(struct ring *r);

/* Appends the packet of len <= room bytes written into the last reserved
 * area, with the header fields in rec (len is set here). Returns the
 * packet's position, for ring_at and ring_next. */
size_t ring_commit(struct ring *r, const struct ring_rec *rec, uint32_t len);

/* Packets held. */
size_t ring_count(const struct ring *r);

/* Position of the oldest packet; meaningful only when ring_count() > 0. */
size_t ring_first(const struct ring *r);

/* The packet at position pos (from ring_first, ring_next, ring_commit).
 * Its bytes follow the header. */
struct ring_rec *ring_at(const struct ring *r, size_t pos);

/* Position of the packet after the one at pos; equals ring_end() when pos
 * is the newest. */
size_t ring_next(const struct ring *r, size_t pos);

/* The position one past the newest packet. */
size_t ring_end(const struct ring *r);

/* Drops the oldest packet. ring_count() must be > 0. */
void ring_pop(struct ring *r);

#endif
