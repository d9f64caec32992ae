/* SPDX-License-Identifier: Apache-2.0 */
/* wire: what packets read from a TUN device amount to on the emulated
 * wire, and cutting GSO super-packets into runs of their segments. Pure
 * functions on byte buffers: no I/O, no state. */
#ifndef LINKEM_WIRE_H
#define LINKEM_WIRE_H

#include <stddef.h>
#include <stdint.h>

/* Size of the virtio_net_hdr that precedes every packet on our TUN fds. */
#define WIRE_VNET_HDR_LEN 10u

/* Most segments a super-packet may have and still be cut. */
#define WIRE_MAX_SEGS 512u

/* A packet as seen by the wire. */
struct wire_info {
	uint64_t bytes;      /* sum over segments of (IP packet + overhead) */
	uint32_t segs;       /* segments on the wire: 1, or more for GSO */
	uint32_t hdr_len;    /* IP + TCP headers of each segment; 0 when the
			      * packet cannot be cut (not TCP GSO, or odd) */
	uint32_t l4;         /* offset of the TCP header in the IP packet */
	uint32_t mss;        /* payload bytes per segment, last may be less */
	uint32_t payload;    /* payload bytes in all */
	uint32_t overhead;   /* wire bytes added per segment */
};

/* Measures pkt (len bytes: a virtio_net_hdr, then an IP packet). A GSO
 * super-packet counts as the segments the kernel would cut it into, each
 * with its own copy of the IP and transport headers; overhead bytes (e.g.
 * 38 for Ethernet framing) are added per segment. A malformed packet counts
 * as one segment of its own length. Never fails. */
void wire_parse(const uint8_t *pkt, size_t len, uint32_t overhead,
		struct wire_info *wi);

/* Wire bytes of segment i (0 <= i < wi->segs). */
uint64_t wire_seg_bytes(const struct wire_info *wi, uint32_t i);

/* Writes into dst the packet (virtio_net_hdr first) that carries segments
 * [first, first + count) of the super-packet src, as the kernel's own
 * segmentation would make them: IP length and id, TCP sequence number and
 * flags, and the partial checksum adjusted; a GSO packet again when count
 * > 1. Needs wi->hdr_len != 0 and room for the result (at most the size
 * of src). Returns the length written. */
size_t wire_build_run(const uint8_t *src, const struct wire_info *wi,
		      uint32_t first, uint32_t count, uint8_t *dst);

#endif
