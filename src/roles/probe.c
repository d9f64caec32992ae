// SPDX-License-Identifier: Apache-2.0
/* probe: the measurements of pcopy --probe and its PROBE steps (probe.h). */
#include "roles/probe.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_received */
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "codec/codec.h"
#include "roles/probe_rec.h"
#include "sys/crypto.h"
#include "sys/log.h"
#include "sys/platform.h"

#define PROBE_CHUNK (64u << 10)       /* a sender's write; a reader's read is 4x */
#define PROBE_IO_BUF (1u << 20)       /* a disk test's write and read */
#define PROBE_SYNC_EVERY (16u << 20)  /* a disk write test flushes this often */
#define PROBE_MARKS_RTT 5u            /* round trips timed for the RTT */

/* ---- Small helpers ------------------------------------------------------- */

static uint64_t probe_read_proc(const char *path, int field)
{
	char buf[128];
	unsigned long long v[3] = { 0, 0, 0 };
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	if (sscanf(buf, "%llu %llu %llu", &v[0], &v[1], &v[2]) < field + 1)
		return 0;
	return v[field];
}

void probe_kernel_limits(uint64_t *rmem_max, uint64_t *wmem_max, uint64_t *tcp_rmem_max,
			 uint64_t *tcp_wmem_max)
{
	*rmem_max = probe_read_proc("/proc/sys/net/core/rmem_max", 0);
	*wmem_max = probe_read_proc("/proc/sys/net/core/wmem_max", 0);
	*tcp_rmem_max = probe_read_proc("/proc/sys/net/ipv4/tcp_rmem", 2);
	*tcp_wmem_max = probe_read_proc("/proc/sys/net/ipv4/tcp_wmem", 2);
}

static unsigned probe_cpus(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);

	return n < 1 ? 1 : n > 65535 ? 65535 : (unsigned)n;
}

