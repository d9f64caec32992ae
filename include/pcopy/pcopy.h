/* SPDX-License-Identifier: Apache-2.0 */
/* libpcopy: the public interface the command line (and tests, tools and
 * fuzzers) drive. Everything pcopy does is behind these calls; src/main.c
 * only turns argv into a struct pcopy_opts.
 *
 * Each call runs on the calling thread, starts and joins its own worker
 * threads, and returns an error code (0 or negative) with a message in the
 * result. None of them calls exit() or prints the final error: the caller
 * does. Call pcopy_init() once first, before any thread exists. */
#ifndef PCOPY_PCOPY_H
#define PCOPY_PCOPY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCOPY_DEFAULT_STREAMS 4u
#define PCOPY_DEFAULT_BLOCK (1u << 20)
/* --checksum's block without -B: a change costs at most this on the wire,
 * and parallel streams end together (docs/DESIGN-NOTES.md). */
#define PCOPY_DELTA_BLOCK (256u << 10)
#define PCOPY_DEFAULT_TIMEOUT 120u
/* --serve limits (pcopy(1)); an option left at 0 takes its default. */
#define PCOPY_DEFAULT_MAX_SESSIONS 64u
#define PCOPY_MAX_MAX_SESSIONS 1024u
#define PCOPY_DEFAULT_MAX_STARTUPS 256u
#define PCOPY_MAX_MAX_STARTUPS 4096u
#define PCOPY_DEFAULT_MAX_PER_SOURCE 96u /* 32, and one client's most streams */
#define PCOPY_MAX_MAX_PER_SOURCE 4096u
#define PCOPY_MIN_BWLIMIT 1024u          /* --bwlimit: bytes per second, when not 0 */
#define PCOPY_MAX_BWLIMIT (1ull << 40)
#define PCOPY_MAX_FILTERS 256u           /* --exclude, --include, --exclude-from: rules */
#define PCOPY_MAX_FILTER_BYTES 16384u    /* ...their bytes, one NUL each counted */
#define PCOPY_MAX_FILTER 1024u           /* bytes in one rule: "- " or "+ " and a pattern */

struct pcopy_hooks;

