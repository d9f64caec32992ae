/* SPDX-License-Identifier: Apache-2.0 */
/* opts: a table of options; per-direction ones take -ab / -ba suffixes. */
#include "opts.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum opts_kind {
	OK_DELAY, OK_RATE, OK_BYTES, OK_PCT, OK_COUNT,  /* per direction */
	OK_NS_A, OK_NS_B, OK_DEV_A, OK_DEV_B, OK_SEED, OK_OFFLOAD, OK_THREADS,
	OK_HELP, OK_VERSION
};

struct opts_entry {
	const char *name;
	enum opts_kind kind;
	size_t off;          /* per direction: field in struct link_params */
	const char *arg;     /* NULL: takes no argument */
	const char *help;
};

#define PD(f) offsetof(struct link_params, f)

static const struct opts_entry opts_table[] = {
	{ "delay", OK_DELAY, PD(delay_ns), "MS",
	  "one-way delay in ms (also 500us, 0.2s); default 25" },
	{ "rate", OK_RATE, PD(rate_bps), "RATE",
	  "bandwidth cap: 100mbit, 1gbit, 800kbit, 2.5gbit; default 1gbit" },
	{ "queue", OK_BYTES, PD(queue_bytes), "BYTES",
	  "queue limit, tail drop (k/m = KiB/MiB); default rate x RTT" },
	{ "loss", OK_PCT, PD(loss), "PCT", "random loss in percent; default 0" },
	{ "burst", OK_BYTES, PD(burst_bytes), "BYTES",
	  "token bucket depth beyond one packet; default 0" },
	{ "overhead", OK_COUNT, PD(overhead), "BYTES",
	  "wire bytes added per segment (38: Ethernet); default 0" },
	{ "ns-a", OK_NS_A, 0, "NS", "namespace of TUN A; default pcA" },
	{ "ns-b", OK_NS_B, 0, "NS", "namespace of TUN B; default pcB" },
	{ "dev-a", OK_DEV_A, 0, "NAME", "TUN A's name; default linkem-a" },
	{ "dev-b", OK_DEV_B, 0, "NAME", "TUN B's name; default linkem-b" },
	{ "seed", OK_SEED, 0, "N", "loss PRNG seed; default 1" },
	{ "offload", OK_OFFLOAD, 0, "on|off",
	  "TSO/GSO super-packets from the kernel; default on" },
	{ "threads", OK_THREADS, 0, "1|2",
	  "2: one thread per direction (default); 1: one for both" },
	{ "help", OK_HELP, 0, NULL, "show this help" },
	{ "version", OK_VERSION, 0, NULL, "show the version" },
};

#define OPTS_N (sizeof(opts_table) / sizeof(opts_table[0]))

/* What the command line said, before defaults are resolved. */
struct opts_raw {
	bool given[2][OK_COUNT + 1];   /* per direction option given */
	uint64_t seed;
};

/* Splits "12.5mbit" into 12.5 and "mbit". Returns -EINVAL if no number. */
static int opts_number(const char *s, double *v, const char **unit)
{
	char *end = NULL;

	errno = 0;
	*v = strtod(s, &end);
	if (end == s || errno != 0 || !isfinite(*v) || *v < 0)
		return -EINVAL;
	*unit = end;
	return 0;
}

/* Looks unit up in a list of {suffix, factor}; "" is the bare number. */
static int opts_scale(const char *unit, const char *const *names,
		      const double *factors, size_t n, double *factor)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (strcasecmp(unit, names[i]) == 0) {
			*factor = factors[i];
			return 0;
		}
	}
	return -EINVAL;
}

