/* SPDX-License-Identifier: Apache-2.0 */
/* proto: the wire formats, as pure functions over byte buffers.
 *
 * Nothing here does I/O or allocates, so every function is thread-safe and
 * can be unit tested and fuzzed on raw bytes. docs/PROTOCOL.md is the
 * specification; this file follows it field for field. All integers are
 * big-endian on the wire.
 *
 * Control channel: a stream of frames. Each frame is an 8-byte header
 * (type u8, flags u8, reserved u16 = 0, length u32) and `length` bytes of
 * payload, length <= PROTO_MAX_PAYLOAD.
 *
 * Data channels: after the handshake (PROTO_DHELLO_LEN etc. below), a stream
 * of blocks, each a PROTO_BLOCK_HDR_LEN-byte header followed by enc_len
 * payload bytes, closed by a block header of type PROTO_BLK_END. */
#ifndef PCOPY_PROTO_H
#define PCOPY_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PROTO_VERSION 14u
#define PROTO_MIN_VERSION 14u   /* 1 and 2 were never released; 3 had no encryption; 4 had
                                  a data listener per daemon session; 5 had no data
                                  connections through ssh; 6 had no stage times in
                                  END and DONE, nor probe sessions; 7 no rate cap; 8 no
                                  filter rules; 9 no block delta (SUMS, SAME); 10 no
                                  resume (REQUEST.sync RESUME, DONE.resumed); 11 no
                                  INPLACE; 12 no INCOMPLETE directories; 13 no sign of
                                  life from the sink after END */
#define PROTO_MAGIC 0x50435059u       /* "PCPY": control HELLO */
#define PROTO_DATA_MAGIC 0x50434454u  /* "PCDT": data channel hello */
#define PROTO_ROUTE_MAGIC 0x50435254u /* "PCRT": a data connection to a daemon's port */

#define PROTO_FRAME_HDR_LEN 8u
#define PROTO_MAX_PAYLOAD 65536u
#define PROTO_MAX_PATH 4096u          /* bytes in a path or name, no NUL */
#define PROTO_MAX_NAME 255u           /* bytes in a path component, user or group name */
#define PROTO_MAX_BATCH 4096u         /* entries in one ENTRIES */
#define PROTO_MAX_INFLIGHT 65536u     /* entries announced and not yet covered by an ACK */
#define PROTO_MAX_INFLIGHT_BYTES (16u << 20) /* their string bytes (proto_entry_bytes) */
#define PROTO_MAX_PACK 65536u         /* ids covered by one PACK block */
#define PROTO_MAX_MSG 1024u           /* bytes in an error/status message */
#define PROTO_MAX_CODEC_SPEC 512u     /* bytes in REQUEST.codec */
#define PROTO_MAX_HOST 255u           /* bytes in a host name or address */
#define PROTO_MAX_SSH_DEST 320u       /* bytes in an ssh destination: [user@]host */
#define PROTO_ATTACH_ID_LEN 16u       /* names a session's attach socket (data through ssh) */
#define PROTO_MAX_PATHS 1024u         /* paths in one REQUEST */
#define PROTO_REQ_PATHS_BYTES 32768u  /* REQUEST.paths, NULs included */
#define PROTO_MAX_FILTERS 256u        /* filter rules in one REQUEST (version 9) */
#define PROTO_MAX_FILTER 1024u        /* bytes in one rule: "- " or "+ ", then the pattern */
#define PROTO_REQ_FILTER_BYTES 16384u /* REQUEST.filters, NULs included */
#define PROTO_NONCE_LEN 32u
#define PROTO_KEY_LEN 32u
#define PROTO_MAC_LEN 32u
#define PROTO_MAX_STREAMS 64u
#define PROTO_MIN_DATA_PORT 1024u /* no privileged port for data: a daemon listens before auth */
#define PROTO_MIN_BLOCK 4096u
#define PROTO_MAX_BLOCK (64u << 20)
#define PROTO_MAX_SUMS 2048u          /* block hashes in one SUMS (version 10) */
#define PROTO_SUM_LEN 16u             /* bytes of one: XXH3-128, big-endian */
#define PROTO_MAX_INFLIGHT_SUMS (64u << 20) /* hash bytes sent for entries not yet
                                         covered by an ACK */
#define PROTO_MIN_BWLIMIT 1024u        /* REQUEST.bwlimit, bytes per second, when not 0 */
#define PROTO_MAX_BWLIMIT (1ull << 40) /* 1 TiB/s: the limiter's arithmetic stays exact */

enum proto_type {
	PROTO_HELLO = 1,     /* both ways, first message */
	PROTO_AUTH = 2,      /* daemon transport: proof of the shared key */
	PROTO_KEY = 3,       /* pipe/ssh transport: client sends the session key */
	PROTO_REQUEST = 4,   /* client -> server: what to do */
	PROTO_READY = 5,     /* server -> client: accepted; data port */
	PROTO_ENTRIES = 6,   /* source -> sink: a batch of tree entries is coming */
	PROTO_FILE_END = 7,  /* source -> sink: final size of a streamed file */
	PROTO_FILE_DONE = 8, /* sink -> source: an entry failed */
	PROTO_END = 9,       /* source -> sink: no more files; source stats */
	PROTO_DONE = 10,     /* sink -> source: all files finished; sink stats */
	PROTO_ERROR = 11,    /* either way: fatal error, then close */
	PROTO_SKIP = 12,     /* server as source -> client: a source that cannot be sent */
	PROTO_FILE_FAIL = 13, /* source -> sink: an announced file will not come */
	PROTO_ACK = 14,      /* sink -> source: every entry below an id is finished */
	/* version 7: probe sessions (REQUEST.role PROBE; docs/PROTOCOL.md 4.14) */
	PROTO_PROBE = 15,    /* client -> server: one step of a probe */
	PROTO_PROBE_FIG = 16, /* server -> client: the figures that step measured */
	/* version 8: sync (REQUEST.sync; docs/PROTOCOL.md 4.16) */
	PROTO_HAVE = 17,     /* sink -> source: which files of a batch it has already */
	PROTO_LIST = 18,     /* sink -> client: an entry a dry run would write, or one
	                        --delete removes (or would) (version 9) */
	PROTO_SUMS = 19,     /* sink -> source: hashes of the blocks a file has at the
	                        destination (--checksum; version 10) */
	PROTO_TYPE_MAX
};