struct pcopy_opts {
	unsigned streams;        /* -s: 1..64 */
	uint64_t window;         /* -w: socket buffer bytes; 0 = kernel autotuning */
	uint64_t block_size;     /* -B: 4 KiB..64 MiB; 0 = PCOPY_DEFAULT_BLOCK, or
	                            PCOPY_DELTA_BLOCK with checksum */
	unsigned progress_s;     /* -P: seconds between progress lines; 0 = none */
	unsigned timeout_s;      /* --timeout: data idle timeout; 0 = none */
	uint64_t bwlimit;        /* --bwlimit, -x: the data's bytes per second over every
	                            stream; 0 = no cap, else 1 KiB/s..1 TiB/s */
	const char *codec;       /* -c: compression spec (pcopy(1)); NULL = none */
	bool recursive;          /* -r: copy directories and what is in them */
	bool preserve;           /* -p: modes, times, and owners where the sink is root;
	                            special files are recreated */
	bool numeric_ids;        /* --numeric-ids: owners by number, not by name */
	bool dereference;        /* -L: follow symbolic links in the sources */
	bool hard_links;         /* -H: hard links among the sources stay hard links */
	bool verify;             /* -e: read each file written back from the disk and keep it
	                            only if it has the source's bytes */
	bool dry_run;            /* -n: change nothing; list what would be copied and removed
	                            (pcopy_hooks.listed) */
	bool delete_missing;     /* --delete (with -r and -u, --checksum or -a): remove from each directory of
	                            the copy what the source does not have there, but what
	                            the filter rules exclude */
	bool update;             /* -u: keep a file already there with the source's size and
	                            modification time; give the files written the source's
	                            modification time */
	bool checksum;           /* --checksum: as -u, but compare contents instead of size
	                            and time: only the blocks that differ travel, and the
	                            others are taken from the file already there */
	bool resume;             /* -a: as -u, and a big file's bytes are written to a partial
	                            file kept beside it with a journal until it is in
	                            place, so that after an interruption the same copy
	                            with -a sends only what is missing (pcopy(1)) */
	bool inplace;            /* --inplace, with checksum and not resume: the blocks that
	                            differ are written into the file already there (a
	                            regular file with one link), not into a new file put in
	                            place when complete; an interrupted copy leaves it part
	                            old, part new (pcopy(1)) */
	const char *const *filters; /* --exclude, --include, --exclude-from, in order: each
	                            "- PATTERN" or "+ PATTERN"; the first rule that
	                            matches an entry decides (pcopy(1), FILTER RULES).
	                            At most PCOPY_MAX_FILTERS rules. Borrowed */
	unsigned nfilters;
	int verbosity;           /* -1 quiet (errors only), 1 normal, 2 verbose (-v), 3 debug
	                            (-vv); pcopy_init takes -2 too: nothing at all (a far
	                            end, whose errors its client reports) */
	const char *key_file;    /* --key-file or PCOPY_KEY_FILE (daemon transport) */
	const char *self_exe;    /* binary to start as the local sink (default /proc/self/exe) */
	/* --serve */
	const char *serve_addr;  /* [ADDR:]PORT */
	const char *root;        /* --root */
	unsigned max_sessions;   /* --max-sessions: session processes at once, 1..1024;
	                            0 = PCOPY_DEFAULT_MAX_SESSIONS */
	unsigned max_startups;   /* --max-startups: connections not yet handed on, 1..4096;
	                            0 = PCOPY_DEFAULT_MAX_STARTUPS */
	unsigned max_per_source; /* --max-per-source: of those, from one address, 1..4096;
	                            0 = PCOPY_DEFAULT_MAX_PER_SOURCE */
	/* --server (internal: started by a client) */
	int control_fd;          /* control channel fd; -1 = stdin/stdout */
	bool notices;            /* --notices: show notices though quiet (log.h) */
	const char *bind;        /* data address (a local client passes 127.0.0.1); NULL = any */
	/* remote hosts */
	const char *rsh;         /* --rsh / PCOPY_RSH: the command that reaches a host (ssh) */
	const char *remote_pcopy; /* --remote-pcopy: the pcopy binary on the remote host */
	uint16_t port_lo, port_hi; /* -Z: data ports of the listening side; 0 = ephemeral */
	bool reverse;            /* -z: the client side listens, the remote side connects */
	int data_via;            /* --data-via: PCOPY_DATA_VIA_* */
	bool relay;              /* -3: a third-party copy's data goes through this host */
	/* --attach (internal: a data stream through ssh, started by a client) */
	const char *attach_id;   /* the session's attach id, in hex */
	int family;              /* -4 / -6: 4 or 6; 0 = either */
	/* encryption (TLS 1.3 on the data channels and a daemon's control channel) */
	int encrypt;             /* PCOPY_ENCRYPT_*: --encrypt / --no-encrypt */
	const char *cipher;      /* --cipher: "auto", "aes128-gcm", "chacha20-poly1305";
	                            NULL = auto */
	bool allow_unencrypted;  /* --serve --allow-unencrypted: accept --no-encrypt clients */
	const struct pcopy_hooks *hooks; /* pcopy_copy: progress and failure reports for the
	                                    caller to show; NULL = none. Borrowed. */
};

/* A snapshot of a copy in progress, as the client knows it. A pull or a
 * third-party copy learns its entries as the source walks, so total and
 * entries_total grow until total_final. */
struct pcopy_progress {
	double elapsed_s;        /* since the transfer started (set-up excluded) */
	uint64_t bytes;          /* payload bytes done: read (the client is the source) or
	                            written (the client is the sink); third party: bytes of
	                            finished files */
	uint64_t total;          /* bytes of the entries announced so far */
	bool total_final;        /* every entry is announced and every size known: total
	                            is the copy's; false while a tree is walked or a stream
	                            of unknown length (stdin) is in flight */
	uint64_t entries_done;   /* entries (files, directories, links) finished */
	uint64_t entries_total;  /* entries announced so far */
	const char *current;     /* the oldest file still in flight, for display (may be
	                            a peer's name: not escaped); NULL = none known. Valid
	                            during the callback only */
	uint64_t current_size;   /* its size; 0 when not known */
	unsigned streams;
};

