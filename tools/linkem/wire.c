/* SPDX-License-Identifier: Apache-2.0 */
/* wire: on-wire size of TUN packets, and GSO super-packets cut by segment.
 *
 * The virtio_net_hdr is in the host's byte order (legacy virtio, which
 * TUN uses unless told otherwise); IP and TCP fields are big-endian. */
#include "wire.h"

#include <linux/virtio_net.h>
#include <string.h>

_Static_assert(sizeof(struct virtio_net_hdr) == WIRE_VNET_HDR_LEN,
	       "virtio_net_hdr is 10 bytes");

#define WIRE_TCP_FIN 0x01u
#define WIRE_TCP_PSH 0x08u
#define WIRE_TCP_CWR 0x80u

static uint32_t wire_be16(const uint8_t *p)
{
	return (uint32_t)p[0] << 8 | p[1];
}

static uint32_t wire_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 |
	       (uint32_t)p[2] << 8 | p[3];
}

static void wire_put16(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static void wire_put32(uint8_t *p, uint32_t v)
{
	wire_put16(p, v >> 16);
	wire_put16(p + 2, v);
}

/* One's complement sum of n bytes (n even) added to sum, unfolded. */
static uint32_t wire_sum(const uint8_t *p, size_t n, uint32_t sum)
{
	size_t i;

	for (i = 0; i + 1 < n; i += 2)
		sum += wire_be16(p + i);
	return sum;
}

static uint32_t wire_fold(uint32_t sum)
{
	while (sum >> 16)
		sum = (sum & 0xffff) + (sum >> 16);
	return sum;
}

/* Offset of the TCP header when pkt is TCP GSO that we know how to cut
 * (partial checksum, IPv4, or IPv6 without extension headers), else 0. */
static uint32_t wire_tcp_offset(const struct virtio_net_hdr *vh,
				const uint8_t *ip, size_t iplen)
{
	unsigned type = vh->gso_type & (unsigned)~VIRTIO_NET_HDR_GSO_ECN;
	uint32_t l4 = vh->csum_start;

	if (!(vh->flags & VIRTIO_NET_HDR_F_NEEDS_CSUM) || iplen < 40)
		return 0;
	if (type == VIRTIO_NET_HDR_GSO_TCPV4 && (ip[0] >> 4) == 4 &&
	    ip[9] == 6 && l4 == (uint32_t)(ip[0] & 0x0f) * 4)
		return l4;
	if (type == VIRTIO_NET_HDR_GSO_TCPV6 && (ip[0] >> 4) == 6 &&
	    ip[6] == 6 && l4 == 40)
		return l4;
	return 0;
}

void wire_parse(const uint8_t *pkt, size_t len, uint32_t overhead,
		struct wire_info *wi)
{
	struct virtio_net_hdr vh;
	const uint8_t *ip = pkt + WIRE_VNET_HDR_LEN;
	size_t iplen = len > WIRE_VNET_HDR_LEN ? len - WIRE_VNET_HDR_LEN : 0;
	uint32_t l4, hl;

	memset(wi, 0, sizeof(*wi));
	wi->segs = 1;
	wi->overhead = overhead;
	wi->bytes = (uint64_t)iplen + overhead;
	wi->payload = (uint32_t)iplen;
	if (iplen == 0)
		return;
	memcpy(&vh, pkt, sizeof(vh));
	if (vh.gso_type == VIRTIO_NET_HDR_GSO_NONE || vh.gso_size == 0)
		return;
	l4 = wire_tcp_offset(&vh, ip, iplen);
	if (l4 == 0 || l4 + 20 > iplen)
		return;
	hl = l4 + (uint32_t)(ip[l4 + 12] >> 4) * 4;
	if (hl >= iplen)
		return;
	wi->l4 = l4;
	wi->mss = vh.gso_size;
	wi->payload = (uint32_t)(iplen - hl);
	wi->segs = (wi->payload + wi->mss - 1) / wi->mss;
	wi->bytes = wi->payload + (uint64_t)wi->segs * (hl + overhead);
	wi->hdr_len = wi->segs <= WIRE_MAX_SEGS ? hl : 0;
}

uint64_t wire_seg_bytes(const struct wire_info *wi, uint32_t i)
{
	uint32_t pay;

	if (wi->segs == 1)
		return wi->bytes;
	pay = i + 1 < wi->segs ? wi->mss : wi->payload - i * wi->mss;
	return (uint64_t)pay + wi->hdr_len + wi->overhead;
}

/* Sets the IP length (and id and header checksum for IPv4) of a run. */
static void wire_fix_ip(uint8_t *ip, const struct wire_info *wi,
			uint32_t iplen, uint32_t first)
{
	uint32_t sum;

	if ((ip[0] >> 4) == 6) {
		wire_put16(ip + 4, iplen - 40);
		return;
	}
	wire_put16(ip + 2, iplen);
	wire_put16(ip + 4, wire_be16(ip + 4) + first);
	wire_put16(ip + 10, 0);
	sum = wire_fold(wire_sum(ip, wi->l4, 0));
	wire_put16(ip + 10, ~sum & 0xffff);
}

/* Sets sequence number, flags and the partial (pseudo-header) checksum
 * of a run's TCP header. */
static void wire_fix_tcp(uint8_t *ip, const struct wire_info *wi,
			 uint32_t tcplen, uint32_t first, uint32_t last)
{
	uint8_t *th = ip + wi->l4;
	uint32_t sum;

	wire_put32(th + 4, wire_be32(th + 4) + first * wi->mss);
	if (last + 1 < wi->segs)
		th[13] &= (uint8_t)~(WIRE_TCP_FIN | WIRE_TCP_PSH);
	if (first > 0)
		th[13] &= (uint8_t)~WIRE_TCP_CWR;
	if ((ip[0] >> 4) == 6)
		sum = wire_sum(ip + 8, 32, 0);
	else
		sum = wire_sum(ip + 12, 8, 0);
	sum += 6 + (tcplen >> 16) + (tcplen & 0xffff);
	wire_put16(th + 16, wire_fold(sum));
}

size_t wire_build_run(const uint8_t *src, const struct wire_info *wi,
		      uint32_t first, uint32_t count, uint8_t *dst)
{
	struct virtio_net_hdr vh;
	const uint8_t *ip = src + WIRE_VNET_HDR_LEN;
	uint8_t *out = dst + WIRE_VNET_HDR_LEN;
	uint32_t off = first * wi->mss, pay, end;

	end = (first + count) * wi->mss;
	if (end > wi->payload)
		end = wi->payload;
	pay = end - off;
	memcpy(&vh, src, sizeof(vh));
	vh.hdr_len = (uint16_t)wi->hdr_len;
	if (count == 1) {
		vh.gso_type = VIRTIO_NET_HDR_GSO_NONE;
		vh.gso_size = 0;
	}
	memcpy(dst, &vh, sizeof(vh));
	memcpy(out, ip, wi->hdr_len);
	memcpy(out + wi->hdr_len, ip + wi->hdr_len + off, pay);
	wire_fix_ip(out, wi, wi->hdr_len + pay, first);
	wire_fix_tcp(out, wi, wi->hdr_len - wi->l4 + pay, first,
		     first + count - 1);
	return WIRE_VNET_HDR_LEN + wi->hdr_len + pay;
}
