#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""stranger: hostile but bounded clients of a pcopy daemon (issue 17).

    stranger.py [--host H] [--from ADDR] [--max-time S] [--rate R] PORT MODE ARGS

Connects to H:PORT (default 127.0.0.1) from ADDR (default 127.0.0.2, bound
before connect, so the daemon's log tells these connections from the real
clients' on 127.0.0.1; all of 127.0.0.0/8 is loopback on Linux), and:

  idle N        holds N connections that send nothing; each one the daemon
                closes is opened again
  trickle N SECS [--preamble]
                N connections that each send one byte every SECS seconds:
                a TLS record header and ClientHello (first byte 0x16), so
                that they look like control connections in their TLS
                handshake; with --preamble a route preamble ("PCRT", the
                version, a token) instead, so that they look like data
                connections. Each one the daemon closes is opened again.
  garbage N     N connections, one after the other, that each send a line of
                hostile text (control characters, an ANSI escape, a forged
                log line), then close; they start with bytes that take each
                of the daemon's paths (TLS, route preamble, anything else),
                and one in six sends it as a well-formed ERROR frame;
                with --c1 the text also holds C1 control characters

Re-opening is paced to at most R connects per second (default 200), so
that a daemon that closes at once is not met by a busy loop; the first N
go at once. Everything stops after --max-time seconds (default 60), or on
SIGTERM/SIGINT.

Output on stdout, one line per event, flushed:
  up K                      every slot was tried once, K are connected
                            (garbage: K connections have said their text)
  closed SLOT SECS SENT     the daemon closed a connection after SECS
                            seconds (from connect) and SENT bytes from us
  refused SLOT ERRNO        a connect failed (then retried, paced)
  open SLOT SECS SENT       at the end: a connection still open, its age
  done opened=A closed=B refused=C
                            at the end: totals
"""

import argparse
import errno
import os
import select
import signal
import socket
import struct
import sys
import time

# Control connections: a TLS 1.0 record header for a 512-byte handshake,
# then the start of a ClientHello. The daemon never gets all of it.
TLS_BYTES = bytes([0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xFC, 0x03, 0x03]) + os.urandom(64)
# Data connections: "PCRT", version 14, flags 0, a 16-byte token (docs/PROTOCOL.md 6.2).
ROUTE_BYTES = b"PCRT\x00\x0d\x00\x00" + os.urandom(16)
# What a garbage connection says: a forged log line after a CR LF, a
# terminal escape (clear screen), a window title, DEL, a bell, a backspace
# run and invalid UTF-8 (and a NUL, outside an ERROR frame, which may not
# hold one). With --c1, also C1 control characters: a raw CSI byte (0x9b,
# what an 8-bit terminal takes for ESC [) and CSI as UTF-8 (U+009B).
HOSTILE = (b"\r\npcopy: session from 10.9.9.9:22 done\x1b[2J\x1b]0;owned\x07"
           b"\x7f\x08\x08\x08\xff\xfe\r\n")
C1 = b"\x9b2J\xc2\x9b2J"


def garbage_texts(text):
    """What the garbage connections send, in turn: text after first bytes
    that take each of the daemon's paths (TLS, route preamble, anything
    else), and as a well-formed control frame ERROR (type 11,
    docs/PROTOCOL.md 3 and 4.10: code -1002, the text as its message)
    after a HELLO, which a daemon in clear (--allow-unencrypted) reads and
    reports as the peer's message, so that the text reaches its log."""
    # A HELLO first (docs/PROTOCOL.md 4.1), so that a daemon in clear takes
    # it for a client's control channel; a daemon that requires TLS refuses
    # it at the HELLO and reads nothing after.
    hello = struct.pack(">BBHIIHHI", 1, 0, 0, 44, 0x50435059, 14, 14, 0) + os.urandom(32)
    frame = hello + struct.pack(">BBHIiH", 11, 0, 0, 6 + len(text), -1002, len(text)) + text
    return (b"\x00" + text, b"\x16" + text, b"PCRT" + text, b"PCRT\x00\x0d" + text,
            b"GET / HTTP/1.0" + text, frame)

STOP = False


def on_signal(_sig, _frame):
    global STOP
    STOP = True