/* Capability bits in HELLO.caps. None are defined in version 3. */
#define PROTO_CAP_NONE 0u

enum proto_role {
	PROTO_ROLE_SINK = 1,
	PROTO_ROLE_SOURCE = 2,
	PROTO_ROLE_PROBE = 3, /* version 7: the server measures a path (PROBE, PROBE_FIG);
	                         paths: the one directory it may write its test file in */
};

/* REQUEST.flags */
#define PROTO_REQ_ORDERED 0x1u   /* sink writes a stream (stdout): block k on stream k % N */
#define PROTO_REQ_DEST_STDOUT 0x2u /* server as sink writes to its stdout */
#define PROTO_REQ_SRC_STDIN 0x4u   /* (reserved: server as source reads stdin) */
#define PROTO_REQ_CONNECT 0x8u     /* the server connects for data (to connect_host:port) */
#define PROTO_REQ_DATA_KEY 0x10u   /* data connections use data_key, not the derived key */
#define PROTO_REQ_RECURSIVE 0x20u  /* the source walks directories (-r) */
#define PROTO_REQ_PRESERVE 0x40u   /* modes, times and owners are kept (-p) */
#define PROTO_REQ_NUMERIC_IDS 0x80u /* owners by uid/gid, not by name (--numeric-ids) */
#define PROTO_REQ_DEREF 0x100u     /* the source follows symlinks (-L) */
#define PROTO_REQ_HARDLINKS 0x200u /* hard links are kept (-H) */
#define PROTO_REQ_ENCRYPT 0x400u   /* the data channels are TLS 1.3 (section 6.1) */
#define PROTO_REQ_CIPHER_AES 0x800u /* with ENCRYPT: a connector offers only AES-128-GCM */
#define PROTO_REQ_CIPHER_CHACHA 0x1000u /* ...only ChaCha20-Poly1305 (never both bits) */
#define PROTO_REQ_SSH_DATA 0x2000u /* data may come through ssh: a server on the pipe
                                      transport that listens opens an attach socket named
                                      by attach_id */
#define PROTO_REQ_CONNECT_SSH 0x4000u /* with CONNECT: the server may reach the listener
                                      through ssh (connect_ssh, attach_id) */
#define PROTO_REQ_SSH_ONLY 0x8000u /* with SSH_DATA: no TCP listener, only ssh streams */
#define PROTO_REQ_KNOWN (PROTO_REQ_ORDERED | PROTO_REQ_DEST_STDOUT | PROTO_REQ_SRC_STDIN | \
			 PROTO_REQ_CONNECT | PROTO_REQ_DATA_KEY | PROTO_REQ_RECURSIVE | \
			 PROTO_REQ_PRESERVE | PROTO_REQ_NUMERIC_IDS | PROTO_REQ_DEREF | \
			 PROTO_REQ_HARDLINKS | PROTO_REQ_ENCRYPT | PROTO_REQ_CIPHER_AES | \
			 PROTO_REQ_CIPHER_CHACHA | PROTO_REQ_SSH_DATA | \
			 PROTO_REQ_CONNECT_SSH | PROTO_REQ_SSH_ONLY) /* 0xffff: every bit is taken */

/* REQUEST.sync bits (version 8): how the copy treats what is already there. */
#define PROTO_SYNC_UPDATE 0x1u  /* -u: the sink answers every ENTRIES with HAVE, and keeps
                                   a regular file whose size and mtime match; the files it
                                   writes get the source's mtime */
#define PROTO_SYNC_VERIFY 0x2u  /* -e: the sink reads each file it wrote back from the disk
                                   and puts it in place only if its blocks' checksums are
                                   the source's */
#define PROTO_SYNC_DELETE 0x4u  /* --delete (version 9), only with UPDATE and RECURSIVE:
                                   the sink removes what the destination has and the
                                   source did not announce, in each directory it
                                   announced, but what the filter rules exclude */
#define PROTO_SYNC_DRY_RUN 0x8u /* -n (version 9): the sink changes nothing; it lists what it
                                   would write and remove (LIST), and the source sends no
                                   block */
#define PROTO_SYNC_CHECKSUM 0x10u /* --checksum (version 10), only with UPDATE: the sink
                                   keeps nothing by size and time; it sends the hashes
                                   of the blocks each file has already (SUMS), and the
                                   source sends a block that matches as SAME */
#define PROTO_SYNC_RESUME 0x20u /* -a (version 11), only with UPDATE: the sink keeps what
                                   an interrupted run wrote of a file (a partial file and
                                   its journal) and sends SUMS of the blocks it has there;
                                   the source sends those that match as SAME */
#define PROTO_SYNC_INPLACE 0x40u /* --inplace (version 12), only with CHECKSUM and not with
                                   RESUME: the sink writes the blocks that differ into the
                                   file already there (a regular file with one link that it
                                   can open for writing), not into a new file put in place */
