/* SPDX-License-Identifier: Apache-2.0 */
/* link: one direction of the emulated link.
 *
 * Packets read from the input TUN fd enter a FIFO. A token bucket on the
 * bytes on the wire gives each its departure time (end of serialisation);
 * it is written to the output TUN fd one propagation delay later. The
 * queue limit drops at the tail; random loss drops before the queue. Both
 * act on each segment of a GSO super-packet. */
#ifndef LINKEM_LINK_H
#define LINKEM_LINK_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct link_params {
	uint64_t rate_bps;     /* bandwidth cap, bits per second, > 0 */
	uint64_t delay_ns;     /* one-way propagation delay */
	uint64_t queue_bytes;  /* tail drop above this many queued wire bytes */
	uint64_t burst_bytes;  /* token bucket depth beyond one packet */
	double loss;           /* probability of dropping a packet, 0..1 */
	uint32_t overhead;     /* wire bytes added to every segment */
	uint64_t seed;         /* loss PRNG seed */
};

/* Counters as plain numbers, from link_stats(). A "packet" is one read
 * from or written to a TUN device (a GSO super-packet is one); a "segment"
 * is one packet on the emulated wire. Drops count segments. */
struct link_stats {
	uint64_t rx_pkts, rx_segs, rx_bytes;   /* read from the input TUN */
	uint64_t tx_pkts, tx_segs, tx_bytes;   /* written to the output TUN */
	uint64_t drop_queue;   /* segments dropped: queue limit reached */
	uint64_t drop_loss;    /* segments dropped: random loss */
	uint64_t drop_ring;    /* segments dropped: linkem's buffer full */
	uint64_t drop_write;   /* packets the output TUN refused */
	uint64_t qmax_bytes;   /* largest queue seen, wire bytes */
	uint64_t qmax_pkts;    /* largest queue seen, segments */
	uint64_t late_sum_ns;  /* sum of (write time - due time) */
	uint64_t late_max_ns;  /* largest (write time - due time) */
	uint64_t late_1ms;     /* packets written more than 1 ms late */
};

struct link;

/* Makes a direction that reads in_fd and writes out_fd (non-blocking TUN
 * fds with 10-byte virtio_net_hdr; the link does not own them). Allocates
 * its whole buffer now. Returns NULL on ENOMEM. */
struct link *link_new(const char *name, int in_fd, int out_fd,
		      const struct link_params *p);

/* Frees l. NULL is a no-op. No worker may be running l. */
void link_free(struct link *l);

/* The direction's name, e.g. "A->B". */
const char *link_name(const struct link *l);

/* Copies l's counters into out. Any thread, at any time, while a worker
 * runs l: each counter is read atomically, the set is not a snapshot. */
void link_stats(const struct link *l, struct link_stats *out);

/* Runs links[0..n) (n <= 2) in the calling thread until *stop is set and
 * wake_fd becomes readable, or an fd fails. Sleeps in ppoll until the next
 * packet is due or arrives. Returns 0 on stop, or -errno with a message in
 * err. Each link must be run by one thread only. */
int link_run(struct link **links, size_t n, int wake_fd,
	     const atomic_bool *stop, char *err, size_t errlen);

#endif
