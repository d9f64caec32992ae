/* SPDX-License-Identifier: Apache-2.0 */
/* pcopy: the command line. Turns argv into a struct pcopy_opts, calls
 * libpcopy, prints the final message or summary, and exits with the
 * documented status. Nothing else lives here. */
#include <pcopy/pcopy.h>

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/report.h"
#include "cli/tty.h"
#include "sys/log.h"
#include "sys/platform.h"

enum cli_action {
	CLI_COPY, CLI_PROBE, CLI_SERVE, CLI_SERVER, CLI_ATTACH, CLI_SSH_DIAL, CLI_GEN_KEY, CLI_HELP,
	CLI_VERSION
};

struct cli {
	struct pcopy_opts o;
	enum cli_action action;
	const char *gen_key;
	const char *bad_arg;     /* the argument getopt choked on, for the message */
	bool no_progress;        /* --no-progress: no bar on a terminal */
	bool json;               /* --json[=FILE] */
	const char *json_path;   /* FILE; NULL = standard output */
	char **rules;            /* the filter rules, in order (o.filters): owned */
	unsigned nrules;
	size_t rule_bytes;       /* their bytes, one NUL each counted */
};

enum {
	OPT_KEY_FILE = 256, OPT_TIMEOUT, OPT_SERVE, OPT_ROOT, OPT_GEN_KEY, OPT_SERVER,
	OPT_CONTROL_FD, OPT_BIND, OPT_RSH, OPT_REMOTE_PCOPY, OPT_NUMERIC_IDS, OPT_ENCRYPT,
	OPT_NO_ENCRYPT, OPT_CIPHER, OPT_ALLOW_UNENCRYPTED, OPT_MAX_SESSIONS, OPT_MAX_STARTUPS,
	OPT_MAX_PER_SOURCE, OPT_DATA_VIA, OPT_ATTACH, OPT_NOTICES, OPT_SSH_DIAL, OPT_NO_PROGRESS,
	OPT_JSON, OPT_PROBE, OPT_EXCLUDE, OPT_INCLUDE, OPT_EXCLUDE_FROM, OPT_DELETE,
	OPT_CHECKSUM,
	OPT_INPLACE,
};

static const struct option cli_longopts[] = {
	{ "recursive", no_argument, NULL, 'r' },
	{ "preserve", no_argument, NULL, 'p' },
	{ "dereference", no_argument, NULL, 'L' },
	{ "hard-links", no_argument, NULL, 'H' },
	{ "update", no_argument, NULL, 'u' },
	{ "verify", no_argument, NULL, 'e' },
	{ "numeric-ids", no_argument, NULL, OPT_NUMERIC_IDS },
	{ "delete", no_argument, NULL, OPT_DELETE },
	{ "checksum", no_argument, NULL, OPT_CHECKSUM },
	{ "inplace", no_argument, NULL, OPT_INPLACE },
	{ "append", no_argument, NULL, 'a' },
	{ "resume", no_argument, NULL, 'a' },
	{ "dry-run", no_argument, NULL, 'n' },
	{ "exclude", required_argument, NULL, OPT_EXCLUDE },
	{ "include", required_argument, NULL, OPT_INCLUDE },
	{ "exclude-from", required_argument, NULL, OPT_EXCLUDE_FROM },
	{ "streams", required_argument, NULL, 's' },
	{ "window", required_argument, NULL, 'w' },
	{ "block-size", required_argument, NULL, 'B' },
	{ "compress", required_argument, NULL, 'c' },
	{ "progress", required_argument, NULL, 'P' },
	{ "no-progress", no_argument, NULL, OPT_NO_PROGRESS },
	{ "json", optional_argument, NULL, OPT_JSON },
	{ "verbose", no_argument, NULL, 'v' },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ "version", no_argument, NULL, 'V' },
	{ "key-file", required_argument, NULL, OPT_KEY_FILE },
	{ "timeout", required_argument, NULL, OPT_TIMEOUT },
	{ "bwlimit", required_argument, NULL, 'x' },
	{ "serve", required_argument, NULL, OPT_SERVE },
	{ "probe", no_argument, NULL, OPT_PROBE },
	{ "root", required_argument, NULL, OPT_ROOT },
	{ "gen-key", required_argument, NULL, OPT_GEN_KEY },
	{ "server", no_argument, NULL, OPT_SERVER },
	{ "attach", required_argument, NULL, OPT_ATTACH },
	{ "notices", no_argument, NULL, OPT_NOTICES },
	{ "ssh-dial", no_argument, NULL, OPT_SSH_DIAL },
	{ "data-via", required_argument, NULL, OPT_DATA_VIA },
	{ "control-fd", required_argument, NULL, OPT_CONTROL_FD },
	{ "bind", required_argument, NULL, OPT_BIND },
	{ "rsh", required_argument, NULL, OPT_RSH },
	{ "remote-pcopy", required_argument, NULL, OPT_REMOTE_PCOPY },
	{ "port-range", required_argument, NULL, 'Z' },
	{ "reverse", no_argument, NULL, 'z' },
	{ "ipv4", no_argument, NULL, '4' },
	{ "ipv6", no_argument, NULL, '6' },
	{ "encrypt", no_argument, NULL, OPT_ENCRYPT },
	{ "no-encrypt", no_argument, NULL, OPT_NO_ENCRYPT },
	{ "cipher", required_argument, NULL, OPT_CIPHER },
	{ "allow-unencrypted", no_argument, NULL, OPT_ALLOW_UNENCRYPTED },
	{ "max-sessions", required_argument, NULL, OPT_MAX_SESSIONS },
	{ "max-startups", required_argument, NULL, OPT_MAX_STARTUPS },
	{ "max-per-source", required_argument, NULL, OPT_MAX_PER_SOURCE },
	{ NULL, 0, NULL, 0 },
};