#define PROTO_SYNC_KNOWN (PROTO_SYNC_UPDATE | PROTO_SYNC_VERIFY | PROTO_SYNC_DELETE | \
			  PROTO_SYNC_DRY_RUN | PROTO_SYNC_CHECKSUM | PROTO_SYNC_RESUME | \
			  PROTO_SYNC_INPLACE)

/* proto_entry.type */
enum proto_entry_type {
	PROTO_ENT_REG = 1,      /* a regular file; its bytes come in blocks */
	PROTO_ENT_DIR = 2,      /* a directory, before anything inside it */
	PROTO_ENT_SYMLINK = 3,  /* target holds the link text */
	PROTO_ENT_HARDLINK = 4, /* another name for the REG entry link_id */
	PROTO_ENT_FIFO = 5,
	PROTO_ENT_CHR = 6,      /* rdev holds the device number */
	PROTO_ENT_BLK = 7,      /* rdev holds the device number */
	PROTO_ENT_SOCK = 8,
	PROTO_ENT_DIR_END = 9,  /* after everything inside the DIR of the same path */
	PROTO_ENT_TYPE_MAX
};

/* proto_entry.flags: REG's */
#define PROTO_ENT_SIZE_UNKNOWN 0x1u /* a stream: size is 0, FILE_END gives it */
#define PROTO_ENT_LINKED 0x2u       /* later HARDLINK entries may name this id */
#define PROTO_ENT_REG_FLAGS (PROTO_ENT_SIZE_UNKNOWN | PROTO_ENT_LINKED)
/* ... and DIR_END's (version 13): the source could not read all that is in
 * the directory (an entry it skipped with an error, or its listing cut
 * short), so --delete removes nothing from it */
#define PROTO_ENT_INCOMPLETE 0x4u

struct proto_hello {
	uint32_t magic;         /* PROTO_MAGIC */
	uint16_t version;       /* highest version spoken */
	uint16_t min_version;   /* lowest version spoken */
	uint32_t caps;          /* PROTO_CAP_* */
	uint8_t nonce[PROTO_NONCE_LEN];
};

struct proto_auth {
	uint8_t mac[PROTO_MAC_LEN];
};

struct proto_key {
	uint8_t key[PROTO_KEY_LEN];
};

struct proto_request {
	uint8_t role;           /* the role the server plays: enum proto_role */
	uint16_t flags;         /* PROTO_REQ_* */
	uint16_t streams;       /* 1..PROTO_MAX_STREAMS */
	uint32_t block_size;    /* PROTO_MIN_BLOCK..PROTO_MAX_BLOCK */
	uint32_t window;        /* socket buffer bytes; 0 = kernel autotuning */
	uint32_t timeout_s;     /* data idle timeout; 0 = none */
	uint32_t nsources;      /* number of sources the client will send (sink role) */
	uint16_t port_lo;       /* data listener port range (-Z); 0 = any ephemeral port,
	                           else >= PROTO_MIN_DATA_PORT (the server checks) */
	uint16_t port_hi;       /* >= port_lo, or 0 */
	uint8_t family;         /* data address family: 0 any, 4 IPv4, 6 IPv6 */
	uint8_t data_key[PROTO_KEY_LEN]; /* with PROTO_REQ_DATA_KEY: the data session key */
	uint16_t connect_port;  /* with PROTO_REQ_CONNECT: where to connect for data */
	/* With SSH_DATA: the name of the attach socket this server opens; with
	 * CONNECT_SSH: the one it attaches to on the listener's host. Random,
	 * chosen by the client; all zero with neither flag. */
	uint8_t attach_id[PROTO_ATTACH_ID_LEN];
	uint64_t bwlimit;       /* the source's cap on its data, bytes per second over every
	                           stream (--bwlimit); 0 = none, else PROTO_MIN_BWLIMIT..
	                           PROTO_MAX_BWLIMIT. Version 8 */
	uint32_t sync;          /* PROTO_SYNC_*; no other bit. Version 8 */
	char connect_host[PROTO_MAX_HOST + 1]; /* ...and to whom ("" = the client's address) */
	/* With PROTO_REQ_CONNECT_SSH (else ""): the listener through ssh, each stream as
	 * `ssh -o BatchMode=yes connect_ssh 'connect_pcopy' --attach ID`; connect_port 0:
	 * only so, else after direct connects failed. */
	char connect_ssh[PROTO_MAX_SSH_DEST + 1];  /* [user@]host: no '-' first, no blank
	                                              nor control character */
	char connect_pcopy[PROTO_MAX_PATH + 1];    /* pcopy there; "" = "pcopy" */
	char codec[PROTO_MAX_CODEC_SPEC + 1]; /* the -c spec for the source ("" = none) */
	uint16_t npaths;        /* 1..PROTO_MAX_PATHS */
	char paths[PROTO_REQ_PATHS_BYTES]; /* sink: the destination; source: the sources.
	                           npaths NUL-terminated strings back to back */
	uint16_t nfilters;      /* 0..PROTO_MAX_FILTERS. Version 9 */
	char filters[PROTO_REQ_FILTER_BYTES]; /* the filter rules, in order: nfilters
	                           NUL-terminated strings back to back, each "- PATTERN"
	                           (exclude) or "+ PATTERN" (include): see
	                           proto_filter_rule_ok and pipeline/filter.h */
};

