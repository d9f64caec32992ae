#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tls_relay: a TCP relay that t_tls puts on the network path of a copy.

    tls_relay.py --log FILE --ready FILE --route NAME:LHOST:LPORT:THOST:TPORT...
                 [--flip NAME:DIR:N:MINLEN] [--record NAME:PREFIX] [--hold NAME:GATE]

Each --route listens on LHOST:LPORT and forwards every connection it accepts
to THOST:TPORT, both ways, byte for byte. On top of that, for one route:

  --flip NAME:DIR:N:MINLEN  reads the bytes going DIR (c2s: from the
        connecting side, s2c: back to it) as TLS records (5-byte header:
        type, version, length), and flips one byte (XOR 0x5a) in the middle
        of the payload of the N-th application-data record (type 23) of at
        least MINLEN payload bytes: once in the relay's life, on the first
        connection of NAME that gets that far. Everything else passes as is.
  --record NAME:PREFIX  writes what the k-th connection of NAME sent
        (c2s) to PREFIX.k, k = 1, 2, ... as it passes.
  --hold NAME:GATE  connects a new connection of NAME to its target only
        once the file GATE exists; until then the connecting side's bytes
        wait unread in its socket.

--ready FILE is created once every route listens. --log FILE gets one line
per event: "NAME#k accepted", "NAME#k connected", "NAME#k flipped ...",
"NAME#k closed c2s=B s2c=B". The relay runs until it is killed.
"""

import argparse
import os
import socket
import sys
import threading
import time

LOG_LOCK = threading.Lock()
FLIP_LOCK = threading.Lock()
FLIPPED = False


def log(path, line):
    """Appends one line to the log file."""
    with LOG_LOCK, open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


class Flipper:
    """Follows the TLS records of one direction of one connection and
    flips one byte of the chosen record, if no other connection did."""

    def __init__(self, n, minlen, note):
        self.n, self.minlen, self.note = n, minlen, note
        self.hdr = b""
        self.left = 0       # payload bytes of the current record still to come
        self.pos = 0        # payload bytes of the current record seen
        self.count = 0      # application-data records of at least minlen
        self.flip_at = None  # payload offset to flip in the current record
        self.offset = 0     # bytes of this direction seen

    def _claim(self):
        global FLIPPED
        with FLIP_LOCK:
            if FLIPPED:
                return False
            FLIPPED = True
            return True

    def feed(self, data):
        """data: a bytearray, changed in place."""
        i = 0
        while i < len(data):
            if self.left == 0:
                take = data[i:i + 5 - len(self.hdr)]
                self.hdr += bytes(take)
                i += len(take)
                if len(self.hdr) < 5:
                    continue
                rtype, length = self.hdr[0], (self.hdr[3] << 8) | self.hdr[4]
                self.hdr, self.left, self.pos = b"", length, 0
                if rtype == 23 and length >= max(self.minlen, 1):
                    self.count += 1
                    if self.count == self.n and self._claim():
                        self.flip_at = length // 2
                continue
            take = min(self.left, len(data) - i)
            if self.flip_at is not None and self.pos <= self.flip_at < self.pos + take:
                at = i + self.flip_at - self.pos
                data[at] ^= 0x5A
                self.note(f"flipped the byte at offset {self.offset + at} (application-data "
                          f"record {self.count}, {self.pos + self.left} bytes)")
                self.flip_at = None
            self.pos += take
            self.left -= take
            i += take
        self.offset += len(data)


def pump(src, dst, flipper, record, counts, key):
    """Copies src to dst until EOF or an error, then ends dst's direction.
    An error (a reset) ends this direction only: what the other side sent
    before it reset (a TLS alert saying why) still goes the other way."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            data = bytearray(data)
            if flipper is not None:
                flipper.feed(data)
            if record is not None:
                record.write(data)
                record.flush()
            dst.sendall(data)
            counts[key] += len(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def serve_one(route, conn, k, args):
    """Relays one accepted connection, the k-th of its route."""
    name = f"{route['name']}#{k}"
    note = lambda line: log(args.log, f"{name} {line}")  # noqa: E731
    note("accepted")
    gate = route.get("hold")
    while gate is not None and not os.path.exists(gate):
        time.sleep(0.05)
    try:
        up = socket.create_connection((route["thost"], route["tport"]), timeout=30)
        up.settimeout(None)
    except OSError as e:
        note(f"cannot connect to {route['thost']}:{route['tport']}: {e}")
        conn.close()
        return
    note("connected")
    flips = {"c2s": None, "s2c": None}
    if "flip" in route:
        d, n, minlen = route["flip"]
        flips[d] = Flipper(n, minlen, note)
    record = open(f"{route['record']}.{k}", "wb") if "record" in route else None
    counts = {"c2s": 0, "s2c": 0}
    t = threading.Thread(target=pump, args=(up, conn, flips["s2c"], None, counts, "s2c"))
    t.start()
    pump(conn, up, flips["c2s"], record, counts, "c2s")
    t.join()
    if record is not None:
        record.close()
    conn.close()
    up.close()
    note(f"closed c2s={counts['c2s']} s2c={counts['s2c']}")


def listen(route, args):
    """Accepts the connections of one route forever."""
    k = 0
    while True:
        conn, _ = route["sock"].accept()
        k += 1
        threading.Thread(target=serve_one, args=(route, conn, k, args), daemon=True).start()


def main():
    p = argparse.ArgumentParser(description="a TCP relay for t_tls")
    p.add_argument("--log", required=True)
    p.add_argument("--ready", required=True)
    p.add_argument("--route", action="append", required=True)
    p.add_argument("--flip", action="append", default=[])
    p.add_argument("--record", action="append", default=[])
    p.add_argument("--hold", action="append", default=[])
    args = p.parse_args()

    routes = {}
    for r in args.route:
        name, lhost, lport, thost, tport = r.split(":")
        routes[name] = {"name": name, "lhost": lhost, "lport": int(lport),
                        "thost": thost, "tport": int(tport)}
    for f in args.flip:
        name, d, n, minlen = f.split(":")
        if d not in ("c2s", "s2c"):
            sys.exit(f"tls_relay: --flip {f}: the direction must be c2s or s2c")
        routes[name]["flip"] = (d, int(n), int(minlen))
    for r in args.record:
        name, prefix = r.split(":", 1)
        routes[name]["record"] = prefix
    for h in args.hold:
        name, gate = h.split(":", 1)
        routes[name]["hold"] = gate

    for route in routes.values():
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((route["lhost"], route["lport"]))
        s.listen(64)
        route["sock"] = s
    threads = [threading.Thread(target=listen, args=(r, args), daemon=True)
               for r in routes.values()]
    for t in threads:
        t.start()
    open(args.ready, "w", encoding="utf-8").close()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
