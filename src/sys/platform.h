/* SPDX-License-Identifier: Apache-2.0 */
/* platform: thin wrappers over the OS that every layer uses: clocks, resource
 * usage, full reads and writes, size parsing, signal set-up. */
#ifndef PCOPY_PLATFORM_H
#define PCOPY_PLATFORM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t platform_now_ns(void);

/* CPU time of the calling thread in nanoseconds. */
uint64_t platform_thread_cpu_ns(void);

/* CPU time of the whole process (user and system) in microseconds, and its
 * peak resident set size in KiB. */
void platform_rusage(uint64_t *user_us, uint64_t *sys_us, uint64_t *maxrss_kb);

/* Cumulative idle (idle + iowait) and total CPU time of the whole machine,
 * in clock ticks, from /proc/stat. Returns 0 or -errno. */
int platform_cpu_times(uint64_t *idle, uint64_t *total);

/* Reads exactly len bytes, retrying on EINTR and short reads. Returns 0, or
 * -errno, or -PC_E_NET if EOF came first (*got, if non-NULL, says how many
 * bytes arrived; EOF before the first byte gives *got == 0). A receive
 * timeout (EAGAIN from SO_RCVTIMEO) becomes -PC_E_TIMEOUT. */
int platform_read_full(int fd, void *buf, size_t len, size_t *got);

/* Writes exactly len bytes (send with MSG_NOSIGNAL on sockets, write on
 * other fds), retrying on EINTR. Returns 0 or -errno; EAGAIN from
 * SO_SNDTIMEO becomes -PC_E_TIMEOUT. */
int platform_write_full(int fd, const void *buf, size_t len);

/* Reads len bytes at offset off of fd (pread), retrying on EINTR and short
 * reads; fewer only where the file ends. Returns the bytes read or -errno. */
ssize_t platform_pread_full(int fd, void *buf, size_t len, uint64_t off);

/* Writes len bytes at offset off of fd (pwrite), retrying on EINTR and
 * short writes. Returns 0 or -errno. */
int platform_pwrite_full(int fd, const void *buf, size_t len, uint64_t off);

/* A wake-up flag between threads: an eventfd (EFD_CLOEXEC | EFD_NONBLOCK)
 * that one thread signals and another polls and drains. platform_event_new
 * returns the fd or -errno; the others return 0 or -errno. */
int platform_event_new(void);
int platform_event_signal(int efd);
int platform_event_drain(int efd);

/* Parses "123", "64k", "1M", "2G" (powers of 1024; case-insensitive;
 * optional trailing "B"/"iB") into *out. Returns 0 or -PC_E_USAGE for
 * anything else, including overflow and an empty string. */
int platform_parse_size(const char *s, uint64_t *out);

/* Parses a rate into bytes per second: a size as platform_parse_size
 * takes it, optionally followed by "/s" ("10M", "512k/s"), or a number of
 * bits per second with the suffix "bit", "kbit", "mbit" or "gbit" (powers
 * of 1000, as networks count; case-insensitive: "100mbit" is 12500000).
 * Returns 0 or -PC_E_USAGE for anything else, overflow included. */
int platform_parse_rate(const char *s, uint64_t *out);

/* Formats a byte count as "1.5 GiB" into buf. Returns buf. */
char *platform_fmt_bytes(uint64_t n, char *buf, size_t cap);

/* Blocks SIGINT, SIGTERM, SIGHUP and SIGQUIT in the calling thread (call from
 * main before creating threads, so every thread inherits the mask), ignores
 * SIGPIPE, and returns a signalfd that becomes readable when one of them
 * arrives. Returns the fd or -errno. */
int platform_signals_setup(void);

/* poll(2) over p[0..n) (n <= PLATFORM_POLL_MAX) that also ends when a stop
 * signal is pending: SIGINT, SIGTERM, SIGHUP or SIGQUIT, watched through
 * the signalfd of platform_signals_setup (nothing is watched before it ran,
 * as in unit tests). The signal is left unread, so every later wait ends
 * at once too and the caller's top can report it. This is how the steps
 * before the pipeline (opening a FIFO, resolving a host, connecting) stay
 * interruptible although the signals themselves are blocked. EINTR is
 * retried with the same timeout. Returns the number of ready entries of p
 * (> 0), 0 on timeout, -PC_E_INTERRUPTED, or -errno. Thread-safe. */
#define PLATFORM_POLL_MAX 160 /* 2 x 64 data streams racing, and then some */

/* Whether a stop signal waits on the signalfd, unread (false before
 * platform_signals_setup). */
bool platform_stop_pending(void);

/* Ignores the stop signals from now on (dropping one pending, and every
 * one sent later: they are unblocked too):
 * for the end of the process, once every wait is over (see pcopy_finish).
 * Returns 0 or -errno. */
int platform_signals_ignore(void);
struct pollfd;
int platform_poll(struct pollfd *p, unsigned n, int timeout_ms);

/* Restores the default disposition and unblocks those signals; used in a
 * child between fork and exec. Async-signal-safe. */
void platform_signals_reset(void);

/* Sets or clears O_CLOEXEC / O_NONBLOCK. Return 0 or -errno. */
int platform_set_cloexec(int fd, bool on);

/* The capacity platform_pipe_widen asks for: the default pipe-max-size. */
#define PLATFORM_PIPE_WIDE (1u << 20)

/* Asks that the pipe behind fd hold PLATFORM_PIPE_WIDE bytes instead of
 * 64 KiB, so that the process at its other end (sshd, ssh) hands over what
 * it holds in large writes. OpenSSH copies a channel's whole buffer as it
 * grows, so every byte it must keep because a pipe is full costs it CPU
 * (DESIGN-NOTES, "Pipes to and from ssh"). Returns 0, or -errno: -EBADF
 * when fd is not a pipe (a socket, a tty), -EPERM past the user's limit of
 * pipe memory. The pipe works as before either way: callers may go on. */
int platform_pipe_widen(int fd);

/* Whether the directory dirfd is the directory (dev, ino) or lies inside
 * it, found by going up through ".." to the root (at most
 * PLATFORM_MAX_DEPTH levels). Returns 1, 0, or -errno. */
#define PLATFORM_MAX_DEPTH 4096
int platform_dir_within(int dirfd, dev_t dev, ino_t ino);

#endif
