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
#define PCOPY_DEFAULT_TIMEOUT 120u
/* --serve limits (pcopy(1)); an option left at 0 takes its default. */
#define PCOPY_DEFAULT_MAX_SESSIONS 64u
#define PCOPY_MAX_MAX_SESSIONS 1024u
#define PCOPY_DEFAULT_MAX_STARTUPS 256u
#define PCOPY_MAX_MAX_STARTUPS 4096u
#define PCOPY_DEFAULT_MAX_PER_SOURCE 32u
#define PCOPY_MAX_MAX_PER_SOURCE 4096u

struct pcopy_opts {
	unsigned streams;        /* -s: 1..64 */
	uint64_t window;         /* -w: socket buffer bytes; 0 = kernel autotuning */
	uint64_t block_size;     /* -B: 4 KiB..64 MiB */
	unsigned progress_s;     /* -P: seconds between progress lines; 0 = none */
	unsigned timeout_s;      /* --timeout: data idle timeout; 0 = none */
	const char *codec;       /* -c: compression spec (pcopy(1)); NULL = none */
	bool recursive;          /* -r: copy directories and what is in them */
	bool preserve;           /* -p: modes, times, and owners where the sink is root;
	                            special files are recreated */
	bool numeric_ids;        /* --numeric-ids: owners by number, not by name */
	bool dereference;        /* -L: follow symbolic links in the sources */
	bool hard_links;         /* -H: hard links among the sources stay hard links */
	int verbosity;           /* -1 quiet, 1 normal, 2 verbose (-v), 3 debug (-vv) */
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
};

/* pcopy_opts.data_via: how a copy through ssh carries its data streams */
enum {
	PCOPY_DATA_VIA_AUTO = 0,   /* direct TCP, and through ssh when that cannot connect */
	PCOPY_DATA_VIA_DIRECT,     /* direct TCP connections only */
	PCOPY_DATA_VIA_SSH,        /* each stream its own ssh connection */
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

struct pcopy_result {
	int code;                /* 0 or a negative pcopy error code */
	char msg[1024];          /* what went wrong, naming the file, host or option */
	double wall_s;           /* client wall time, set-up included */
	double xfer_s;           /* the transfer itself: from the data connections being
	                            ready to the last file verified (the client's side;
	                            third party: the sink's) */
	unsigned streams;
	char security[96];       /* how the data travelled: "TLS 1.3, TLS_AES_128_GCM_SHA256"
	                            or "clear" */
	unsigned files_failed;   /* entries not copied: failed, or skipped by the source */
	struct pcopy_side_stats source, sink;
	unsigned nstream_stats;  /* entries in stream[]: 0 unless this side was the source */
	struct pcopy_stream_stats stream[64];
};

/* Sets up logging and signal handling for this process. Must run before
 * any thread is created. verbosity as in pcopy_opts; prefix like "pcopy".
 * Also arms the test-only fault injection named by the environment
 * variable PCOPY_TEST_FAULT (src/sys/fault.h), if set. Returns 0, -errno
 * (signal set-up failed), or a usage error (exit code 1) for a malformed
 * PCOPY_TEST_FAULT, which it has logged. */
int pcopy_init(int verbosity, const char *prefix);

/* pcopy_init's counterpart, for when no call is left to make: from now on
 * the stop signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT) are ignored, and one
 * already pending is dropped. A process must not exit with one of them
 * pending and blocked: timeout(1), for one, signals the command and then
 * its whole process group, so a second SIGINT can arrive after the first
 * was reported, and LeakSanitizer's exit-time check has been seen to spin
 * forever in such a process. */
void pcopy_finish(void);

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