static void cli_usage(FILE *out)
{
	fputs("Usage: pcopy [OPTIONS] SRC... DST\n"
	      "       pcopy [OPTIONS] SRC... [USER@]HOST:DST          (push through ssh)\n"
	      "       pcopy [OPTIONS] [USER@]HOST:SRC... DST          (pull through ssh)\n"
	      "       pcopy [OPTIONS] [USER@]H1:SRC... [USER@]H2:DST  (third party: H1 to H2)\n"
	      "       pcopy [OPTIONS] SRC... pcopy://HOST:PORT/PATH   (push to a daemon)\n"
	      "       pcopy [OPTIONS] pcopy://HOST:PORT/PATH... DST   (pull from a daemon)\n"
	      "       pcopy --probe [SRC] [USER@]HOST[:DIR] | pcopy://HOST:PORT[/DIR]\n"
	      "       pcopy --serve [ADDR:]PORT --root DIR --key-file KEY\n"
	      "       pcopy --gen-key FILE\n"
	      "Copy files and trees over parallel TCP streams, encrypted and authenticated\n"
	      "with TLS 1.3 wherever they cross a network.\n"
	      "\n"
	      "  -r, -R, --recursive   copy directories and everything in them\n"
	      "  -p, --preserve        keep modes and times, and owners where the copy is\n"
	      "                        written as root; recreate FIFOs, sockets, devices\n"
	      "      --numeric-ids     with -p: owners by number, not by name\n"
	      "  -L, --dereference     follow symbolic links in the sources\n"
	      "  -H, --hard-links      keep hard links among the copied files\n"
	      "  -u, --update          keep files already there with the same size and\n"
	      "                        modification time (nothing of them travels), and\n"
	      "                        give the files written the source's times\n"
	      "      --checksum        as -u, but compare contents, not size and time:\n"
	      "                        only the blocks that differ travel, and a file\n"
	      "                        that matches is left as it is\n"
	      "      --inplace         with --checksum: write those blocks into the file\n"
	      "                        already there, not into a new copy put in place\n"
	      "                        (interrupted, it is left part old, part new)\n"
	      "  -a, --append, --resume  as -u, and make an interrupted copy resumable:\n"
	      "                        run the same command with -a again and only what\n"
	      "                        is missing travels (what is kept is checked first)\n"
	      "  -e, --verify          read each file written back from the disk and put\n"
	      "                        it in place only if it has the source's bytes\n"
	      "  -n, --dry-run         change nothing: list on stdout what would be copied\n"
	      "                        (copy, update) and removed (delete)\n"
	      "      --delete          with -r and -u, --checksum or -a: remove from the copy\n"
	      "                        what the source no longer has (but what --exclude\n"
	      "                        rules leave out)\n"	      "      --exclude PATTERN leave out what PATTERN matches (and what is in it)\n"
	      "      --include PATTERN copy what PATTERN matches, even if a later rule\n"
	      "                        excludes it; the first rule that matches decides\n"
	      "      --exclude-from FILE  the rules in FILE, one per line: a pattern to\n"
	      "                        exclude, or '- PATTERN' / '+ PATTERN'; '#' comments\n"
	      "  -s, --streams N       data streams, 1 to 64 (default 4)\n"
	      "  -w, --window SIZE     TCP window (socket buffer) per stream, e.g. 1M\n"
	      "                        (default: kernel autotuning)\n"
	      "  -B, --block-size SIZE block size, 4k to 64M (default 1M; 256k with\n"
	      "                        --checksum)\n"
	      "  -c, --compress SPEC   compress: 0-9 (zlib level; 0 = off), zlib[:0-9],\n"
	      "                        lz4[:1-12], bz2[:1-9], none, auto, or one per\n"
	      "                        stream: 1,1,6,6 (default: none)\n"
	      "  -P, --progress SEC    print a progress line every SEC seconds to stderr\n"
	      "                        (for logs; instead of the bar), and with --json a\n"
	      "                        progress event\n"
	      "      --no-progress     no progress bar (shown by default on a terminal)\n"
	      "      --json[=FILE]     the summary as one JSON object on standard output\n"
	      "                        (or in FILE); see pcopy(1), JSON OUTPUT\n"
	      "      --timeout SEC     fail when the data streams are idle SEC seconds\n"
	      "                        (default 120; 0 = never)\n"
	      "  -x, --bwlimit RATE    cap the data at RATE over all streams together,\n"
	      "                        in bytes per second (10M, 512k) or bits (100mbit)\n"
	      "      --key-file KEY    key shared with a daemon (or PCOPY_KEY_FILE)\n"
	      "      --rsh CMD         command that reaches a host (or PCOPY_RSH; default ssh)\n"
	      "      --remote-pcopy PATH  pcopy on the remote host (default: pcopy in PATH)\n"
	      "  -Z, --port-range LO-HI  data ports the listening side may use (LO >= 1024)\n"
	      "  -z, --reverse         the local side listens for data, the remote connects\n"
	      "      --data-via HOW    through ssh, how data streams travel: auto (direct\n"
	      "                        TCP, and each stream its own ssh connection when\n"
	      "                        that cannot connect), direct, or ssh (default auto)\n"
	      "  -3                    third party: the data goes through this host\n"
	      "  -4, --ipv4            data over IPv4 only\n"
	      "  -6, --ipv6            data over IPv6 only\n"
	      "      --encrypt         encrypt a local copy too (TLS 1.3; on by default\n"
	      "                        for every stream that crosses a network)\n"
	      "      --no-encrypt      send data (and a daemon's control channel) in clear;\n"
	      "                        the daemon must allow it\n"
	      "      --cipher NAME     auto (AES-128-GCM where the CPU has AES\n"
	      "                        instructions, else ChaCha20-Poly1305), aes128-gcm\n"
	      "                        or chacha20-poly1305\n"
	      "      --allow-unencrypted  with --serve: also serve --no-encrypt clients\n"
	      "      --probe           measure the path to HOST (about 10 s): SRC's disk (or\n"
	      "                        a temporary file here), the network (streams x\n"
	      "                        windows), DIR's disk there, the codecs on both\n"
	      "                        sides; print them and the -s, -w, -c to use\n"
	      "      --serve [ADDR:]PORT  run a daemon serving --root DIR\n"
	      "      --root DIR        the directory a daemon serves\n"
	      "      --max-sessions N  with --serve: sessions at once, 1 to 1024 (default\n"
	      "                        64); a client beyond them is told the daemon is busy\n"
	      "      --max-startups N  with --serve: connections waiting to be handed on,\n"
	      "                        1 to 4096 (default 256); beyond them the oldest goes\n"
	      "      --max-per-source N  with --serve: of those, from one address, a\n"
	      "                        client's data streams too, 1 to 4096 (default 96);\n"
	      "                        beyond them a new one is closed\n"
	      "      --gen-key FILE    write a new random key to FILE (mode 0600)\n"
	      "  -v, --verbose         more messages, and the table of stages behind the\n"
	      "                        summary's bottleneck line (-vv: debug)\n"
	      "  -q, --quiet           no summary, only errors\n"
	      "  -h, --help            show this help\n"
	      "  -V, --version         show the version\n"
	      "\n"
	      "SIZE takes k, M or G suffixes (powers of 1024; 1M, 1MB and 1MiB alike).\n"
	      "'-' as SRC reads standard input; '-' as DST writes standard output.\n"
	      "Exit status: 0 ok, 1 usage, 2 protocol, 3 some files not copied,\n"
	      "5 launch/authentication, 10 network, 11 file I/O, 12 data integrity,\n"
	      "13 compression, 14 daemon busy, 20 interrupted, 30 timeout. See pcopy(1).\n",
	      out);
}