static int opts_value(enum opts_kind kind, const char *s, void *dst)
{
	static const char *const t_n[] = { "", "ms", "us", "s", "ns" };
	static const double t_f[] = { 1e6, 1e6, 1e3, 1e9, 1 };
	static const char *const r_n[] = { "", "bit", "k", "kbit", "m", "mbit",
					   "g", "gbit", "t", "tbit" };
	static const double r_f[] = { 1, 1, 1e3, 1e3, 1e6, 1e6,
				      1e9, 1e9, 1e12, 1e12 };
	static const char *const b_n[] = { "", "b", "k", "kb", "kib", "m",
					   "mb", "mib", "g", "gb", "gib" };
	static const double b_f[] = { 1, 1, 1024, 1024, 1024, 1048576,
				      1048576, 1048576, 1073741824.0,
				      1073741824.0, 1073741824.0 };
	const char *unit;
	double v, f = 1;
	int ret = opts_number(s, &v, &unit);

	if (ret == 0 && kind == OK_DELAY)
		ret = opts_scale(unit, t_n, t_f, 5, &f);
	else if (ret == 0 && kind == OK_RATE)
		ret = opts_scale(unit, r_n, r_f, 10, &f);
	else if (ret == 0 && (kind == OK_BYTES || kind == OK_COUNT))
		ret = opts_scale(unit, b_n, b_f, kind == OK_BYTES ? 11 : 1, &f);
	else if (ret == 0 && kind == OK_PCT)
		ret = (strcmp(unit, "") == 0 || strcmp(unit, "%") == 0) &&
		      v <= 100 ? 0 : -EINVAL;
	if (ret < 0)
		return ret;
	v *= f;
	if (kind == OK_RATE && (v < 1000 || v > 1e13))
		return -EINVAL;
	if (kind == OK_PCT)
		*(double *)dst = v / 100.0;
	else if (kind == OK_COUNT && v <= 65535)
		*(uint32_t *)dst = (uint32_t)v;
	else if (kind != OK_COUNT && v < 1e18)
		*(uint64_t *)dst = (uint64_t)llround(v);
	else
		return -EINVAL;
	return 0;
}

/* Finds the entry for name (without "--"); dir gets -1 for both
 * directions, or the direction of a -ab / -ba suffix. */
static const struct opts_entry *opts_find(const char *name, size_t len,
					  int *dir)
{
	size_t i, n;

	for (i = 0; i < OPTS_N; i++) {
		n = strlen(opts_table[i].name);
		if (n > len || strncmp(name, opts_table[i].name, n) != 0)
			continue;
		*dir = -1;
		if (n == len)
			return &opts_table[i];
		if (opts_table[i].kind > OK_COUNT || len != n + 3)
			continue;
		if (strncmp(name + n, "-ab", 3) == 0)
			*dir = OPTS_AB;
		else if (strncmp(name + n, "-ba", 3) == 0)
			*dir = OPTS_BA;
		else
			continue;
		return &opts_table[i];
	}
	return NULL;
}

/* Stores one option's value. dir is -1 (both directions) or one. */
static int opts_apply(struct opts *o, struct opts_raw *raw,
		      const struct opts_entry *e, int dir, const char *val)
{
	int d, ret = 0;

	if (e->kind <= OK_COUNT) {
		for (d = 0; d < 2 && ret == 0; d++) {
			if (dir >= 0 && d != dir)
				continue;
			ret = opts_value(e->kind, val, (char *)&o->p[d] + e->off);
			raw->given[d][e->kind] = true;
		}
		return ret;
	}
	switch (e->kind) {
	case OK_NS_A: o->ns[0] = strcmp(val, "-") == 0 ? NULL : val; break;
	case OK_NS_B: o->ns[1] = strcmp(val, "-") == 0 ? NULL : val; break;
	case OK_DEV_A: o->dev[0] = val; break;
	case OK_DEV_B: o->dev[1] = val; break;
	case OK_SEED: return opts_value(OK_BYTES, val, &raw->seed);
	case OK_OFFLOAD:
		o->offload = strcmp(val, "on") == 0;
		return o->offload || strcmp(val, "off") == 0 ? 0 : -EINVAL;
	case OK_THREADS:
		o->threads = strcmp(val, "1") == 0 ? 1 :
			     strcmp(val, "2") == 0 ? 2 : 0;
		return o->threads == 0 ? -EINVAL : 0;
	case OK_HELP: o->help = true; break;
	case OK_VERSION: o->version = true; break;
	default: return -EINVAL;
	}
	return 0;
}

/* Goes through argv once; pass 0 applies the options for both directions
 * and the global ones, pass 1 the -ab / -ba ones, so those win. */
