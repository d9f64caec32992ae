/* SPDX-License-Identifier: Apache-2.0 */
/* datapath: how a connecting end's data streams reach a listener that
 * takes them directly and through ssh alike (--data-via auto,
 * docs/PROTOCOL.md 6.5): a race. The direct TCP connects start at once.
 * If none has connected after DATAPATH_HEAD_START_MS, the streams through
 * ssh start too, and the direct connects go on. The first direct connect
 * that succeeds wins: an open link never goes through ssh (the ssh streams
 * still in their key exchange are stopped). The ssh streams win when every
 * direct connect failed (refused, unreachable), or when one of them has
 * the listener's proof and no direct connect succeeded within
 * DATAPATH_COMMIT_MS (a single lost SYN is resent after 1 s: with one
 * stream it waits longer), and in any case after DATAPATH_CAP_MS without a
 * direct connection. Behind a firewall that drops what it refuses, the
 * copy so loses about the head start plus ssh's own set-up, not the 3 s of
 * the cap. */
#ifndef PCOPY_DATAPATH_H
#define PCOPY_DATAPATH_H

#include <stdint.h>

#include "roles/sshdata.h"
#include "sys/err.h"
#include "transport/chan.h"
#include "wire/proto.h"

#define DATAPATH_HEAD_START_MS 300u
#define DATAPATH_COMMIT_MS 500u
#define DATAPATH_COMMIT_ONE_MS 1500u /* with one stream */
#define DATAPATH_CAP_MS 3000u

struct datapath_cfg {
	const char *host;                 /* the listener, directly */
	const char *alt_host;             /* tried when host has no address here (a name only
	                                     ssh's configuration knows); NULL: none */
	uint16_t port;
	const struct proto_request *req;  /* streams, window, family, timeout, flags */
	const uint8_t *k;                 /* [PROTO_KEY_LEN]: the data key */
	uint8_t (*pending)[PROTO_MAC_LEN]; /* as session_connect_data */
	const struct sshdata_cfg *ssh;    /* the same streams through ssh */
	char *why;                        /* [why_cap]: receives why direct TCP lost when the
	                                     streams go through ssh; NULL: not wanted */
	size_t why_cap;
};

/* Opens req->streams data channels by whichever way wins (above), and says
 * once on stderr when they go through ssh, and why. On success
 * chans[0..n-1] are the caller's, and *sd the ssh streams if they won
 * (else NULL): the caller ends them (sshdata_end) after closing the
 * channels. Returns 0 or a negative code with the detail in e (nothing
 * left open, *sd NULL). */
int datapath_open(const struct datapath_cfg *cfg, struct chan **chans, struct sshdata **sd,
		  struct pc_err *e);

#endif