struct proto_ready {
	uint16_t data_port;     /* port the server listens on for data; 0 if it connects, or
	                           if the data comes to a daemon's own port (version 5,
	                           docs/PROTOCOL.md 6.2) */
	char host[PROTO_MAX_HOST + 1]; /* the server's own address for data, as it knows it
	                           ("" = unknown: use the address the client reached) */
};

/* One entry of a tree (ENTRIES). Strings are NUL-terminated; every rule of
 * docs/PROTOCOL.md 4.6 holds for an entry the decoder returns, and the
 * encoder (proto_batch_add) refuses one that breaks any. */
struct proto_entry {
	uint32_t id;            /* first_id + its position in the batch */
	uint8_t type;           /* enum proto_entry_type */
	uint8_t flags;          /* PROTO_ENT_* (REG only; else 0) */
	uint32_t mode;          /* permission bits, <= 07777 */
	uint32_t uid;
	uint32_t gid;
	int64_t mtime_s;
	uint32_t mtime_ns;      /* < 1e9 */
	int64_t atime_s;
	uint32_t atime_ns;      /* < 1e9 */
	uint64_t size;          /* REG: bytes (0 if SIZE_UNKNOWN); else 0 */
	uint64_t rdev;          /* CHR/BLK: the device number (Linux dev_t); else 0 */
	uint32_t link_id;       /* HARDLINK: an earlier REG with LINKED, < id; else 0 */
	char path[PROTO_MAX_PATH + 1];   /* relative: see proto_check_relpath */
	char target[PROTO_MAX_PATH + 1]; /* SYMLINK: 1..PROTO_MAX_PATH bytes; else "" */
	char user[PROTO_MAX_NAME + 1];   /* owner's name; "" = unknown */
	char group[PROTO_MAX_NAME + 1];  /* group's name; "" = unknown */
};

/* ENTRIES as a message: the entries themselves stay encoded in body, which
 * the message borrows. After proto_decode, body points into the payload
 * given to it (for ctl: its receive buffer, valid until the next ctl_recv)
 * and every entry in it has been checked; read them with
 * proto_entries_next. To send, point body at a proto_batch's bytes
 * (proto_batch_msg). */
struct proto_entries {
	uint32_t first_id;      /* id of the first entry; the next ones count up */
	uint16_t count;         /* 1..PROTO_MAX_BATCH */
	const uint8_t *body;    /* borrowed: the count entries, back to back */
	size_t body_len;        /* bytes in body: exactly the count entries */
	/* Set by proto_decode, which checked every entry, so that
	 * proto_entries_next does not check them again. Never set by hand: a
	 * message built otherwise leaves it false. proto_encode checks every
	 * entry whatever it says. */
	bool checked;
};

/* An ENTRIES payload being built. Large (64 KiB): not for the stack of a
 * thread with a small one. Not thread-safe; one builder per batch. */
struct proto_batch {
	uint8_t body[PROTO_MAX_PAYLOAD]; /* the encoded entries */
	uint32_t first_id;      /* id of the first entry */
	uint16_t count;         /* entries added */
	size_t len;             /* bytes used in body */
};

struct proto_file_end {
	uint32_t id;
	uint64_t size;
};

/* A failed entry (sink -> source). Success is never reported this way:
 * an ACK covers it. */
struct proto_file_done {
	uint32_t id;
	int32_t status;         /* a negative pcopy error code; never 0 */
	uint64_t bytes;         /* bytes written before it failed */
	char msg[PROTO_MAX_MSG + 1]; /* NUL-terminated; names the file and the reason */
};

/* The source gives up on an announced REG entry (source -> sink). */
struct proto_file_fail {
	uint32_t id;
	int32_t status;         /* a negative pcopy error code; never 0 */
	char msg[PROTO_MAX_MSG + 1]; /* NUL-terminated; names the file and the reason */
};

/* Every entry with an id below upto is finished (sink -> source). */
struct proto_ack {
	uint32_t upto;          /* never decreases; <= entries announced (the receiver checks) */
};

/* The sink's answer to one ENTRIES under PROTO_SYNC_UPDATE: which of its
 * entries the sink has already (the source sends no block of them). */
struct proto_have {
	uint32_t first_id;      /* the ENTRIES' first_id (the receiver checks) */
	uint16_t count;         /* its count: 1..PROTO_MAX_BATCH */
	uint8_t bits[PROTO_MAX_BATCH / 8]; /* entry first_id + i is kept: bit i % 8 (1 << that)
	                           of byte i / 8; (count + 7) / 8 bytes travel, and a bit
	                           at or past count is 0 */
};

/* The hashes of blocks first .. first + count - 1 of entry id as the
 * destination has them (sink -> source, --checksum or -a): hash k is
 * XXH3-128 of the destination's bytes where the source's block first + k
 * lies, or PROTO_SUM_NONE (all zeros) for a block the destination does not
 * have (-a: not yet written), which matches nothing. The message borrows
 * the hashes, as ENTRIES its body. */
struct proto_sums {
	uint32_t id;            /* an announced REG entry (the receiver checks) */
	uint64_t first;         /* index of the first block; first + count does not wrap */
	uint16_t count;         /* 1..PROTO_MAX_SUMS */
	const uint8_t *hashes;  /* borrowed: count * PROTO_SUM_LEN bytes */
};

/* Whether SUMS may name a REG entry of this size at this block size: one
 * of more than a quarter block (a smaller one travels whole). */
bool proto_sums_wanted(uint64_t size, uint32_t block_size);

/* XXH3-128 of buf, big-endian, into out (a SUMS hash). */
void proto_block_sum(const void *buf, size_t len, uint8_t out[PROTO_SUM_LEN]);