static int cli_bad(const char *opt, const char *arg, const char *want)
{
	fprintf(stderr, "pcopy: %s: '%s' is not %s\nTry 'pcopy --help'.\n", opt, arg, want);
	return -1;
}

/* Two options that say opposite things, both given: refused, not the last
 * one silently winning (a script that adds --encrypt to a command with
 * --no-encrypt must not send in clear). */
static int cli_clash(const char *a, const char *b)
{
	fprintf(stderr, "pcopy: %s and %s do not go together\nTry 'pcopy --help'.\n", a, b);
	return -1;
}

static int cli_uint(const char *opt, const char *arg, unsigned lo, unsigned hi, unsigned *out,
		    const char *want)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(arg, &end, 10);
	if (arg[0] < '0' || arg[0] > '9' || *end != '\0' || errno != 0 || v < lo || v > hi)
		return cli_bad(opt, arg, want);
	*out = (unsigned)v;
	return 0;
}

/* A size within [lo, hi]; want says which, for the message. */
static int cli_size(const char *opt, const char *arg, uint64_t lo, uint64_t hi, uint64_t *out,
		    const char *want)
{
	if (platform_parse_size(arg, out) < 0 || *out < lo || *out > hi)
		return cli_bad(opt, arg, want);
	return 0;
}

/* "LO-HI", 1024 <= LO <= HI <= 65535 (the library checks the low bound
 * too, and says why). */
static int cli_range(const char *arg, uint16_t *lo, uint16_t *hi)
{
	unsigned a, b;
	char dash, extra;

	if (sscanf(arg, "%u%c%u%c", &a, &dash, &b, &extra) != 3 || dash != '-' || a < 1 ||
	    a > b || b > 65535)
		return cli_bad("-Z", arg, "a port range LO-HI with 1024 <= LO <= HI <= 65535");
	*lo = (uint16_t)a;
	*hi = (uint16_t)b;
	return 0;
}

