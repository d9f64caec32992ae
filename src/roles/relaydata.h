/* SPDX-License-Identifier: Apache-2.0 */
/* relaydata: the data of a third-party copy relayed through the client
 * (pcopy -3, as scp -3): both hosts listen, the client connects to each
 * (directly, or through ssh: roles/datapath), and stream i of the source
 * host is pumped to stream i of the sink host, and back, by two threads
 * per stream. The bytes pass through as they are (the client ends each
 * host's TLS, with the copy's data key), so the block checksums of the
 * source reach the sink untouched. */
#ifndef PCOPY_RELAYDATA_H
#define PCOPY_RELAYDATA_H

#include "sys/err.h"
#include "transport/chan.h"

struct relaydata;

/* Starts the pumps between src[i] and dst[i], i < n; the channels stay
 * the caller's, and must outlive relaydata_finish. Returns 0 with *out
 * set, or a negative code with e set (nothing left running). */
int relaydata_start(struct chan **src, struct chan **dst, unsigned n, struct relaydata **out,
		    struct pc_err *e);

/* Stops the pumps (abort: at once, by aborting every channel; else they
 * end as the hosts close their streams) and joins them; returns the first
 * pump's failure (not one caused by the abort), with e set, or 0. A pump
 * that fails aborts both channels of its stream, so each host sees its
 * stream fail and says so on its control channel: the caller learns of it
 * there. Frees r; NULL is a no-op. */
int relaydata_finish(struct relaydata *r, bool abort, struct pc_err *e);

#endif