/* The low 64 bits of a SUMS hash: a SAME block's checksum. */
uint64_t proto_sum_low(const uint8_t sum[PROTO_SUM_LEN]);

/* Whether a SUMS hash is PROTO_SUM_NONE: all zeros, "no such block here",
 * which no block matches (even one whose XXH3-128 were zero: it travels). */
bool proto_sum_none(const uint8_t sum[PROTO_SUM_LEN]);

/* LIST.what */
enum proto_list_what {
	PROTO_LIST_NEW = 1,     /* a dry run would create it: nothing is at its name */
	PROTO_LIST_CHANGED = 2, /* a dry run would replace what is at its name */
	PROTO_LIST_GONE = 3,    /* --delete removed it (in a dry run: would remove it) */
};

/* One line of a listing, for the user: what the sink does or would do to
 * the entry at path. Informational: no peer acts on it. */
#define PROTO_LIST_HEAD 256u
struct proto_list {
	uint8_t what;           /* enum proto_list_what */
	char path[PROTO_MAX_MSG + 1]; /* relative to the destination, as an entry's path;
	                           a longer one cut to PROTO_MAX_MSG bytes in the middle
	                           (PROTO_LIST_HEAD bytes, "...", its end). Not empty,
	                           no NUL */
};

/* Whether HAVE says entry first_id + i is kept (i < h->count). */
bool proto_have_bit(const struct proto_have *h, uint32_t i);

/* Per-side totals carried by END and DONE. */
/* The stages of the pipeline whose times END (the source's three) and DONE
 * (the sink's three) carry, in wire order (docs/PROTOCOL.md, 4.9). */
enum proto_stage_id {
	PROTO_STAGE_READ,       /* source: readers reading files or a stream */
	PROTO_STAGE_ENCODE,     /* source: readers checksumming and compressing */
	PROTO_STAGE_SEND,       /* source: senders writing the data channels */
	PROTO_STAGE_RECV,       /* sink: receivers reading the data channels */
	PROTO_STAGE_DECODE,     /* sink: receivers decompressing and verifying */
	PROTO_STAGE_WRITE,      /* sink: writers writing files */
	PROTO_STAGES
};
#define PROTO_STAGE_MAX_THREADS 256u  /* threads one stage may report */

/* One stage's times, added up over the threads that did its work. Bounds
 * (a decoder refuses, an encoder too): threads <= PROTO_STAGE_MAX_THREADS;
 * no thread, no time; span_us <= threads * wall_us; busy_us + in_us +
 * out_us <= span_us; END carries only source stages, DONE only sink ones. */
struct proto_stage {
	uint32_t threads;       /* threads that did some of the stage's work */
	uint64_t span_us;       /* their lifetimes, added up */
	uint64_t busy_us;       /* working: reading, compressing, encrypting, writing */
	uint64_t in_us;         /* waiting for input (the stage before it) */
	uint64_t out_us;        /* waiting to hand on (the stage after it) */
};

struct proto_stats {
	uint64_t bytes;         /* payload bytes read (source) or written (sink) */
	uint64_t wire_bytes;    /* bytes sent or received on data channels */
	uint64_t files;         /* regular files completed */
	uint64_t cpu_user_us;
	uint64_t cpu_sys_us;
	uint64_t maxrss_kb;
	uint64_t wall_us;
	uint64_t codec_cpu_us;  /* CPU spent compressing (source) or decompressing (sink) */
	uint64_t dirs;          /* directories sent (source) or created (sink) */
	uint64_t links;         /* symlinks and hard links sent or created */
	struct proto_stage stage[PROTO_STAGES]; /* this side's stages; the other's are 0 */
	uint64_t unchanged;     /* version 8, -u: regular files kept as they were (HAVE) */
	uint64_t unchanged_bytes; /* their bytes, which did not travel */
	uint64_t deleted;       /* version 9, --delete: entries the sink removed (DONE); 0 in
	                           END */
	uint64_t resumed;       /* version 11, -a: regular files the sink finished from what
	                           an interrupted run left (of files; DONE); 0 in END */
};

/* A source of the REQUEST (or an entry inside its tree) that the server, as
 * source, could not read: it sends no entry for it, and the copy goes on
 * without it. Several SKIPs may carry the same index. */
struct proto_skip {
	uint32_t index;         /* the source's position in REQUEST.paths, from 0 */
	int32_t status;         /* a negative pcopy error code; never 0 */
	char msg[PROTO_MAX_MSG + 1]; /* NUL-terminated; names the source and the reason */
};

struct proto_error {
	int32_t code;           /* negative pcopy error code */
	char msg[PROTO_MAX_MSG + 1];
};

/* ---- Probe sessions (version 7; docs/PROTOCOL.md 4.14 and 4.15) ---------- */

#define PROTO_PROBE_MAX_CODECS 8u    /* codec figures in one PROBE_FIG */
#define PROTO_PROBE_MAX_WRITE_MIB 256u /* the most a SIDE step may write (the server
                                        also stops after 1 s) */
#define PROTO_PROBE_MAX_LEVEL 12u    /* the highest codec level (lz4 HC) */

/* PROBE.op */
enum proto_probe_op {
	PROTO_PROBE_MARK = 1,   /* answer at once: bytes received on the data channels */
	PROTO_PROBE_SIDE = 2,   /* measure this side: disk write, codecs, kernel limits */
	PROTO_PROBE_END = 3,    /* the probe is over: answer, then the client closes */
	PROTO_PROBE_OP_MAX
};

struct proto_probe {
	uint8_t op;             /* enum proto_probe_op */
	uint32_t arg;           /* SIDE: MiB the disk test may write, 1..256; else 0 */
};