/* Appends the filter rule "KIND PATTERN" (KIND '-' or '+'). what names the
 * option (and line) for a message. Returns 0, or -1 after printing why. */
static int cli_rule(struct cli *c, char kind, const char *pattern, const char *what)
{
	size_t n = strlen(pattern);

	if (n == 0 || n + 2 > PCOPY_MAX_FILTER) {
		fprintf(stderr, "pcopy: %s: a pattern of 1 to %u bytes is needed, not %zu bytes\n"
			"Try 'pcopy --help'.\n", what, PCOPY_MAX_FILTER - 2, n);
		return -1;
	}
	if (c->nrules >= PCOPY_MAX_FILTERS || c->rule_bytes + n + 3 > PCOPY_MAX_FILTER_BYTES) {
		fprintf(stderr, "pcopy: %s: too many filter rules: at most %u rules of %u bytes "
			"in all\n", what, PCOPY_MAX_FILTERS, PCOPY_MAX_FILTER_BYTES);
		return -1;
	}
	char **rules = realloc(c->rules, (c->nrules + 1) * sizeof(*rules));
	char *rule = malloc(n + 3);
	if (rules == NULL || rule == NULL) {
		free(rule);
		if (rules != NULL)
			c->rules = rules;
		fprintf(stderr, "pcopy: %s: out of memory\n", what);
		return -1;
	}
	rule[0] = kind;
	rule[1] = ' ';
	memcpy(rule + 2, pattern, n + 1);
	c->rules = rules;
	c->rules[c->nrules++] = rule;
	c->rule_bytes += n + 3;
	c->o.filters = (const char *const *)c->rules;
	c->o.nfilters = c->nrules;
	return 0;
}

/* --exclude-from FILE ("-": standard input): a rule per line. A line
 * "- PATTERN" or "+ PATTERN" is that rule; any other line is a pattern to
 * exclude; empty lines and lines starting with '#' or ';' are comments.
 * A '\r' before the newline is dropped. Returns 0 or -1 after printing. */
static int cli_rules_file(struct cli *c, const char *path)
{
	bool std = strcmp(path, "-") == 0;
	FILE *f = std ? stdin : fopen(path, "r");
	char *line = NULL, what[64 + PATH_MAX];
	size_t cap = 0;
	unsigned no = 0;
	ssize_t n;
	int ret = 0;

	if (f == NULL) {
		fprintf(stderr, "pcopy: --exclude-from: cannot read '%s': %s\n", path,
			strerror(errno));
		return -1;
	}
	errno = 0;
	while (ret == 0 && (n = getline(&line, &cap, f)) >= 0) {
		no++;
		while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		if (n == 0 || line[0] == '#' || line[0] == ';')
			continue;
		snprintf(what, sizeof(what), "--exclude-from '%s', line %u", path, no);
		if ((size_t)n != strlen(line))
			ret = (fprintf(stderr, "pcopy: %s: a NUL byte in a rule\n", what), -1);
		else if (n >= 2 && (line[0] == '-' || line[0] == '+') && line[1] == ' ')
			ret = cli_rule(c, line[0], line + 2, what);
		else
			ret = cli_rule(c, '-', line, what);
		errno = 0;
	}
	if (ret == 0 && ferror(f)) {
		fprintf(stderr, "pcopy: --exclude-from: cannot read '%s': %s\n", path,
			strerror(errno != 0 ? errno : EIO));
		ret = -1;
	}
	free(line);
	if (!std)
		fclose(f);
	return ret;
}

static void cli_free(struct cli *c)
{
	for (unsigned i = 0; i < c->nrules; i++)
		free(c->rules[i]);
	free(c->rules);
	c->rules = NULL;
	c->nrules = 0;
}

/* Long options whose name begins with the text of arg ("--NAME[=...]")
 * and that differ from each other; *val receives the last one's. */
static unsigned cli_long_matches(const char *arg, int *val)
{
	size_t n = strcspn(arg + 2, "=");
	unsigned count = 0;

	for (const struct option *lo = cli_longopts; lo->name != NULL; lo++)
		if (strncmp(lo->name, arg + 2, n) == 0 && (count == 0 || lo->val != *val)) {
			count++;
			*val = lo->val;
		}
	return count;
}

/* What getopt (told to stay quiet: opterr = 0) choked on, said our way,
 * naming the option as the user wrote it: ch is ':' (a value is missing)
 * or '?' (anything else), arg the argument that held the option. */
