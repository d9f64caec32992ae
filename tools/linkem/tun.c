/* SPDX-License-Identifier: Apache-2.0 */
/* tun: TUN devices opened from inside a network namespace.
 *
 * A TUN device lives in the namespace of the thread that opens
 * /dev/net/tun, so we setns() there, open and configure, and setns() back. */
#include "tun.h"
#include "wire.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* Opens the namespace file for ns, or returns -1 with errno set. */
static int tun_ns_fd(const char *ns)
{
	char path[256];

	if (strchr(ns, '/') != NULL)
		return open(ns, O_RDONLY | O_CLOEXEC);
	if (snprintf(path, sizeof(path), "/run/netns/%s", ns) >=
	    (int)sizeof(path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	return open(path, O_RDONLY | O_CLOEXEC);
}

/* Creates and configures the device in the current namespace. */
static int tun_create(const char *name, bool offload, char *err,
		      size_t errlen)
{
	struct ifreq ifr;
	unsigned off = 0;
	int hdr = (int)WIRE_VNET_HDR_LEN;
	int fd = -1, ret = -EINVAL;
	const char *what = "open /dev/net/tun";

	fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		goto fail;
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_flags = IFF_TUN | IFF_NO_PI | IFF_VNET_HDR;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
	what = "TUNSETIFF (does the device exist already?)";
	if (ioctl(fd, TUNSETIFF, &ifr) < 0)
		goto fail;
	what = "TUNSETVNETHDRSZ";
	if (ioctl(fd, TUNSETVNETHDRSZ, &hdr) < 0)
		goto fail;
	if (offload)
		off = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN;
	what = "TUNSETOFFLOAD";
	if (ioctl(fd, TUNSETOFFLOAD, off) < 0)
		goto fail;
	return fd;
fail:
	ret = -errno;
	snprintf(err, errlen, "TUN device %s: %s: %s", name, what,
		 strerror(errno));
	if (fd >= 0)
		close(fd);
	return ret;
}

int tun_open(const char *ns, const char *name, bool offload,
	     char *err, size_t errlen)
{
	int home = -1, target = -1, fd = -1, ret = -EINVAL;

	if (strlen(name) >= IFNAMSIZ) {
		snprintf(err, errlen, "TUN device name '%s' is longer than %d",
			 name, IFNAMSIZ - 1);
		return -EINVAL;
	}
	if (ns == NULL)
		return tun_create(name, offload, err, errlen);
	home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	target = tun_ns_fd(ns);
	if (home < 0 || target < 0) {
		ret = -errno;
		snprintf(err, errlen, "network namespace %s: %s (create it "
			 "with 'ip netns add %s')", ns, strerror(errno), ns);
		goto out;
	}
	if (setns(target, CLONE_NEWNET) < 0) {
		ret = -errno;
		snprintf(err, errlen, "setns into network namespace %s: %s "
			 "(linkem needs root)", ns, strerror(errno));
		goto out;
	}
	fd = tun_create(name, offload, err, errlen);
	if (setns(home, CLONE_NEWNET) < 0) {
		ret = -errno;
		snprintf(err, errlen, "setns back from %s: %s", ns,
			 strerror(errno));
		goto out;
	}
	ret = fd;
	fd = -1;
out:
	if (fd >= 0)
		close(fd);
	if (target >= 0)
		close(target);
	if (home >= 0)
		close(home);
	return ret;
}