/* One codec timed by the server on the standard sample (probe.h). */
struct proto_probe_codec {
	uint8_t codec;          /* enum proto_codec_id, not NONE */
	uint8_t level;          /* 1..PROTO_PROBE_MAX_LEVEL */
	uint32_t raw;           /* sample bytes, 1..PROTO_MAX_BLOCK */
	uint32_t enc;           /* their encoded size */
	uint64_t comp_ns;       /* one core's time to compress raw bytes */
	uint64_t decomp_ns;     /* ...and to decompress them */
};

/* The server's answer to a PROBE. Fields an op does not measure are 0. */
struct proto_probe_fig {
	uint8_t op;             /* the PROBE's op */
	uint8_t ncodecs;        /* SIDE: 0..PROTO_PROBE_MAX_CODECS; else 0 */
	uint16_t cpus;          /* SIDE: processors online; else 0 */
	int32_t disk_status;    /* SIDE: 0, or -errno of the disk test (nothing measured) */
	uint64_t rx_bytes;      /* MARK: data bytes received on every data channel so far */
	uint64_t t_us;          /* MARK: the server's monotonic clock, microseconds */
	uint64_t disk_bytes;    /* SIDE: bytes written and flushed (fdatasync) */
	uint64_t disk_us;       /* ...in this long */
	uint64_t rmem_max;      /* SIDE: net.core.rmem_max (0: unknown) */
	uint64_t wmem_max;      /* net.core.wmem_max */
	uint64_t tcp_rmem_max;  /* net.ipv4.tcp_rmem, third field */
	uint64_t tcp_wmem_max;  /* net.ipv4.tcp_wmem, third field */
	struct proto_probe_codec codec[PROTO_PROBE_MAX_CODECS];
};

struct proto_msg {
	uint8_t type;           /* enum proto_type */
	union {
		struct proto_hello hello;
		struct proto_auth auth;
		struct proto_key key;
		struct proto_request *request; /* REQUEST: see proto_encode, proto_decode */
		struct proto_ready ready;
		struct proto_entries entries;  /* ENTRIES: borrows its body */
		struct proto_file_end file_end;
		struct proto_file_done file_done;
		struct proto_file_fail file_fail;
		struct proto_ack ack;
		struct proto_have have;
		struct proto_list list;
		struct proto_sums sums;     /* SUMS: borrows its hashes */
		struct proto_stats stats;   /* END and DONE */
		struct proto_error error;
		struct proto_skip skip;
		struct proto_probe probe;
		struct proto_probe_fig probe_fig;
	} u;
};

/* Small, so that a message on the stack is cheap: the large REQUEST is
 * held by pointer, ENTRIES by a borrowed body. */
_Static_assert(sizeof(struct proto_msg) < 2048, "struct proto_msg must stay small");

/* Encodes m as a complete frame (header + payload) into out. Returns the
 * frame length, or -PC_E_PROTO if m is invalid (unknown type, a string too
 * long, a REQUEST whose u.request is NULL, an ENTRIES whose body breaks a
 * rule) or cap is too small. */
int proto_encode(const struct proto_msg *m, uint8_t *out, size_t cap);

/* Decodes a frame header. Returns 0 and sets *type and *len, or -PC_E_PROTO
 * if the reserved bits are not zero, the type is unknown, or len exceeds
 * PROTO_MAX_PAYLOAD. */
int proto_frame_decode(const uint8_t hdr[PROTO_FRAME_HDR_LEN], uint8_t *type, uint32_t *len);

/* Decodes the payload of a frame of the given type into *m. Strict: the
 * payload must be exactly as long as its fields, strings must hold no NUL
 * and fit their limits, numeric fields must be in range. Returns 0 or
 * -PC_E_PROTO.
 * REQUEST: the caller points m->u.request at its own storage first (NULL:
 * -PC_E_PROTO); the request is decoded into it and the pointer is kept.
 * ENTRIES: every entry is checked; m->u.entries.body then points into
 * payload, so payload must outlive the message. */
int proto_decode(uint8_t type, const uint8_t *payload, size_t len, struct proto_msg *m);

/* The i-th path of a request (i < npaths), or NULL. Pure. */
const char *proto_request_path(const struct proto_request *q, unsigned i);

/* Appends a path to a request. Returns 0, or -PC_E_PROTO if it is empty,
 * too long, or the request is full. Pure. */
int proto_request_add_path(struct proto_request *q, const char *path);

/* The i-th filter rule of a request (i < nfilters), or NULL. Pure. */
const char *proto_request_filter(const struct proto_request *q, unsigned i);

/* Appends a filter rule to a request. Returns 0, or -PC_E_PROTO if the rule
 * breaks proto_filter_rule_ok or the request has no room for it. Pure. */
int proto_request_add_filter(struct proto_request *q, const char *rule);

/* Whether rule is a filter rule the wire carries: "- " or "+ " followed by
 * a pattern of at least one byte, PROTO_MAX_FILTER bytes in all at most.
 * Pure. */
bool proto_filter_rule_ok(const char *rule);

/* Whether SKIP k may come next (docs/PROTOCOL.md, section 4.11): its index
 * is below npaths, the number of paths of the REQUEST, and not below *next,
 * which starts at 0. On true, *next becomes k's index (the next SKIP may
 * name the same source again, never an earlier one). Pure. */
bool proto_skip_in_order(const struct proto_skip *k, uint32_t npaths, uint32_t *next);