static void cli_getopt_error(int ch, const char *arg)
{
	bool is_long = arg != NULL && strncmp(arg, "--", 2) == 0;
	int len = is_long ? (int)strcspn(arg, "=") : 0, val = 0;
	char name[512], shown[2048];

	/* As the user wrote it, control characters shown as \xNN. */
	snprintf(name, sizeof(name), "%.*s", is_long ? len : (int)sizeof(name),
		 arg != NULL ? arg : "");
	log_escape(shown, sizeof(shown), name);
	if (is_long && ch == ':')
		fprintf(stderr, "pcopy: option '%s' needs a value\n", shown);
	else if (ch == ':')
		fprintf(stderr, "pcopy: option -%c needs a value\n", optopt);
	else if (is_long && optopt != 0)
		fprintf(stderr, "pcopy: option '%s' takes no value\n", shown);
	else if (is_long && cli_long_matches(arg, &val) > 1)
		fprintf(stderr, "pcopy: option '%s' is ambiguous\n", shown);
	else if (is_long)
		fprintf(stderr, "pcopy: unknown option '%s'\n", shown);
	else if (optopt > ' ' && optopt < 127)
		fprintf(stderr, "pcopy: unknown option -%c\n", optopt);
	else
		fprintf(stderr, "pcopy: unknown option in '%s'\n", shown);
	fputs("Try 'pcopy --help'.\n", stderr);
}

/* Applies one option. Returns 0, or -1 after printing why it is wrong. */
static int cli_apply(struct cli *c, int ch, const char *arg)
{
	struct pcopy_opts *o = &c->o;

	switch (ch) {
	case 'r': case 'R': o->recursive = true; return 0;
	case 'p': o->preserve = true; return 0;
	case 'L': o->dereference = true; return 0;
	case 'H': o->hard_links = true; return 0;
	case 'u': o->update = true; return 0;
	case 'e': o->verify = true; return 0;
	case OPT_NUMERIC_IDS: o->numeric_ids = true; return 0;
	case OPT_DELETE: o->delete_missing = true; return 0;
	case OPT_CHECKSUM: o->checksum = true; return 0;
	case OPT_INPLACE: o->inplace = true; return 0;
	case 'a': o->resume = true; return 0;
	case 'n': o->dry_run = true; return 0;
	case OPT_EXCLUDE: return cli_rule(c, '-', arg, "--exclude");
	case OPT_INCLUDE: return cli_rule(c, '+', arg, "--include");
	case OPT_EXCLUDE_FROM: return cli_rules_file(c, arg);
	case 's': return cli_uint("-s", arg, 1, 64, &o->streams, "a number of streams from 1 to 64");
	case 'w': return cli_size("-w", arg, 0, 1u << 30, &o->window,
				   "a size up to 1G, like 1M or 4M (0: the kernel's)");
	case 'B': return cli_size("-B", arg, 4096, 64u << 20, &o->block_size,
				  "a size from 4k to 64M, like 256k or 1M");
	case 'c': o->codec = arg; return 0;
	case 'P': return cli_uint("-P", arg, 1, 86400, &o->progress_s,
				  "a number of seconds from 1 to 86400");
	case OPT_TIMEOUT:
		return cli_uint("--timeout", arg, 0, 86400 * 7, &o->timeout_s,
				"a number of seconds from 0 (never) to 604800");
	case 'x':
		if (platform_parse_rate(arg, &o->bwlimit) < 0 || o->bwlimit < PCOPY_MIN_BWLIMIT ||
		    o->bwlimit > PCOPY_MAX_BWLIMIT)
			return cli_bad("--bwlimit", arg, "a rate from 1k to 1T bytes per second, "
				       "like 10M or 100mbit");
		return 0;
	case 'v': o->verbosity = o->verbosity < 1 ? 2 : o->verbosity + 1; return 0;
	case 'q': o->verbosity = -1; return 0;
	case 'h': c->action = CLI_HELP; return 0;
	case 'V': c->action = CLI_VERSION; return 0;
	case OPT_KEY_FILE: o->key_file = arg; return 0;
	case OPT_SERVE: o->serve_addr = arg; c->action = CLI_SERVE; return 0;
	case OPT_PROBE: c->action = CLI_PROBE; return 0;
	case OPT_ROOT: o->root = arg; return 0;
	case OPT_GEN_KEY:
		if (arg[0] == '\0')
			return cli_bad("--gen-key", arg, "a file name");
		c->gen_key = arg;
		c->action = CLI_GEN_KEY;
		return 0;
	case OPT_SERVER: c->action = CLI_SERVER; return 0;
	case OPT_ATTACH: o->attach_id = arg; c->action = CLI_ATTACH; return 0;
	case OPT_NOTICES: o->notices = true; return 0;
	case OPT_SSH_DIAL: c->action = CLI_SSH_DIAL; return 0;
	case OPT_NO_PROGRESS: c->no_progress = true; return 0;
	case OPT_JSON:
		if (arg != NULL && arg[0] == '\0')
			return cli_bad("--json", arg, "a file name");
		c->json = true;
		c->json_path = arg;
		return 0;
	case OPT_DATA_VIA:
		if (strcmp(arg, "auto") == 0)
			o->data_via = PCOPY_DATA_VIA_AUTO;
		else if (strcmp(arg, "direct") == 0)
			o->data_via = PCOPY_DATA_VIA_DIRECT;
		else if (strcmp(arg, "ssh") == 0)
			o->data_via = PCOPY_DATA_VIA_SSH;
		else
			return cli_bad("--data-via", arg, "auto, direct or ssh");
		return 0;
	case '3': o->relay = true; return 0;
	case OPT_BIND: o->bind = arg; return 0;
	case OPT_RSH: o->rsh = arg; return 0;
	case OPT_REMOTE_PCOPY: o->remote_pcopy = arg; return 0;
	case 'Z': return cli_range(arg, &o->port_lo, &o->port_hi);
	case 'z': o->reverse = true; return 0;
	case '4':
	case '6':
		if (o->family != 0 && o->family != (ch == '4' ? 4 : 6))
			return cli_clash("-4", "-6");
		o->family = ch == '4' ? 4 : 6;
		return 0;
	case OPT_ENCRYPT:
	case OPT_NO_ENCRYPT: {
		int want = ch == OPT_ENCRYPT ? PCOPY_ENCRYPT_ON : PCOPY_ENCRYPT_OFF;
		if (o->encrypt != PCOPY_ENCRYPT_DEFAULT && o->encrypt != want)
			return cli_clash("--encrypt", "--no-encrypt");
		o->encrypt = want;
		return 0;
	}
	case OPT_CIPHER: o->cipher = arg; return 0;
	case OPT_ALLOW_UNENCRYPTED: o->allow_unencrypted = true; return 0;
	case OPT_MAX_SESSIONS:
		return cli_uint("--max-sessions", arg, 1, PCOPY_MAX_MAX_SESSIONS, &o->max_sessions,
				"a number of sessions from 1 to 1024");
	case OPT_MAX_STARTUPS:
		return cli_uint("--max-startups", arg, 1, PCOPY_MAX_MAX_STARTUPS, &o->max_startups,
				"a number of connections from 1 to 4096");
	case OPT_MAX_PER_SOURCE:
		return cli_uint("--max-per-source", arg, 1, PCOPY_MAX_MAX_PER_SOURCE,
				&o->max_per_source, "a number of connections from 1 to 4096");
	case OPT_CONTROL_FD: {
		unsigned fd;
		if (cli_uint("--control-fd", arg, 0, 1u << 20, &fd, "a file descriptor") < 0)
			return -1;
		o->control_fd = (int)fd;
		return 0;
	}
	default:
		cli_getopt_error(ch, c->bad_arg);
		return -1;
	}
}

