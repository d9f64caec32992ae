/* SPDX-License-Identifier: Apache-2.0 */
/* link: shaper, delay line and counters for one direction.
 *
 * Each packet gets two times when it arrives: depart_ns, when the token
 * bucket has serialised it, and due_ns = depart_ns + delay. Both only grow
 * from one packet to the next, so one FIFO holds the queue (packets not yet
 * departed) followed by the delay line (departed, not yet due). q_pos marks
 * where the queue starts; the packets before it are on the "wire". */
#include "link.h"
#include "ring.h"
#include "wire.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#define LINK_ROOM (65536u + 512u)  /* largest TUN packet, vnet header too */
#define LINK_BATCH 64              /* reads per fd before we look at sends */
#define LINK_NS_PER_S 1000000000ull

enum link_ctr {
	LC_RX_PKTS, LC_RX_SEGS, LC_RX_BYTES,
	LC_TX_PKTS, LC_TX_SEGS, LC_TX_BYTES,
	LC_DROP_QUEUE, LC_DROP_LOSS, LC_DROP_RING, LC_DROP_WRITE,
	LC_QMAX_BYTES, LC_QMAX_PKTS, LC_LATE_SUM, LC_LATE_MAX, LC_LATE_1MS,
	LC_COUNT
};

struct link {
	char name[16];           /* fixed at creation */
	int in_fd, out_fd;       /* not owned */
	struct link_params p;    /* fixed at creation */
	struct ring *ring;       /* worker only */
	uint8_t *scratch;        /* worker only: packets dropped for want of room */
	uint64_t busy_until;     /* worker only: shaper's virtual clock, ns */
	uint64_t ser_rem;        /* worker only: rounding carry, ns/rate units */
	uint64_t burst_ns;       /* fixed: burst_bytes at rate */
	uint64_t loss_thr;       /* fixed: drop when a draw < this; 0 = never */
	uint64_t prng;           /* worker only: xorshift64* state */
	size_t q_pos;            /* worker only: first packet not departed */
	uint64_t q_pkts;         /* worker only: ring records not departed */
	uint64_t q_segs;         /* worker only: their segments */
	uint64_t q_bytes;        /* worker only: their wire bytes */
	_Atomic uint64_t ctr[LC_COUNT];  /* written by the worker only */
};

static uint64_t link_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * LINK_NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* Single writer, so a relaxed load and store suffice (no locked add). */
static void link_add(struct link *l, enum link_ctr c, uint64_t v)
{
	uint64_t old = atomic_load_explicit(&l->ctr[c], memory_order_relaxed);

	atomic_store_explicit(&l->ctr[c], old + v, memory_order_relaxed);
}

static void link_max(struct link *l, enum link_ctr c, uint64_t v)
{
	if (v > atomic_load_explicit(&l->ctr[c], memory_order_relaxed))
		atomic_store_explicit(&l->ctr[c], v, memory_order_relaxed);
}

static uint64_t link_get(const struct link *l, enum link_ctr c)
{
	return atomic_load_explicit(&l->ctr[c], memory_order_relaxed);
}

static uint64_t link_splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint64_t link_random(struct link *l)
{
	uint64_t x = l->prng;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	l->prng = x;
	return x * 0x2545f4914f6cdd1dull;
}

struct link *link_new(const char *name, int in_fd, int out_fd,
		      const struct link_params *p)
{
	struct link *l = NULL;
	uint64_t flight, cap, seed = p->seed;

	l = calloc(1, sizeof(*l));
	if (l == NULL)
		return NULL;
	snprintf(l->name, sizeof(l->name), "%s", name);
	l->in_fd = in_fd;
	l->out_fd = out_fd;
	l->p = *p;
	l->burst_ns = p->burst_bytes * 8 * LINK_NS_PER_S / p->rate_bps;
	if (p->loss >= 1.0)
		l->loss_thr = UINT64_MAX;
	else if (p->loss > 0.0)
		l->loss_thr = (uint64_t)(p->loss * 18446744073709551616.0);
	l->prng = link_splitmix(&seed) | 1;
	/* Queue and delay line; small packets cost up to twice their wire
	 * size in the arena (header, vnet header, alignment). */
	flight = p->rate_bps / 8 * p->delay_ns / LINK_NS_PER_S;
	cap = 2 * (p->queue_bytes + flight + p->burst_bytes) + 64ull * LINK_ROOM;
	l->ring = ring_new((size_t)cap, LINK_ROOM);
	l->scratch = malloc(LINK_ROOM);
	if (l->ring == NULL || l->scratch == NULL) {
		link_free(l);
		return NULL;
	}
	return l;
}

