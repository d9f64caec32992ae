/* SPDX-License-Identifier: Apache-2.0 */
/* platform: clocks, resource usage, full I/O, size parsing, signals. */
#include "sys/platform.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sys/err.h"

uint64_t platform_now_ns(void)
{
	struct timespec ts;

	/* CLOCK_MONOTONIC cannot fail on Linux with a valid pointer. */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t platform_tv_us(const struct timeval *tv)
{
	return (uint64_t)tv->tv_sec * 1000000u + (uint64_t)tv->tv_usec;
}

void platform_rusage(uint64_t *user_us, uint64_t *sys_us, uint64_t *maxrss_kb)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) != 0)
		memset(&ru, 0, sizeof(ru));
	if (user_us != NULL)
		*user_us = platform_tv_us(&ru.ru_utime);
	if (sys_us != NULL)
		*sys_us = platform_tv_us(&ru.ru_stime);
	if (maxrss_kb != NULL)  /* Linux reports KiB already */
		*maxrss_kb = ru.ru_maxrss > 0 ? (uint64_t)ru.ru_maxrss : 0;
}

/* errno after a failed read or write, as our return code. */
static int platform_io_errno(int e)
{
	if (e == EAGAIN || e == EWOULDBLOCK)
		return -PC_E_TIMEOUT;
	return -e;
}

int platform_read_full(int fd, void *buf, size_t len, size_t *got)
{
	uint8_t *p = buf;
	size_t done = 0;
	ssize_t n;
	int ret = -PC_E_NET;

	while (done < len) {
		n = read(fd, p + done, len - done);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			ret = platform_io_errno(errno);
			goto out;
		}
		if (n == 0)
			goto out;  /* EOF: ret is -PC_E_NET */
		done += (size_t)n;
	}
	ret = 0;
out:
	if (got != NULL)
		*got = done;
	return ret;
}

ssize_t platform_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;
	size_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, p + got, len - got, (off_t)(off + got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

int platform_pwrite_full(int fd, const void *buf, size_t len, uint64_t off)
{
	const uint8_t *p = buf;

	for (size_t done = 0; done < len;) {
		ssize_t n = pwrite(fd, p + done, len - done, (off_t)(off + done));
		if (n < 0 && errno != EINTR)
			return -errno;
		if (n > 0)
			done += (size_t)n;
	}
	return 0;
}

int platform_write_full(int fd, const void *buf, size_t len)
{
	const uint8_t *p = buf;
	bool is_sock = true;  /* until send says ENOTSOCK, for this call */
	size_t done = 0;
	ssize_t n;

	while (done < len) {
		if (is_sock)
			n = send(fd, p + done, len - done, MSG_NOSIGNAL);
		else
			n = write(fd, p + done, len - done);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == ENOTSOCK && is_sock) {
				is_sock = false;
				continue;
			}
			return platform_io_errno(errno);
		}
		if (n == 0)
			return -EIO;  /* no progress and no error: do not spin */
		done += (size_t)n;
	}
	return 0;
}

/* Power-of-1024 shift for a unit letter, or -1. */
static int platform_unit_shift(char c)
{
	switch (c) {
	case 'k': case 'K': return 10;
	case 'm': case 'M': return 20;
	case 'g': case 'G': return 30;
	case 't': case 'T': return 40;
	default: return -1;
	}
}

int platform_event_new(void)
{
	int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);

	return fd >= 0 ? fd : -errno;
}

int platform_event_signal(int efd)
{
	uint64_t one = 1;

	/* Cannot be short, and cannot overflow in any lifetime of ours. */
	return write(efd, &one, sizeof(one)) == (ssize_t)sizeof(one) ? 0 : -errno;
}

int platform_event_drain(int efd)
{
	uint64_t v;

	return read(efd, &v, sizeof(v)) >= 0 || errno == EAGAIN ? 0 : -errno;
}