static int cli_parse(struct cli *c, int argc, char **argv)
{
	int ch;

	memset(c, 0, sizeof(*c));
	pcopy_opts_defaults(&c->o);
	c->o.key_file = getenv("PCOPY_KEY_FILE");
	c->o.rsh = getenv("PCOPY_RSH");
	c->action = CLI_COPY;
	opterr = 0;
	for (;;) {
		int before = optind;
		ch = getopt_long(argc, argv, ":s:w:B:c:P:Z:x:z346vqhVrRpLHuena", cli_longopts, NULL);
		if (ch == -1)
			break;
		/* Inside a group of short options ("-kr"), optind stays on it
		 * until its last letter. */
		c->bad_arg = optind > before ? argv[optind - 1] : argv[optind];
		if (cli_apply(c, ch, optarg) < 0)
			return -1;
	}
	return 0;
}

/* The summary's last line: which link of the chain was the slow one. */
static void cli_bottleneck(const struct pcopy_result *r)
{
	const struct pcopy_bottleneck *b = &r->bottleneck;

	if (b->verdict == PCOPY_VERDICT_UNKNOWN)
		return;
	if (b->verdict == PCOPY_VERDICT_NONE_CLEAR)
		fprintf(stderr, "pcopy: bottleneck: none clear (busiest: %s %.0f%%, %s %.0f%%)\n",
			b->busiest, b->busy * 100, b->second_label, b->second * 100);
	else
		fprintf(stderr, "pcopy: bottleneck: %s (busy %.0f%%, %s %.0f%%)\n", b->name,
			b->busy * 100, b->second_label, b->second * 100);
}

/* -v: where each stage's threads spent their time. */
static void cli_stage_table(const struct pcopy_result *r)
{
	if (r->nstages == 0)
		return;
	fprintf(stderr, "pcopy: %-8s %-6s %7s %6s %10s %11s\n", "stage", "side", "threads",
		"busy", "blocked-in", "blocked-out");
	for (unsigned i = 0; i < r->nstages; i++) {
		const struct pcopy_stage_stats *g = &r->stage[i];
		fprintf(stderr, "pcopy: %-8s %-6s %7u %5.0f%% %9.0f%% %10.0f%%\n", g->name, g->side,
			g->threads, g->busy * 100, g->blocked_in * 100, g->blocked_out * 100);
	}
}

