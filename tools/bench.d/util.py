#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Small helpers for tools/bench, one per subcommand:

    util.py sha256 FILE         the file's SHA-256, in hex
    util.py tree DIR            one SHA-256 over the tree (every regular file's
                                relative path, size and SHA-256, in sorted
                                order), then the file count and byte count
    util.py warm PATH...        read every non-empty regular file under PATH
                                (page cache; empty files are only listed)
    util.py iperf3 JSON         "BYTES SECONDS BITS_PER_S RETRANSMITS" of
                                end.sum_received (retransmits from sum_sent)
    util.py sample SRC DST N    hard-link N files of the tree SRC, in a run
                                from the middle of its sorted list (so about
                                as many directories per file as the whole
                                tree), into DST with their relative paths;
                                prints the count and bytes linked
    util.py empty DIR N PER     make the tree DIR of N empty files, PER to a
                                directory (DIR/d0000/f0000000, ...); prints N
    util.py names DIR           one SHA-256 over every entry under DIR (its
                                relative path, its type, and a regular
                                file's size, in sorted order), then the
                                count of entries: the check of a tree of
                                empty files, cheaper than `tree`
    util.py enc LOG             how the pcopy run whose stderr (-v or -vv,
                                with or without a timestamp before each
                                line) is LOG sent its data, from its summary
                                line: the TLS 1.3 cipher suite (e.g.
                                TLS_AES_128_GCM_SHA256), "ssh" (the data
                                went through ssh, "encrypted (ssh)"),
                                "TLS" (encrypted, suite not named), "clear"
                                ("not encrypted
                                (...)", or a pcopy before protocol 4, which
                                has no TLS and says neither), or "-" when
                                LOG has no summary line

hashlib uses OpenSSL, which uses the CPU's SHA extensions: about three times
as fast as coreutils' sha256sum here.
"""

import hashlib
import json
import os
import re
import sys

BUF = 1 << 20


def die(msg):
    print(f"bench util.py: {msg}", file=sys.stderr)
    sys.exit(1)


def file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(BUF)
        view = memoryview(buf)
        while True:
            n = f.readinto(buf)
            if not n:
                break
            h.update(view[:n])
    return h.hexdigest()


def tree_files(top):
    """Sorted relative paths of the regular files under top."""
    out = []
    for d, dirs, files in os.walk(top):
        dirs.sort()
        for name in files:
            p = os.path.join(d, name)
            if os.path.isfile(p) and not os.path.islink(p):
                out.append(os.path.relpath(p, top))
    out.sort()
    return out


def cmd_tree(top):
    if not os.path.isdir(top):
        die(f"'{top}' is not a directory")
    h = hashlib.sha256()
    count = total = 0
    for rel in tree_files(top):
        p = os.path.join(top, rel)
        size = os.path.getsize(p)
        h.update(f"{rel}\0{size}\0{file_sha256(p)}\n".encode())
        count += 1
        total += size
    print(h.hexdigest(), count, total)


def cmd_warm(paths):
    buf = bytearray(BUF)
    for top in paths:
        files = [top] if os.path.isfile(top) else [os.path.join(top, r) for r in tree_files(top)]
        for p in files:
            if os.path.getsize(p) == 0:
                continue
            with open(p, "rb", buffering=0) as f:
                while f.readinto(buf):
                    pass


def cmd_iperf3(path):
    try:
        with open(path) as f:
            j = json.load(f)
    except (OSError, ValueError) as e:
        die(f"cannot read iperf3's JSON report {path}: {e}")
    if "error" in j:
        die(f"iperf3 reported: {j['error']}")
    try:
        r = j["end"]["sum_received"]
        retr = j["end"].get("sum_sent", {}).get("retransmits", "-")
        print(r["bytes"], r["seconds"], r["bits_per_second"], retr)
    except KeyError:
        die(f"no end.sum_received in {path}")


def cmd_sample(src, dst, n):
    files = tree_files(src)
    if n <= 0 or not files:
        die("nothing to sample")
    start = max(0, (len(files) - n) // 2)
    picked = files[start:start + n]
    total = 0
    for rel in picked:
        os.makedirs(os.path.join(dst, os.path.dirname(rel)), exist_ok=True)
        os.link(os.path.join(src, rel), os.path.join(dst, rel))
        total += os.path.getsize(os.path.join(src, rel))
    print(len(picked), total)


def cmd_empty(top, n, per):
    """N empty files, PER to a directory; DIR must not exist yet."""
    if n <= 0 or per <= 0:
        die("empty: N and PER must be positive")
    os.mkdir(top)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
    d = None
    for i in range(n):
        if i % per == 0:
            d = os.path.join(top, f"d{i // per:04d}")
            os.mkdir(d)
        os.close(os.open(os.path.join(d, f"f{i:07d}"), flags, 0o644))
    print(n)


def cmd_names(top):
    """Digest and count of every entry under top (top itself left out)."""
    if not os.path.isdir(top):
        die(f"'{top}' is not a directory")
    lines = []
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(os.path.join(top, rel)) as it:
            for e in it:
                r = os.path.join(rel, e.name)
                if e.is_dir(follow_symlinks=False):
                    lines.append(f"{r}\0d\n")
                    stack.append(r)
                elif e.is_file(follow_symlinks=False):
                    lines.append(f"{r}\0f\0{e.stat(follow_symlinks=False).st_size}\n")
                else:
                    lines.append(f"{r}\0o\n")
    lines.sort()
    h = hashlib.sha256()
    for line in lines:
        h.update(line.encode())
    print(h.hexdigest(), len(lines))


# pcopy's summary line: "pcopy: BYTES bytes in N file(s), ..., SECURITY".
SUMMARY = re.compile(r"(?:^|\s)pcopy: \d+ bytes in \d+ files?, ")
SUITE = re.compile(r"\bencrypted \(TLS 1\.3, ([A-Z0-9_]+)\)")


def cmd_enc(path):
    """How a pcopy run sent its data, from its last summary line."""
    enc = "-"
    with open(path, "r", encoding="utf-8", errors="replace") as f:
        for line in f:
            if not SUMMARY.search(line):
                continue
            m = SUITE.search(line)
            if "not encrypted" in line:
                enc = "clear"
            elif "encrypted (ssh)" in line:
                enc = "ssh"
            elif m:
                enc = m.group(1)
            elif "encrypted" in line:
                enc = "TLS"
            else:
                enc = "clear"
    print(enc)


def main(argv):
    if len(argv) < 2:
        die("usage: util.py sha256|tree|warm|iperf3|sample|empty|names|enc ARGS")
    cmd, args = argv[1], argv[2:]
    try:
        if cmd == "sha256" and len(args) == 1:
            print(file_sha256(args[0]))
        elif cmd == "tree" and len(args) == 1:
            cmd_tree(args[0])
        elif cmd == "warm" and args:
            cmd_warm(args)
        elif cmd == "iperf3" and len(args) == 1:
            cmd_iperf3(args[0])
        elif cmd == "sample" and len(args) == 3:
            cmd_sample(args[0], args[1], int(args[2]))
        elif cmd == "empty" and len(args) == 3:
            cmd_empty(args[0], int(args[1]), int(args[2]))
        elif cmd == "names" and len(args) == 1:
            cmd_names(args[0])
        elif cmd == "enc" and len(args) == 1:
            cmd_enc(args[0])
        else:
            die(f"bad arguments: {' '.join(argv[1:])}")
    except OSError as e:
        die(f"{cmd}: {e.filename}: {e.strerror}")


if __name__ == "__main__":
    main(sys.argv)
