/* SPDX-License-Identifier: Apache-2.0 */
/* keyfile: create and read the daemon's shared secret. */
#include "wire/keyfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sys/crypto.h"

#define KEYFILE_HEX_LEN (2 * PROTO_KEY_LEN)
#define KEYFILE_MAX_READ 200u   /* 64 digits and generous trailing whitespace */

static const char keyfile_digits[] = "0123456789abcdef";

/* Writes all of buf, retrying on EINTR and short writes. Returns 0 or -errno. */
static int keyfile_write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Makes fd (just created at path) mode 0600 whatever the umask, and writes
 * and syncs the text form of key. Returns 0 or a negative code with e set;
 * the caller closes fd and removes path on failure. */
static int keyfile_write(int fd, const char *path, const uint8_t key[PROTO_KEY_LEN],
			 struct pc_err *e)
{
	char text[KEYFILE_HEX_LEN + 1];
	int ret;

	for (size_t i = 0; i < PROTO_KEY_LEN; i++) {
		text[2 * i] = keyfile_digits[key[i] >> 4];
		text[2 * i + 1] = keyfile_digits[key[i] & 0xf];
	}
	text[KEYFILE_HEX_LEN] = '\n';
	if (fchmod(fd, 0600) != 0) {
		ret = -errno;
		pc_err_set(e, ret, "cannot set mode 0600 on key file '%s': %s", path,
			   strerror(-ret));
		goto out;
	}
	ret = keyfile_write_all(fd, text, sizeof text);
	if (ret == 0 && fsync(fd) != 0)
		ret = -errno;
	if (ret != 0)
		pc_err_set(e, ret, "cannot write key file '%s': %s", path, strerror(-ret));
out:
	crypto_wipe(text, sizeof text);
	return ret;
}

int keyfile_generate(const char *path, struct pc_err *e)
{
	uint8_t key[PROTO_KEY_LEN];
	int fd = -1;
	int ret;

	ret = crypto_random(key, sizeof key);
	if (ret != 0) {
		pc_err_set(e, ret, "cannot make a key for '%s': the system random generator failed",
			   path);
		goto out;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		ret = -errno;
		if (ret == -EEXIST)
			ret = pc_err_set(e, -PC_E_USAGE, "key file '%s' already exists; "
					 "remove it or choose another name", path);
		else
			pc_err_set(e, ret, "cannot create key file '%s': %s", path, strerror(-ret));
		goto out;
	}
	ret = keyfile_write(fd, path, key, e);
	if (close(fd) != 0 && ret == 0) {
		ret = -errno;
		pc_err_set(e, ret, "cannot write key file '%s': %s", path, strerror(-ret));
	}
	if (ret != 0)
		unlink(path);
out:
	crypto_wipe(key, sizeof key);
	return ret;
}

int keyfile_hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static bool keyfile_is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}

/* Decodes exactly KEYFILE_HEX_LEN hex digits followed only by whitespace.
 * Returns true on success; key may be partly written on failure. */
static bool keyfile_parse(const char *text, size_t len, uint8_t key[PROTO_KEY_LEN])
{
	if (len < KEYFILE_HEX_LEN)
		return false;
	for (size_t i = 0; i < PROTO_KEY_LEN; i++) {
		int hi = keyfile_hex_digit(text[2 * i]);
		int lo = keyfile_hex_digit(text[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return false;
		key[i] = (uint8_t)(hi << 4 | lo);
	}
	for (size_t i = KEYFILE_HEX_LEN; i < len; i++)
		if (!keyfile_is_space(text[i]))
			return false;
	return true;
}

/* Checks that fd is a regular file only its owner can use. Returns 0 or
 * -PC_E_USAGE / -errno with e set. */
static int keyfile_check_mode(int fd, const char *path, struct pc_err *e)
{
	struct stat st;
	const char *what;

	if (fstat(fd, &st) != 0) {
		int ret = -errno;

		return pc_err_set(e, ret, "cannot stat key file '%s': %s", path, strerror(-ret));
	}
	if (!S_ISREG(st.st_mode))
		return pc_err_set(e, -PC_E_USAGE,
				  "key file '%s' is not a regular file; give the path of a "
				  "file made with pcopy --gen-key FILE", path);
	if ((st.st_mode & 077) == 0)
		return 0;
	if (st.st_mode & 044)
		what = "readable";
	else if (st.st_mode & 022)
		what = "writable";
	else
		what = "executable";
	return pc_err_set(e, -PC_E_USAGE,
			  "key file '%s' is %s by group or others (mode %04o); run: chmod 600 %s",
			  path, what, (unsigned)(st.st_mode & 07777), path);
}

/* Reads up to cap bytes (stops at EOF). Returns the count or -errno. */
static ssize_t keyfile_read_all(int fd, char *buf, size_t cap)
{
	size_t got = 0;

	while (got < cap) {
		ssize_t n = read(fd, buf + got, cap - got);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

int keyfile_load(const char *path, uint8_t key[PROTO_KEY_LEN], struct pc_err *e)
{
	char buf[KEYFILE_MAX_READ + 1]; /* one spare byte detects an oversized file */
	uint8_t tmp[PROTO_KEY_LEN];
	ssize_t len = 0;
	int fd = -1;
	int ret;

	/* O_NONBLOCK so that a FIFO cannot hang us before the S_ISREG check. */
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0) {
		int err = errno;
		/* A name that leads nowhere, or to what we may not read, is the
		 * user's to fix, as a bad option is (exit 1); the rest (EIO,
		 * EMFILE, ENOMEM) is not. */
		bool users = err == ENOENT || err == EACCES || err == ENOTDIR || err == ELOOP ||
			     err == ENAMETOOLONG;
		ret = pc_err_set(e, users ? -PC_E_USAGE : -err, "cannot open key file '%s': %s%s",
				 path, strerror(err),
				 err == ENOENT ? " (make one with pcopy --gen-key FILE)" : "");
		goto out;
	}
	ret = keyfile_check_mode(fd, path, e);
	if (ret != 0)
		goto out;
	len = keyfile_read_all(fd, buf, sizeof buf);
	if (len < 0) {
		ret = (int)len;
		pc_err_set(e, ret, "cannot read key file '%s': %s", path, strerror(-ret));
		goto out;
	}
	if ((size_t)len > KEYFILE_MAX_READ || !keyfile_parse(buf, (size_t)len, tmp)) {
		ret = pc_err_set(e, -PC_E_USAGE,
				 "key file '%s' is not a pcopy key (expected 64 hex digits; "
				 "make one with pcopy --gen-key FILE)", path);
		goto out;
	}
	memcpy(key, tmp, sizeof tmp);
	ret = 0;
out:
	if (fd >= 0)
		close(fd);
	crypto_wipe(buf, sizeof buf);
	crypto_wipe(tmp, sizeof tmp);
	return ret;
}
