/* SPDX-License-Identifier: Apache-2.0 */
/* relay: the client's part in a third-party copy (h1:SRC h2:DST). The
 * data flows from h1 straight to h2; the client only carries the control
 * messages between them: ENTRIES, FILE_END, FILE_FAIL and END from the
 * source to the sink, FILE_DONE, ACK and DONE back (checking ids and ACKs
 * as it counts progress). The source's SKIPs (sources it could not
 * open) stop here: the client reports them. Runs on the calling thread. */
#ifndef PCOPY_RELAY_H
#define PCOPY_RELAY_H

#include <pcopy/pcopy.h>

#include "wire/ctl.h"
#include "sys/err.h"
#include "wire/proto.h"

struct relay_result {
	struct proto_stats src;    /* the source's END */
	struct proto_stats sink;   /* the sink's DONE */
	unsigned failed;           /* files the sink could not write, and sources the
	                              source skipped (reported) */
	unsigned unverified;       /* of those, files -e read back other than sent */
};

/* What the client shows as the copy goes. */
struct relay_report {
	unsigned progress_s;       /* seconds between progress lines; 0: none */
	const struct pcopy_hooks *hooks; /* display hooks; NULL: none. Borrowed */
	bool flat;                 /* no -r: each path gives one entry or one SKIP, so the
	                              total is final once npaths of them came */
};

/* Relays until the sink's DONE has reached the source, or an error: an
 * ERROR from either side is passed to the other and returned (the detail,
 * naming the host, in e); a signal on sigfd sends ERROR to both. npaths is
 * the number of paths in the source's REQUEST, which bounds its SKIPs.
 * Prints a progress line every rep->progress_s seconds (0: none) and
 * calls rep->hooks as they ask; the progress it knows: entries and bytes
 * announced and finished, no current file (the names pass through
 * unkept). Returns 0, -PC_E_PARTIAL, or a negative code. */
int relay_run(struct ctl *src, struct ctl *sink, int sigfd, const struct relay_report *rep,
	      uint32_t npaths, struct relay_result *r, struct pc_err *e);

#endif
