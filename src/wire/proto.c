/* SPDX-License-Identifier: Apache-2.0 */
/* proto: encoding and decoding of the wire formats (see proto.h and
 * docs/PROTOCOL.md). Every function is pure: no I/O, no allocation. */
#include "wire/proto.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "sys/err.h"

/* A bounded output cursor. Writing past cap sets bad and writes nothing. */
struct wbuf {
	uint8_t *p;
	size_t cap;
	size_t len;
	bool bad;
};

/* A bounded input cursor. Reading past len sets bad and yields zeros. */
struct rbuf {
	const uint8_t *p;
	size_t len;
	size_t pos;
	bool bad;
};

/* ---- Big-endian integers at a fixed place ---------------------------- */

static void be16_put(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void be32_put(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static void be64_put(uint8_t *p, uint64_t v)
{
	be32_put(p, (uint32_t)(v >> 32));
	be32_put(p + 4, (uint32_t)v);
}

static uint16_t be16_get(const uint8_t *p)
{
	return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static uint32_t be32_get(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t be64_get(const uint8_t *p)
{
	return (uint64_t)be32_get(p) << 32 | be32_get(p + 4);
}

/* ---- Cursor writers ---------------------------------------------------- */

static uint8_t *put_room(struct wbuf *w, size_t n)
{
	uint8_t *at;

	if (w->bad || w->cap - w->len < n) {
		w->bad = true;
		return NULL;
	}
	at = w->p + w->len;
	w->len += n;
	return at;
}

static void put_u8(struct wbuf *w, uint8_t v)
{
	uint8_t *at = put_room(w, 1);

	if (at)
		at[0] = v;
}

static void put_u16(struct wbuf *w, uint16_t v)
{
	uint8_t *at = put_room(w, 2);

	if (at)
		be16_put(at, v);
}

static void put_u32(struct wbuf *w, uint32_t v)
{
	uint8_t *at = put_room(w, 4);

	if (at)
		be32_put(at, v);
}

static void put_u64(struct wbuf *w, uint64_t v)
{
	uint8_t *at = put_room(w, 8);

	if (at)
		be64_put(at, v);
}

static void put_bytes(struct wbuf *w, const void *src, size_t n)
{
	uint8_t *at = put_room(w, n);

	if (at && n > 0)
		memcpy(at, src, n);
}

/* A string: u16 length, then the bytes without a NUL. s must be terminated
 * within max + 1 bytes, else the message is invalid. */
static void put_str(struct wbuf *w, const char *s, size_t max)
{
	size_t n = strnlen(s, max + 1);

	if (n > max) {
		w->bad = true;
		return;
	}
	put_u16(w, (uint16_t)n);
	put_bytes(w, s, n);
}

/* ---- Cursor readers ---------------------------------------------------- */

static const uint8_t *get_room(struct rbuf *r, size_t n)
{
	const uint8_t *at;

	if (r->bad || r->len - r->pos < n) {
		r->bad = true;
		return NULL;
	}
	at = r->p + r->pos;
	r->pos += n;
	return at;
}

static uint8_t get_u8(struct rbuf *r)
{
	const uint8_t *at = get_room(r, 1);

	return at ? at[0] : 0;
}

static uint16_t get_u16(struct rbuf *r)
{
	const uint8_t *at = get_room(r, 2);

	return at ? be16_get(at) : 0;
}

static uint32_t get_u32(struct rbuf *r)
{
	const uint8_t *at = get_room(r, 4);

	return at ? be32_get(at) : 0;
}

static uint64_t get_u64(struct rbuf *r)
{
	const uint8_t *at = get_room(r, 8);

	return at ? be64_get(at) : 0;
}

static void get_bytes(struct rbuf *r, void *dst, size_t n)
{
	const uint8_t *at = get_room(r, n);

	if (at && n > 0)
		memcpy(dst, at, n);
}

/* Two's complement back to signed, without implementation-defined casts. */
static int32_t to_i32(uint32_t v)
{
	return v <= INT32_MAX ? (int32_t)v : -(int32_t)(UINT32_MAX - v) - 1;
}

static int64_t to_i64(uint64_t v)
{
	return v <= INT64_MAX ? (int64_t)v : -(int64_t)(UINT64_MAX - v) - 1;
}

/* A string into dst[max + 1]: at most max bytes, no NUL; dst is terminated. */
static void get_str(struct rbuf *r, char *dst, size_t max)
{
	size_t n = get_u16(r);
	const uint8_t *at;

	if (n > max) {
		r->bad = true;
		return;
	}
	at = get_room(r, n);
	if (!at)
		return;
	if (n > 0 && memchr(at, 0, n) != NULL) {
		r->bad = true;
		return;
	}
	if (n > 0)
		memcpy(dst, at, n);
	dst[n] = '\0';
}

/* ---- Messages: one writer, reader and range check per type ------------- */

static void put_hello(struct wbuf *w, const struct proto_msg *m)
{
	const struct proto_hello *h = &m->u.hello;

	put_u32(w, h->magic);
	put_u16(w, h->version);
	put_u16(w, h->min_version);
	put_u32(w, h->caps);
	put_bytes(w, h->nonce, PROTO_NONCE_LEN);
}

static void get_hello(struct rbuf *r, struct proto_msg *m)
{
	struct proto_hello *h = &m->u.hello;

	h->magic = get_u32(r);
	h->version = get_u16(r);
	h->min_version = get_u16(r);
	h->caps = get_u32(r);
	get_bytes(r, h->nonce, PROTO_NONCE_LEN);
}

/* Unknown caps bits are allowed: a peer ignores capabilities it lacks. */
static bool check_hello(const struct proto_msg *m)
{
	const struct proto_hello *h = &m->u.hello;

	return h->magic == PROTO_MAGIC && h->min_version >= 1 &&
	       h->min_version <= h->version;
}

static void put_auth(struct wbuf *w, const struct proto_msg *m)
{
	put_bytes(w, m->u.auth.mac, PROTO_MAC_LEN);
}

static void get_auth(struct rbuf *r, struct proto_msg *m)
{
	get_bytes(r, m->u.auth.mac, PROTO_MAC_LEN);
}

static void put_key(struct wbuf *w, const struct proto_msg *m)
{
	put_bytes(w, m->u.key.key, PROTO_KEY_LEN);
}

static void get_key(struct rbuf *r, struct proto_msg *m)
{
	get_bytes(r, m->u.key.key, PROTO_KEY_LEN);
}

/* A list of strings in a REQUEST (paths, filters): in memory n
 * NUL-terminated strings back to back in buf[cap]; on the wire a u16 count,
 * then each as a string (section 2). At most max strings, each 1..maxlen
 * bytes, together at most cap bytes counting one NUL each. */
static void put_list(struct wbuf *w, const char *buf, unsigned n, unsigned max, size_t cap,
		     size_t maxlen)
{
	const char *p = buf;

	if (n > max) {
		w->bad = true;
		return;
	}
	put_u16(w, (uint16_t)n);
	for (unsigned i = 0; i < n && !w->bad; i++) {
		size_t left = cap - (size_t)(p - buf);
		size_t len = strnlen(p, left);
		if (len == left || len == 0) {
			w->bad = true; /* unterminated or empty */
			return;
		}
		put_str(w, p, maxlen);
		p += len + 1;
	}
}

/* The other way: fills buf[cap] and returns the count (0 with r->bad set
 * when the list breaks a bound). */
static uint16_t get_list(struct rbuf *r, char *buf, unsigned max, size_t cap, size_t maxlen)
{
	uint16_t n = get_u16(r);
	size_t used = 0;

	if (n > max) {
		r->bad = true;
		return 0;
	}
	for (unsigned i = 0; i < n && !r->bad; i++) {
		char s[PROTO_MAX_PATH + 1];
		get_str(r, s, maxlen);
		size_t len = strlen(s);
		if (r->bad || len == 0 || used + len + 1 > cap) {
			r->bad = true;
			return 0;
		}
		memcpy(buf + used, s, len + 1);
		used += len + 1;
	}
	return n;
}

static void put_request(struct wbuf *w, const struct proto_msg *m)
{
	const struct proto_request *q = m->u.request;

	if (q == NULL) {
		w->bad = true;
		return;
	}
	put_u8(w, q->role);
	put_u16(w, q->flags);
	put_u16(w, q->streams);
	put_u32(w, q->block_size);
	put_u32(w, q->window);
	put_u32(w, q->timeout_s);
	put_u32(w, q->nsources);
	put_u16(w, q->port_lo);
	put_u16(w, q->port_hi);
	put_u8(w, q->family);
	put_bytes(w, q->data_key, PROTO_KEY_LEN);
	put_u16(w, q->connect_port);
	put_bytes(w, q->attach_id, PROTO_ATTACH_ID_LEN);
	put_u64(w, q->bwlimit);
	put_u32(w, q->sync);
	put_str(w, q->connect_host, PROTO_MAX_HOST);
	put_str(w, q->connect_ssh, PROTO_MAX_SSH_DEST);
	put_str(w, q->connect_pcopy, PROTO_MAX_PATH);
	put_str(w, q->codec, PROTO_MAX_CODEC_SPEC);
	/* The count bounds sit here and in get_request, once per direction:
	 * check_request runs on both and would hide either one's removal. */
	put_list(w, q->paths, q->npaths, PROTO_MAX_PATHS, PROTO_REQ_PATHS_BYTES, PROTO_MAX_PATH);
	put_list(w, q->filters, q->nfilters, PROTO_MAX_FILTERS, PROTO_REQ_FILTER_BYTES,
		 PROTO_MAX_FILTER);
}

static void get_request(struct rbuf *r, struct proto_msg *m)
{
	struct proto_request *q = m->u.request;

	if (q == NULL) {
		r->bad = true;
		return;
	}
	memset(q, 0, sizeof(*q));
	q->role = get_u8(r);
	q->flags = get_u16(r);
	q->streams = get_u16(r);
	q->block_size = get_u32(r);
	q->window = get_u32(r);
	q->timeout_s = get_u32(r);
	q->nsources = get_u32(r);
	q->port_lo = get_u16(r);
	q->port_hi = get_u16(r);
	q->family = get_u8(r);
	get_bytes(r, q->data_key, PROTO_KEY_LEN);
	q->connect_port = get_u16(r);
	get_bytes(r, q->attach_id, PROTO_ATTACH_ID_LEN);
	q->bwlimit = get_u64(r);
	q->sync = get_u32(r);
	get_str(r, q->connect_host, PROTO_MAX_HOST);
	get_str(r, q->connect_ssh, PROTO_MAX_SSH_DEST);
	get_str(r, q->connect_pcopy, PROTO_MAX_PATH);
	get_str(r, q->codec, PROTO_MAX_CODEC_SPEC);
	q->npaths = get_list(r, q->paths, PROTO_MAX_PATHS, PROTO_REQ_PATHS_BYTES, PROTO_MAX_PATH);
	q->nfilters = get_list(r, q->filters, PROTO_MAX_FILTERS, PROTO_REQ_FILTER_BYTES,
			       PROTO_MAX_FILTER);
}

/* At most one cipher bit, and only with ENCRYPT. */
static bool proto_request_cipher_ok(uint16_t flags)
{
	uint16_t c = flags & (PROTO_REQ_CIPHER_AES | PROTO_REQ_CIPHER_CHACHA);

	return c == 0 || ((flags & PROTO_REQ_ENCRYPT) && c != (PROTO_REQ_CIPHER_AES |
							       PROTO_REQ_CIPHER_CHACHA));
}

/* An ssh destination a server will put on ssh's command line: not an
 * option (no '-' first), one word (no blank), nothing a terminal acts on. */
static bool proto_ssh_dest_ok(const char *d)
{
	if (d[0] == '\0' || d[0] == '-')
		return false;
	for (const unsigned char *p = (const unsigned char *)d; *p != '\0'; p++)
		if (*p <= 0x20 || *p == 0x7f)
			return false;
	return true;
}

/* SSH_DATA and CONNECT_SSH need an attach id, and with neither it is all
 * zero; CONNECT_SSH needs CONNECT and a destination, and without it the
 * ssh strings are empty. */
static bool proto_request_ssh_ok(const struct proto_request *q)
{
	static const uint8_t zero[PROTO_ATTACH_ID_LEN];
	bool has_id = memcmp(q->attach_id, zero, sizeof(zero)) != 0;

	if (has_id != ((q->flags & (PROTO_REQ_SSH_DATA | PROTO_REQ_CONNECT_SSH)) != 0))
		return false;
	if ((q->flags & PROTO_REQ_SSH_ONLY) && !(q->flags & PROTO_REQ_SSH_DATA))
		return false;
	if (!(q->flags & PROTO_REQ_CONNECT_SSH))
		return q->connect_ssh[0] == '\0' && q->connect_pcopy[0] == '\0';
	return (q->flags & PROTO_REQ_CONNECT) && proto_ssh_dest_ok(q->connect_ssh);
}

static bool proto_request_filters_ok(const struct proto_request *q);

static bool check_request(const struct proto_msg *m)
{
	const struct proto_request *q = m->u.request;

	return q != NULL && (q->role == PROTO_ROLE_SINK || q->role == PROTO_ROLE_SOURCE ||
			     (q->role == PROTO_ROLE_PROBE && q->npaths == 1)) &&
	       (q->flags & ~PROTO_REQ_KNOWN) == 0 &&
	       proto_request_cipher_ok(q->flags) && proto_request_ssh_ok(q) &&
	       q->streams >= 1 && q->streams <= PROTO_MAX_STREAMS &&
	       q->block_size >= PROTO_MIN_BLOCK && q->block_size <= PROTO_MAX_BLOCK &&
	       q->port_lo <= q->port_hi && (q->port_lo != 0 || q->port_hi == 0) &&
	       (q->family == 0 || q->family == 4 || q->family == 6) &&
	       (q->bwlimit == 0 ||
		(q->bwlimit >= PROTO_MIN_BWLIMIT && q->bwlimit <= PROTO_MAX_BWLIMIT)) &&
	       (q->sync & ~PROTO_SYNC_KNOWN) == 0 &&
	       (!(q->sync & PROTO_SYNC_DELETE) ||
		((q->sync & PROTO_SYNC_UPDATE) && (q->flags & PROTO_REQ_RECURSIVE))) &&
	       (!(q->sync & PROTO_SYNC_CHECKSUM) || (q->sync & PROTO_SYNC_UPDATE)) &&
	       (!(q->sync & PROTO_SYNC_RESUME) || (q->sync & PROTO_SYNC_UPDATE)) &&
	       (!(q->sync & PROTO_SYNC_INPLACE) ||
		((q->sync & PROTO_SYNC_CHECKSUM) && !(q->sync & PROTO_SYNC_RESUME))) &&
	       proto_request_filters_ok(q) &&
	       q->npaths >= 1; /* at most PROTO_MAX_PATHS: put_ and get_request */
}

/* The i-th of the n strings in buf[cap] (a list as put_list has it), or NULL. */
static const char *list_at(const char *buf, size_t cap, unsigned n, unsigned i)
{
	const char *p = buf, *end = buf + cap;

	if (i >= n)
		return NULL;
	while (i-- > 0) {
		const char *nul = memchr(p, 0, (size_t)(end - p));
		if (nul == NULL || nul + 1 >= end)
			return NULL;
		p = nul + 1;
	}
	return memchr(p, 0, (size_t)(end - p)) ? p : NULL;
}

/* Appends s (1..maxlen bytes) to the list buf[cap] of *n strings, at most
 * max. Returns 0 or -PC_E_PROTO. */
static int list_add(char *buf, size_t cap, uint16_t *n, unsigned max, size_t maxlen,
		    const char *s)
{
	size_t used = 0, len = strnlen(s, maxlen + 1);

	if (len == 0 || len > maxlen || *n >= max)
		return -PC_E_PROTO;
	for (unsigned i = 0; i < *n; i++)
		used += strnlen(buf + used, cap - used) + 1;
	if (used + len + 1 > cap)
		return -PC_E_PROTO;
	memcpy(buf + used, s, len + 1);
	(*n)++;
	return 0;
}

const char *proto_request_path(const struct proto_request *q, unsigned i)
{
	return list_at(q->paths, PROTO_REQ_PATHS_BYTES, q->npaths, i);
}

int proto_request_add_path(struct proto_request *q, const char *path)
{
	return list_add(q->paths, PROTO_REQ_PATHS_BYTES, &q->npaths, PROTO_MAX_PATHS,
			PROTO_MAX_PATH, path);
}

const char *proto_request_filter(const struct proto_request *q, unsigned i)
{
	return list_at(q->filters, PROTO_REQ_FILTER_BYTES, q->nfilters, i);
}

bool proto_filter_rule_ok(const char *rule)
{
	size_t n = strnlen(rule, PROTO_MAX_FILTER + 1);

	return n >= 3 && n <= PROTO_MAX_FILTER && (rule[0] == '-' || rule[0] == '+') &&
	       rule[1] == ' ';
}

int proto_request_add_filter(struct proto_request *q, const char *rule)
{
	if (!proto_filter_rule_ok(rule))
		return -PC_E_PROTO;
	return list_add(q->filters, PROTO_REQ_FILTER_BYTES, &q->nfilters, PROTO_MAX_FILTERS,
			PROTO_MAX_FILTER, rule);
}

/* Every rule of q is one the wire carries. */
static bool proto_request_filters_ok(const struct proto_request *q)
{
	for (unsigned i = 0; i < q->nfilters; i++) {
		const char *rule = proto_request_filter(q, i);
		if (rule == NULL || !proto_filter_rule_ok(rule))
			return false;
	}
	return true;
}

static void put_ready(struct wbuf *w, const struct proto_msg *m)
{
	put_u16(w, m->u.ready.data_port);
	put_str(w, m->u.ready.host, PROTO_MAX_HOST);
}

static void get_ready(struct rbuf *r, struct proto_msg *m)
{
	m->u.ready.data_port = get_u16(r);
	get_str(r, m->u.ready.host, PROTO_MAX_HOST);
}

static bool check_ready(const struct proto_msg *m)
{
	(void)m; /* port 0: the server connects instead (REQUEST flag CONNECT) */
	return true;
}

/* ---- Tree entries (ENTRIES) ---------------------------------------------- */

#define ENTRIES_HDR_LEN 6u   /* first_id u32, count u16 */
#define ENTRIES_BODY_MAX (PROTO_MAX_PAYLOAD - ENTRIES_HDR_LEN)
/* proto_entries_next's cursor: the entry's index above this many bits, its
 * byte offset in the body below (a body is shorter than 1 << 16 bytes). */
#define ENTRIES_POS_SHIFT 16u

int proto_check_relpath(const char *p, size_t len)
{
	size_t comp = 0; /* bytes in the component being read */

	if (len == 0 || len > PROTO_MAX_PATH || p[0] == '/')
		return -PC_E_PROTO;
	for (size_t i = 0; i <= len; i++) {
		if (i < len && p[i] == '\0')
			return -PC_E_PROTO;
		if (i < len && p[i] != '/') {
			comp++;
			continue;
		}
		const char *c = p + i - comp;
		if (comp == 0 || comp > PROTO_MAX_NAME)
			return -PC_E_PROTO;
		if (c[0] == '.' && (comp == 1 || (comp == 2 && c[1] == '.')))
			return -PC_E_PROTO;
		comp = 0;
	}
	return 0;
}

/* Every rule of one entry whose id is id (docs/PROTOCOL.md 4.6). Strings
 * must be terminated within their arrays. */
static const char *entry_why(const struct proto_entry *e, uint32_t id)
{
	size_t plen = strnlen(e->path, sizeof(e->path));
	size_t tlen = strnlen(e->target, sizeof(e->target));
	bool reg = e->type == PROTO_ENT_REG;
	bool dev = e->type == PROTO_ENT_CHR || e->type == PROTO_ENT_BLK;
	unsigned allowed = reg ? PROTO_ENT_REG_FLAGS
			       : e->type == PROTO_ENT_DIR_END ? PROTO_ENT_INCOMPLETE : 0;

	if (e->type < PROTO_ENT_REG || e->type >= PROTO_ENT_TYPE_MAX)
		return "unknown type";
	if ((e->flags & ~allowed) != 0)
		return "unknown flags";
	if (e->mode > 07777 || e->mtime_ns >= 1000000000u || e->atime_ns >= 1000000000u)
		return "mode or time out of range";
	if (reg ? (e->flags & PROTO_ENT_SIZE_UNKNOWN) && e->size != 0 : e->size != 0)
		return "a size where none belongs";
	if (!dev && e->rdev != 0)
		return "a device number where none belongs";
	if (e->type == PROTO_ENT_HARDLINK ? e->link_id >= id : e->link_id != 0)
		return "a bad link id";
	if (plen > PROTO_MAX_PATH || proto_check_relpath(e->path, plen) < 0)
		return "an unsafe path (absolute, empty, or with an empty, '.' or '..' component)";
	if (e->type == PROTO_ENT_SYMLINK ? tlen == 0 || tlen > PROTO_MAX_PATH : tlen != 0)
		return "a bad link target";
	if (strnlen(e->user, sizeof(e->user)) > PROTO_MAX_NAME ||
	    strnlen(e->group, sizeof(e->group)) > PROTO_MAX_NAME)
		return "an owner name too long";
	return NULL;
}

static bool entry_ok(const struct proto_entry *e, uint32_t id)
{
	return entry_why(e, id) == NULL;
}

static void put_entry(struct wbuf *w, const struct proto_entry *e)
{
	put_u8(w, e->type);
	put_u8(w, e->flags);
	put_u32(w, e->mode);
	put_u32(w, e->uid);
	put_u32(w, e->gid);
	put_u64(w, (uint64_t)e->mtime_s);
	put_u32(w, e->mtime_ns);
	put_u64(w, (uint64_t)e->atime_s);
	put_u32(w, e->atime_ns);
	put_u64(w, e->size);
	put_u64(w, e->rdev);
	put_u32(w, e->link_id);
	put_str(w, e->path, PROTO_MAX_PATH);
	put_str(w, e->target, PROTO_MAX_PATH);
	put_str(w, e->user, PROTO_MAX_NAME);
	put_str(w, e->group, PROTO_MAX_NAME);
}

/* Reads the entry at r's position as id and, with check, checks it.
 * Returns 0 or -PC_E_PROTO. */
static int entry_read(struct rbuf *r, uint32_t id, struct proto_entry *e, bool check)
{
	e->id = id;
	e->type = get_u8(r);
	e->flags = get_u8(r);
	e->mode = get_u32(r);
	e->uid = get_u32(r);
	e->gid = get_u32(r);
	e->mtime_s = to_i64(get_u64(r));
	e->mtime_ns = get_u32(r);
	e->atime_s = to_i64(get_u64(r));
	e->atime_ns = get_u32(r);
	e->size = get_u64(r);
	e->rdev = get_u64(r);
	e->link_id = get_u32(r);
	get_str(r, e->path, PROTO_MAX_PATH);
	get_str(r, e->target, PROTO_MAX_PATH);
	get_str(r, e->user, PROTO_MAX_NAME);
	get_str(r, e->group, PROTO_MAX_NAME);
	return r->bad || (check && !entry_ok(e, id)) ? -PC_E_PROTO : 0;
}

/* The batch-level rules: a count in range, ids that do not pass
 * UINT32_MAX, a body that fits a payload. */
static bool entries_head_ok(const struct proto_entries *es)
{
	return es->count >= 1 && es->count <= PROTO_MAX_BATCH &&
	       (uint64_t)es->first_id + es->count - 1 <= UINT32_MAX &&
	       es->body_len <= ENTRIES_BODY_MAX && (es->body != NULL || es->body_len == 0);
}

/* proto_entries_next, each entry checked with check. */
static int entries_next(const struct proto_entries *es, size_t *pos, struct proto_entry *out,
			bool check)
{
	size_t idx = *pos >> ENTRIES_POS_SHIFT;
	size_t off = *pos & (((size_t)1 << ENTRIES_POS_SHIFT) - 1);
	struct rbuf r;

	if (!entries_head_ok(es) || idx > es->count || off > es->body_len)
		return -PC_E_PROTO;
	if (idx == es->count) /* the body must end right after the last entry */
		return off == es->body_len ? 0 : -PC_E_PROTO;
	r = (struct rbuf){ es->body, es->body_len, off, false };
	if (entry_read(&r, es->first_id + (uint32_t)idx, out, check) < 0)
		return -PC_E_PROTO;
	*pos = (idx + 1) << ENTRIES_POS_SHIFT | r.pos;
	return 1;
}

int proto_entries_next(const struct proto_entries *es, size_t *pos, struct proto_entry *out)
{
	return entries_next(es, pos, out, !es->checked);
}

static void put_entries(struct wbuf *w, const struct proto_msg *m)
{
	const struct proto_entries *es = &m->u.entries;

	put_u32(w, es->first_id);
	put_u16(w, es->count);
	put_bytes(w, es->body, es->body_len);
}

/* Borrows the rest of the payload as the body; check_entries reads it. */
static void get_entries(struct rbuf *r, struct proto_msg *m)
{
	struct proto_entries *es = &m->u.entries;

	es->first_id = get_u32(r);
	es->count = get_u16(r);
	es->body_len = r->bad ? 0 : r->len - r->pos;
	es->body = get_room(r, es->body_len);
}

/* Every entry, both ways: an encoder never sends, and a decoder never
 * returns, a batch with one bad entry or a byte too many. */
static bool check_entries(const struct proto_msg *m)
{
	struct proto_entry e; /* about 9 KiB: only ENTRIES pays for it */
	size_t pos = 0;
	int ret;

	while ((ret = entries_next(&m->u.entries, &pos, &e, true)) == 1)
		;
	return ret == 0;
}

/* Appends the n bytes at p to out[cap] (length *len), quoted for a
 * message: printable ASCII as is, anything else as \xNN. */
static void quote_bytes(char *out, size_t cap, size_t *len, const char *p, size_t n)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < n && *len + 5 < cap; i++) {
		unsigned char c = (unsigned char)p[i];
		if (c >= 0x20 && c < 0x7f && c != '\\') {
			out[(*len)++] = (char)c;
		} else {
			out[(*len)++] = '\\';
			out[(*len)++] = 'x';
			out[(*len)++] = hex[c >> 4];
			out[(*len)++] = hex[c & 15];
		}
	}
	out[*len] = '\0';
}

int proto_pack_walk(const uint8_t *raw, size_t len, uint32_t first, uint32_t span,
		    proto_pack_visit visit, void *arg)
{
	uint64_t off = 4 * (uint64_t)span;

	if (span == 0 || span > PROTO_MAX_PACK || len < off)
		return -PC_E_PROTO;
	for (uint32_t i = 0; i < span; i++) {
		const uint8_t *p = raw + 4 * (size_t)i;
		int32_t st = (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
				       (uint32_t)p[2] << 8 | p[3]);
		uint64_t took = 0;
		if (st > 1)
			return -PC_E_PROTO;
		int ret = visit(arg, first + i, st, raw + off, len - off, &took);
		if (ret < 0)
			return ret;
		if (took > len - off)
			return -PC_E_PROTO;
		off += took;
	}
	return off == len ? 0 : -PC_E_PROTO;
}

size_t proto_entry_bytes(const struct proto_entry *e)
{
	return strnlen(e->path, sizeof(e->path)) + strnlen(e->target, sizeof(e->target)) +
	       strnlen(e->user, sizeof(e->user)) + strnlen(e->group, sizeof(e->group));
}

void proto_entries_explain(const uint8_t *payload, size_t len, char *out, size_t cap)
{
	struct proto_msg m;
	struct proto_entry ent; /* about 9 KiB, as in check_entries */
	struct proto_entry *e = &ent;
	struct rbuf r = { payload, len, 0, false };
	size_t n = 0;

	if (cap == 0)
		return;
	out[0] = '\0';
	get_entries(&r, &m);
	if (r.bad || !entries_head_ok(&m.u.entries)) {
		snprintf(out, cap, "a malformed batch header");
		return;
	}
	struct rbuf b = { m.u.entries.body, m.u.entries.body_len, 0, false };
	for (uint32_t i = 0; i < m.u.entries.count; i++) {
		uint32_t id = m.u.entries.first_id + i;
		const char *why;
		if (entry_read(&b, id, e, true) == 0)
			continue;
		why = b.bad ? "is cut short" : entry_why(e, id);
		n = (size_t)snprintf(out, cap, "entry %u ('", (unsigned)id);
		if (n < cap)
			quote_bytes(out, cap, &n, e->path, b.bad ? 0 : strnlen(e->path, sizeof(e->path)));
		snprintf(out + strlen(out), cap - strlen(out), "'): %s", why ? why : "invalid");
		return;
	}
	snprintf(out, cap, "bytes left over after the last entry");
}

void proto_batch_init(struct proto_batch *b, uint32_t first_id)
{
	b->first_id = first_id;
	b->count = 0;
	b->len = 0;
}

int proto_batch_add(struct proto_batch *b, const struct proto_entry *e)
{
	struct wbuf w = { b->body, ENTRIES_BODY_MAX, b->len, false };

	if ((uint64_t)b->first_id + b->count > UINT32_MAX)
		return -PC_E_PROTO; /* the id space is used up */
	if (!entry_ok(e, b->first_id + b->count))
		return -PC_E_PROTO;
	if (b->count >= PROTO_MAX_BATCH)
		return -ENOSPC;
	put_entry(&w, e);
	if (w.bad)
		return -ENOSPC; /* entry_ok passed: only the room can be short */
	b->len = w.len;
	b->count++;
	return 0;
}

void proto_batch_msg(const struct proto_batch *b, struct proto_msg *m)
{
	memset(m, 0, sizeof(*m));
	m->type = PROTO_ENTRIES;
	m->u.entries.first_id = b->first_id;
	m->u.entries.count = b->count;
	m->u.entries.body = b->body;
	m->u.entries.body_len = b->len;
}

static void put_file_end(struct wbuf *w, const struct proto_msg *m)
{
	put_u32(w, m->u.file_end.id);
	put_u64(w, m->u.file_end.size);
}

static void get_file_end(struct rbuf *r, struct proto_msg *m)
{
	m->u.file_end.id = get_u32(r);
	m->u.file_end.size = get_u64(r);
}

static void put_file_done(struct wbuf *w, const struct proto_msg *m)
{
	const struct proto_file_done *d = &m->u.file_done;

	put_u32(w, d->id);
	put_u32(w, (uint32_t)d->status);
	put_u64(w, d->bytes);
	put_str(w, d->msg, PROTO_MAX_MSG);
}

static void get_file_done(struct rbuf *r, struct proto_msg *m)
{
	struct proto_file_done *d = &m->u.file_done;

	d->id = get_u32(r);
	d->status = to_i32(get_u32(r));
	d->bytes = get_u64(r);
	get_str(r, d->msg, PROTO_MAX_MSG);
}

/* FILE_DONE reports failures only: success is an ACK's business. */
static bool check_file_done(const struct proto_msg *m)
{
	return m->u.file_done.status < 0;
}

static void put_file_fail(struct wbuf *w, const struct proto_msg *m)
{
	const struct proto_file_fail *f = &m->u.file_fail;

	put_u32(w, f->id);
	put_u32(w, (uint32_t)f->status);
	put_str(w, f->msg, PROTO_MAX_MSG);
}

static void get_file_fail(struct rbuf *r, struct proto_msg *m)
{
	struct proto_file_fail *f = &m->u.file_fail;

	f->id = get_u32(r);
	f->status = to_i32(get_u32(r));
	get_str(r, f->msg, PROTO_MAX_MSG);
}

static bool check_file_fail(const struct proto_msg *m)
{
	return m->u.file_fail.status < 0;
}

/* ACK's rules (never decreasing, within what was announced) need the
 * session's state: the receiver checks them. */
static void put_ack(struct wbuf *w, const struct proto_msg *m)
{
	put_u32(w, m->u.ack.upto);
}

static void get_ack(struct rbuf *r, struct proto_msg *m)
{
	m->u.ack.upto = get_u32(r);
}

/* HAVE's rule against its ENTRIES (the same first_id and count, bits only
 * for files with contents) needs the session's state: the source checks
 * it. The decoder checks the count and that no bit lies past it. */
static void put_have(struct wbuf *w, const struct proto_msg *m)
{
	const struct proto_have *h = &m->u.have;

	put_u32(w, h->first_id);
	put_u16(w, h->count);
	if (h->count > PROTO_MAX_BATCH) {
		w->bad = true;
		return;
	}
	put_bytes(w, h->bits, (h->count + 7u) / 8u);
}

static void get_have(struct rbuf *r, struct proto_msg *m)
{
	struct proto_have *h = &m->u.have;

	h->first_id = get_u32(r);
	h->count = get_u16(r);
	if (h->count > PROTO_MAX_BATCH) {
		r->bad = true;
		return;
	}
	get_bytes(r, h->bits, (h->count + 7u) / 8u);
}

static bool check_have(const struct proto_msg *m)
{
	const struct proto_have *h = &m->u.have;

	if (h->count == 0 || h->count > PROTO_MAX_BATCH)
		return false;
	for (uint32_t i = h->count; i < (h->count + 7u) / 8u * 8u; i++)
		if (proto_have_bit(h, i))
			return false;
	return true;
}

static void put_list_msg(struct wbuf *w, const struct proto_msg *m)
{
	put_u8(w, m->u.list.what);
	put_str(w, m->u.list.path, PROTO_MAX_MSG);
}

static void get_list_msg(struct rbuf *r, struct proto_msg *m)
{
	m->u.list.what = get_u8(r);
	get_str(r, m->u.list.path, PROTO_MAX_MSG);
}

static bool check_list_msg(const struct proto_msg *m)
{
	return m->u.list.what >= PROTO_LIST_NEW && m->u.list.what <= PROTO_LIST_GONE &&
	       m->u.list.path[0] != '\0';
}

/* SUMS: which file and which blocks need the session (the source checks);
 * the decoder checks the count, the length and that the range does not
 * wrap. */
static void put_sums(struct wbuf *w, const struct proto_msg *m)
{
	const struct proto_sums *k = &m->u.sums;

	put_u32(w, k->id);
	put_u64(w, k->first);
	put_u16(w, k->count);
	if (k->count > PROTO_MAX_SUMS || k->hashes == NULL) {
		w->bad = true;
		return;
	}
	put_bytes(w, k->hashes, (size_t)k->count * PROTO_SUM_LEN);
}

static void get_sums(struct rbuf *r, struct proto_msg *m)
{
	struct proto_sums *k = &m->u.sums;
	size_t n;

	k->id = get_u32(r);
	k->first = get_u64(r);
	k->count = get_u16(r);
	n = (size_t)k->count * PROTO_SUM_LEN;
	if (k->count > PROTO_MAX_SUMS) {
		r->bad = true;
		return;
	}
	k->hashes = get_room(r, n);
}

static bool check_sums(const struct proto_msg *m)
{
	const struct proto_sums *k = &m->u.sums;

	return k->count >= 1 && k->count <= PROTO_MAX_SUMS && k->first <= UINT64_MAX - k->count;
}

bool proto_have_bit(const struct proto_have *h, uint32_t i)
{
	return (h->bits[i / 8] >> (i % 8)) & 1u;
}

static void put_stats(struct wbuf *w, const struct proto_msg *m)
{
	const struct proto_stats *s = &m->u.stats;

	put_u64(w, s->bytes);
	put_u64(w, s->wire_bytes);
	put_u64(w, s->files);
	put_u64(w, s->cpu_user_us);
	put_u64(w, s->cpu_sys_us);
	put_u64(w, s->maxrss_kb);
	put_u64(w, s->wall_us);
	put_u64(w, s->codec_cpu_us);
	put_u64(w, s->dirs);
	put_u64(w, s->links);
	for (unsigned i = 0; i < PROTO_STAGES; i++) {
		put_u32(w, s->stage[i].threads);
		put_u64(w, s->stage[i].span_us);
		put_u64(w, s->stage[i].busy_us);
		put_u64(w, s->stage[i].in_us);
		put_u64(w, s->stage[i].out_us);
	}
	put_u64(w, s->unchanged);
	put_u64(w, s->unchanged_bytes);
	put_u64(w, s->deleted);
	put_u64(w, s->resumed);
}

static void get_stats(struct rbuf *r, struct proto_msg *m)
{
	struct proto_stats *s = &m->u.stats;

	s->bytes = get_u64(r);
	s->wire_bytes = get_u64(r);
	s->files = get_u64(r);
	s->cpu_user_us = get_u64(r);
	s->cpu_sys_us = get_u64(r);
	s->maxrss_kb = get_u64(r);
	s->wall_us = get_u64(r);
	s->codec_cpu_us = get_u64(r);
	s->dirs = get_u64(r);
	s->links = get_u64(r);
	for (unsigned i = 0; i < PROTO_STAGES; i++) {
		s->stage[i].threads = get_u32(r);
		s->stage[i].span_us = get_u64(r);
		s->stage[i].busy_us = get_u64(r);
		s->stage[i].in_us = get_u64(r);
		s->stage[i].out_us = get_u64(r);
	}
	s->unchanged = get_u64(r);
	s->unchanged_bytes = get_u64(r);
	s->deleted = get_u64(r);
	s->resumed = get_u64(r);
}

/* One stage's times are possible: within its threads' lifetimes, which lie
 * within the transfer's wall time; mine says whether this side runs it. */
static bool check_stage(const struct proto_stage *g, uint64_t wall_us, bool mine)
{
	if (g->threads == 0 || !mine)
		return g->threads == 0 && g->span_us == 0 && g->busy_us == 0 && g->in_us == 0 &&
		       g->out_us == 0;
	if (g->threads > PROTO_STAGE_MAX_THREADS || g->span_us / g->threads > wall_us)
		return false;
	/* Each part first, so that the sum cannot wrap. */
	if (g->busy_us > g->span_us || g->in_us > g->span_us || g->out_us > g->span_us)
		return false;
	return g->busy_us + g->in_us + g->out_us <= g->span_us;
}

/* END carries the source's stages, DONE the sink's (proto_stage_id). */
static bool check_stats(const struct proto_msg *m)
{
	const struct proto_stats *s = &m->u.stats;

	for (unsigned i = 0; i < PROTO_STAGES; i++) {
		bool source = i <= PROTO_STAGE_SEND;
		if (!check_stage(&s->stage[i], s->wall_us, source == (m->type == PROTO_END)))
			return false;
	}
	return s->resumed <= s->files;
}

static void put_error(struct wbuf *w, const struct proto_msg *m)
{
	put_u32(w, (uint32_t)m->u.error.code);
	put_str(w, m->u.error.msg, PROTO_MAX_MSG);
}

static void get_error(struct rbuf *r, struct proto_msg *m)
{
	m->u.error.code = to_i32(get_u32(r));
	get_str(r, m->u.error.msg, PROTO_MAX_MSG);
}

static bool check_error(const struct proto_msg *m)
{
	return m->u.error.code <= 0;
}

static void put_skip(struct wbuf *w, const struct proto_msg *m)
{
	put_u32(w, m->u.skip.index);
	put_u32(w, (uint32_t)m->u.skip.status);
	put_str(w, m->u.skip.msg, PROTO_MAX_MSG);
}

static void get_skip(struct rbuf *r, struct proto_msg *m)
{
	m->u.skip.index = get_u32(r);
	m->u.skip.status = to_i32(get_u32(r));
	get_str(r, m->u.skip.msg, PROTO_MAX_MSG);
}

/* A skipped source failed: status 0 would say it did not. */
static bool check_skip(const struct proto_msg *m)
{
	return m->u.skip.status < 0;
}

/* ---- Probe sessions (version 7) ---------------------------------------- */

/* PROBE: op u8, zero u8, zero u16, arg u32 (8 bytes). */
static void put_probe(struct wbuf *w, const struct proto_msg *m)
{
	put_u8(w, m->u.probe.op);
	put_u8(w, 0);
	put_u16(w, 0);
	put_u32(w, m->u.probe.arg);
}

static void get_probe(struct rbuf *r, struct proto_msg *m)
{
	m->u.probe.op = get_u8(r);
	if (get_u8(r) != 0 || get_u16(r) != 0)
		r->bad = true;
	m->u.probe.arg = get_u32(r);
}

/* A known op; SIDE names 1..PROTO_PROBE_MAX_WRITE_MIB MiB, the others 0. */
static bool check_probe(const struct proto_msg *m)
{
	const struct proto_probe *p = &m->u.probe;

	if (p->op == PROTO_PROBE_SIDE)
		return p->arg >= 1 && p->arg <= PROTO_PROBE_MAX_WRITE_MIB;
	return (p->op == PROTO_PROBE_MARK || p->op == PROTO_PROBE_END) && p->arg == 0;
}

/* PROBE_FIG: op u8, ncodecs u8, cpus u16, disk_status i32, eight u64
 * (rx_bytes t_us disk_bytes disk_us rmem_max wmem_max tcp_rmem_max
 * tcp_wmem_max), then ncodecs records of 28 bytes: codec u8, level u8,
 * zero u16, raw u32, enc u32, comp_ns u64, decomp_ns u64. */
static void put_probe_fig(struct wbuf *w, const struct proto_msg *m)
{
	const struct proto_probe_fig *f = &m->u.probe_fig;

	put_u8(w, f->op);
	put_u8(w, f->ncodecs);
	put_u16(w, f->cpus);
	put_u32(w, (uint32_t)f->disk_status);
	put_u64(w, f->rx_bytes);
	put_u64(w, f->t_us);
	put_u64(w, f->disk_bytes);
	put_u64(w, f->disk_us);
	put_u64(w, f->rmem_max);
	put_u64(w, f->wmem_max);
	put_u64(w, f->tcp_rmem_max);
	put_u64(w, f->tcp_wmem_max);
	for (unsigned i = 0; i < f->ncodecs && i < PROTO_PROBE_MAX_CODECS; i++) {
		const struct proto_probe_codec *c = &f->codec[i];
		put_u8(w, c->codec);
		put_u8(w, c->level);
		put_u16(w, 0);
		put_u32(w, c->raw);
		put_u32(w, c->enc);
		put_u64(w, c->comp_ns);
		put_u64(w, c->decomp_ns);
	}
}

static void get_probe_fig(struct rbuf *r, struct proto_msg *m)
{
	struct proto_probe_fig *f = &m->u.probe_fig;

	f->op = get_u8(r);
	f->ncodecs = get_u8(r);
	f->cpus = get_u16(r);
	f->disk_status = to_i32(get_u32(r));
	f->rx_bytes = get_u64(r);
	f->t_us = get_u64(r);
	f->disk_bytes = get_u64(r);
	f->disk_us = get_u64(r);
	f->rmem_max = get_u64(r);
	f->wmem_max = get_u64(r);
	f->tcp_rmem_max = get_u64(r);
	f->tcp_wmem_max = get_u64(r);
	if (f->ncodecs > PROTO_PROBE_MAX_CODECS) {
		r->bad = true;
		return;
	}
	for (unsigned i = 0; i < f->ncodecs && !r->bad; i++) {
		struct proto_probe_codec *c = &f->codec[i];
		c->codec = get_u8(r);
		c->level = get_u8(r);
		if (get_u16(r) != 0)
			r->bad = true;
		c->raw = get_u32(r);
		c->enc = get_u32(r);
		c->comp_ns = get_u64(r);
		c->decomp_ns = get_u64(r);
	}
}

/* A known op; at most PROTO_PROBE_MAX_CODECS codecs, each a real codec at
 * a level 1..PROTO_PROBE_MAX_LEVEL over 1..PROTO_MAX_BLOCK sample bytes; a
 * disk status that is 0 or negative, and no disk figures with a failure. */
static bool check_probe_fig(const struct proto_msg *m)
{
	const struct proto_probe_fig *f = &m->u.probe_fig;

	if (f->op < PROTO_PROBE_MARK || f->op >= PROTO_PROBE_OP_MAX ||
	    f->ncodecs > PROTO_PROBE_MAX_CODECS || f->disk_status > 0 ||
	    (f->disk_status < 0 && (f->disk_bytes != 0 || f->disk_us != 0)))
		return false;
	for (unsigned i = 0; i < f->ncodecs; i++) {
		const struct proto_probe_codec *c = &f->codec[i];
		if (c->codec == PROTO_CODEC_NONE || c->codec >= PROTO_CODEC_MAX || c->level < 1 ||
		    c->level > PROTO_PROBE_MAX_LEVEL || c->raw < 1 || c->raw > PROTO_MAX_BLOCK)
			return false;
	}
	return true;
}

/* How one message type is written, read and range-checked. The encoder and
 * the decoder share check, so neither accepts what the other refuses. */
struct proto_ops {
	const char *name;
	void (*put)(struct wbuf *w, const struct proto_msg *m);
	void (*get)(struct rbuf *r, struct proto_msg *m);
	bool (*check)(const struct proto_msg *m); /* NULL: every value is valid */
};

static const struct proto_ops proto_ops[PROTO_TYPE_MAX] = {
	[PROTO_HELLO] = { "HELLO", put_hello, get_hello, check_hello },
	[PROTO_AUTH] = { "AUTH", put_auth, get_auth, NULL },
	[PROTO_KEY] = { "KEY", put_key, get_key, NULL },
	[PROTO_REQUEST] = { "REQUEST", put_request, get_request, check_request },
	[PROTO_READY] = { "READY", put_ready, get_ready, check_ready },
	[PROTO_ENTRIES] = { "ENTRIES", put_entries, get_entries, check_entries },
	[PROTO_FILE_END] = { "FILE_END", put_file_end, get_file_end, NULL },
	[PROTO_FILE_DONE] = { "FILE_DONE", put_file_done, get_file_done, check_file_done },
	[PROTO_END] = { "END", put_stats, get_stats, check_stats },
	[PROTO_DONE] = { "DONE", put_stats, get_stats, check_stats },
	[PROTO_ERROR] = { "ERROR", put_error, get_error, check_error },
	[PROTO_SKIP] = { "SKIP", put_skip, get_skip, check_skip },
	[PROTO_FILE_FAIL] = { "FILE_FAIL", put_file_fail, get_file_fail, check_file_fail },
	[PROTO_ACK] = { "ACK", put_ack, get_ack, NULL },
	[PROTO_PROBE] = { "PROBE", put_probe, get_probe, check_probe },
	[PROTO_PROBE_FIG] = { "PROBE_FIG", put_probe_fig, get_probe_fig, check_probe_fig },
	[PROTO_HAVE] = { "HAVE", put_have, get_have, check_have },
	[PROTO_LIST] = { "LIST", put_list_msg, get_list_msg, check_list_msg },
	[PROTO_SUMS] = { "SUMS", put_sums, get_sums, check_sums },
};

static const struct proto_ops *proto_ops_get(uint8_t type)
{
	if (type >= PROTO_TYPE_MAX || proto_ops[type].name == NULL)
		return NULL;
	return &proto_ops[type];
}

/* ---- Control frames ---------------------------------------------------- */

int proto_encode(const struct proto_msg *m, uint8_t *out, size_t cap)
{
	const struct proto_ops *op = proto_ops_get(m->type);
	struct wbuf w = { out, cap, PROTO_FRAME_HDR_LEN, false };
	size_t plen;

	if (op == NULL || cap < PROTO_FRAME_HDR_LEN)
		return -PC_E_PROTO;
	if (op->check && !op->check(m))
		return -PC_E_PROTO;
	op->put(&w, m);
	if (w.bad)
		return -PC_E_PROTO;
	plen = w.len - PROTO_FRAME_HDR_LEN;
	if (plen > PROTO_MAX_PAYLOAD)
		return -PC_E_PROTO;
	out[0] = m->type;
	out[1] = 0;              /* flags: none in version 3 */
	be16_put(out + 2, 0);    /* reserved */
	be32_put(out + 4, (uint32_t)plen);
	return (int)w.len;
}

int proto_frame_decode(const uint8_t hdr[PROTO_FRAME_HDR_LEN], uint8_t *type, uint32_t *len)
{
	uint32_t n = be32_get(hdr + 4);

	if (hdr[1] != 0 || be16_get(hdr + 2) != 0 || proto_ops_get(hdr[0]) == NULL ||
	    n > PROTO_MAX_PAYLOAD)
		return -PC_E_PROTO;
	*type = hdr[0];
	*len = n;
	return 0;
}

int proto_decode(uint8_t type, const uint8_t *payload, size_t len, struct proto_msg *m)
{
	const struct proto_ops *op = proto_ops_get(type);
	struct rbuf r = { payload, len, 0, false };
	/* The one field the caller sets: where a REQUEST goes. */
	struct proto_request *q = type == PROTO_REQUEST ? m->u.request : NULL;

	memset(m, 0, sizeof(*m));
	if (op == NULL || len > PROTO_MAX_PAYLOAD)
		return -PC_E_PROTO;
	m->type = type;
	if (type == PROTO_REQUEST)
		m->u.request = q;
	op->get(&r, m);
	if (r.bad || r.pos != r.len)
		return -PC_E_PROTO;
	if (op->check && !op->check(m))
		return -PC_E_PROTO;
	if (type == PROTO_ENTRIES)
		m->u.entries.checked = true;
	return 0;
}

bool proto_skip_in_order(const struct proto_skip *k, uint32_t npaths, uint32_t *next)
{
	if (k->index >= npaths || k->index < *next)
		return false;
	*next = k->index;
	return true;
}

const char *proto_type_name(uint8_t type)
{
	const struct proto_ops *op = proto_ops_get(type);

	return op ? op->name : "?";
}

/* ---- Data channels ----------------------------------------------------- */

void proto_dhello_encode(const struct proto_dhello *h, uint8_t out[PROTO_DHELLO_LEN])
{
	be32_put(out, h->magic);
	be16_put(out + 4, h->version);
	be16_put(out + 6, h->stream);
	memcpy(out + 8, h->nonce, PROTO_NONCE_LEN);
}

int proto_dhello_decode(const uint8_t in[PROTO_DHELLO_LEN], struct proto_dhello *h)
{
	h->magic = be32_get(in);
	h->version = be16_get(in + 4);
	h->stream = be16_get(in + 6);
	memcpy(h->nonce, in + 8, PROTO_NONCE_LEN);
	return h->magic == PROTO_DATA_MAGIC ? 0 : -PC_E_PROTO;
}

void proto_psk_id_encode(const struct proto_psk_id *id, uint8_t out[PROTO_PSK_ID_LEN])
{
	be32_put(out, id->magic);
	be16_put(out + 4, id->version);
	be16_put(out + 6, id->stream);
}

int proto_psk_id_decode(const uint8_t *in, size_t len, struct proto_psk_id *id)
{
	if (in == NULL || len != PROTO_PSK_ID_LEN)
		return -PC_E_PROTO;
	id->magic = be32_get(in);
	id->version = be16_get(in + 4);
	id->stream = be16_get(in + 6);
	if (id->version != PROTO_VERSION)
		return -PC_E_PROTO;
	if (id->magic == PROTO_DATA_MAGIC)
		return 0;
	return id->magic == PROTO_MAGIC && id->stream == 0 ? 0 : -PC_E_PROTO;
}

void proto_route_encode(const uint8_t token[PROTO_ROUTE_TOKEN_LEN], uint8_t out[PROTO_ROUTE_LEN])
{
	be32_put(out, PROTO_ROUTE_MAGIC);
	be16_put(out + 4, PROTO_VERSION);
	be16_put(out + 6, 0);
	memcpy(out + 8, token, PROTO_ROUTE_TOKEN_LEN);
}

int proto_route_decode(const uint8_t *in, size_t len, uint8_t token[PROTO_ROUTE_TOKEN_LEN])
{
	if (in == NULL || len != PROTO_ROUTE_LEN || be32_get(in) != PROTO_ROUTE_MAGIC ||
	    be16_get(in + 4) != PROTO_VERSION || be16_get(in + 6) != 0)
		return -PC_E_PROTO;
	memcpy(token, in + 8, PROTO_ROUTE_TOKEN_LEN);
	return 0;
}

void proto_block_encode(const struct proto_block *b, uint8_t out[PROTO_BLOCK_HDR_LEN])
{
	out[0] = b->type;
	out[1] = b->codec;
	be16_put(out + 2, b->flags);
	be32_put(out + 4, b->file_id);
	be64_put(out + 8, b->offset);
	be32_put(out + 16, b->raw_len);
	be32_put(out + 20, b->enc_len);
	be64_put(out + 24, b->seq);
	be64_put(out + 32, b->checksum);
}

static bool block_end_ok(const struct proto_block *b)
{
	return b->codec == 0 && b->flags == 0 && b->file_id == 0 && b->offset == 0 &&
	       b->raw_len == 0 && b->enc_len == 0 && b->seq == 0 && b->checksum == 0;
}

static bool block_data_ok(const struct proto_block *b, uint32_t max_block)
{
	if ((b->flags & ~PROTO_BLK_KNOWN) != 0 || b->codec >= PROTO_CODEC_MAX)
		return false;
	if (b->raw_len > max_block || b->enc_len > max_block)
		return false;
	if (b->offset > UINT64_MAX - b->raw_len)
		return false;
	if (b->flags & PROTO_BLK_HOLE)
		return b->enc_len == 0 && b->codec == PROTO_CODEC_NONE;
	if (b->codec == PROTO_CODEC_NONE)
		return b->enc_len == b->raw_len; /* the payload is the raw bytes */
	return b->enc_len > 0 && b->enc_len < b->raw_len;
}

/* A PACK's header; the statuses and sizes inside it are the sink's to
 * check against the entries they name. */
static bool block_pack_ok(const struct proto_block *b, uint32_t max_block)
{
	uint64_t n = b->offset;

	if (b->flags != 0 || b->codec >= PROTO_CODEC_MAX)
		return false;
	if (b->raw_len > max_block || b->enc_len > max_block)
		return false;
	if (n < 1 || n > PROTO_MAX_PACK || b->raw_len < 4 * n ||
	    (uint64_t)b->file_id + n > UINT32_MAX)
		return false;
	if (b->codec == PROTO_CODEC_NONE)
		return b->enc_len == b->raw_len;
	return b->enc_len > 0 && b->enc_len < b->raw_len;
}

/* SAME: a block's place, with no payload and nothing to decode. */
static bool block_same_ok(const struct proto_block *b, uint32_t max_block)
{
	return b->flags == 0 && b->codec == PROTO_CODEC_NONE && b->enc_len == 0 &&
	       b->raw_len > 0 && b->raw_len <= max_block && b->offset <= UINT64_MAX - b->raw_len;
}

int proto_block_decode(const uint8_t in[PROTO_BLOCK_HDR_LEN], uint32_t max_block,
		       struct proto_block *b)
{
	b->type = in[0];
	b->codec = in[1];
	b->flags = be16_get(in + 2);
	b->file_id = be32_get(in + 4);
	b->offset = be64_get(in + 8);
	b->raw_len = be32_get(in + 16);
	b->enc_len = be32_get(in + 20);
	b->seq = be64_get(in + 24);
	b->checksum = be64_get(in + 32);
	if (b->type == PROTO_BLK_END)
		return block_end_ok(b) ? 0 : -PC_E_PROTO;
	if (b->type == PROTO_BLK_DATA)
		return block_data_ok(b, max_block) ? 0 : -PC_E_PROTO;
	if (b->type == PROTO_BLK_PACK)
		return block_pack_ok(b, max_block) ? 0 : -PC_E_PROTO;
	if (b->type == PROTO_BLK_SAME)
		return block_same_ok(b, max_block) ? 0 : -PC_E_PROTO;
	return -PC_E_PROTO;
}

uint64_t proto_checksum(const void *buf, size_t len)
{
	return XXH3_64bits(buf, len);
}

uint64_t proto_sum_low(const uint8_t sum[PROTO_SUM_LEN])
{
	return be64_get(sum + 8);
}

bool proto_sum_none(const uint8_t sum[PROTO_SUM_LEN])
{
	uint8_t acc = 0;

	for (unsigned i = 0; i < PROTO_SUM_LEN; i++)
		acc |= sum[i];
	return acc == 0;
}

bool proto_sums_wanted(uint64_t size, uint32_t block_size)
{
	return size > block_size / 4;
}

void proto_block_sum(const void *buf, size_t len, uint8_t out[PROTO_SUM_LEN])
{
	XXH128_hash_t h = XXH3_128bits(buf, len);

	be64_put(out, h.high64);
	be64_put(out + 8, h.low64);
}
