/* SPDX-License-Identifier: Apache-2.0 */
/* loc: parse a SRC or DST argument into a local path, stdio, or a daemon URL. */
#include "roles/loc.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define LOC_SCHEME "pcopy://"
#define LOC_USAGE_HINT "use pcopy://HOST:PORT/PATH"

/* Copies the host starting at s into out->host and returns a pointer to
 * what follows it (the ':' before the port), or NULL with e set. */
static const char *loc_parse_host(const char *arg, const char *s, struct loc *out,
				  struct pc_err *e)
{
	const char *end;
	size_t len;

	if (*s == '[') {
		s++;
		end = strchr(s, ']');
		if (end == NULL || memchr(s, '/', (size_t)(end - s)) != NULL) {
			pc_err_set(e, -PC_E_USAGE, "%s: missing ']' after the IPv6 address; "
				   LOC_USAGE_HINT, arg);
			return NULL;
		}
	} else {
		end = s + strcspn(s, ":/[]");
		if (*end == '[' || *end == ']') {
			pc_err_set(e, -PC_E_USAGE, "%s: an IPv6 address must be written in "
				   "brackets, as in pcopy://[::1]:PORT/PATH", arg);
			return NULL;
		}
	}
	len = (size_t)(end - s);
	if (len == 0) {
		pc_err_set(e, -PC_E_USAGE, "%s: the host is missing; " LOC_USAGE_HINT, arg);
		return NULL;
	}
	if (len > LOC_MAX_HOST) {
		pc_err_set(e, -PC_E_USAGE, "%s: the host name is longer than %u bytes", arg,
			   LOC_MAX_HOST);
		return NULL;
	}
	memcpy(out->host, s, len);
	out->host[len] = '\0';
	return *end == ']' ? end + 1 : end;
}

/* Parses ":PORT" at s into out->port and returns a pointer to what follows
 * (a '/' or the end), or NULL with e set. */
static const char *loc_parse_port(const char *arg, const char *s, struct loc *out,
				  struct pc_err *e)
{
	unsigned long port = 0;
	const char *p;

	if (*s != ':') {
		pc_err_set(e, -PC_E_USAGE, "%s: a port is required; " LOC_USAGE_HINT, arg);
		return NULL;
	}
	for (p = s + 1; *p >= '0' && *p <= '9'; p++) {
		port = port * 10 + (unsigned long)(*p - '0');
		if (port > 65535)
			break;
	}
	if (p == s + 1 || port < 1 || port > 65535 || (*p != '/' && *p != '\0')) {
		pc_err_set(e, -PC_E_USAGE, "%s: the port must be a number from 1 to 65535", arg);
		return NULL;
	}
	out->port = (uint16_t)port;
	return p;
}

/* Normalises the daemon path s into out->path: no leading or repeated
 * slashes, no "." components, "." for the root. Returns 0 or -PC_E_USAGE. */
static int loc_normalise(const char *arg, const char *s, struct loc *out, struct pc_err *e)
{
	size_t used = 0;

	while (*s != '\0') {
		size_t len = strcspn(s, "/");

		if (len == 2 && s[0] == '.' && s[1] == '.')
			return pc_err_set(e, -PC_E_USAGE,
					  "%s: '..' is not allowed in a daemon path", arg);
		if (len > 0 && !(len == 1 && s[0] == '.')) {
			if (used + (used > 0) + len > PROTO_MAX_PATH)
				return pc_err_set(e, -PC_E_USAGE,
						  "%s: the path is longer than %u bytes", arg,
						  PROTO_MAX_PATH);
			if (used > 0)
				out->path[used++] = '/';
			memcpy(out->path + used, s, len);
			used += len;
		}
		s += len;
		if (*s == '/')
			s++;
	}
	if (used == 0)
		out->path[used++] = '.';
	out->path[used] = '\0';
	return 0;
}

/* [user@]host:PATH. Returns 1 if arg has that form (out filled), 0 if it
 * is a local path, or -PC_E_USAGE. */
static int loc_parse_ssh(const char *arg, struct loc *out, struct pc_err *e)
{
	const char *at = NULL, *h = arg, *colon, *slash = strchr(arg, '/');
	size_t hlen;

	if (arg[0] == '/' || strncmp(arg, "./", 2) == 0 || strncmp(arg, "../", 3) == 0)
		return 0;
	colon = strchr(arg, ':');
	if (strchr(arg, '[') != NULL) {
		const char *rb = strstr(arg, "]:");
		if (rb == NULL || (slash != NULL && slash < rb))
			return 0;
		colon = rb + 1;
	}
	if (colon == NULL || (slash != NULL && slash < colon) || colon == arg)
		return 0;
	for (const char *p = arg; p < colon; p++)
		if (*p == '@')
			at = p;
	if (at != NULL) {
		if ((size_t)(at - arg) > LOC_MAX_USER || at == arg)
			return pc_err_set(e, -PC_E_USAGE, "%s: the user name is empty or too long",
					  arg);
		memcpy(out->user, arg, (size_t)(at - arg));
		h = at + 1;
	}
	hlen = (size_t)(colon - h);
	if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
		h++;
		hlen -= 2;
	}
	if (hlen == 0 || hlen > LOC_MAX_HOST || memchr(h, '[', hlen) || memchr(h, ']', hlen))
		return pc_err_set(e, -PC_E_USAGE, "%s: '%.*s' is not a host name", arg, (int)hlen, h);
	memcpy(out->host, h, hlen);
	out->host[hlen] = '\0';
	if (strlen(colon + 1) > PROTO_MAX_PATH)
		return pc_err_set(e, -PC_E_USAGE, "%.64s...: the path is longer than %u bytes",
				  arg, PROTO_MAX_PATH);
	snprintf(out->path, sizeof(out->path), "%s", colon[1] ? colon + 1 : ".");
	out->kind = LOC_SSH;
	return 1;
}

void loc_ssh_target(const struct loc *l, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s%s%s", l->user, l->user[0] ? "@" : "", l->host);
}

void loc_host_display(const struct loc *l, char *buf, size_t cap)
{
	snprintf(buf, cap, strchr(l->host, ':') ? "[%s]" : "%s", l->host);
}

int loc_parse(const char *arg, struct loc *out, struct pc_err *e)
{
	size_t len;

	memset(out, 0, sizeof *out);
	if (arg == NULL || arg[0] == '\0')
		return pc_err_set(e, -PC_E_USAGE, "an empty argument is not a file; give a path, "
				  "'-' or pcopy://HOST:PORT/PATH");
	if (strcmp(arg, "-") == 0) {
		out->kind = LOC_STDIO;
		strcpy(out->path, "-");
		return 0;
	}
	if (strncmp(arg, LOC_SCHEME, strlen(LOC_SCHEME)) == 0) {
		const char *s;

		out->kind = LOC_DAEMON;
		s = loc_parse_host(arg, arg + strlen(LOC_SCHEME), out, e);
		if (s != NULL)
			s = loc_parse_port(arg, s, out, e);
		if (s == NULL)
			return -PC_E_USAGE;
		return loc_normalise(arg, s, out, e);
	}
	int ret = loc_parse_ssh(arg, out, e);
	if (ret != 0)
		return ret < 0 ? ret : 0;
	len = strlen(arg);
	if (len > PROTO_MAX_PATH)
		return pc_err_set(e, -PC_E_USAGE, "%.64s...: the path is longer than %u bytes",
				  arg, PROTO_MAX_PATH);
	out->kind = LOC_LOCAL;
	memcpy(out->path, arg, len + 1);
	return 0;
}
