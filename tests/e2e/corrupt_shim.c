/* SPDX-License-Identifier: Apache-2.0 */
/* corrupt_shim: an LD_PRELOAD library for the integrity tests. It wraps
 * sendmsg() and, once the process has sent PCOPY_CORRUPT_AFTER bytes in
 * messages of at least 64 KiB (block payloads), flips one byte in the
 * middle of the next such message's last iovec, so the bytes that reach the
 * kernel, and the wire, really differ from what was checksummed. Only the
 * first PCOPY_CORRUPT_COUNT (default 1) messages are touched. It wraps
 * write() to a socket the same way (count >= 64 KiB), which is how OpenSSL
 * sends TLS records: there the flipped byte is in the ciphertext. */
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags);
ssize_t write(int fd, const void *buf, size_t count);

static atomic_ullong shim_sent;
static atomic_int shim_done;
static ssize_t (*shim_real)(int, const struct msghdr *, int);
static ssize_t (*shim_real_write)(int, const void *, size_t);

/* Resolved before main, so threads never race to set it. */
__attribute__((constructor)) static void shim_init(void)
{
	*(void **)&shim_real = dlsym(RTLD_NEXT, "sendmsg");
	*(void **)&shim_real_write = dlsym(RTLD_NEXT, "write");
}

/* Whether this large message is the one to corrupt (counts it). */
static int shim_pick(size_t total)
{
	const char *after = getenv("PCOPY_CORRUPT_AFTER");
	const char *count = getenv("PCOPY_CORRUPT_COUNT");

	if (after == NULL || total < 65536)
		return 0;
	unsigned long long before = atomic_fetch_add(&shim_sent, total);
	return before >= strtoull(after, NULL, 10) &&
	       atomic_fetch_add(&shim_done, 1) < (count ? atoi(count) : 1);
}

ssize_t write(int fd, const void *buf, size_t count)
{
	struct stat st;

	if (count < 65536 || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) || !shim_pick(count))
		return shim_real_write(fd, buf, count);
	uint8_t *copy = malloc(count);
	if (copy == NULL)
		return shim_real_write(fd, buf, count);
	memcpy(copy, buf, count);
	copy[count / 2] ^= 0x5a;
	ssize_t ret = shim_real_write(fd, copy, count);
	free(copy);
	return ret;
}

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
	ssize_t (*real)(int, const struct msghdr *, int) = shim_real;
	size_t total = 0;

	for (size_t i = 0; i < msg->msg_iovlen; i++)
		total += msg->msg_iov[i].iov_len;
	if (msg->msg_iovlen < 2 || !shim_pick(total))
		return real(fd, msg, flags);

	/* Send a corrupted copy of the payload iovec. */
	struct iovec iov[8];
	struct msghdr m = *msg;
	size_t n = msg->msg_iovlen < 8 ? msg->msg_iovlen : 8, last = n - 1;
	memcpy(iov, msg->msg_iov, n * sizeof(*iov));
	uint8_t *copy = malloc(iov[last].iov_len);
	if (copy == NULL)
		return real(fd, msg, flags);
	memcpy(copy, iov[last].iov_base, iov[last].iov_len);
	copy[iov[last].iov_len / 2] ^= 0x5a;
	iov[last].iov_base = copy;
	m.msg_iov = iov;
	m.msg_iovlen = n;
	ssize_t ret = real(fd, &m, flags);
	free(copy);
	return ret;
}
