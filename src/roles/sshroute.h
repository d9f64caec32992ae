/* SPDX-License-Identifier: Apache-2.0 */
/* sshroute: how ssh reaches a host, read from its effective configuration
 * (`ssh -G`), for the data streams through ssh (sshdata.h).
 *
 * Two things follow from it: whether ssh goes through a proxy (then a
 * direct data connection stands little chance), and whether pcopy may
 * open ssh's TCP connection itself and hand it over (ssh's ProxyUseFdpass),
 * which lets a stream through ssh have the window that -w asks for, as a
 * direct stream has. pcopy dials only where that changes nothing else of
 * the user's setup: no ProxyCommand or ProxyJump, no BindAddress or
 * BindInterface, a host name of plain characters; it uses the host, port,
 * address family and connect timeout that ssh would. */
#ifndef PCOPY_SSHROUTE_H
#define PCOPY_SSHROUTE_H

#include <stdbool.h>
#include <stdint.h>

#define SSHROUTE_MAX_HOST 255

struct sshroute {
	const char *proxied;        /* "ProxyJump", "ProxyCommand", or NULL */
	bool dial;                  /* pcopy may connect for ssh (see above) */
	char host[SSHROUTE_MAX_HOST + 1]; /* ssh's HostName, when dial */
	uint16_t port;              /* ssh's Port, when dial */
	int family;                 /* AddressFamily: 0 any, 4 or 6 */
	unsigned connect_timeout_s; /* ConnectTimeout; 0: none (the kernel's) */
};

/* Reads `ssh -G`'s output (text, NUL-terminated) into r. Lines it does not
 * know are ignored; a value it cannot use clears r->dial. */
void sshroute_parse(const char *text, struct sshroute *r);

/* Runs `RSH -G target` (rsh: the --rsh words, NULL for ssh) and parses
 * its output into r. For a command that is not OpenSSH's ssh, or an ssh
 * that fails, r says no proxy and no dial. */
void sshroute_probe(const char *rsh, const char *target, struct sshroute *r);

#endif