/* Whether p[0..len) is a path an entry may carry: 1..PROTO_MAX_PATH bytes,
 * no NUL, relative (no leading '/'), no empty component (so no "//" and no
 * trailing '/'), no component "." or "..", each component
 * 1..PROTO_MAX_NAME bytes. Returns 0 or -PC_E_PROTO. Pure. */
int proto_check_relpath(const char *p, size_t len);

/* Starts an empty batch whose first entry gets id first_id. */
void proto_batch_init(struct proto_batch *b, uint32_t first_id);

/* Appends e to the batch, as id first_id + count (e->id is ignored).
 * Returns 0; -ENOSPC if it does not fit (PROTO_MAX_BATCH entries, or the
 * payload would pass PROTO_MAX_PAYLOAD): send the batch and start a new
 * one; -PC_E_PROTO if e breaks a rule (or the ids would pass UINT32_MAX).
 * On error the batch is unchanged. */
int proto_batch_add(struct proto_batch *b, const struct proto_entry *e);

/* Fills m as the ENTRIES message of b; m borrows b's bytes, so b must
 * outlive it. b must hold at least one entry (else encoding fails). */
void proto_batch_msg(const struct proto_batch *b, struct proto_msg *m);

/* Reads the next entry of a decoded (or built) ENTRIES. *pos is an opaque
 * cursor: set it to 0 before the first call and leave it alone between
 * calls. Returns 1 (*out filled, its id set), 0 (no more entries), or
 * -PC_E_PROTO (the body breaks a rule). After a successful proto_decode
 * (es->checked) each entry's rules were checked there and are not again;
 * the body's bounds always are. Pure. */
int proto_entries_next(const struct proto_entries *es, size_t *pos, struct proto_entry *out);

/* The string bytes of an entry (path, target, user and group, without
 * NULs): what PROTO_MAX_INFLIGHT_BYTES counts. Pure. */
size_t proto_entry_bytes(const struct proto_entry *e);

/* What the reader of a PACK is told of each id the block covers: its
 * status (section 6.3: 0, 1, or negative) and the contents not yet taken
 * (avail bytes at contents). It returns 0, or a negative code to stop, and
 * sets *took to the bytes of contents that id takes (0 when none are its;
 * at most avail). */
typedef int (*proto_pack_visit)(void *arg, uint32_t id, int32_t status,
				const uint8_t *contents, uint64_t avail, uint64_t *took);

/* Walks the raw bytes raw[len] of a PACK block covering span ids from
 * first: visits each id in order with its status. Returns 0 when every id
 * was visited and the contents end exactly at len; -PC_E_PROTO when the
 * layout is wrong (len < 4 * span, a status above 1, a visitor that took
 * more than was there, bytes left over); or the visitor's code. Pure apart
 * from what visit does. */
int proto_pack_walk(const uint8_t *raw, size_t len, uint32_t first, uint32_t span,
		    proto_pack_visit visit, void *arg);

/* Why an ENTRIES payload that proto_decode refused is wrong, for a
 * message: the first bad entry's id, its path (quoted: bytes outside
 * printable ASCII as \xNN) and the rule it breaks. Writes a NUL-terminated
 * text of at most cap bytes. Pure. */
void proto_entries_explain(const uint8_t *payload, size_t len, char *out, size_t cap);

/* Name of a message type for messages ("FILE_DONE"); "?" if unknown. */
const char *proto_type_name(uint8_t type);

/* ---- Data channels ---------------------------------------------------- */

/* Handshake on each data connection in clear (without ENCRYPT; connector
 * C, listener L; docs/PROTOCOL.md 6.1), one flight each way:
 *   C -> L  DHELLO: magic u32, version u16, stream u16, nonce_c[32] (40 bytes),
 *           then mac_c[32] = HMAC(k, "pcopy data C" | nonce_c | stream)
 *   L -> C  mac_l[32] = HMAC(k, "pcopy data L" | nonce_c | stream)
 * k is the session key. Both sides compare MACs in constant time. With
 * ENCRYPT the TLS handshake (proto_psk_id) takes its place. */
#define PROTO_DHELLO_LEN 40u

struct proto_dhello {
	uint32_t magic;         /* PROTO_DATA_MAGIC */
	uint16_t version;
	uint16_t stream;        /* 0..streams-1 */
	uint8_t nonce[PROTO_NONCE_LEN];
};

void proto_dhello_encode(const struct proto_dhello *h, uint8_t out[PROTO_DHELLO_LEN]);
/* Returns 0 or -PC_E_PROTO (bad magic). */
int proto_dhello_decode(const uint8_t in[PROTO_DHELLO_LEN], struct proto_dhello *h);

/* TLS 1.3 PSK identities (version 4; docs/PROTOCOL.md 5.3 and 6.1): what a
 * client offers in its ClientHello, in clear, before anyone has proved a
 * key. magic u32, version u16, stream u16 (8 bytes): PROTO_MAGIC and
 * stream 0 for a daemon's control channel, PROTO_DATA_MAGIC and the stream
 * index for a data channel. */
#define PROTO_PSK_ID_LEN 8u

struct proto_psk_id {
	uint32_t magic;         /* PROTO_MAGIC or PROTO_DATA_MAGIC */
	uint16_t version;       /* PROTO_VERSION */
	uint16_t stream;        /* data: 0..streams-1; control: 0 */
};

void proto_psk_id_encode(const struct proto_psk_id *id, uint8_t out[PROTO_PSK_ID_LEN]);

/* Decodes an identity offered by a peer: exactly PROTO_PSK_ID_LEN bytes,
 * a known magic, our version, stream 0 for the control channel. The caller
 * checks a data stream against its own count. Returns 0 or -PC_E_PROTO. */