static void cli_summary(const struct cli *c, const struct pcopy_result *r)
{
	double mbs = r->wall_s > 0 ? (double)r->sink.bytes / r->wall_s / 1e6 : 0;

	if (c->o.verbosity < 1)
		return;
	if (c->o.dry_run)
		fputs("pcopy: dry run, nothing changed: ", stderr);
	else
		fputs("pcopy: ", stderr);
	fprintf(stderr, "%" PRIu64 " bytes in %" PRIu64 " file%s", r->sink.bytes,
		r->sink.files, r->sink.files == 1 ? "" : "s");
	if (c->o.recursive)
		fprintf(stderr, ", %" PRIu64 " director%s, %" PRIu64 " link%s", r->sink.dirs,
			r->sink.dirs == 1 ? "y" : "ies", r->sink.links, r->sink.links == 1 ? "" : "s");
	if (c->o.update || c->o.checksum || c->o.resume)
		fprintf(stderr, ", %" PRIu64 " unchanged (%" PRIu64 " bytes not sent)",
			r->sink.unchanged, r->sink.unchanged_bytes);
	if (c->o.resume)
		fprintf(stderr, ", %" PRIu64 " resumed", r->sink.resumed);
	if (c->o.delete_missing)
		fprintf(stderr, ", %" PRIu64 " %s", r->sink.deleted,
			c->o.dry_run ? "to delete" : "deleted");
	if (r->files_failed > 0)
		fprintf(stderr, ", %u skipped", r->files_failed);
	if (c->o.dry_run) /* the bytes would be written: no rate of them */
		fprintf(stderr, ", %.3f s, %u stream%s", r->wall_s, r->streams,
			r->streams == 1 ? "" : "s");
	else
		fprintf(stderr, ", %.3f s, %.1f MB/s, %u stream%s", r->wall_s, mbs, r->streams,
			r->streams == 1 ? "" : "s");
	if (r->security[0] != '\0')
		fprintf(stderr, ", %s", r->security);
	if (r->compressed && r->source.wire_bytes > 0)
		fprintf(stderr, ", compression %.2fx (cpu: compress %.2f s, decompress %.2f s)",
			(double)r->source.bytes / (double)r->source.wire_bytes,
			r->source.codec_cpu_s, r->sink.codec_cpu_s);
	fputc('\n', stderr);
	if (c->o.verbosity >= 2)
		cli_stage_table(r);
	cli_bottleneck(r);
	if (c->o.verbosity < 2)
		return;
	for (unsigned i = 0; i < r->nstream_stats; i++)
		fprintf(stderr, "pcopy: stream %u: %s, %" PRIu64 " bytes, %" PRIu64
			" on the wire\n", i, r->stream[i].codec, r->stream[i].raw, r->stream[i].wire);
	fprintf(stderr, "pcopy: stats src_cpu_s=%.3f src_maxrss_kib=%" PRIu64
		" sink_cpu_s=%.3f sink_maxrss_kib=%" PRIu64 " wall_s=%.3f src_codec_cpu_s=%.3f"
		" sink_codec_cpu_s=%.3f wire_bytes=%" PRIu64 " xfer_s=%.3f\n",
		r->source.cpu_s, r->source.maxrss_kib, r->sink.cpu_s, r->sink.maxrss_kib,
		r->wall_s, r->source.codec_cpu_s, r->sink.codec_cpu_s, r->source.wire_bytes,
		r->xfer_s);
}

/* pcopy --probe [SRC] HOST: the table and the advice on stdout. */
static int cli_probe(struct cli *c, int nargs, char **args, struct pcopy_result *r)
{
	struct pcopy_probe *p;
	char *text;
	int ret;

	if (nargs < 1 || nargs > 2) {
		fprintf(stderr, "pcopy: --probe takes [SRC] HOST[:DIR] (or a pcopy:// URL)\n"
			"Try 'pcopy --help'.\n");
		r->code = -1;
		return 1;
	}
	p = malloc(sizeof(*p));
	text = malloc(8192);
	if (p == NULL || text == NULL) {
		free(p);
		free(text);
		fprintf(stderr, "pcopy: out of memory\n");
		r->code = -1;
		return 1;
	}
	ret = pcopy_probe(&c->o, nargs == 2 ? args[0] : NULL, args[nargs - 1], p, r);
	if (ret == 0) {
		pcopy_probe_format(p, text, 8192);
		fputs(text, stdout);
		if (c->o.verbosity >= 1)
			fprintf(stderr, "pcopy: probe took %.1f s\n", p->secs);
	}
	free(p);
	free(text);
	return ret;
}

static int cli_run(struct cli *c, int nargs, char **args, struct pcopy_result *r)
{
	if ((c->action == CLI_SERVE || c->action == CLI_GEN_KEY) && nargs > 0) {
		fprintf(stderr, "pcopy: %s takes no operands, and '%s' is one\n"
			"Try 'pcopy --help'.\n", c->action == CLI_SERVE ? "--serve" : "--gen-key FILE",
			args[0]);
		r->code = -1;
		return 1;
	}
	switch (c->action) {
	case CLI_PROBE:
		return cli_probe(c, nargs, args, r);
	case CLI_SERVE:
		return pcopy_serve(&c->o, r);
	case CLI_SERVER:
		return pcopy_server(&c->o, r);
	case CLI_ATTACH:
		return pcopy_attach(&c->o, r);
	case CLI_SSH_DIAL:
		if (nargs != 2) {
			fprintf(stderr, "pcopy: --ssh-dial takes HOST PORT\n");
			r->code = -1;
			return 1;
		}
		return pcopy_ssh_dial(&c->o, args[0], args[1], r);
	case CLI_GEN_KEY:
		return pcopy_gen_key(c->gen_key, r);
	default:
		if (nargs < 2) {
			fprintf(stderr, "pcopy: %s\nTry 'pcopy --help'.\n",
				nargs == 0 ? "missing file operands" : "missing destination operand");
			r->code = -1;
			return 1;
		}
		return pcopy_copy(&c->o, nargs - 1, args, args[nargs - 1], r);
	}
}

