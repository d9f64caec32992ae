// SPDX-License-Identifier: Apache-2.0
/* sshroute: how ssh reaches a host (sshroute.h). */
#include "roles/sshroute.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "roles/spawn.h"
#include "roles/sshdata.h"
#include "sys/err.h"

#define SSHROUTE_MAX_ARGV 96
#define SSHROUTE_MAX_OUT 16384 /* ssh -G prints about 3 KiB */

/* A host name pcopy passes on as it is: letters, digits, '.', '-', '_'
 * and ':' (an IPv6 address). Anything else, ssh's own connect handles. */
static bool sshroute_plain_host(const char *h)
{
	size_t n = strlen(h);

	return n > 0 && n <= SSHROUTE_MAX_HOST && h[0] != '-' &&
	       strspn(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_:") == n;
}

/* One "key value" line of ssh -G. */
static void sshroute_line(const char *key, const char *val, struct sshroute *r,
			  bool *have_host, bool *have_port)
{
	char *end;

	if (strcmp(key, "proxyjump") == 0 || strcmp(key, "proxycommand") == 0) {
		if (strcmp(val, "none") != 0)
			r->proxied = key[5] == 'j' ? "ProxyJump" : "ProxyCommand";
	} else if (strcmp(key, "bindaddress") == 0 || strcmp(key, "bindinterface") == 0) {
		r->dial = false;
	} else if (strcmp(key, "hostname") == 0) {
		*have_host = sshroute_plain_host(val);
		if (*have_host)
			snprintf(r->host, sizeof(r->host), "%s", val);
	} else if (strcmp(key, "port") == 0) {
		errno = 0;
		unsigned long p = strtoul(val, &end, 10);
		*have_port = errno == 0 && *end == '\0' && p > 0 && p <= 65535;
		r->port = *have_port ? (uint16_t)p : 0;
	} else if (strcmp(key, "addressfamily") == 0) {
		r->family = strcmp(val, "inet") == 0 ? 4 : strcmp(val, "inet6") == 0 ? 6 : 0;
	} else if (strcmp(key, "ciphers") == 0) {
		if (strlen(val) <= SSHROUTE_MAX_CIPHERS)
			snprintf(r->ciphers, sizeof(r->ciphers), "%s", val);
	} else if (strcmp(key, "connecttimeout") == 0) {
		errno = 0;
		unsigned long t = strtoul(val, &end, 10);
		r->connect_timeout_s = errno == 0 && *end == '\0' && t <= 86400 ? (unsigned)t : 0;
	}
}

void sshroute_parse(const char *text, struct sshroute *r)
{
	bool have_host = false, have_port = false;
	char line[1024];

	*r = (struct sshroute){ .dial = true };
	while (*text != '\0') {
		size_t n = strcspn(text, "\n"), k = n < sizeof(line) ? n : sizeof(line) - 1;
		/* A longer line is cut: its key still counts (a long
		 * ProxyCommand is a proxy), and no value pcopy dials with is
		 * that long. */
		memcpy(line, text, k);
		line[k] = '\0';
		char *sp = strchr(line, ' ');
		if (sp != NULL) {
			*sp = '\0';
			sshroute_line(line, sp + 1, r, &have_host, &have_port);
		}
		text += n + (text[n] == '\n');
	}
	r->dial = r->dial && r->proxied == NULL && have_host && have_port;
	if (!r->dial) {
		r->host[0] = '\0';
		r->port = 0;
	}
}

const char *sshroute_aes_first(const struct sshroute *r, char *out, size_t cap)
{
	static const char chacha[] = "chacha20-poly1305@openssh.com,";
	static const char gcm[] = "aes128-gcm@openssh.com";
	const char *list = r->ciphers, *at = list;
	size_t glen = sizeof(gcm) - 1;

	out[0] = '\0';
	if (strncmp(list, chacha, sizeof(chacha) - 1) != 0)
		return out;
	/* aes128-gcm@openssh.com as a whole item of the list. */
	while ((at = strstr(at, gcm)) != NULL && !(at[-1] == ',' &&
						   (at[glen] == ',' || at[glen] == '\0')))
		at += glen;
	if (at == NULL)
		return out;
	int n = snprintf(out, cap, "Ciphers=%s,%.*s%s", gcm, (int)(at - 1 - list), list,
			 at + glen);
	if (n < 0 || (size_t)n >= cap)
		out[0] = '\0';
	return out;
}

void sshroute_start(const char *rsh, const char *target, struct sshroute_run *run)
{
	char cmd[1024];
	char *argv[SSHROUTE_MAX_ARGV];
	struct pc_err e;
	int wfd = -1, argc = 0;

	*run = (struct sshroute_run){ .pid = -1, .rfd = -1, .efd = -1 };
	if (!sshdata_is_ssh(rsh))
		return;
	snprintf(cmd, sizeof(cmd), "%s", rsh != NULL ? rsh : "ssh");
	if (spawn_split(cmd, argv, &argc, SSHROUTE_MAX_ARGV - 4) < 0)
		return;
	argv[argc++] = (char *)(uintptr_t)"-G";
	argv[argc++] = (char *)(uintptr_t)target;
	argv[argc] = NULL;
	pc_err_init(&e);
	if (spawn_piped(argv, &run->pid, &run->rfd, &wfd, &run->efd, &e) == 0)
		close(wfd);
	else
		run->pid = -1;
	pc_err_destroy(&e);
}

void sshroute_finish(struct sshroute_run *run, struct sshroute *r)
{
	char *out = run->pid > 0 ? malloc(SSHROUTE_MAX_OUT) : NULL;
	size_t got = 0;
	ssize_t n;

	*r = (struct sshroute){ 0 };
	if (run->pid <= 0)
		return;
	while (out != NULL && got < SSHROUTE_MAX_OUT - 1 &&
	       ((n = read(run->rfd, out + got, SSHROUTE_MAX_OUT - 1 - got)) > 0 ||
		(n < 0 && errno == EINTR)))
		got += n > 0 ? (size_t)n : 0;
	close(run->rfd);
	close(run->efd);
	/* Only a complete answer counts: ssh -G that failed (a bad option,
	 * say) may have printed part of one. Out of memory, it is reaped
	 * all the same. */
	if (spawn_wait(run->pid) == 0 && out != NULL) {
		out[got] = '\0';
		sshroute_parse(out, r);
	}
	free(out);
	*run = (struct sshroute_run){ .pid = -1, .rfd = -1, .efd = -1 };
}

void sshroute_probe(const char *rsh, const char *target, struct sshroute *r)
{
	struct sshroute_run run;

	sshroute_start(rsh, target, &run);
	sshroute_finish(&run, r);
}