void link_free(struct link *l)
{
	if (l == NULL)
		return;
	ring_free(l->ring);
	free(l->scratch);
	free(l);
}

const char *link_name(const struct link *l)
{
	return l->name;
}

void link_stats(const struct link *l, struct link_stats *out)
{
	out->rx_pkts = link_get(l, LC_RX_PKTS);
	out->rx_segs = link_get(l, LC_RX_SEGS);
	out->rx_bytes = link_get(l, LC_RX_BYTES);
	out->tx_pkts = link_get(l, LC_TX_PKTS);
	out->tx_segs = link_get(l, LC_TX_SEGS);
	out->tx_bytes = link_get(l, LC_TX_BYTES);
	out->drop_queue = link_get(l, LC_DROP_QUEUE);
	out->drop_loss = link_get(l, LC_DROP_LOSS);
	out->drop_ring = link_get(l, LC_DROP_RING);
	out->drop_write = link_get(l, LC_DROP_WRITE);
	out->qmax_bytes = link_get(l, LC_QMAX_BYTES);
	out->qmax_pkts = link_get(l, LC_QMAX_PKTS);
	out->late_sum_ns = link_get(l, LC_LATE_SUM);
	out->late_max_ns = link_get(l, LC_LATE_MAX);
	out->late_1ms = link_get(l, LC_LATE_1MS);
}

/* Moves the queue's start past every packet serialised by now. */
static void link_queue_advance(struct link *l, uint64_t now)
{
	const struct ring_rec *rec;

	while (l->q_pkts > 0) {
		rec = ring_at(l->ring, l->q_pos);
		if (rec->depart_ns > now)
			break;
		l->q_pkts--;
		l->q_segs -= rec->segs;
		l->q_bytes -= rec->wire;
		l->q_pos = ring_next(l->ring, l->q_pos);
	}
}

/* Serialisation time of wire bytes at the cap, exact over the long run. */
static uint64_t link_ser_ns(struct link *l, uint64_t wire)
{
	uint64_t num = wire * 8 * LINK_NS_PER_S + l->ser_rem;

	l->ser_rem = num % l->p.rate_bps;
	return num / l->p.rate_bps;
}

/* Puts a packet of len bytes, already in the reserved ring area, in the
 * FIFO at time now: the shaper gives it its departure time. */
static void link_enqueue(struct link *l, uint32_t len, uint64_t wire,
			 uint32_t segs, uint64_t now)
{
	struct ring_rec rec;
	uint64_t start;
	size_t pos;

	start = now - l->burst_ns;
	if (start < l->busy_until)
		start = l->busy_until;
	l->busy_until = start + link_ser_ns(l, wire);
	memset(&rec, 0, sizeof(rec));
	rec.depart_ns = l->busy_until > now ? l->busy_until : now;
	rec.due_ns = rec.depart_ns + l->p.delay_ns;
	rec.wire = (uint32_t)wire;
	rec.segs = segs;
	pos = ring_commit(l->ring, &rec, len);
	if (l->q_pkts == 0)
		l->q_pos = pos;
	l->q_pkts++;
	l->q_segs += segs;
	l->q_bytes += wire;
	link_max(l, LC_QMAX_BYTES, l->q_bytes);
	link_max(l, LC_QMAX_PKTS, l->q_segs);
}

/* Loss, then tail drop, for wire bytes that make segs segments and go
 * or stay together; acc is what the same packet already put in the
 * queue. Returns whether they stay. Drops count segments. */