int platform_parse_size(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	unsigned d;
	int shift = 0;

	if (s == NULL || *s < '0' || *s > '9')
		return -PC_E_USAGE;  /* empty, sign, space or garbage */
	for (; *s >= '0' && *s <= '9'; s++) {
		d = (unsigned)(*s - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -PC_E_USAGE;
		v = v * 10 + d;
	}
	if (*s != '\0' && platform_unit_shift(*s) >= 0) {
		shift = platform_unit_shift(*s);
		s++;
		if (*s == 'i' || *s == 'I') {  /* "KiB": the i needs the B */
			s++;
			if (*s != 'b' && *s != 'B')
				return -PC_E_USAGE;
		}
	}
	if (*s == 'b' || *s == 'B')
		s++;
	if (*s != '\0')
		return -PC_E_USAGE;
	if (shift > 0 && v > (UINT64_MAX >> shift))
		return -PC_E_USAGE;
	*out = v << shift;
	return 0;
}

/* "bit", "kbit", "mbit", "gbit" (any case): the power of 1000 it scales
 * bits by; -1 for anything else. */
static int platform_bit_unit(const char *u)
{
	static const char *const names[] = { "bit", "kbit", "mbit", "gbit" };

	for (int i = 0; i < 4; i++)
		if (strcasecmp(u, names[i]) == 0)
			return i;
	return -1;
}

int platform_parse_rate(const char *s, uint64_t *out)
{
	char num[32];
	size_t n = 0;
	uint64_t v;

	if (s == NULL)
		return -PC_E_USAGE;
	while (s[n] >= '0' && s[n] <= '9')
		n++;
	int bits = n > 0 ? platform_bit_unit(s + n) : -1;
	if (bits < 0) {
		/* A size, perhaps per second. */
		size_t len = strlen(s);
		if (len >= sizeof(num))
			return -PC_E_USAGE;
		memcpy(num, s, len + 1);
		if (len > 2 && strcmp(num + len - 2, "/s") == 0)
			num[len - 2] = '\0';
		return platform_parse_size(num, out);
	}
	if (n >= sizeof(num))
		return -PC_E_USAGE;
	memcpy(num, s, n);
	num[n] = '\0';
	if (platform_parse_size(num, &v) < 0)
		return -PC_E_USAGE;
	for (int i = 0; i < bits; i++) {
		if (v > UINT64_MAX / 1000)
			return -PC_E_USAGE;
		v *= 1000;
	}
	*out = v / 8;
	return 0;
}

char *platform_fmt_bytes(uint64_t n, char *buf, size_t cap)
{
	static const char *const units[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
	const size_t nunits = sizeof(units) / sizeof(units[0]);
	double v = (double)n;
	size_t u = 0;

	if (buf == NULL || cap == 0)
		return buf;
	if (n < 1024) {
		snprintf(buf, cap, "%" PRIu64 " B", n);
		return buf;
	}
	v /= 1024.0;
	while (v >= 1024.0 && u + 1 < nunits) {
		v /= 1024.0;
		u++;
	}
	/* 1023.96 KiB would print as "1024.0 KiB": step up instead. */
	if (v >= 1023.95 && u + 1 < nunits) {
		v /= 1024.0;
		u++;
	}
	snprintf(buf, cap, "%.1f %s", v, units[u]);
	return buf;
}

/* The signals the main thread turns into an orderly stop. */
static void platform_stop_signals(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGHUP);
	sigaddset(set, SIGQUIT);
}

/* The stop signals' signalfd once platform_signals_setup made it, else -1.
 * Written before any thread exists; read-only afterwards. */
static int platform_stop_fd = -1;

int platform_signals_setup(void)
{
	struct sigaction sa;
	sigset_t set;
	int rc;
	int fd;

	platform_stop_signals(&set);
	rc = pthread_sigmask(SIG_BLOCK, &set, NULL);
	if (rc != 0)
		return -rc;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGPIPE, &sa, NULL) != 0)
		return -errno;

	fd = signalfd(-1, &set, SFD_CLOEXEC);
	if (fd < 0)
		return -errno;
	platform_stop_fd = fd;
	return fd;
}

