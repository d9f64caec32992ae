/* SPDX-License-Identifier: Apache-2.0 */
/* tun: open a layer-3 TUN device inside a network namespace. */
#ifndef LINKEM_TUN_H
#define LINKEM_TUN_H

#include <stdbool.h>
#include <stddef.h>

/* Creates TUN device name (IFF_TUN | IFF_NO_PI | IFF_VNET_HDR, 10-byte
 * virtio_net_hdr) in network namespace ns and returns its fd, non-blocking
 * and close-on-exec. ns is a name under /run/netns, a path (it contains a
 * '/'), or NULL for the caller's namespace. With offload, the kernel may
 * hand over (and accepts back) GSO super-packets up to 64 KiB with partial
 * checksums; without, every packet is one checksummed segment. The device
 * is not persistent: it disappears when the fd is closed.
 * Returns -errno on failure with a message naming ns and name in err.
 * Switches the calling thread's namespace and back: call it before any
 * other thread depends on the calling thread's namespace. */
int tun_open(const char *ns, const char *name, bool offload,
	     char *err, size_t errlen);

#endif
