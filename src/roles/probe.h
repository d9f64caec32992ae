// SPDX-License-Identifier: Apache-2.0
/* probe: both ends of a probe session (pcopy --probe; REQUEST.role PROBE,
 * docs/PROTOCOL.md 4.14 and 4.15, docs/DESIGN-NOTES.md "Probing a path").
 * The session is set up as a push would be (every transport: ssh, a
 * daemon, data through ssh); then the client drives it with PROBE steps:
 * MARKs around the cells of a streams x window sweep, in which its threads
 * send throw-away bytes the server counts and discards; one SIDE, in which
 * the server times its disk and codecs; END. One session per thread. */
#ifndef PCOPY_PROBE_H
#define PCOPY_PROBE_H

#include <stdint.h>

#include <pcopy/pcopy.h>

#include "sys/err.h"
#include "transport/chan.h"
#include "wire/ctl.h"
#include "wire/proto.h"

#define PROBE_STREAMS 8u         /* data channels a probe opens (its widest cell) */
#define PROBE_DISK_MAX_NS 1000000000ull /* a disk test stops after 1 s... */
#define PROBE_DISK_MAX_MIB PROTO_PROBE_MAX_WRITE_MIB /* ...or this much, first */
#define PROBE_SAMPLE_LEN (2u << 20) /* the codecs' sample */

/* Server side: answers the client's PROBE steps on c, counting what
 * arrives on chans[0..n) (borrowed; aborted before it returns, so that
 * their readers end) and writing its disk test into dirfd (borrowed):
 * an unnamed file (O_TMPFILE, or a name unlinked at once), at most
 * PROBE_DISK_MAX_MIB MiB and about 1 s. Returns 0 after END, or a
 * negative code with the detail in e. */
int probe_serve(struct ctl *c, struct chan **chans, unsigned n, int dirfd, struct pc_err *e);

/* Client side: runs the probe over c and chans[0..n) (borrowed; n >= 1):
 * RTT, the far side's figures, this host's (src: a file or directory to
 * read, NULL: a temporary file in the current directory), the sweep (with
 * windows only when window_settable: the channels are sockets), END.
 * sigfd (-1: none) ends the waits on a stop signal. Fills p's figures,
 * not the advice. Returns 0 or a negative code with the detail in e. */
int probe_run(struct ctl *c, struct chan **chans, unsigned n, int sigfd, const char *src,
	      struct pcopy_probe *p, struct pc_err *e);

/* This host's socket buffer limits (0 where /proc does not say). */
void probe_kernel_limits(uint64_t *rmem_max, uint64_t *wmem_max, uint64_t *tcp_rmem_max,
			 uint64_t *tcp_wmem_max);

/* Fills buf[len] with the standard sample: deterministic, half words and
 * numbers, half random bytes, in 64 KiB runs. Pure. */
void probe_sample(uint8_t *buf, size_t len);

/* Times the probe's codecs (lz4, zlib:1, zlib:6) on one core over
 * sample[len], in blocks of 1 MiB. out has room for
 * PROTO_PROBE_MAX_CODECS; returns how many were filled, or a negative
 * code (-ENOMEM, -PC_E_CODEC). */
int probe_time_codecs(const uint8_t *sample, size_t len, struct proto_probe_codec *out);

#endif