/* A copy's report: the bar when stderr is a terminal (unless -q, -P or
 * --no-progress), --json's stream. Returns 0, or -1 after saying why. */
static int cli_report_open(struct cli *c, int nargs, char **args, struct report *rep)
{
	bool bar = !c->no_progress && c->o.verbosity >= 1 && c->o.progress_s == 0 &&
		   tty_wanted(STDERR_FILENO);
	FILE *json = NULL;
	int ret;

	if (c->json && c->json_path == NULL && nargs >= 2 && strcmp(args[nargs - 1], "-") == 0) {
		fputs("pcopy: --json writes to standard output, and so does the destination '-': "
		      "use --json=FILE\nTry 'pcopy --help'.\n", stderr);
		return -1;
	}
	if (c->json) {
		json = c->json_path != NULL ? fopen(c->json_path, "w") : stdout;
		if (json == NULL) {
			fprintf(stderr, "pcopy: --json: cannot open '%s': %s\n", c->json_path,
				strerror(errno));
			return -1;
		}
	}
	ret = report_init(rep, STDERR_FILENO, bar, c->o.recursive, json, c->json_path != NULL,
			  c->o.progress_s);
	if (ret < 0) {
		fprintf(stderr, "pcopy: cannot set up the progress report: %s\n", strerror(-ret));
		if (c->json_path != NULL)
			fclose(json);
		return -1;
	}
	rep->dry_run = c->o.dry_run;
	c->o.hooks = &rep->hooks;
	if (bar)
		pcopy_log_hooks(tty_log_before, tty_log_after, &rep->bar);
	return 0;
}

/* Ends a copy's report: the JSON summary for exit status code. Returns
 * code, or 11 (file I/O) when a copy that went well could not write its
 * JSON. */
static int cli_report_close(struct cli *c, struct report *rep, const struct pcopy_result *r,
			    int ret, int code)
{
	pcopy_log_hooks(NULL, NULL, NULL);
	int bad = report_summary(rep, &c->o, r, ret, code);
	if (report_free(rep) < 0 || bad < 0) {
		fprintf(stderr, "pcopy: --json: cannot write %s: %s\n",
			c->json_path != NULL ? c->json_path : "to standard output", strerror(errno));
		return code == 0 ? pcopy_exit_code(-EIO) : code;
	}
	return code;
}

static int cli_main(struct cli *c, int argc, char **argv);

int main(int argc, char **argv)
{
	struct cli c;
	int code = cli_main(&c, argc, argv);

	cli_free(&c);
	return code;
}

/* main, with c's storage in main's hands (cli_free). */
static int cli_main(struct cli *c, int argc, char **argv)
{
	struct pcopy_result r;
	struct report rep;
	int ret;

	if (cli_parse(c, argc, argv) < 0)
		return 1;
	/* -q prints errors only: no progress lines, whatever the order of -q
	 * and -P (they go out at the errors' level, to show without -v). */
	if (c->o.verbosity < 0)
		c->o.progress_s = 0;
	if (c->action == CLI_HELP) {
		cli_usage(stdout);
		return 0;
	}
	if (c->action == CLI_VERSION) {
		printf("pcopy %s\n", pcopy_version());
		return 0;
	}
	/* -q leaves the errors; a far end started with it says nothing (but
	 * notices), since its client reports them. */
	bool far = c->action == CLI_SERVER || c->action == CLI_ATTACH ||
		   c->action == CLI_SSH_DIAL;
	ret = pcopy_init(far && c->o.verbosity < 0 ? -2 : c->o.verbosity,
			 c->action == CLI_SERVER ? "pcopy[sink]" : "pcopy");
	if (ret < 0) {
		/* A bad test-only PCOPY_TEST_FAULT was explained already. */
		if (pcopy_exit_code(ret) != 1)
			fprintf(stderr, "pcopy: cannot set up signal handling: %s\n", strerror(-ret));
		return 1;
	}
	bool copy = c->action == CLI_COPY && argc - optind >= 2;
	if (copy && cli_report_open(c, argc - optind, argv + optind, &rep) < 0) {
		pcopy_finish();
		return 1;
	}
	ret = cli_run(c, argc - optind, argv + optind, &r);
	pcopy_finish();
	if (copy)
		report_bar_clear(&rep); /* the summary or the error takes its line */
	if (ret == 1 && r.code == -1)
		return 1; /* usage, already explained */
	if (c->action == CLI_COPY && (ret == 0 || r.sink.files > 0 || r.sink.dirs > 0))
		cli_summary(c, &r);
	if (ret < 0 && c->action != CLI_SERVER)
		pcopy_print_error(&r);
	return copy ? cli_report_close(c, &rep, &r, ret, pcopy_exit_code(ret))
		    : pcopy_exit_code(ret);
}