/* What pcopy_copy reports to its caller as it goes. Each pointer may be
 * NULL. The callbacks must return quickly and must not call libpcopy. */
struct pcopy_hooks {
	/* On the thread that called pcopy_copy, at most every interval_ms
	 * (at least 50) while data moves. */
	void (*progress)(void *arg, const struct pcopy_progress *p);
	unsigned interval_ms;
	/* One entry was not copied: path names it where this side knows it
	 * (NULL otherwise: the reason names it), reason says why, as the
	 * log line that reported it; skipped: the source could not read it
	 * and never sent it (else it was sent and failed on the way or at
	 * the sink). Each entry counted in pcopy_result.files_failed is
	 * reported once. Any thread, possibly several at once: the callback
	 * does its own locking. Strings valid during the call. */
	void (*failed)(void *arg, const char *path, const char *reason, bool skipped);
	/* One line of the listing: what (PCOPY_LISTED_*) the copy did or, with
	 * -n, would do to the entry at path (the destination as the user named
	 * it, then the entry's path; cut at 1024 bytes; bytes from the peer,
	 * unescaped). The control thread. */
	void (*listed)(void *arg, int what, const char *path);
	void *arg;               /* passed to each callback */
};

/* pcopy_hooks.listed: what */
enum {
	PCOPY_LISTED_NEW = 1,      /* -n: would be created */
	PCOPY_LISTED_CHANGED = 2,  /* -n: would replace what is there */
	PCOPY_LISTED_GONE = 3,     /* --delete: removed (-n: would be) */
};

/* pcopy_opts.data_via: how a copy through ssh carries its data streams */
enum {
	PCOPY_DATA_VIA_AUTO = 0,   /* direct TCP, and through ssh when that cannot connect */
	PCOPY_DATA_VIA_DIRECT,     /* direct TCP connections only */
	PCOPY_DATA_VIA_SSH,        /* each stream its own ssh connection */
};

/* pcopy_result.data_via */
enum {
	PCOPY_VIA_NONE = 0,        /* no data connection was made */
	PCOPY_VIA_LOCAL,           /* sockets to our own child process */
	PCOPY_VIA_DIRECT,          /* direct TCP connections */
	PCOPY_VIA_SSH,             /* each stream inside its own ssh connection */
	PCOPY_VIA_RELAY,           /* -3: through this host */
	PCOPY_VIA_HOSTS,           /* third party, --data-via auto: the hosts chose direct
	                              TCP or ssh and do not tell the client which */
};

/* pcopy_opts.encrypt */
enum {
	PCOPY_ENCRYPT_DEFAULT = 0, /* TLS wherever data crosses a network; clear in a local copy */
	PCOPY_ENCRYPT_ON,          /* --encrypt: TLS in a local copy too */
	PCOPY_ENCRYPT_OFF,         /* --no-encrypt: clear everywhere (both ends must agree) */
};

struct pcopy_side_stats {
	uint64_t bytes;          /* payload bytes read (source) / written (sink) */
	uint64_t wire_bytes;
	uint64_t files;          /* regular files */
	uint64_t dirs;           /* directories */
	uint64_t links;          /* symbolic and hard links */
	uint64_t unchanged;      /* -u: regular files already there as they are (not in files) */
	uint64_t unchanged_bytes; /* their bytes, which did not travel */
	uint64_t deleted;        /* --delete: entries removed from the destination (sink) */
	uint64_t resumed;        /* -a: files finished from what an interrupted run left
	                            (of files; sink) */
	double cpu_s;            /* user + system CPU seconds */
	double codec_cpu_s;      /* of which compressing (source) or decompressing (sink) */
	uint64_t maxrss_kib;
};