def say(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


class Conn:
    """One connection of a slot: its socket, when it connected, bytes sent."""

    def __init__(self, sock):
        self.sock = sock
        self.t0 = time.monotonic()
        self.sent = 0
        self.next_send = self.t0


def connect(args):
    """A blocking connect from --from to the daemon; the socket, or an errno.
    At most 2 s (a full listen queue drops SYNs, which come again after 1 s,
    then 3 s), so that SIGTERM, which waits for a connect, ends us soon."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((args.source, 0))
        s.settimeout(2)
        s.connect((args.host, args.port))
        s.setblocking(False)
        return s
    except OSError as e:
        s.close()
        return e.errno or errno.ETIMEDOUT


def hold(args, n, payload, every):
    """idle (payload None) and trickle: N slots, each re-opened when closed."""
    deadline = time.monotonic() + args.max_time
    conns = [None] * n
    retry_at = [0.0] * n
    opened = closed = refused = 0
    gap = 1.0 / args.rate
    next_reopen = 0.0
    first_wave = True
    while not STOP and time.monotonic() < deadline:
        now = time.monotonic()
        for i in range(n):
            if STOP:
                break
            if conns[i] is not None or retry_at[i] > now:
                continue
            if not first_wave:
                if now < next_reopen:
                    break
                next_reopen = max(next_reopen, now) + gap
            r = connect(args)
            if isinstance(r, int):
                refused += 1
                say(f"refused {i} {errno.errorcode.get(r, r)}")
                retry_at[i] = now + 0.2
                continue
            conns[i] = Conn(r)
            opened += 1
        if first_wave:
            # Every slot was tried once; those refused come again, paced.
            first_wave = False
            say(f"up {sum(c is not None for c in conns)}")
        now = time.monotonic()
        wake = deadline
        for c in conns:
            if c is not None and payload is not None and c.sent < len(payload):
                wake = min(wake, c.next_send)
        waiting = [retry_at[i] for i, c in enumerate(conns) if c is None]
        if waiting:
            wake = min(wake, max(next_reopen, min(waiting)))
        # poll, not select: select cannot take descriptors above 1023.
        poller = select.poll()
        for c in conns:
            if c is not None:
                poller.register(c.sock, select.POLLIN)
        try:
            readable = {fd for fd, _ in poller.poll(1000 * max(0.0, min(wake - now, 0.5)))}
        except InterruptedError:
            continue
        now = time.monotonic()
        for i, c in enumerate(conns):
            if c is None:
                continue
            gone = False
            if c.sock.fileno() in readable:
                try:
                    gone = c.sock.recv(4096) == b""
                except BlockingIOError:
                    pass
                except OSError:
                    gone = True
            if not gone and payload is not None and c.sent < len(payload) and now >= c.next_send:
                try:
                    c.sent += c.sock.send(payload[c.sent:c.sent + 1])
                    c.next_send = now + every
                except BlockingIOError:
                    pass
                except OSError:
                    gone = True
            if gone:
                say(f"closed {i} {now - c.t0:.2f} {c.sent}")
                c.sock.close()
                conns[i] = None
                closed += 1
    now = time.monotonic()
    for i, c in enumerate(conns):
        if c is not None:
            say(f"open {i} {now - c.t0:.2f} {c.sent}")
            c.sock.close()
    say(f"done opened={opened} closed={closed} refused={refused}")


def garbage(args, n):
    """N connections, one at a time, each saying a hostile line and closing."""
    deadline = time.monotonic() + args.max_time
    sent = refused = 0
    texts = garbage_texts(HOSTILE + C1 if args.c1 else HOSTILE)
    for i in range(n):
        if STOP or time.monotonic() >= deadline:
            break
        s = connect(args)
        if isinstance(s, int):
            refused += 1
            say(f"refused {i} {errno.errorcode.get(s, s)}")
            continue
        s.setblocking(True)
        s.settimeout(3)
        try:
            s.sendall(texts[i % len(texts)])
            s.shutdown(socket.SHUT_WR)
            # Until the daemon closes (or 3 s), so that it reads it all.
            while s.recv(4096):
                pass
        except OSError:
            pass
        s.close()
        sent += 1
    say(f"up {sent}")
    say(f"done opened={sent} closed={sent} refused={refused}")


def main():
    ap = argparse.ArgumentParser(
        prog="stranger.py",
        usage="stranger.py [--host H] [--from ADDR] [--max-time S] [--rate R] PORT "
              "{idle N | trickle N SECS [--preamble] | garbage N [--c1]}",
        description=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--from", dest="source", default="127.0.0.2")
    ap.add_argument("--max-time", type=float, default=60.0)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--preamble", action="store_true")
    ap.add_argument("--c1", action="store_true")
    ap.add_argument("port", type=int)
    ap.add_argument("mode", choices=("idle", "trickle", "garbage"))
    ap.add_argument("n", type=int)
    ap.add_argument("secs", type=float, nargs="?")
    args = ap.parse_args()
    # Bounded: a test must not be able to start a flood by a typo.
    if not 1 <= args.n <= 1000:
        ap.error("N must be from 1 to 1000")
    if not 0 < args.max_time <= 600:
        ap.error("--max-time must be from 0 to 600 seconds")
    if not 0 < args.rate <= 10000:
        ap.error("--rate must be from 0 to 10000 per second")
    if (args.mode == "trickle") != (args.secs is not None):
        ap.error("trickle takes N and SECS; idle and garbage take N only")
    if args.preamble and args.mode != "trickle":
        ap.error("--preamble is for trickle")
    if args.c1 and args.mode != "garbage":
        ap.error("--c1 is for garbage")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if args.mode == "idle":
        hold(args, args.n, None, 0)
    elif args.mode == "trickle":
        if args.secs <= 0:
            ap.error("SECS must be positive")
        hold(args, args.n, ROUTE_BYTES if args.preamble else TLS_BYTES, args.secs)
    else:
        garbage(args, args.n)


if __name__ == "__main__":
    main()