static bool link_admit(struct link *l, uint64_t wire, uint32_t segs,
		       uint64_t acc)
{
	if (l->loss_thr != 0 && link_random(l) < l->loss_thr) {
		link_add(l, LC_DROP_LOSS, segs);
		return false;
	}
	if (l->q_bytes + acc > 0 && l->q_bytes + acc + wire > l->p.queue_bytes) {
		link_add(l, LC_DROP_QUEUE, segs);
		return false;
	}
	return true;
}

/* Enqueues the kept runs of segments of a super-packet some of whose
 * segments were dropped. Copies it aside first: the runs are rebuilt in
 * the ring where it was read. */
static void link_enqueue_runs(struct link *l, const uint8_t *pkt, size_t len,
			      const struct wire_info *wi, const bool *keep,
			      uint64_t now)
{
	uint32_t first, n, i;
	uint64_t wire;
	uint8_t *dst;
	size_t out;

	memcpy(l->scratch, pkt, len);
	for (first = 0; first < wi->segs; first += n) {
		for (n = 0; first + n < wi->segs && keep[first + n] ==
		     keep[first]; n++)
			;
		if (!keep[first])
			continue;
		dst = ring_reserve(l->ring);
		if (dst == NULL) {
			link_add(l, LC_DROP_RING, n);
			continue;
		}
		out = wire_build_run(l->scratch, wi, first, n, dst);
		for (wire = 0, i = first; i < first + n; i++)
			wire += wire_seg_bytes(wi, i);
		link_enqueue(l, (uint32_t)out, wire, n, now);
	}
}

/* Takes the packet of len bytes just read into the reserved ring area at
 * time now. Loss and tail drop apply to each segment on the wire: a GSO
 * super-packet that loses some is cut into runs of the rest. */
static void link_accept(struct link *l, const uint8_t *pkt, uint32_t len,
			uint64_t now)
{
	bool keep[WIRE_MAX_SEGS];
	struct wire_info wi;
	uint64_t acc = 0, w;
	uint32_t i, kept = 0;

	wire_parse(pkt, len, l->p.overhead, &wi);
	link_add(l, LC_RX_PKTS, 1);
	link_add(l, LC_RX_SEGS, wi.segs);
	link_add(l, LC_RX_BYTES, wi.bytes);
	link_queue_advance(l, now);
	if (wi.segs == 1 || wi.hdr_len == 0) {
		/* One unit: a plain packet, or GSO we cannot cut. */
		if (link_admit(l, wi.bytes, wi.segs, 0))
			link_enqueue(l, len, wi.bytes, wi.segs, now);
		return;
	}
	for (i = 0; i < wi.segs; i++) {
		w = wire_seg_bytes(&wi, i);
		keep[i] = link_admit(l, w, 1, acc);
		acc += keep[i] ? w : 0;
		kept += keep[i];
	}
	if (kept == wi.segs)
		link_enqueue(l, len, wi.bytes, wi.segs, now);
	else if (kept > 0)
		link_enqueue_runs(l, pkt, len, &wi, keep, now);
}

/* Counts a packet read into scratch because the ring was full. */
static void link_drop_unbuffered(struct link *l, uint32_t len)
{
	struct wire_info wi;

	wire_parse(l->scratch, len, l->p.overhead, &wi);
	link_add(l, LC_RX_PKTS, 1);
	link_add(l, LC_RX_SEGS, wi.segs);
	link_add(l, LC_RX_BYTES, wi.bytes);
	link_add(l, LC_DROP_RING, wi.segs);
}

/* Reads up to LINK_BATCH packets. Returns 1 when more may be waiting, 0
 * when the fd is drained, -errno when it failed. */
static int link_read_batch(struct link *l)
{
	uint8_t *buf;
	ssize_t n;
	int i;

	for (i = 0; i < LINK_BATCH; i++) {
		buf = ring_reserve(l->ring);
		n = read(l->in_fd, buf != NULL ? buf : l->scratch, LINK_ROOM);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return 0;
		if (n < 0)
			return -errno;
		if (n == 0)
			return 0;
		if (buf == NULL) {
			link_drop_unbuffered(l, (uint32_t)n);
			continue;
		}
		link_accept(l, buf, (uint32_t)n, link_now());
	}
	return 1;
}