static int opts_pass(struct opts *o, struct opts_raw *raw, int pass,
		     int argc, char **argv, char *err, size_t errlen)
{
	const struct opts_entry *e;
	const char *name, *eq, *val;
	int i, dir;

	for (i = 1; i < argc; i++) {
		name = argv[i] + 2;
		if (strncmp(argv[i], "--", 2) != 0) {
			snprintf(err, errlen, "unexpected argument '%s' (try "
				 "--help)", argv[i]);
			return -EINVAL;
		}
		eq = strchr(name, '=');
		e = opts_find(name, eq ? (size_t)(eq - name) : strlen(name), &dir);
		if (e == NULL) {
			snprintf(err, errlen, "unknown option '%s' (try --help)",
				 argv[i]);
			return -EINVAL;
		}
		val = eq ? eq + 1 : NULL;
		if (e->arg != NULL && val == NULL && i + 1 < argc)
			val = argv[++i];
		if ((e->arg != NULL) != (val != NULL)) {
			snprintf(err, errlen, "option --%s %s", e->name,
				 e->arg ? "needs a value" : "takes no value");
			return -EINVAL;
		}
		if ((pass == 0) != (dir < 0))
			continue;
		if (opts_apply(o, raw, e, dir, val ? val : "") < 0) {
			snprintf(err, errlen, "option --%s%s: bad value '%s' "
				 "(expected %s)", e->name, dir < 0 ? "" :
				 dir == OPTS_AB ? "-ab" : "-ba", val, e->arg);
			return -EINVAL;
		}
	}
	return 0;
}

/* Fills in what the command line left open. */
static void opts_resolve(struct opts *o, const struct opts_raw *raw)
{
	uint64_t rtt = o->p[0].delay_ns + o->p[1].delay_ns, q;
	int d;

	for (d = 0; d < 2; d++) {
		o->p[d].seed = raw->seed + (uint64_t)d;
		if (!raw->given[d][OK_BYTES] || o->p[d].queue_bytes == 0) {
			q = o->p[d].rate_bps / 8 * rtt / 1000000000ull;
			o->p[d].queue_bytes = q > 131072 ? q : 131072;
		}
	}
}

int opts_parse(struct opts *o, int argc, char **argv, char *err,
	       size_t errlen)
{
	struct opts_raw raw;
	int d, ret;

	memset(o, 0, sizeof(*o));
	memset(&raw, 0, sizeof(raw));
	raw.seed = 1;
	o->offload = true;
	o->ns[0] = "pcA";
	o->ns[1] = "pcB";
	o->dev[0] = "linkem-a";
	o->dev[1] = "linkem-b";
	o->threads = 2;
	for (d = 0; d < 2; d++) {
		o->p[d].delay_ns = 25000000;
		o->p[d].rate_bps = 1000000000;
	}
	ret = opts_pass(o, &raw, 0, argc, argv, err, errlen);
	if (ret == 0)
		ret = opts_pass(o, &raw, 1, argc, argv, err, errlen);
	if (ret == 0)
		opts_resolve(o, &raw);
	return ret;
}

void opts_usage(FILE *f, const char *prog)
{
	char left[40];
	size_t i;

	fprintf(f, "usage: %s [OPTION]...\n\n"
		"Joins two network namespaces through a TUN device in each and\n"
		"relays IP packets between them with a delay, a bandwidth cap,\n"
		"a queue limit and random loss per direction. SIGUSR1 prints\n"
		"statistics; SIGTERM or SIGINT stops.\n\n", prog);
	for (i = 0; i < OPTS_N; i++) {
		snprintf(left, sizeof(left), "--%s%s%s", opts_table[i].name,
			 opts_table[i].arg ? " " : "",
			 opts_table[i].arg ? opts_table[i].arg : "");
		fprintf(f, "  %-22s %s\n", left, opts_table[i].help);
	}
	fprintf(f, "\nThe first six also exist per direction with a suffix\n"
		"-ab (A->B) or -ba (B->A), e.g. --delay-ab 40 --delay-ba 10;\n"
		"those win over the plain form. --queue 0 means the default.\n"
		"A namespace '-' means linkem's own namespace.\n");
}
