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
 * address family and connect timeout that ssh would. It also tells which
 * ciphers the user's setup allows, so that a data stream may prefer the
 * cheapest of them (sshroute_aes_first). */
#ifndef PCOPY_SSHROUTE_H
#define PCOPY_SSHROUTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define SSHROUTE_MAX_HOST 255
#define SSHROUTE_MAX_CIPHERS 511

struct sshroute {
	const char *proxied;        /* "ProxyJump", "ProxyCommand", or NULL */
	bool dial;                  /* pcopy may connect for ssh (see above) */
	char host[SSHROUTE_MAX_HOST + 1]; /* ssh's HostName, when dial */
	uint16_t port;              /* ssh's Port, when dial */
	int family;                 /* AddressFamily: 0 any, 4 or 6 */
	unsigned connect_timeout_s; /* ConnectTimeout; 0: none (the kernel's) */
	char ciphers[SSHROUTE_MAX_CIPHERS + 1]; /* Ciphers, in ssh's order; "" if unknown */
};

/* The Ciphers option for data streams through ssh on a CPU with AES
 * instructions: where r's list is in OpenSSH's default order (it begins
 * with chacha20-poly1305@openssh.com) and allows aes128-gcm@openssh.com,
 * the same list with aes128-gcm@openssh.com first, as "Ciphers=..." in
 * out[cap]; else "" (the user's choice, or nothing known, stands). ssh's
 * chacha20-poly1305 costs twice the CPU of AES-GCM there. Returns out. */
const char *sshroute_aes_first(const struct sshroute *r, char *out, size_t cap);

/* Reads `ssh -G`'s output (text, NUL-terminated) into r. Lines it does not
 * know are ignored; a value it cannot use clears r->dial. */
void sshroute_parse(const char *text, struct sshroute *r);

/* A `ssh -G` on its way (sshroute_start). Owned by its caller until
 * sshroute_finish. */
struct sshroute_run {
	pid_t pid;                  /* -1: nothing runs */
	int rfd, efd;               /* its stdout and stderr, read at the end */
};

/* Starts `RSH -G target` (rsh: the --rsh words, NULL for ssh) in the
 * background: ssh reads its configuration while the caller goes on (ssh -G
 * costs a process start, some 20 to 70 ms). For a command that is not
 * OpenSSH's ssh, or one that cannot start, nothing runs (run->pid -1). */
void sshroute_start(const char *rsh, const char *target, struct sshroute_run *run);

/* Waits for what sshroute_start started and parses its output into r. For
 * nothing started, or an ssh that failed, r says no proxy and no dial. The
 * run is over (pid -1) and may be started again. */
void sshroute_finish(struct sshroute_run *run, struct sshroute *r);

/* sshroute_start, then sshroute_finish. */
void sshroute_probe(const char *rsh, const char *target, struct sshroute *r);

#endif
