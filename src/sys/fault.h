/* SPDX-License-Identifier: Apache-2.0 */
/* fault: test-only fault injection. NOT a user feature.
 *
 * A test arms a site so that its Nth call from now fails once, the way a
 * real failure would (an allocation that returns NULL, a codec that returns
 * -ENOMEM). The library asks fault_fire(site) at each site; unarmed, that is
 * one relaxed atomic load. Unit tests call fault_arm; end-to-end tests arm
 * the binary through the environment variable PCOPY_TEST_FAULT, read once by
 * pcopy_init (and deliberately left out of the man page):
 *
 *   PCOPY_TEST_FAULT=SITE:N[,SITE:N...]
 *
 * where SITE is a name below and N >= 1. Sites:
 *   encoder_new  encoder_new returns NULL (as on ENOMEM)
 *   compress     encoder_run's codec call fails with -ENOMEM (counted only
 *                for blocks it really tries to compress)
 *   walk_opendir the walker's open of a directory fails with EACCES, as for
 *                a directory root cannot read either (counted per directory
 *                the walker tries to open, top-level sources included)
 *   walk_readdir the walker's readdir fails with EIO (counted per readdir
 *                call, the one that finds the end of a directory included)
 *   source_open  the source's open of a file it is about to read fails with
 *                EACCES, as if it had become unreadable after the walk
 *   sink_write   the sink's write of a block or of a small file fails with
 *                ENOSPC, as on a full disk
 *   sink_verify  -e: the sink's read back of a file it wrote finds its
 *                first byte inverted, as after a bad write to the disk
 *   sink_same    --checksum: the sink's read of a block it has already (a
 *                SAME block) finds its first byte inverted, as if the file
 *                had changed since it was hashed
 *   sink_slow    -e: the sink's read back of a file it wrote waits 3 s
 *                first, as a slow disk's flush does
 *   sums_slow    --checksum, -a: the sink waits 0.5 s after it sends a
 *                SUMS, as when reading the old file is slower than the
 *                source's answers (counted per SUMS)
 *   sink_kept    --checksum: the sink's look at an old file every block
 *                matched, before it keeps it, finds its ctime moved on, as
 *                if it had been written since it was hashed (counted per
 *                file about to be kept)
 *   data_probe   --data-via auto: the probe of the direct path
 *                (roles/datapath.h) gets no answer, as behind a firewall
 *                that drops it, whatever the link; at once, without the
 *                probe's wait
 *   data_probe_slow --data-via auto: the probe's answer is seen only 0.5 s
 *                after its start, as across a link whose round trip is
 *                longer than the probe's wait
 *   data_late    --data-via auto: the race's direct connects are seen
 *                connected only once a stream through ssh has the
 *                listener's proof, as when their first SYNs were lost
 * Thread-safe: any thread may fire a site; exactly one call fires per arm. */
#ifndef PCOPY_FAULT_H
#define PCOPY_FAULT_H

#include <stdatomic.h>
#include <stdbool.h>

enum fault_site {
	FAULT_ENCODER_NEW,
	FAULT_COMPRESS,
	FAULT_WALK_OPENDIR,
	FAULT_WALK_READDIR,
	FAULT_SOURCE_OPEN,
	FAULT_SINK_WRITE,
	FAULT_SINK_VERIFY,
	FAULT_SINK_SAME,
	FAULT_SINK_SLOW,
	FAULT_SUMS_SLOW,
	FAULT_SINK_KEPT,
	FAULT_DATA_PROBE,
	FAULT_DATA_PROBE_SLOW,
	FAULT_DATA_LATE,
	FAULT_SITES
};

/* Sites armed and not yet fired; only fault.c writes it. */
extern atomic_uint fault_armed;

/* Arms site so that its nth call from now (nth >= 1) fails; nth == 0
 * disarms it. Replaces an earlier arming of the same site. */
void fault_arm(enum fault_site site, unsigned nth);

/* Arms the sites spec names (the PCOPY_TEST_FAULT grammar above). NULL or
 * "" arms nothing. Returns 0, or -PC_E_USAGE for a malformed spec (nothing
 * is armed then). */
int fault_arm_spec(const char *spec);

bool fault_fire_slow(enum fault_site site);

/* True if this call at site must fail. */
static inline bool fault_fire(enum fault_site site)
{
	if (atomic_load_explicit(&fault_armed, memory_order_relaxed) == 0)
		return false;
	return fault_fire_slow(site);
}

#endif
