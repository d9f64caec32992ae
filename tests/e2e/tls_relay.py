#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""tls_relay: a TCP relay that t_tls puts on the network path of a copy.

    tls_relay.py --log FILE --ready FILE --route NAME:LHOST:LPORT:THOST:TPORT...
                 [--split NAME:DATANAME] [--flip NAME:DIR:N:MINLEN]
                 [--record NAME:PREFIX] [--hold NAME:GATE]

Each --route listens on LHOST:LPORT and forwards every connection it accepts
to THOST:TPORT, both ways, byte for byte.

  --split NAME:DATANAME  tells the two kinds of connection to a daemon in
        TLS apart on route NAME (protocol 5: the data connections go to the
        daemon's own port too). The relay reads the first 4 bytes the
        connecting side sends (a control connection starts with its TLS
        ClientHello, so they always come): b"PCRT" makes it a data
        connection, whose whole 24-byte route preamble the relay reads
        next. A data connection is named, counted, logged and configured
        (--flip, --record, --hold) as DATANAME, with a counter of its own;
        any other connection stays NAME's. Bytes read to decide go on
        unchanged.

On top of that, for one name (a route's, or a DATANAME):

  --flip NAME:DIR:N:MINLEN  reads the bytes going DIR (c2s: from the
        connecting side, s2c: back to it) as TLS records (5-byte header:
        type, version, length), and flips one byte (XOR 0x5a) in the middle
        of the payload of the N-th application-data record (type 23) of at
        least MINLEN payload bytes: once in the relay's life, on the first
        connection of NAME that gets that far. Everything else passes as is.
        On a data connection the records start after its route preamble,
        which passes untouched.
  --record NAME:PREFIX  writes what the k-th connection of NAME sent
        (c2s) to PREFIX.k, k = 1, 2, ... as it passes; what the relay read
        to tell a split connection's kind (a data connection's preamble)
        at once, before any --hold.
  --hold NAME:GATE  connects a new connection of NAME to its target only
        once the file GATE exists; until then the connecting side's bytes
        (after those read for --split) wait unread in its socket.

--ready FILE is created once every route listens. --log FILE gets one line
per event: "NAME#k accepted", "NAME#k connected", "NAME#k flipped ...",
"NAME#k closed c2s=B s2c=B" (NAME a route's or a DATANAME; a split
connection is "accepted" once its kind is known). The relay runs until it
is killed.
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
COUNT_LOCK = threading.Lock()

ROUTE_MAGIC = b"PCRT"   # how a data connection's route preamble starts
ROUTE_LEN = 24          # magic, version u16, zero u16, token[16]


def log(path, line):
    """Appends one line to the log file."""
    with LOG_LOCK, open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


class Flipper:
    """Follows the TLS records of one direction of one connection, after
    its first skip bytes, and flips one byte of the chosen record, if no
    other connection did."""

    def __init__(self, n, minlen, note, skip=0):
        self.n, self.minlen, self.note = n, minlen, note
        self.skip = skip    # bytes still to pass before the first record
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
        i = min(self.skip, len(data))
        self.skip -= i
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


def pump(src, dst, flipper, record, counts, key, head=b""):
    """Copies head (bytes already read from src, and recorded), then src,
    to dst until EOF or an error, then ends dst's direction. An error (a
    reset) ends this direction only: what the other side sent before it
    reset (a TLS alert saying why) still goes the other way."""
    try:
        if head:
            data = bytearray(head)
            if flipper is not None:
                flipper.feed(data)
            dst.sendall(data)
            counts[key] += len(data)
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


def read_upto(conn, n, have=b""):
    """Reads from conn until have holds n bytes, or EOF, or an error."""
    while len(have) < n:
        try:
            data = conn.recv(n - len(have))
        except OSError:
            break
        if not data:
            break
        have += data
    return have


def serve_one(route, conn, args):
    """Relays one accepted connection of route: as one of the route's
    own, or, with --split, as a data connection (whose conf it takes)."""
    conf, head, skip = route, b"", 0
    if "split" in route:
        head = read_upto(conn, len(ROUTE_MAGIC))
        if head == ROUTE_MAGIC:
            head = read_upto(conn, ROUTE_LEN, head)
            conf, skip = route["split"], ROUTE_LEN
    with COUNT_LOCK:
        conf["count"] += 1
        k = conf["count"]
    name = f"{conf['name']}#{k}"
    note = lambda line: log(args.log, f"{name} {line}")  # noqa: E731
    note("accepted")
    record = open(f"{conf['record']}.{k}", "wb") if "record" in conf else None
    if record is not None and head:
        record.write(head)
        record.flush()
    gate = conf.get("hold")
    while gate is not None and not os.path.exists(gate):
        time.sleep(0.05)
    try:
        up = socket.create_connection((route["thost"], route["tport"]), timeout=30)
        up.settimeout(None)
    except OSError as e:
        note(f"cannot connect to {route['thost']}:{route['tport']}: {e}")
        if record is not None:
            record.close()
        conn.close()
        return
    note("connected")
    flips = {"c2s": None, "s2c": None}
    if "flip" in conf:
        d, n, minlen = conf["flip"]
        flips[d] = Flipper(n, minlen, note, skip if d == "c2s" else 0)
    counts = {"c2s": 0, "s2c": 0}
    t = threading.Thread(target=pump, args=(up, conn, flips["s2c"], None, counts, "s2c"))
    t.start()
    pump(conn, up, flips["c2s"], record, counts, "c2s", head)
    t.join()
    if record is not None:
        record.close()
    conn.close()
    up.close()
    note(f"closed c2s={counts['c2s']} s2c={counts['s2c']}")


def listen(route, args):
    """Accepts the connections of one route forever."""
    while True:
        conn, _ = route["sock"].accept()
        threading.Thread(target=serve_one, args=(route, conn, args), daemon=True).start()


def main():
    p = argparse.ArgumentParser(description="a TCP relay for t_tls")
    p.add_argument("--log", required=True)
    p.add_argument("--ready", required=True)
    p.add_argument("--route", action="append", required=True)
    p.add_argument("--split", action="append", default=[])
    p.add_argument("--flip", action="append", default=[])
    p.add_argument("--record", action="append", default=[])
    p.add_argument("--hold", action="append", default=[])
    args = p.parse_args()

    routes = {}
    confs = {}  # by name: the routes', and the DATANAMEs of --split
    for r in args.route:
        name, lhost, lport, thost, tport = r.split(":")
        if name in confs:
            sys.exit(f"tls_relay: --route {r}: the name {name} is taken")
        routes[name] = confs[name] = {"name": name, "lhost": lhost, "lport": int(lport),
                                      "thost": thost, "tport": int(tport), "count": 0}

    def conf_of(opt, value, name):
        if name not in confs:
            sys.exit(f"tls_relay: {opt} {value}: no route or --split names {name}")
        return confs[name]

    for sp in args.split:
        name, dname = sp.split(":")
        if name not in routes or dname in confs:
            sys.exit(f"tls_relay: --split {sp}: {name} must be a route, {dname} a new name")
        routes[name]["split"] = confs[dname] = {"name": dname, "count": 0}
    for f in args.flip:
        name, d, n, minlen = f.split(":")
        if d not in ("c2s", "s2c"):
            sys.exit(f"tls_relay: --flip {f}: the direction must be c2s or s2c")
        conf_of("--flip", f, name)["flip"] = (d, int(n), int(minlen))
    for r in args.record:
        name, prefix = r.split(":", 1)
        conf_of("--record", r, name)["record"] = prefix
    for h in args.hold:
        name, gate = h.split(":", 1)
        conf_of("--hold", h, name)["hold"] = gate

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