/* What one data stream carried (known when this side was the source). */
struct pcopy_stream_stats {
	char codec[16];          /* "zlib:1", "lz4", "none"; for auto, where it ended */
	uint64_t raw;            /* file bytes */
	uint64_t wire;           /* bytes on the wire, headers included */
};

/* The stages of the copy, for the summary's table (-v) and --json: the
 * source's three, the network between, the sink's three. */
enum pcopy_stage {
	PCOPY_STAGE_READ,        /* source: reading files or a stream */
	PCOPY_STAGE_COMPRESS,    /* source: checksumming and compressing */
	PCOPY_STAGE_SEND,        /* source: writing the data channels (TLS: encrypting) */
	PCOPY_STAGE_NETWORK,     /* between: derived from SEND and RECEIVE */
	PCOPY_STAGE_RECEIVE,     /* sink: reading the data channels (TLS: decrypting) */
	PCOPY_STAGE_DECODE,      /* sink: decompressing and verifying */
	PCOPY_STAGE_WRITE,       /* sink: writing files or a stream */
	PCOPY_STAGES
};

/* Where one stage's threads spent the copy: shares of threads * the copy's
 * wall time (the longer of the two sides'), each 0..1, summing to at most 1
 * (the rest: before the threads started and after they finished;
 * docs/DESIGN-NOTES.md,
 * "Which link is the slow one"). NETWORK: busy is the time the senders
 * waited for room in the socket while the receivers waited for bytes;
 * blocked_in the time the senders had nothing to send; blocked_out the
 * time the receivers held on to what they had read. */
struct pcopy_stage_stats {
	char name[12];           /* "read", "compress", "send", "network", "receive",
	                            "decode", "write" */
	char side[8];            /* "source", "sink", or "both" (network) */
	unsigned threads;        /* threads that did the stage's work */
	double busy;             /* working */
	double blocked_in;       /* waiting for input */
	double blocked_out;      /* waiting to hand on */
};

/* pcopy_bottleneck.verdict: the slowest link of the copy */
enum pcopy_verdict {
	PCOPY_VERDICT_UNKNOWN = 0,   /* no stage times (the copy failed, or nothing moved) */
	PCOPY_VERDICT_NONE_CLEAR,    /* no stage dominates */
	PCOPY_VERDICT_SOURCE_READ,   /* "source disk reads" */
	PCOPY_VERDICT_COMPRESSION,   /* "compression (CPU) on the source" */
	PCOPY_VERDICT_ENCRYPTION,    /* "encryption" (TLS, either side) */
	PCOPY_VERDICT_NETWORK,       /* "the network" */
	PCOPY_VERDICT_DECOMPRESSION, /* "decompression (CPU) on the sink" */
	PCOPY_VERDICT_SINK_WRITE,    /* "sink disk writes" */
};

/* The verdict and its two headline numbers, as the summary's line says
 * them: "bottleneck: NAME (busy BUSY%, SECOND_LABEL SECOND%)". */
struct pcopy_bottleneck {
	int verdict;             /* enum pcopy_verdict */
	char name[40];           /* "sink disk writes"; "none clear" */
	char key[16];            /* the same for machines: "sink_write"; "none" */
	double busy;             /* the named stage's score, 0..1; none clear: the busiest's */
	char busiest[40];        /* none clear: the busiest stage's name; else "" */
	char second_label[16];   /* "network idle" (the network: "sink idle") */
	double second;           /* 0..1 */
};

