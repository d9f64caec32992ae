// SPDX-License-Identifier: Apache-2.0
/* probe_rec: what pcopy --probe advises, from the figures it measured, and
 * the table it prints. Pure: no I/O, no clock, so the rules can be tested
 * on synthetic sweeps. docs/DESIGN-NOTES.md, "Probing a path", states the
 * rules. */
#ifndef PCOPY_PROBE_REC_H
#define PCOPY_PROBE_REC_H

#include <stddef.h>
#include <stdint.h>

#include <pcopy/pcopy.h>

/* A cell counts as "as good as the best" from this fraction of its rate. */
#define PROBE_REC_GOOD 0.95
/* Compression must deliver this much more than sending raw. */
#define PROBE_REC_CODEC_MARGIN 1.2
/* ...on a sample that shrinks at least this much. */
#define PROBE_REC_MIN_RATIO 1.1
/* Each stream's share of the bytes in flight (rate x RTT) is kept at most
 * this, when as many streams are as good: slow start opens a stream's
 * window from 10 segments in about 6 round trips up to it, so a copy of
 * finite size reaches full speed sooner with more streams. */
#define PROBE_REC_STREAM_SHARE (1u << 20)
/* A side compresses (or decompresses) on this many cores at most. */
#define PROBE_REC_CODEC_THREADS 16u

/* Fills p->rec_streams, rec_window, rec_codec and reason from the other
 * fields. At least one cell with a rate > 0 must be there; without one the
 * advice is the defaults and the reason says the network was not
 * measured. Pure. */
void probe_recommend(struct pcopy_probe *p);

/* The streams that keep each one's share of rate x rtt_s within
 * PROBE_REC_STREAM_SHARE: at least 1, at most PROTO_MAX_STREAMS. Pure. */
unsigned probe_streams_for(double rate, double rtt_s);

/* A byte count as -w takes it: "4M", "512k", or plain bytes when neither
 * divides it. Always NUL-terminates (cap > 0). Pure. */
void probe_fmt_size(uint64_t v, char *buf, size_t cap);

#endif
