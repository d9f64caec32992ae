/* SPDX-License-Identifier: Apache-2.0 */
/* server: the far end of a session: answers a client's handshake and
 * request, then runs the source or the sink it asked for. Used by
 * pcopy_server (a child the client started) and by each session process
 * of the daemon. */
#ifndef PCOPY_SERVER_H
#define PCOPY_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "wire/ctl.h"
#include "sys/err.h"
#include "wire/proto.h"
#include "roles/session.h"

struct server_cfg {
	enum session_transport transport;
	const uint8_t *key;        /* daemon: the shared key; pipe: NULL */
	int rootfd;                /* paths in requests resolve from here */
	bool beneath;              /* ...and may not leave it (daemon) */
	const char *listen_host;   /* data listener address; NULL = any */
	const char *self_host;     /* our address for data as we know it (READY.host); "" unknown */
	const char *client_host;   /* the client's address, to connect to it (-z); "" unknown */
	bool allow_stdout;         /* the sink may write to our stdout */
	bool allow_unencrypted;    /* daemon: serve data channels in clear (--allow-unencrypted) */
	int sigfd;                 /* -1: no signal watching */
	int route_fd;              /* daemon in TLS: where the daemon passes on the data
	                              connections that came to its own port for this
	                              session (acceptor_run_passed); -1: none, so a
	                              session of ours that accepts opens a listener.
	                              server_session takes it over and closes it once
	                              its data connections are in */
};

/* Serves one session on c (borrowed). Returns 0, -PC_E_PARTIAL, or the
 * first fatal error with the detail in e; the client has been told with
 * ERROR where the channel still worked. */
int server_session(struct ctl *c, const struct server_cfg *cfg, struct pc_err *e);

#endif