struct pcopy_result {
	int code;                /* 0 or a negative pcopy error code */
	char msg[1024];          /* what went wrong, naming the file, host or option */
	double wall_s;           /* client wall time, set-up included */
	double xfer_s;           /* the transfer itself: from the data connections being
	                            ready to the last file verified (the client's side;
	                            third party: the sink's) */
	unsigned streams;
	bool compressed;         /* -c asks for compression (a codec at a level above 0 for
	                            some stream, or auto): ratios are worth showing */
	char security[96];       /* how the data travelled: "TLS 1.3, TLS_AES_128_GCM_SHA256"
	                            or "clear" */
	int data_via;            /* PCOPY_VIA_*: the path the data streams took */
	char via_reason[256];    /* why the data went through ssh though direct TCP was
	                            tried (the automatic fallback); "" otherwise */
	unsigned files_failed;   /* entries not copied: failed, or skipped by the source */
	unsigned files_unverified; /* of those, files -e read back from the disk other than
	                            sent (the code is then -PC_E_INTEGRITY) */
	struct pcopy_side_stats source, sink;
	unsigned nstream_stats;  /* entries in stream[]: 0 unless this side was the source */
	struct pcopy_stream_stats stream[64];
	unsigned nstages;        /* entries in stage[]: PCOPY_STAGES, or 0 (verdict unknown) */
	struct pcopy_stage_stats stage[PCOPY_STAGES]; /* by enum pcopy_stage */
	struct pcopy_bottleneck bottleneck;
};

/* Sets up logging and signal handling for this process. Must run before
 * any thread is created. verbosity as in pcopy_opts; prefix like "pcopy".
 * Also arms the test-only fault injection named by the environment
 * variable PCOPY_TEST_FAULT (src/sys/fault.h), if set. Returns 0, -errno
 * (signal set-up failed), or a usage error (exit code 1) for a malformed
 * PCOPY_TEST_FAULT, which it has logged. */
int pcopy_init(int verbosity, const char *prefix);

/* Calls before(arg) ahead of every line this process logs to stderr and
 * after(arg) once it is written, on the logging thread (any thread): a
 * caller drawing on the terminal clears its line in before and holds its
 * lock until after. Call after pcopy_init, before pcopy_copy. */
void pcopy_log_hooks(void (*before)(void *arg), void (*after)(void *arg), void *arg);

/* pcopy_init's counterpart, for when no call is left to make: from now on
 * the stop signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT) are ignored, and one
 * already pending is dropped. A process must not exit with one of them
 * pending and blocked: timeout(1), for one, signals the command and then
 * its whole process group, so a second SIGINT can arrive after the first
 * was reported, and LeakSanitizer's exit-time check has been seen to spin
 * forever in such a process. */
void pcopy_finish(void);

/* Prints a result's message (r->msg, escaped already) as the final error
 * line: "pcopy: MSG", or with its syslog priority where stderr is the
 * journal, as every other line this process logs. */
void pcopy_print_error(const struct pcopy_result *r);

void pcopy_opts_defaults(struct pcopy_opts *o);

/* Copies srcs (local paths, "-", or one pcopy:// URL) to dst (a local path,
 * "-", or a pcopy:// URL). Returns 0 or a negative code; r is filled in
 * either case. */
int pcopy_copy(const struct pcopy_opts *o, int nsrc, char *const srcs[], const char *dst,
	       struct pcopy_result *r);

/* Runs the daemon: serves sessions under o->root, authenticated by the key
 * in o->key_file, until SIGINT/SIGTERM. */
int pcopy_serve(const struct pcopy_opts *o, struct pcopy_result *r);

/* Serves one session on the control channel a client opened for us
 * (o->control_fd, or stdin/stdout). */
int pcopy_server(const struct pcopy_opts *o, struct pcopy_result *r);

/* One data stream through ssh, on the host a client reached with
 * `ssh HOST pcopy --attach ID`: hands this process's standard input and
 * output to the session of o->attach_id on this host and waits until the
 * session is done with them. */
int pcopy_attach(const struct pcopy_opts *o, struct pcopy_result *r);

/* ssh's ProxyCommand for a data stream through ssh (roles/sshroute.h):
 * connects to host:port with o->window, o->family and o->timeout_s (the
 * connect's limit), passes the socket to ssh over standard output (a
 * socket: ProxyUseFdpass) and returns. */
int pcopy_ssh_dial(const struct pcopy_opts *o, const char *host, const char *port,
		   struct pcopy_result *r);

