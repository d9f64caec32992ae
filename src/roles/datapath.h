/* SPDX-License-Identifier: Apache-2.0 */
/* datapath: how a connecting end's data streams reach a listener that
 * takes them directly and through ssh alike (--data-via auto,
 * docs/PROTOCOL.md 6.5): a race. The direct TCP connects start at once.
 * If none has connected after DATAPATH_HEAD_START_MS, the streams through
 * ssh start too, and the direct connects go on. The first direct connect
 * that succeeds wins: an open link does not go through ssh (the ssh streams
 * still in their key exchange are stopped), unless below. The ssh streams
 * win when every direct connect failed (refused, unreachable), or as soon
 * as one of them has the listener's proof (the listener holds that stream
 * then: a direct one of its index would be dropped as a duplicate, so
 * direct can no longer win; only lost SYNs let ssh log in first on an open
 * link), and in any case after DATAPATH_CAP_MS without a direct
 * connection. Behind a firewall that drops what it refuses, the copy so
 * loses about the head start plus ssh's own set-up, not the 3 s of the
 * cap. One gap stays: a proof the listener has sent and we have not yet
 * read (half a round trip) does not stop a direct connect that completes
 * meanwhile. Where a probe during the login got no answer (below), the ssh
 * streams are already logging in (cfg->early) and there is no head start:
 * the direct connects get DATAPATH_QUIET_MS, and the ssh streams send
 * their proofs only once they have won. */
#ifndef PCOPY_DATAPATH_H
#define PCOPY_DATAPATH_H

#include <stdbool.h>
#include <stdint.h>

#include "roles/sshdata.h"
#include "sys/err.h"
#include "transport/chan.h"
#include "wire/proto.h"

#define DATAPATH_HEAD_START_MS 300u
#define DATAPATH_CAP_MS 3000u
/* The probe (below): how long it may go unanswered before the streams
 * through ssh start, and how long direct connects get after READY once
 * it has stayed unanswered. That is so with one stream too: the probe's
 * SYN went unanswered as well, so a fallback then takes two lost SYNs.
 * The wait is a round trip within a continent: a longer link's answer
 * stops the streams before they reach the host (datapath_probe_answered),
 * so it costs only their ssh processes. */
#define DATAPATH_PROBE_MS 150u
#define DATAPATH_QUIET_MS 300u

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
	/* The same streams through ssh, started early because the probe got
	 * no answer (datapath_probe_quiet), not yet begun; NULL: none. Owned by
	 * datapath_open from the call on. */
	struct sshdata *early;
};

/* Opens req->streams data channels by whichever way wins (above), and says
 * once on stderr when they go through ssh, and why. On success
 * chans[0..n-1] are the caller's, and *sd the ssh streams if they won
 * (else NULL): the caller ends them (sshdata_end) after closing the
 * channels. Returns 0 or a negative code with the detail in e (nothing
 * left open, *sd NULL). */
int datapath_open(const struct datapath_cfg *cfg, struct chan **chans, struct sshdata **sd,
		  struct pc_err *e);

/* The probe: a look at the direct path while the control ssh logs in,
 * before the listener's port is known. One non-blocking connect to the
 * data host, at the first port of -Z's range, else at a random port of
 * Linux's default ephemeral range (where the listener's own port will be).
 * An open host answers within a round trip, refused or accepted; a
 * firewall that drops says nothing, and one that rejects administratively
 * says unreachable. A probe that stays unanswered for DATAPATH_PROBE_MS
 * lets the client start the streams through ssh at once, beside the
 * control login, instead of after READY and the race's head start: about
 * a login earlier. It decides nothing alone: at READY the direct connects
 * still race (datapath_open with cfg->early), and any that succeeds wins.
 * The probe sends only SYNs (the kernel resends one unanswered) and its
 * socket stays open until READY (datapath_probe_end): no byte travels. */
struct datapath_probe {
	int fd;          /* the connect under way; -1: none (done, or never started) */
	int state;       /* DATAPATH_PROBE_* */
	uint64_t t0;     /* when it started (platform_now_ns) */
	uint64_t held_ms; /* its answer is not looked at before then (the test
	                     fault data_probe_slow); 0: no such rule */
};

enum {
	DATAPATH_PROBE_OFF,      /* not started, or the host has no address here */
	DATAPATH_PROBE_PENDING,  /* no answer yet */
	DATAPATH_PROBE_ANSWERED, /* connected or refused: a host that answers */
	DATAPATH_PROBE_BLOCKED,  /* unreachable, or forbidden on the way */
};

/* Starts a probe of host (family as -4/-6; port_lo: -Z's first port, 0:
 * none). Never fails: a probe that cannot start is OFF. */
void datapath_probe_start(struct datapath_probe *p, const char *host, uint16_t port_lo,
			  int family);

/* Waits for the probe's answer up to DATAPATH_PROBE_MS from its start, or
 * until watch is readable or hung up (-1: no wait at all, only a look), and
 * returns whether the direct path looks closed (PENDING or BLOCKED). */
bool datapath_probe_quiet(struct datapath_probe *p, int watch);

/* Once the streams through ssh have started early: waits until watch is
 * readable or hung up (the far end's READY, or its failure, is on its way;
 * -1: no wait, only a look), a stop signal comes, or the probe answers
 * after all, and returns whether it did (an open path: the early streams
 * should stop). On the same path as the probe, an early stream's own TCP
 * handshake began later than the probe's, so one stopped at an answer to
 * the probe's first SYN has not reached the host's sshd: a probe wait
 * shorter than the round trip costs starting and stopping the ssh
 * processes, not logins. (An answer that needed a resent SYN can come
 * after the streams logged in; they stop then all the same.) */
bool datapath_probe_answered(struct datapath_probe *p, int watch);

/* Closes the probe's socket; p is OFF again. */
void datapath_probe_end(struct datapath_probe *p);

#endif