/* Writes every packet due by *now, oldest first; *now is kept current.
 * Returns 0, or -errno when the output fd is gone. */
static int link_send_due(struct link *l, uint64_t *now)
{
	struct ring_rec *rec;
	uint64_t late;
	ssize_t n;

	while (ring_count(l->ring) > 0) {
		rec = ring_at(l->ring, ring_first(l->ring));
		if (rec->due_ns > *now)
			break;
		link_queue_advance(l, *now);
		late = *now - rec->due_ns;
		n = write(l->out_fd, rec + 1, rec->len);
		if (n < 0 && (errno == EBADF || errno == EBADFD))
			return -errno;
		if (n < 0) {
			link_add(l, LC_DROP_WRITE, 1);
		} else {
			link_add(l, LC_TX_PKTS, 1);
			link_add(l, LC_TX_SEGS, rec->segs);
			link_add(l, LC_TX_BYTES, rec->wire);
			link_add(l, LC_LATE_SUM, late);
			link_max(l, LC_LATE_MAX, late);
			link_add(l, LC_LATE_1MS, late > 1000000);
		}
		ring_pop(l->ring);
		*now = link_now();
	}
	return 0;
}

/* The earliest due time over links, or UINT64_MAX when all are empty. */
static uint64_t link_next_due(struct link **links, size_t n)
{
	uint64_t next = UINT64_MAX, due;
	size_t i;

	for (i = 0; i < n; i++) {
		if (ring_count(links[i]->ring) == 0)
			continue;
		due = ring_at(links[i]->ring, ring_first(links[i]->ring))->due_ns;
		if (due < next)
			next = due;
	}
	return next;
}

/* Sleeps until an input is readable, wake_fd fires, or the time next. */
static int link_wait(struct link **links, size_t n, int wake_fd,
		     uint64_t next, uint64_t now)
{
	struct pollfd fds[3];
	struct timespec ts;
	size_t i;

	for (i = 0; i < n; i++) {
		fds[i].fd = links[i]->in_fd;
		fds[i].events = POLLIN;
	}
	fds[n].fd = wake_fd;
	fds[n].events = POLLIN;
	ts.tv_sec = (time_t)((next - now) / LINK_NS_PER_S);
	ts.tv_nsec = (long)((next - now) % LINK_NS_PER_S);
	if (ppoll(fds, n + 1, next == UINT64_MAX ? NULL : &ts, NULL) < 0 &&
	    errno != EINTR)
		return -errno;
	return 0;
}

int link_run(struct link **links, size_t n, int wake_fd,
	     const atomic_bool *stop, char *err, size_t errlen)
{
	const char *what = "ppoll", *who = links[0]->name;
	uint64_t now, next;
	bool more;
	size_t i;
	int ret = 0;

	if (n == 0 || n > 2)
		return -EINVAL;
	/* Our timers are the emulation: no slack on ppoll wake-ups. */
	prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
	while (ret == 0 && !atomic_load(stop)) {
		now = link_now();
		more = false;
		for (i = 0; i < n && ret == 0; i++) {
			who = links[i]->name;
			what = "write";
			ret = link_send_due(links[i], &now);
			if (ret < 0)
				break;
			what = "read";
			ret = link_read_batch(links[i]);
			more |= ret > 0;
			ret = ret > 0 ? 0 : ret;
		}
		if (ret < 0 || more)
			continue;
		now = link_now();
		next = link_next_due(links, n);
		what = "ppoll";
		if (next > now)
			ret = link_wait(links, n, wake_fd, next, now);
	}
	if (ret < 0)
		snprintf(err, errlen, "%s: %s failed: %s (was the TUN device "
			 "or its namespace deleted?)", who, what, strerror(-ret));
	return ret;
}