int proto_psk_id_decode(const uint8_t *in, size_t len, struct proto_psk_id *id);

/* The first byte a daemon reads from a new connection tells the two
 * transports apart: a TLS handshake record (22) or a control frame, whose
 * first byte is a message type (at most PROTO_TYPE_MAX - 1 < 22). */
#define PROTO_TLS_RECORD_HANDSHAKE 22u
_Static_assert(PROTO_TYPE_MAX <= PROTO_TLS_RECORD_HANDSHAKE,
	       "a control frame must never start like a TLS record");
static inline bool proto_starts_tls(uint8_t first)
{
	return first == PROTO_TLS_RECORD_HANDSHAKE;
}

/* A data connection to a daemon in TLS comes to the daemon's own port, not
 * to a listener of the session (version 5; docs/PROTOCOL.md 6.2), and
 * names its session before its TLS handshake, in clear:
 *   magic u32 (PROTO_ROUTE_MAGIC), version u16, zero u16, token[16]
 * (24 bytes). The token is HKDF of the session key (auth_route_token): it
 * only picks the session, which then wants the stream's TLS handshake; a
 * connection with a token no session has is dropped. Its first byte, 'P',
 * is neither a TLS record nor a message type. */
#define PROTO_ROUTE_TOKEN_LEN 16u
#define PROTO_ROUTE_LEN 24u
_Static_assert((PROTO_ROUTE_MAGIC >> 24) >= PROTO_TYPE_MAX &&
	       (PROTO_ROUTE_MAGIC >> 24) != PROTO_TLS_RECORD_HANDSHAKE,
	       "a route preamble must start unlike a frame and a TLS record");
static inline bool proto_starts_route(uint8_t first)
{
	return first == (uint8_t)(PROTO_ROUTE_MAGIC >> 24);
}

void proto_route_encode(const uint8_t token[PROTO_ROUTE_TOKEN_LEN], uint8_t out[PROTO_ROUTE_LEN]);

/* Decodes a preamble a stranger may have sent: exactly PROTO_ROUTE_LEN
 * bytes, our magic and version, zero where zero is due. Returns 0 (token
 * set) or -PC_E_PROTO. */
int proto_route_decode(const uint8_t *in, size_t len, uint8_t token[PROTO_ROUTE_TOKEN_LEN]);

#define PROTO_BLOCK_HDR_LEN 40u

/* PACK: several whole small files in one block. file_id is the first id,
 * offset the number n of ids covered (1..PROTO_MAX_PACK), raw_len >= 4n:
 * the raw bytes are n big-endian i32 statuses, then the contents of every
 * id whose status is 0 and that is a REG of known size > 0, in id order
 * (docs/PROTOCOL.md 6.3). */
/* SAME (version 10, --checksum): a DATA block the sink has already, where
 * a SUMS hash said so: no payload; checksum is the low 64 bits of the
 * XXH3-128 of the source's raw bytes (proto_sum_low of the hash SUMS
 * compares), which the sink checks against its own before it uses them. */
enum proto_blk_type { PROTO_BLK_DATA = 1, PROTO_BLK_END = 2, PROTO_BLK_PACK = 3,
	PROTO_BLK_SAME = 4 };

/* Block flags */
#define PROTO_BLK_HOLE 0x1u      /* all zeros: no payload, raw_len zero bytes */
#define PROTO_BLK_KNOWN PROTO_BLK_HOLE

/* Payload encodings; the values are codec.h's enum codec_id. */
enum proto_codec_id {
	PROTO_CODEC_NONE = 0,
	PROTO_CODEC_ZLIB = 1,
	PROTO_CODEC_LZ4 = 2,
	PROTO_CODEC_BZ2 = 3,
	PROTO_CODEC_MAX
};

struct proto_block {
	uint8_t type;           /* enum proto_blk_type */
	uint8_t codec;          /* enum proto_codec_id of the payload */
	uint16_t flags;         /* PROTO_BLK_* */
	uint32_t file_id;
	uint64_t offset;        /* DATA: byte offset in the file; PACK: ids covered */
	uint32_t raw_len;       /* bytes after decoding */
	uint32_t enc_len;       /* payload bytes that follow this header */
	uint64_t seq;           /* session-wide block sequence number */
	uint64_t checksum;      /* XXH3-64 of the raw bytes; 0 (unchecked) for a HOLE; for a
	                           SAME, the low half of their XXH3-128 */
};

void proto_block_encode(const struct proto_block *b, uint8_t out[PROTO_BLOCK_HDR_LEN]);

/* Decodes and checks a block header against the negotiated block size:
 * known type and flags, codec known, raw_len <= max_block, offset + raw_len
 * does not overflow; a HOLE has codec NONE and enc_len 0; codec NONE has
 * enc_len == raw_len; a compressed block has 0 < enc_len < raw_len (it is
 * sent compressed only when that is smaller); an END block has all other
 * fields zero. A PACK has flags 0, 1 <= offset (n) <= PROTO_MAX_PACK,
 * raw_len >= 4n, and file_id + n <= UINT32_MAX; the per-id rules are the
 * sink's. A SAME has flags 0, codec NONE, enc_len 0, 0 < raw_len <=
 * max_block, and offset + raw_len does not overflow. Returns 0 or
 * -PC_E_PROTO. */
int proto_block_decode(const uint8_t in[PROTO_BLOCK_HDR_LEN], uint32_t max_block,
		       struct proto_block *b);

/* XXH3-64 of buf (the block checksum). */
uint64_t proto_checksum(const void *buf, size_t len);

#endif
