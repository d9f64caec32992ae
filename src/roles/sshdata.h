/* SPDX-License-Identifier: Apache-2.0 */
/* sshdata: data streams through ssh, the connecting end (docs/PROTOCOL.md
 * 6.5). Each stream is its own `ssh HOST pcopy --attach ID`, so each has
 * its own TCP connection and ssh channel window, and the far side's
 * session reads and writes sshd's pipes itself (wire/attach.h). Used when
 * a firewall lets only ssh through: by the client, and by a server that
 * connects to the other host of a third-party copy.
 *
 * ssh gets options of ours before the user's words, for the first value
 * of an option wins: -T (no terminal, whatever RequestTTY says),
 * BatchMode=yes (never N password prompts, nor empty passwords sent for
 * the user), ControlPath=none (a connection of its own even under the
 * user's ControlMaster), no forwardings, no RemoteCommand or LocalCommand.
 * Everything else of the user's setup (config, identities, ports,
 * ProxyJump) holds. A --rsh that is not ssh gets none of them. Where
 * the user's setup leaves ssh's connect alone and -w asks for a window,
 * pcopy makes that connect itself (ProxyCommand `pcopy --ssh-dial` with
 * ProxyUseFdpass, sshroute.h), so each stream has the window asked for.
 * On a CPU with AES instructions, the streams prefer aes128-gcm among the
 * ciphers the user's setup allows, if it left them in OpenSSH's default
 * order (sshroute_aes_first). */
#ifndef PCOPY_SSHDATA_H
#define PCOPY_SSHDATA_H

#include <stdbool.h>
#include <stdint.h>

#include "sys/err.h"
#include "transport/chan.h"
#include "wire/proto.h"
#include "roles/sshroute.h"

struct sshdata_cfg {
	const char *rsh;            /* the command that reaches a host (its words); NULL: ssh */
	const char *target;         /* [user@]host, as ssh takes it */
	const char *remote_pcopy;   /* pcopy on that host; NULL: "pcopy" */
	const uint8_t *attach_id;   /* [PROTO_ATTACH_ID_LEN]: the session there */
	unsigned streams;           /* 1..PROTO_MAX_STREAMS */
	const char *peer;           /* names the host in messages */
	/* ssh's route to target (sshroute_probe), or NULL: with route->dial
	 * and a window, each ssh gets its TCP connection from `pcopy
	 * --ssh-dial` (ProxyUseFdpass), with that window, as a direct stream
	 * would; else ssh connects by itself. Copied by sshdata_start. */
	const struct sshroute *route;
	uint32_t window;            /* -w: the streams' socket buffers; 0: the kernel's */
	int family;                 /* -4/-6 for that connect; 0: as ssh's AddressFamily */
};

struct sshdata;

/* Starts cfg->streams ssh processes at once (they connect while the
 * session starts: the remote end waits for it). Returns 0 with *out set,
 * or a negative code with the detail in e (nothing left running). */
int sshdata_start(const struct sshdata_cfg *cfg, struct sshdata **out, struct pc_err *e);

/* Runs the data handshake of stream i over each one's pipes, as the
 * connecting end (in clear, with key k: ssh encrypts it), and waits for the
 * far end's proof, up to SESSION_CONNECT_TIMEOUT_S for all of them (a
 * stop signal ends the wait). On success chans[0..streams-1] are the
 * caller's, each with req->timeout_s. On failure none is left, and the
 * message says what ssh said, if it failed. */
int sshdata_open(struct sshdata *s, const struct proto_request *req,
		 const uint8_t k[PROTO_KEY_LEN], struct chan **chans, struct pc_err *e);

/* sshdata_open in two steps, for a caller that races the streams
 * against direct connections (roles/datapath): sshdata_begin sends our
 * proofs (returns 0 or a negative code); while the far end's proofs are on
 * their way, sshdata_fd(s, i) is stream i's fd to poll for them, one of
 * sshdata_count(s); sshdata_finish waits for them and hands the channels
 * over as sshdata_open does. After a failed begin, or instead of finish,
 * sshdata_end closes everything. */
int sshdata_begin(struct sshdata *s, const uint8_t k[PROTO_KEY_LEN], struct pc_err *e);
int sshdata_fd(const struct sshdata *s, unsigned i);
unsigned sshdata_count(const struct sshdata *s);
int sshdata_finish(struct sshdata *s, const struct proto_request *req, struct chan **chans,
		   struct pc_err *e);

/* After the streams' channels are closed (or instead of sshdata_open):
 * waits a little for the ssh processes to end, stops those that do not
 * (all at once with stop), and frees s. NULL is a no-op. */
void sshdata_end(struct sshdata *s, bool stop);

/* Whether cmd (the --rsh words) runs OpenSSH's ssh, which takes our
 * options. */
bool sshdata_is_ssh(const char *rsh);

#endif