bool platform_stop_pending(void)
{
	struct pollfd p = { .fd = platform_stop_fd, .events = POLLIN };

	return platform_stop_fd >= 0 && poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

int platform_signals_ignore(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
	struct sigaction sa;
	sigset_t set;
	int ret;

	/* Setting SIG_IGN discards one pending (POSIX, sigaction). But Linux
	 * queues a signal that is blocked even while it is ignored (the
	 * handler might change before it is unblocked), so one sent after
	 * this would stay pending for good: unblock them too, and an ignored,
	 * unblocked signal is discarded as it is sent. */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_IGN;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (sigaction(sigs[i], &sa, NULL) != 0)
			return -errno;
	platform_stop_signals(&set);
	ret = pthread_sigmask(SIG_UNBLOCK, &set, NULL);
	return -ret;
}

int platform_poll(struct pollfd *p, unsigned n, int timeout_ms)
{
	struct pollfd all[PLATFORM_POLL_MAX + 1];
	int r;

	if (n > PLATFORM_POLL_MAX)
		return -EINVAL;
	memcpy(all, p, n * sizeof(*p));
	/* poll ignores a negative fd: before set-up, only p counts. */
	all[n] = (struct pollfd){ .fd = platform_stop_fd, .events = POLLIN };
	do
		r = poll(all, n + 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	if (all[n].revents & POLLIN)
		return -PC_E_INTERRUPTED;
	for (unsigned i = 0; i < n; i++)
		p[i].revents = all[i].revents;
	return r;
}

void platform_signals_reset(void)
{
	static const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE };
	struct sigaction sa;
	sigset_t set;
	size_t i;

	/* Only async-signal-safe calls: this runs between fork and exec. */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	sigemptyset(&sa.sa_mask);
	sigemptyset(&set);
	for (i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
		sigaction(sigs[i], &sa, NULL);
		sigaddset(&set, sigs[i]);
	}
	sigprocmask(SIG_UNBLOCK, &set, NULL);
}

int platform_pipe_widen(int fd)
{
	return fcntl(fd, F_SETPIPE_SZ, (int)PLATFORM_PIPE_WIDE) < 0 ? -errno : 0;
}

int platform_set_cloexec(int fd, bool on)
{
	int flags = fcntl(fd, F_GETFD);

	if (flags < 0)
		return -errno;
	if (on)
		flags |= FD_CLOEXEC;
	else
		flags &= ~FD_CLOEXEC;
	if (fcntl(fd, F_SETFD, flags) < 0)
		return -errno;
	return 0;
}

int platform_cpu_times(uint64_t *idle, uint64_t *total)
{
	unsigned long long v[8] = { 0 };
	FILE *f = fopen("/proc/stat", "re");
	int n;

	if (f == NULL)
		return -errno;
	n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
		   &v[4], &v[5], &v[6], &v[7]);
	fclose(f);
	if (n < 5)
		return -EIO;
	*idle = v[3] + v[4];
	*total = 0;
	for (int i = 0; i < 8; i++)
		*total += v[i];
	return 0;
}

uint64_t platform_thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int platform_dir_within(int dirfd, dev_t dev, ino_t ino)
{
	struct stat st, up;
	int fd = -1, ret = 0;

	if (fstat(dirfd, &st) != 0)
		return -errno;
	for (unsigned depth = 0; depth < PLATFORM_MAX_DEPTH; depth++) {
		if (st.st_dev == dev && st.st_ino == ino) {
			ret = 1;
			break;
		}
		/* O_PATH: a directory we may not read still has a parent. */
		int next = openat(fd >= 0 ? fd : dirfd, "..", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (next < 0 || fstat(next, &up) != 0) {
			ret = -errno;
			if (next >= 0)
				close(next);
			break;
		}
		if (fd >= 0)
			close(fd);
		fd = next;
		if (up.st_dev == st.st_dev && up.st_ino == st.st_ino)
			break; /* the root: its ".." is itself */
		st = up;
	}
	if (fd >= 0)
		close(fd);
	return ret;
}