/* ---- pcopy --probe ------------------------------------------------------ */

#define PCOPY_PROBE_MAX_CELLS 16u
#define PCOPY_PROBE_MAX_CODECS 8u

/* One cell of the network sweep: what the far side received from streams
 * streams, each sending with a window (send buffer) of window bytes. */
struct pcopy_probe_cell {
	unsigned streams;
	uint64_t window;         /* bytes; 0 = the kernel's autotuning */
	double rate;             /* bytes per second received, after the warm-up */
};

/* A disk figure: a rate, or why there is none. */
struct pcopy_probe_disk {
	double rate;             /* bytes per second; 0 = not measured (see status) */
	uint64_t bytes;          /* bytes read or written (and flushed) */
	double secs;             /* ...in this long */
	int status;              /* 0, or -errno / a negative pcopy code */
	bool cached;             /* read: the bytes came from the page cache */
	char what[160];          /* what was read or written, for the table */
};

/* One codec, timed on one core of each side over the same sample. */
struct pcopy_probe_codec {
	char spec[16];           /* as -c takes it: "lz4", "zlib:1" */
	double ratio;            /* raw / encoded bytes of the sample */
	double src_comp;         /* raw bytes per second compressed by this host */
	double sink_decomp;      /* raw bytes per second decompressed by the far side */
};

/* Every figure --probe measured, and its advice (the --json of a probe
 * will be built from this). Rates are bytes per second. */
struct pcopy_probe {
	double rtt_s;            /* control channel round trip, the least of a few */
	double secs;             /* the whole probe, connection set-up included */
	struct pcopy_probe_disk src_read;   /* this host */
	struct pcopy_probe_disk sink_write; /* the far side, into its directory */
	unsigned ncells;
	struct pcopy_probe_cell cell[PCOPY_PROBE_MAX_CELLS];
	bool window_settable;    /* false: the data went through ssh, whose windows are
	                            ssh's own (only the streams were swept) */
	uint64_t src_wmem_max, src_tcp_wmem_max;    /* this host's kernel limits */
	uint64_t sink_rmem_max, sink_tcp_rmem_max;  /* the far side's */
	unsigned src_cpus, sink_cpus;
	unsigned ncodecs;
	struct pcopy_probe_codec codec[PCOPY_PROBE_MAX_CODECS];
	char sample[160];        /* what the codecs were timed on */
	char security[400];      /* how the probe's data travelled */
	/* the advice */
	unsigned rec_streams;
	uint64_t rec_window;     /* 0: leave -w out (autotuning) */
	char rec_codec[16];      /* "none" or a -c spec */
	char reason[1536];       /* one sentence per finding, "; "-separated */
};

/* Measures the path to host ("[USER@]HOST[:DIR]" through ssh, or
 * "pcopy://HOST:PORT[/DIR]"), as a copy to DIR there would travel, with
 * o's transport options (--rsh, --key-file, --data-via, -4/-6, --no-encrypt,
 * --cipher, -Z, --timeout). src (NULL: a temporary file in the current
 * directory) is read for the source disk rate. Takes about 10 seconds.
 * Fills p (figures and advice). Returns 0 or a negative code; r is filled
 * in either case. */
int pcopy_probe(const struct pcopy_opts *o, const char *src, const char *host,
		struct pcopy_probe *p, struct pcopy_result *r);

/* Writes p as the table --probe prints (stage, measured figure, detail),
 * then the advice ("recommended: -s N [-w SIZE] -c SPEC") and its reasons
 * ("why: ..."), NUL-terminated within cap. Returns the length. Pure. */
int pcopy_probe_format(const struct pcopy_probe *p, char *buf, size_t cap);

/* Writes a new random key to path (mode 0600; path must not exist). */
int pcopy_gen_key(const char *path, struct pcopy_result *r);

/* The documented exit status for a code from the calls above. */
int pcopy_exit_code(int code);

const char *pcopy_version(void);

#endif