static uint64_t probe_xorshift(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

void probe_sample(uint8_t *buf, size_t len)
{
	static const char *const words[] = {
		"the", "file", "copy", "stream", "window", "block", "network", "disk",
		"data", "error", "time", "host", "path", "size", "value", "status",
		"INFO", "WARN", "request", "response", "user", "group", "2026-11-25",
		"id=", "bytes", "elapsed", "ok", "\n", "\n", "{", "}", "\"name\":",
	};
	uint64_t s = 0x9e3779b97f4a7c15ull;
	size_t i = 0;

	while (i < len) {
		size_t run = len - i < (32u << 10) ? len - i : (32u << 10);
		bool text = (i / (32u << 10)) % 2 == 0;
		size_t end = i + run;
		while (text && i < end) {
			uint64_t r = probe_xorshift(&s);
			char word[32];
			int n = r % 4 == 0 ? snprintf(word, sizeof(word), "%u ", (unsigned)(r >> 40) % 100000)
				: snprintf(word, sizeof(word), "%s ", words[(r >> 8) % 32]);
			for (int k = 0; k < n && i < end; k++)
				buf[i++] = (uint8_t)word[k];
		}
		for (; i < end; i += 8) {
			uint64_t r = probe_xorshift(&s);
			memcpy(buf + i, &r, end - i < 8 ? end - i : 8);
		}
	}
}

/* Waits ms milliseconds, or until a stop signal is pending on sigfd
 * (left there for the caller): -PC_E_INTERRUPTED. */
static int probe_wait(int sigfd, unsigned ms)
{
	uint64_t end = platform_now_ns() + (uint64_t)ms * 1000000u;
	struct pollfd p = { .fd = sigfd, .events = POLLIN };

	for (;;) {
		uint64_t now = platform_now_ns();
		if (now >= end)
			return 0;
		int r = poll(&p, sigfd >= 0 ? 1 : 0, (int)((end - now + 999999) / 1000000));
		if (r > 0)
			return -PC_E_INTERRUPTED;
		if (r < 0 && errno != EINTR)
			return -errno;
	}
}

/* ---- Disks --------------------------------------------------------------- */

/* An unnamed file to write in dirfd: O_TMPFILE, or where that is missing a
 * random name unlinked at once. Nothing is left behind even if we are
 * killed. Returns an fd (read-write) or -errno. */
static int probe_tmpfile(int dirfd)
{
	char name[64];
	uint8_t rnd[8];
	int fd = openat(dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

	if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
		return fd >= 0 ? fd : -errno;
	if (crypto_random(rnd, sizeof(rnd)) < 0)
		memset(rnd, 0x5a, sizeof(rnd));
	snprintf(name, sizeof(name), ".pcopy-probe.%02x%02x%02x%02x%02x%02x%02x%02x", rnd[0],
		 rnd[1], rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
	fd = openat(dirfd, name, O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	if (unlinkat(dirfd, name, 0) != 0) {
		int err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

/* Writes fd with buf[PROBE_IO_BUF] until max bytes or max_ns, flushing
 * every PROBE_SYNC_EVERY and at the end (so the time counts the disk, not
 * the page cache). *bytes, *ns: what was written and flushed. 0 or -errno
 * (ENOSPC after some bytes is not a failure: what was flushed counts). */
static int probe_write_fd(int fd, const uint8_t *buf, uint64_t max, uint64_t max_ns,
			  uint64_t *bytes, uint64_t *ns)
{
	uint64_t t0 = platform_now_ns(), done = 0, synced = 0;
	int ret = 0;

	while (done < max && platform_now_ns() - t0 < max_ns) {
		ret = platform_write_full(fd, buf, PROBE_IO_BUF);
		if (ret < 0)
			break;
		done += PROBE_IO_BUF;
		if (done - synced >= PROBE_SYNC_EVERY) {
			if (fdatasync(fd) != 0) {
				ret = -errno;
				break;
			}
			synced = done;
		}
	}
	if (ret == 0 && done > synced && fdatasync(fd) != 0)
		ret = -errno;
	else if (ret == 0)
		synced = done;
	*ns = platform_now_ns() - t0;
	*bytes = synced;
	if (ret == -ENOSPC && synced > 0)
		ret = 0;
	return ret;
}

/* The disk write test in dirfd: 0 or -errno, with the figures. */
static int probe_disk_write(int dirfd, uint64_t max, uint64_t *bytes, uint64_t *ns)
{
	uint8_t *buf = malloc(PROBE_IO_BUF);
	int fd = -1, ret;

	*bytes = *ns = 0;
	if (buf == NULL)
		return -ENOMEM;
	probe_sample(buf, PROBE_IO_BUF); /* not zeros: no file system may skip them */
	fd = probe_tmpfile(dirfd);
	ret = fd < 0 ? fd : probe_write_fd(fd, buf, max, PROBE_DISK_MAX_NS, bytes, ns);
	if (fd >= 0)
		close(fd);
	free(buf);
	if (ret < 0)
		*bytes = *ns = 0;
	return ret;
}

/* Whether most of fd's first bytes sit in the page cache (mincore). */
static bool probe_cached(int fd, uint64_t size)
{
	size_t len = size > (64u << 20) ? (64u << 20) : (size_t)size, page = 4096, in = 0, n;
	unsigned char *vec;
	void *map;

	if (len == 0)
		return false;
	map = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		return false;
	n = (len + page - 1) / page;
	vec = malloc(n);
	if (vec != NULL && mincore(map, len, vec) == 0)
		for (size_t i = 0; i < n; i++)
			in += vec[i] & 1;
	free(vec);
	munmap(map, len);
	return in * 2 > n;
}

/* Reads fd from offset 0 until EOF or the deadline (t0 + max_ns), adding
 * to *bytes. Returns 0 or -errno. */
static int probe_read_fd(int fd, uint8_t *buf, uint64_t t0, uint64_t *bytes)
{
	for (;;) {
		if (platform_now_ns() - t0 >= PROBE_DISK_MAX_NS)
			return 0;
		ssize_t n = read(fd, buf, PROBE_IO_BUF);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return 0;
		*bytes += (uint64_t)n;
	}
}

/* Drops fd's pages (fdatasync first: dirty pages stay) and notes whether
 * they went. */
static void probe_drop(int fd, uint64_t size, struct pcopy_probe_disk *d)
{
	(void)posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	d->cached = d->cached || probe_cached(fd, size);
}

/* Reads the regular files under dirfd (depth-first, at most 16 levels)
 * until the deadline. */
static int probe_read_tree(int dirfd, int depth, uint8_t *buf, uint64_t t0,
			   struct pcopy_probe_disk *d)
{
	DIR *dir;
	struct dirent *de;
	int ret = 0, fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd < 0 || (dir = fdopendir(fd)) == NULL) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	while (ret == 0 && (de = readdir(dir)) != NULL &&
	       platform_now_ns() - t0 < PROBE_DISK_MAX_NS) {
		struct stat st;
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
			continue;
		int sub = S_ISREG(st.st_mode) || (S_ISDIR(st.st_mode) && depth < 16)
			  ? openat(dirfd, de->d_name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC |
				   (S_ISDIR(st.st_mode) ? O_DIRECTORY : 0)) : -1;
		if (sub < 0)
			continue;
		if (S_ISDIR(st.st_mode)) {
			ret = probe_read_tree(sub, depth + 1, buf, t0, d);
		} else {
			probe_drop(sub, (uint64_t)st.st_size, d);
			ret = probe_read_fd(sub, buf, t0, &d->bytes);
		}
		close(sub);
	}
	closedir(dir);
	return ret;
}

/* The source read test: src (a file or a tree), or a temporary file in
 * the current directory written, flushed and dropped first. */
static void probe_src_read(const char *src, struct pcopy_probe_disk *d)
{
	uint8_t *buf = malloc(PROBE_IO_BUF);
	struct stat st;
	uint64_t t0, wbytes = 0, wns;
	int fd = -1, ret;

	memset(d, 0, sizeof(*d));
	if (buf == NULL) {
		d->status = -ENOMEM;
		snprintf(d->what, sizeof(d->what), "out of memory");
		return;
	}
	if (src == NULL) {
		probe_sample(buf, PROBE_IO_BUF);
		fd = probe_tmpfile(AT_FDCWD);
		ret = fd < 0 ? fd : probe_write_fd(fd, buf, (uint64_t)PROBE_DISK_MAX_MIB << 20,
						   PROBE_DISK_MAX_NS, &wbytes, &wns);
		if (ret == 0 && lseek(fd, 0, SEEK_SET) != 0)
			ret = -errno;
		if (ret < 0) {
			snprintf(d->what, sizeof(d->what), "cannot write a temporary file in the "
				 "current directory: %s", strerror(-ret));
		} else {
			snprintf(d->what, sizeof(d->what), "a temporary file in the current "
				 "directory (written, flushed and removed)");
			probe_drop(fd, wbytes, d);
			t0 = platform_now_ns();
			ret = probe_read_fd(fd, buf, t0, &d->bytes);
			d->secs = (double)(platform_now_ns() - t0) / 1e9;
		}
	} else {
		fd = open(src, O_RDONLY | O_CLOEXEC);
		ret = fd < 0 || fstat(fd, &st) != 0 ? -errno : 0;
		t0 = platform_now_ns();
		if (ret == 0 && S_ISDIR(st.st_mode)) {
			ret = probe_read_tree(fd, 0, buf, t0, d);
		} else if (ret == 0) {
			probe_drop(fd, (uint64_t)st.st_size, d);
			t0 = platform_now_ns();
			ret = probe_read_fd(fd, buf, t0, &d->bytes);
		}
		d->secs = (double)(platform_now_ns() - t0) / 1e9;
		snprintf(d->what, sizeof(d->what), ret < 0 ? "cannot read '%s': %s" : "'%s'", src,
			 ret < 0 ? strerror(-ret) : "");
	}
	d->status = ret;
	if (ret == 0 && d->bytes > 0 && d->secs > 0)
		d->rate = (double)d->bytes / d->secs;
	if (fd >= 0)
		close(fd);
	free(buf);
}

/* ---- Codecs -------------------------------------------------------------- */

static const struct { enum codec_id id; int level; } probe_codecs[] = {
	{ CODEC_LZ4, 1 }, { CODEC_ZLIB, 1 }, { CODEC_ZLIB, 6 },
};

/* Compresses and decompresses sample[len] in 1 MiB blocks with codec c at
 * level; fills o. */
static int probe_time_one(const struct codec *c, int level, const uint8_t *sample, size_t len,
			  uint8_t *enc, uint8_t *dec, struct proto_probe_codec *o)
{
	void *ctx = c->ctx_new(level);
	size_t blk = 1u << 20, total = 0;
	uint64_t tc = 0, td = 0;
	int ret = ctx == NULL ? -ENOMEM : 0;

	for (size_t at = 0; ret == 0 && at < len; at += blk) {
		size_t n = len - at < blk ? len - at : blk, out = 0;
		uint64_t t0 = platform_thread_cpu_ns();
		ret = c->compress(ctx, sample + at, n, enc, c->bound(blk), &out);
		uint64_t t1 = platform_thread_cpu_ns();
		if (ret == 0)
			ret = c->decompress(ctx, enc, out, dec, n);
		td += platform_thread_cpu_ns() - t1;
		tc += t1 - t0;
		total += out;
	}
	c->ctx_free(ctx);
	if (ret < 0)
		return ret == -ENOMEM ? ret : -PC_E_CODEC;
	*o = (struct proto_probe_codec){ .codec = (uint8_t)c->id, .level = (uint8_t)level,
					 .raw = (uint32_t)len, .enc = (uint32_t)total,
					 .comp_ns = tc ? tc : 1, .decomp_ns = td ? td : 1 };
	return 0;
}

int probe_time_codecs(const uint8_t *sample, size_t len, struct proto_probe_codec *out)
{
	uint8_t *enc = malloc(codec_lz4.bound(1u << 20) + codec_zlib.bound(1u << 20));
	uint8_t *dec = malloc(1u << 20);
	int n = 0, ret = enc == NULL || dec == NULL ? -ENOMEM : 0;

	for (size_t i = 0; ret == 0 && i < sizeof(probe_codecs) / sizeof(probe_codecs[0]); i++) {
		const struct codec *c = codec_by_id(probe_codecs[i].id);
		ret = probe_time_one(c, probe_codecs[i].level, sample, len, enc, dec, &out[n]);
		n += ret == 0;
	}
	free(enc);
	free(dec);
	return ret < 0 ? ret : n;
}

/* ---- Server side --------------------------------------------------------- */

struct probe_reader {
	struct chan *ch;
	pthread_t th;
	bool started;
	_Atomic uint64_t *rx;           /* shared by the readers */
};

static void *probe_reader_main(void *arg)
{
	struct probe_reader *r = arg;
	uint8_t *buf = malloc(4 * PROBE_CHUNK);
	ssize_t n;

	while (buf != NULL && (n = chan_recv_some(r->ch, buf, 4 * PROBE_CHUNK)) > 0)
		atomic_fetch_add(r->rx, (uint64_t)n);
	free(buf);
	return NULL;
}

/* The SIDE step: the disk test (at most mib MiB), the codecs, the kernel. */
static void probe_side(int dirfd, uint32_t mib, struct proto_probe_fig *f)
{
	uint8_t *sample = malloc(PROBE_SAMPLE_LEN);
	uint64_t bytes, ns;
	int ret;

	if (mib > PROBE_DISK_MAX_MIB)
		mib = PROBE_DISK_MAX_MIB;
	ret = probe_disk_write(dirfd, (uint64_t)mib << 20, &bytes, &ns);
	f->disk_status = ret < 0 ? ret : 0;
	f->disk_bytes = ret < 0 ? 0 : bytes;
	f->disk_us = ret < 0 ? 0 : ns / 1000;
	f->cpus = (uint16_t)probe_cpus();
	probe_kernel_limits(&f->rmem_max, &f->wmem_max, &f->tcp_rmem_max, &f->tcp_wmem_max);
	if (sample != NULL) {
		probe_sample(sample, PROBE_SAMPLE_LEN);
		int n = probe_time_codecs(sample, PROBE_SAMPLE_LEN, f->codec);
		f->ncodecs = (uint8_t)(n > 0 ? n : 0);
		free(sample);
	}
}

/* The bytes received on chans[0..n) so far: the kernel's count on each
 * TCP socket (TCP_INFO), which a reader thread's scheduling cannot
 * shift; where a channel is no TCP socket (ssh streams), what the readers
 * counted. */
static uint64_t probe_rx_bytes(struct chan **chans, unsigned n, _Atomic uint64_t *rx)
{
	uint64_t sum = 0;

	for (unsigned i = 0; i < n; i++) {
		struct tcp_info ti;
		socklen_t len = sizeof(ti);
		memset(&ti, 0, sizeof(ti));
		if (getsockopt(chan_rfd(chans[i]), IPPROTO_TCP, TCP_INFO, &ti, &len) != 0 ||
		    len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti.tcpi_bytes_received))
			return atomic_load(rx);
		sum += ti.tcpi_bytes_received;
	}
	return sum;
}

/* Answers PROBE steps until END; 0 or a negative code. */
static int probe_serve_loop(struct ctl *c, struct chan **chans, unsigned n, int dirfd,
			    _Atomic uint64_t *rx, struct pc_err *e)
{
	struct proto_msg m;
	int ret;

	for (;;) {
		ret = ctl_expect(c, PROTO_PROBE, &m, e);
		if (ret < 0)
			return ret == -PC_E_PROTO ? pc_err_set(e, ret, "%s sent something other "
							       "than a probe step", ctl_peer(c))
						  : pc_err_set(e, ret, "lost control connection to %s",
							       ctl_peer(c));
		uint8_t op = m.u.probe.op;
		uint32_t arg = m.u.probe.arg;
		memset(&m, 0, sizeof(m));
		m.type = PROTO_PROBE_FIG;
		m.u.probe_fig.op = op;
		if (op == PROTO_PROBE_MARK) {
			m.u.probe_fig.rx_bytes = probe_rx_bytes(chans, n, rx);
			m.u.probe_fig.t_us = platform_now_ns() / 1000;
		} else if (op == PROTO_PROBE_SIDE) {
			probe_side(dirfd, arg, &m.u.probe_fig);
		}
		ret = ctl_send(c, &m);
		if (ret < 0)
			return pc_err_set(e, ret, "lost control connection to %s", ctl_peer(c));
		if (op == PROTO_PROBE_END)
			return 0;
	}
}

int probe_serve(struct ctl *c, struct chan **chans, unsigned n, int dirfd, struct pc_err *e)
{
	struct probe_reader r[PROTO_MAX_STREAMS];
	_Atomic uint64_t rx = 0;
	int ret = 0;

	memset(r, 0, sizeof(r));
	for (unsigned i = 0; i < n && ret == 0; i++) {
		r[i] = (struct probe_reader){ .ch = chans[i], .rx = &rx };
		int err = pthread_create(&r[i].th, NULL, probe_reader_main, &r[i]);
		if (err != 0)
			ret = pc_err_set(e, -err, "cannot start a thread: %s", strerror(err));
		r[i].started = err == 0;
	}
	if (ret == 0)
		ret = probe_serve_loop(c, chans, n, dirfd, &rx, e);
	for (unsigned i = 0; i < n; i++) {
		chan_abort(chans[i]); /* wakes its reader */
		if (r[i].started) {
			int err = pthread_join(r[i].th, NULL);
			if (err != 0 && ret == 0)
				ret = pc_err_set(e, -err, "cannot join a thread: %s", strerror(err));
		}
	}
	return ret;
}

/* ---- Client side --------------------------------------------------------- */

/* The senders of the sweep: stream i sends while i < active. */
struct probe_net {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	unsigned active;                /* guarded by lock */
	bool stop;                      /* guarded by lock */
	uint8_t *buf;                   /* PROBE_CHUNK bytes to send; read-only while they run */
};

struct probe_sender {
	struct probe_net *net;
	struct chan *ch;
	unsigned idx;
	pthread_t th;
	bool started;
	int status;                     /* sender thread only, read after join */
};

/* Whether sender s may send now; waits while it may not. False: stop. */
static bool probe_sender_go(struct probe_sender *s)
{
	struct probe_net *net = s->net;
	bool go;

	if (pthread_mutex_lock(&net->lock) != 0)
		return false;
	while (!net->stop && s->idx >= net->active)
		if (pthread_cond_wait(&net->cond, &net->lock) != 0)
			break;
	go = !net->stop && s->idx < net->active;
	if (pthread_mutex_unlock(&net->lock) != 0)
		return false;
	return go;
}

static void *probe_sender_main(void *arg)
{
	struct probe_sender *s = arg;
	struct iovec iov = { s->net->buf, PROBE_CHUNK };

	while (probe_sender_go(s)) {
		s->status = chan_send(s->ch, &iov, 1);
		if (s->status < 0)
			break;
	}
	return NULL;
}

/* Sets how many streams send; 0 or a negative code. */
static int probe_set_active(struct probe_net *net, unsigned active, bool stop)
{
	int err = pthread_mutex_lock(&net->lock);

	if (err != 0)
		return -err;
	net->active = active;
	net->stop = stop;
	err = pthread_cond_broadcast(&net->cond);
	int err2 = pthread_mutex_unlock(&net->lock);
	return -(err != 0 ? err : err2);
}

/* One PROBE step and its PROBE_FIG. */
static int probe_step(struct ctl *c, uint8_t op, uint32_t arg, struct proto_probe_fig *f,
		      struct pc_err *e)
{
	struct proto_msg m = { .type = PROTO_PROBE };
	int ret;

	m.u.probe.op = op;
	m.u.probe.arg = arg;
	ret = ctl_send(c, &m);
	if (ret == 0)
		ret = ctl_expect(c, PROTO_PROBE_FIG, &m, e);
	if (ret == 0 && m.u.probe_fig.op != op)
		ret = -PC_E_PROTO;
	if (ret == -PC_E_PROTO)
		return pc_err_set(e, ret, "%s answered a probe step out of turn", ctl_peer(c));
	if (ret == -PC_E_INTERRUPTED)
		return pc_err_set(e, ret, "interrupted while probing %s", ctl_peer(c));
	if (ret < 0)
		return pc_err_set(e, ret, "lost control connection to %s", ctl_peer(c));
	*f = m.u.probe_fig;
	return 0;
}

/* The round trip of the control channel: the least of a few MARKs. */
static int probe_rtt(struct ctl *c, struct pcopy_probe *p, struct pc_err *e)
{
	struct proto_probe_fig f;
	uint64_t best = UINT64_MAX;

	for (unsigned i = 0; i < PROBE_MARKS_RTT; i++) {
		uint64_t t0 = platform_now_ns();
		int ret = probe_step(c, PROTO_PROBE_MARK, 0, &f, e);
		if (ret < 0)
			return ret;
		uint64_t d = platform_now_ns() - t0;
		best = d < best ? d : best;
	}
	p->rtt_s = (double)best / 1e9;
	return 0;
}

/* Folds the far side's SIDE figures and this host's codec times into p. */
static void probe_codec_figs(struct pcopy_probe *p, const struct proto_probe_fig *far,
			     const struct proto_probe_codec *own, int nown)
{
	p->ncodecs = 0;
	for (int i = 0; i < nown && p->ncodecs < PCOPY_PROBE_MAX_CODECS; i++) {
		const struct proto_probe_codec *o = &own[i], *t = NULL;
		for (unsigned j = 0; j < far->ncodecs; j++)
			if (far->codec[j].codec == o->codec && far->codec[j].level == o->level)
				t = &far->codec[j];
		if (t == NULL || o->enc == 0)
			continue;
		struct pcopy_probe_codec *pc = &p->codec[p->ncodecs++];
		struct codec_choice ch = { .id = (enum codec_id)o->codec, .level = o->level };
		codec_format(&ch, pc->spec, sizeof(pc->spec));
		pc->ratio = (double)o->raw / (double)o->enc;
		pc->src_comp = (double)o->raw * 1e9 / (double)o->comp_ns;
		pc->sink_decomp = (double)t->raw * 1e9 / (double)t->decomp_ns;
	}
}

/* This host's sample: the first PROBE_SAMPLE_LEN bytes of src when it is
 * a regular file of at least 64 KiB, else the standard sample. */
static size_t probe_own_sample(const char *src, uint8_t *buf, char *what, size_t cap)
{
	int fd = src != NULL ? open(src, O_RDONLY | O_CLOEXEC) : -1;
	struct stat st;
	size_t got = 0;
	int ret = -1;

	if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size >= 65536)
		ret = platform_read_full(fd, buf, st.st_size < PROBE_SAMPLE_LEN ? (size_t)st.st_size
					 : PROBE_SAMPLE_LEN, &got);
	/* A file that shrank meanwhile (EOF first) still gives what it had. */
	if ((ret == 0 || ret == -PC_E_NET) && got >= 65536) {
		snprintf(what, cap, "the first %zu KiB of '%s' (the far side's speed: on pcopy's "
			 "standard sample)", got >> 10, src);
	} else {
		got = PROBE_SAMPLE_LEN;
		probe_sample(buf, got);
		snprintf(what, cap, "pcopy's standard sample (2 MiB, half words and numbers, half "
			 "random bytes)");
	}
	if (fd >= 0)
		close(fd);
	return got;
}

/* Everything but the network: the far side's SIDE, this host's disk,
 * codecs and kernel. */
static int probe_sides(struct ctl *c, const char *src, struct pcopy_probe *p, struct pc_err *e)
{
	struct proto_probe_codec own[PROTO_PROBE_MAX_CODECS];
	struct proto_probe_fig f;
	uint64_t rmem, tcp_rmem;
	uint8_t *sample;
	int ret = probe_step(c, PROTO_PROBE_SIDE, PROBE_DISK_MAX_MIB, &f, e);

	if (ret < 0)
		return ret;
	struct pcopy_probe_disk *w = &p->sink_write;
	w->status = f.disk_status;
	w->bytes = f.disk_bytes;
	w->secs = (double)f.disk_us / 1e6;
	w->rate = f.disk_us > 0 ? (double)f.disk_bytes * 1e6 / (double)f.disk_us : 0;
	snprintf(w->what, sizeof(w->what), f.disk_status < 0 ? "cannot write a temporary file "
		 "in the destination directory: %s" : "a temporary file in the destination "
		 "directory (flushed, removed)%s", f.disk_status < 0 ? strerror(-f.disk_status) : "");
	p->sink_cpus = f.cpus;
	p->sink_rmem_max = f.rmem_max;
	p->sink_tcp_rmem_max = f.tcp_rmem_max;
	probe_kernel_limits(&rmem, &p->src_wmem_max, &tcp_rmem, &p->src_tcp_wmem_max);
	p->src_cpus = probe_cpus();
	probe_src_read(src, &p->src_read);
	if ((sample = malloc(PROBE_SAMPLE_LEN)) == NULL)
		return pc_err_set(e, -ENOMEM, "out of memory");
	size_t len = probe_own_sample(src, sample, p->sample, sizeof(p->sample));
	int n = probe_time_codecs(sample, len, own);
	free(sample);
	if (n < 0)
		return pc_err_set(e, n, "cannot time the codecs: %s", pc_strerror(n));
	probe_codec_figs(p, &f, own, n);
	return 0;
}

/* How long a cell warms up and measures: long enough to leave slow start
 * (docs/DESIGN-NOTES.md, "Probing a path"). */
static void probe_cell_times(double rtt_s, unsigned *warm_ms, unsigned *measure_ms)
{
	double rtt_ms = rtt_s * 1e3;

	*warm_ms = (unsigned)(rtt_ms * 8 > 250 ? rtt_ms * 8 : 250);
	*measure_ms = (unsigned)(rtt_ms * 10 > 500 ? rtt_ms * 10 : 500);
	if (*warm_ms > 2000)
		*warm_ms = 2000;
	if (*measure_ms > 2000)
		*measure_ms = 2000;
}

/* One cell: n streams with window (0: leave the buffers alone) send for
 * the warm-up, then the far side's count is taken over the measure. */
static int probe_cell(struct ctl *c, struct probe_net *net, struct chan **chans, int sigfd,
		      double rtt_s, struct pcopy_probe_cell *cell, struct pc_err *e)
{
	struct proto_probe_fig a, b;
	unsigned warm, measure;
	int ret;

	for (unsigned i = 0; cell->window != 0 && i < cell->streams; i++) {
		int v = cell->window > (1u << 30) ? 1 << 30 : (int)cell->window;
		if (setsockopt(chan_wfd(chans[i]), SOL_SOCKET, SO_SNDBUF, &v, sizeof(v)) != 0)
			return pc_err_set(e, -errno, "cannot set a data socket's send buffer: %s",
					  strerror(errno));
	}
	ret = probe_set_active(net, cell->streams, false);
	if (ret < 0)
		return pc_err_set(e, ret, "cannot wake the senders: %s", strerror(-ret));
	probe_cell_times(rtt_s, &warm, &measure);
	ret = probe_wait(sigfd, warm);
	if (ret == 0)
		ret = probe_step(c, PROTO_PROBE_MARK, 0, &a, e);
	if (ret == 0)
		ret = probe_wait(sigfd, measure);
	if (ret == 0)
		ret = probe_step(c, PROTO_PROBE_MARK, 0, &b, e);
	if (ret == -PC_E_INTERRUPTED)
		return pc_err_set(e, ret, "interrupted while probing %s", ctl_peer(c));
	if (ret < 0)
		return ret;
	if (b.t_us <= a.t_us || b.rx_bytes < a.rx_bytes)
		return pc_err_set(e, -PC_E_PROTO, "%s: its byte count or clock went backwards",
				  ctl_peer(c));
	cell->rate = (double)(b.rx_bytes - a.rx_bytes) * 1e6 / (double)(b.t_us - a.t_us);
	log_info("probe: -s %u -w %llu: %.0f Mbit/s", cell->streams,
		 (unsigned long long)cell->window, cell->rate * 8 / 1e6);
	return 0;
}

/* The largest window worth a row of its own: what both kernels let -w ask
 * for (power of two), when it beats what autotuning may reach; else 0. */
static uint64_t probe_fixed_window(const struct pcopy_probe *p)
{
	uint64_t w = p->src_wmem_max < p->sink_rmem_max ? p->src_wmem_max : p->sink_rmem_max;
	uint64_t autotune = p->src_tcp_wmem_max < p->sink_tcp_rmem_max ? p->src_tcp_wmem_max
									: p->sink_tcp_rmem_max;
	uint64_t pow = 1;

	if (!p->window_settable || w == 0)
		return 0;
	while (pow * 2 <= w && pow < (1u << 30))
		pow *= 2;
	return pow > autotune ? pow : 0;
}

/* The sweep: for each window, 1, 2, 4... streams up to n, until doubling
 * them no longer gains 10% and there are enough of them to keep each
 * one's share of what is in flight within PROBE_REC_STREAM_SHARE (the
 * advice may want them: probe_rec.h). */
static int probe_sweep(struct ctl *c, struct probe_net *net, struct chan **chans, unsigned n,
		       int sigfd, struct pcopy_probe *p, struct pc_err *e)
{
	uint64_t windows[2] = { 0, probe_fixed_window(p) };
	int ret = 0;

	for (unsigned w = 0; w < 2 && ret == 0; w++) {
		double prev = 0, best = 0;
		if (w > 0 && windows[w] == 0)
			break;
		for (unsigned s = 1; s <= n && ret == 0 && p->ncells < PCOPY_PROBE_MAX_CELLS;
		     s = s * 2 > n && s < n ? n : s * 2) {
			struct pcopy_probe_cell *cell = &p->cell[p->ncells];
			*cell = (struct pcopy_probe_cell){ .streams = s, .window = windows[w] };
			ret = probe_cell(c, net, chans, sigfd, p->rtt_s, cell, e);
			if (ret < 0)
				break;
			p->ncells++;
			best = cell->rate > best ? cell->rate : best;
			if (prev > 0 && cell->rate < 1.1 * prev && s >= probe_streams_for(best, p->rtt_s))
				break;
			prev = cell->rate;
		}
	}
	return ret;
}

/* Starts a sender on each channel, runs the sweep, stops them. */
static int probe_network(struct ctl *c, struct chan **chans, unsigned n, int sigfd,
			 struct pcopy_probe *p, struct pc_err *e)
{
	struct probe_sender s[PROTO_MAX_STREAMS];
	struct probe_net net = { .active = 0 };
	uint8_t *buf = malloc(PROBE_CHUNK);
	int ret = 0, err;

	memset(s, 0, sizeof(s));
	if (buf == NULL)
		return pc_err_set(e, -ENOMEM, "out of memory");
	(void)crypto_random(buf, PROBE_CHUNK); /* incompressible, whatever the path does */
	net.buf = buf;
	if ((err = pthread_mutex_init(&net.lock, NULL)) != 0) {
		free(buf);
		return pc_err_set(e, -err, "cannot make a mutex: %s", strerror(err));
	}
	if ((err = pthread_cond_init(&net.cond, NULL)) != 0) {
		if (pthread_mutex_destroy(&net.lock) != 0)
			log_warn("cannot free a mutex");
		free(buf);
		return pc_err_set(e, -err, "cannot make a condition variable: %s", strerror(err));
	}
	for (unsigned i = 0; i < n && ret == 0; i++) {
		s[i] = (struct probe_sender){ .net = &net, .ch = chans[i], .idx = i };
		err = pthread_create(&s[i].th, NULL, probe_sender_main, &s[i]);
		if (err != 0)
			ret = pc_err_set(e, -err, "cannot start a thread: %s", strerror(err));
		s[i].started = err == 0;
	}
	if (ret == 0)
		ret = probe_sweep(c, &net, chans, n, sigfd, p, e);
	if (s[0].started && (err = probe_set_active(&net, 0, true)) < 0 && ret == 0)
		ret = pc_err_set(e, err, "cannot stop the senders: %s", strerror(-err));
	for (unsigned i = 0; i < n; i++) {
		if (!s[i].started)
			continue;
		chan_abort(chans[i]); /* a sender blocked on a full window */
		if ((err = pthread_join(s[i].th, NULL)) != 0 && ret == 0)
			ret = pc_err_set(e, -err, "cannot join a thread: %s", strerror(err));
	}
	if ((err = pthread_cond_destroy(&net.cond)) != 0 && ret == 0)
		ret = pc_err_set(e, -err, "cannot free a condition variable: %s", strerror(err));
	if ((err = pthread_mutex_destroy(&net.lock)) != 0 && ret == 0)
		ret = pc_err_set(e, -err, "cannot free a mutex: %s", strerror(err));
	free(buf);
	return ret;
}

int probe_run(struct ctl *c, struct chan **chans, unsigned n, int sigfd, const char *src,
	      struct pcopy_probe *p, struct pc_err *e)
{
	struct proto_probe_fig f;
	int ret;

	p->window_settable = true;
	for (unsigned i = 0; i < n; i++) {
		int type = 0;
		socklen_t len = sizeof(type);
		if (getsockopt(chan_wfd(chans[i]), SOL_SOCKET, SO_TYPE, &type, &len) != 0)
			p->window_settable = false; /* a pipe: a stream through ssh */
	}
	ret = probe_rtt(c, p, e);
	if (ret == 0)
		ret = probe_sides(c, src, p, e);
	if (ret == 0)
		ret = probe_network(c, chans, n, sigfd, p, e);
	if (ret == 0)
		ret = probe_step(c, PROTO_PROBE_END, 0, &f, e);
	return ret;
}
