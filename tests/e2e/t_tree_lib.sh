#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_tree_lib: the tree helpers of lib.sh that t_tree, t_tree_errors and
# t_tree_hostile rely on check what they claim. make_odd_tree makes every
# kind of entry; check_tree passes on a `cp -a` copy of it and fails on a
# copy with any one thing changed: a mode, an mtime by 1 ns only, an owner,
# one byte of contents, a symlink's text, a hard link broken, an extra
# entry, a missing empty directory, a FIFO turned into a file. Each
# mutation keeps the directories' mtimes as they were, so that it is the
# change itself that is caught. No pcopy runs here: this test passes before
# `pcopy -r` exists, and proves that the tree tests are not no-ops. It also
# checks that evil_source, the hostile peer of t_tree_hostile, speaks the
# protocol as the contract lays it out (with a client of its own in Python).
source "$PCOPY_TEST_LIB"
needs_root "make_odd_tree gives entries to nobody:nogroup"

case_odd_tree() {
    local src=$T/src p
    make_odd_tree "$src"
    [[ -f $src/files/empty && ! -s $src/files/empty ]] || fail "files/empty is not an empty file"
    [[ $(stat -c %s "$src/files/one") == 1 ]] || fail "files/one is not 1 byte"
    [[ $(stat -c %s "$src/files/f4095") == 4095 ]] || fail "files/f4095 is not 4095 bytes"
    [[ $(stat -c %s "$src/files/mib1") == 1048577 ]] || fail "files/mib1 is not 1 MiB + 1"
    [[ $(stat -c %s "$src/files/sparse") == $((64 << 20)) ]] || fail "files/sparse is not 64 MiB"
    (($(stat -c %b "$src/files/sparse") * 512 < 1 << 20)) || fail "files/sparse is not sparse"
    [[ $(mode_of "$src/files/secret") == 600 && $(mode_of "$src/files/script") == 755 ]] ||
        fail "the modes of files/secret and files/script are not 600 and 755"
    [[ $(mode_of "$src/ro") == 555 && $(mode_of "$src/private") == 700 ]] ||
        fail "the modes of ro/ and private/ are not 555 and 700"
    p=$(find "$src/deep" -name leaf)
    p=${p#"$src"/deep}
    [[ ${p//[^\/]/} == "$(printf '/%.0s' {1..61})" ]] || fail "deep/ is not 60 levels deep: $p"
    for p in "with space" $'new\nline' -dash $'\xff\xfe' "$ODD_TREE_255"; do
        [[ -f $src/names/$p ]] || fail "names/$(printf '%q' "$p") is missing"
    done
    ((${#ODD_TREE_255} == 255)) || fail "ODD_TREE_255 is ${#ODD_TREE_255} bytes"
    [[ -d $src/empty/inner ]] || fail "empty/inner is not a directory"
    dir_is_empty "$src/empty/inner" || fail "empty/inner is not empty"
    [[ $(readlink "$src/links/rel") == ../files/one && $(readlink "$src/links/abs") == /etc/hostname &&
        $(readlink "$src/links/dangling") == no-such-target && -d $src/links/todir ]] ||
        fail "links/ does not hold the four symlinks"
    [[ $(stat -c %h "$src/hard/two.a") == 2 && $(stat -c %h "$src/hard/three.a") == 3 ]] ||
        fail "hard/ does not hold a file with 2 names and one with 3"
    [[ -p $src/special/fifo ]] || fail "special/fifo is not a FIFO"
    [[ $(stat -c %U:%G "$src/owned/file") == nobody:nogroup &&
        $(stat -c %U "$src/owned/dir") == nobody && $(stat -c %U "$src/owned/link") == nobody ]] ||
        fail "owned/ entries are not owned by nobody:nogroup"
    [[ $(stat -c %y "$src/files/one") =~ \.[0-9]{9}\  && $(stat -c %y "$src/files/one") != *.000000000\ * ]] ||
        fail "files/one has no nanoseconds in its mtime: $(stat -c %y "$src/files/one")"
    # Each inode has an mtime of its own (hard links share theirs).
    [[ -z $(find "$src" -printf '%i %T@\n' | sort -u | cut -d' ' -f2 | sort | uniq -d) ]] ||
        fail "two entries share an mtime"
}

case_cp_a_passes() {
    make_odd_tree "$T/src"
    cp -a "$T/src" "$T/copy"
    check_tree "$T/src" "$T/copy"
    check_tree --numeric "$T/src" "$T/copy"
    check_tree --no-owner "$T/src" "$T/copy"
}

# mutated CMD: check_tree fails on a `cp -a` copy after CMD (a shell
# command, run in the copy; $S is the source).
mutated() {
    make_odd_tree "$T/src"
    cp -a "$T/src" "$T/copy"
    # shellcheck disable=SC2034 # S is for the command
    (cd "$T/copy" && S=$T/src && eval "$1") || fail "the mutation failed: $1"
    if (check_tree "$T/src" "$T/copy") 2>"$T/check.err"; then
        fail "check_tree passed on a copy changed by: $1"
    fi
    sed 's/^/  (expected) /' "$T/check.err" >&2
}

# case_evil_source: tests/e2e/evil_source (t_tree_hostile's hostile peer)
# speaks protocol version 14 as the contract lays it out, checked by an
# independent client written here in Python: the handshake (HELLO, KEY,
# REQUEST; HELLO, READY), the data channels' MACs both ways (mac_l checked
# with Python's own HMAC), every ENTRIES batch decoded field by field to
# exactly its end, END blocks on every stream and END. So a failure of
# t_tree_hostile's benign case points at pcopy, not at the hostile peer.
case_evil_source() {
    local s out
    [[ -n ${PCOPY_EVIL_SOURCE-} && -x $PCOPY_EVIL_SOURCE ]] ||
        fail "PCOPY_EVIL_SOURCE ('${PCOPY_EVIL_SOURCE-}') is not an executable (ctest sets it)"
    command -v python3 >/dev/null || fail "python3 is needed for this case"
    for s in benign symlink dotdot absolute empty dot trailing; do
        out=$(timeout 60 python3 - "$PCOPY_EVIL_SOURCE" "$s" "$T/outside" <<'EOF'
import hashlib, hmac, os, socket, struct, subprocess, sys
evil, scenario, outside = sys.argv[1:4]
p = subprocess.Popen([evil, scenario, outside, "--server", "-q"],
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
def send(t, pl):
    p.stdin.write(struct.pack(">BBHI", t, 0, 0, len(pl)) + pl)
    p.stdin.flush()
def recv():
    h = p.stdout.read(8)
    if len(h) < 8:
        return None, b""
    t, f, r, n = struct.unpack(">BBHI", h)
    assert f == 0 and r == 0 and n <= 65536, "bad frame header"
    return t, p.stdout.read(n)
nc, K, streams = os.urandom(32), os.urandom(32), 3
send(1, struct.pack(">IHHI", 0x50435059, 14, 14, 0) + nc)
send(3, K)
paths = [b"dir/a", b"b"]
req = struct.pack(">BHHIIIIHHB", 2, 0x20 | 0x40 | 0x200, streams, 1 << 20, 0, 0, 2, 0, 0, 0)
req += bytes(32) + struct.pack(">H", 0) + bytes(16)  # data_key, connect_port, attach_id
req += struct.pack(">QI", 0, 0)  # bwlimit, sync (version 8): none
req += struct.pack(">HHHHH", 0, 0, 0, 0, len(paths))  # host, ssh, pcopy, codec; npaths
req += b"".join(struct.pack(">H", len(x)) + x for x in paths)
req += struct.pack(">H", 0)  # nfilters (version 9): none
send(4, req)
t, hello = recv()
assert t == 1 and len(hello) == 44, f"HELLO expected, got {t}"
assert struct.unpack(">IHHI", hello[:12]) == (0x50435059, 14, 14, 0), "HELLO fields"
k = hmac.new(K, b"pcopy session" + nc + hello[12:44], hashlib.sha256).digest()
t, ready = recv()
assert t == 5, f"READY expected, got {t}"
port, hl = struct.unpack(">HH", ready[:4])
assert ready[4:] == b"127.0.0.1" and hl == 9 and port != 0, "READY fields"
conns = []
for i in range(streams):
    c = socket.create_connection(("127.0.0.1", port))
    n, st = os.urandom(32), struct.pack(">H", i)
    c.sendall(struct.pack(">IHH", 0x50434454, 4, i) + n +
              hmac.new(k, b"pcopy data C" + n + st, hashlib.sha256).digest())
    mac_l = c.recv(32, socket.MSG_WAITALL)
    assert mac_l == hmac.new(k, b"pcopy data L" + n + st, hashlib.sha256).digest(), "mac_l"
    conns.append(c)
next_id, seen = 0, []
while True:
    t, pl = recv()
    assert t is not None, "EOF before END"
    if t == 9:
        assert len(pl) == 328 and pl[80:] == bytes(248), "END payload (no stage times, nothing unchanged, deleted or resumed)"
        break
    assert t == 6, f"ENTRIES expected, got {t}"
    first, count = struct.unpack(">IH", pl[:6])
    assert first == next_id and 1 <= count <= 4096, "ENTRIES ids"
    off = 6
    for i in range(count):
        f = struct.unpack(">BBIIIqIqIQQI", pl[off:off + 58])
        off += 58
        strs = []
        for j in range(4):
            (n,) = struct.unpack(">H", pl[off:off + 2])
            strs.append(pl[off + 2:off + 2 + n].decode("latin-1"))
            off += 2 + n
        typ, flags, mode, size, rdev, link_id = f[0], f[1], f[2], f[9], f[10], f[11]
        assert typ in (1, 2, 3, 4, 9) and mode <= 0o7777 and size == 0 and rdev == 0
        assert f[6] < 10**9 and f[8] < 10**9, "ns"
        assert (link_id < first + i) if typ == 4 else link_id == 0, "link_id"
        assert (strs[1] != "") == (typ == 3), "target only on a symlink"
        seen.append(f"{typ}:{strs[0]}")
    assert off == len(pl), "ENTRIES has bytes left over"
    next_id += count
for c in conns:
    assert c.recv(40, socket.MSG_WAITALL) == bytes([2]) + bytes(39), "END block"
    assert c.recv(1) == b"", "bytes after the END block"
send(10, bytes(312))
assert p.wait() == 0, "evil_source failed"
print(" ".join(seen))
EOF
        ) || fail "evil_source $s does not speak version 14 as the contract says"
        log "evil_source $s: $out"
        case $s in
        benign) [[ $out == "2:a 1:a/f 3:a/l 2:a/d 9:a/d 9:a" ]] ;;
        symlink) [[ $out == "3:a 1:a/passwd 2:a/sub 9:a/sub 3:a/l 4:a/h 4:b" ]] ;;
        dotdot) [[ $out == "2:a 1:a/../../escape 9:a" ]] ;;
        absolute) [[ $out == "2:a 1:$T/outside/abs 9:a" ]] ;;
        empty) [[ $out == "2:a 1:a//x 9:a" ]] ;;
        dot) [[ $out == "2:a 1:a/./x 9:a" ]] ;;
        trailing) [[ $out == "2:a 1:a/x/ 9:a" ]] ;;
        esac || fail "evil_source $s sent other entries than t_tree_hostile expects: $out"
    done
}

# flip_byte FILE OFFSET: inverts the byte at OFFSET of FILE in place, a
# change whatever the byte was (writing a fixed byte into random data left
# the copy unchanged once in 256 runs).
flip_byte() {
    local b
    b=$(od -An -tu1 -j "$2" -N1 "$1" | tr -d ' ')
    # shellcheck disable=SC2059 # the format is the octal escape itself
    printf "\\$(printf %03o $((b ^ 255)))" | dd of="$1" bs=1 seek="$2" conv=notrunc status=none
}

# NAME and a shell command run in the copy; $S is the source.
# shellcheck disable=SC2016 # the commands expand $S when they run
MUTATIONS=(
    mode 'chmod 0644 files/secret'
    dirmode 'chmod 0755 ro'
    mtime_ns 't=$(stat -c %Y "$S/files/one"); touch -h -d "@$t.000000001" files/one'
    dir_mtime_ns 't=$(stat -c %Y "$S/empty"); touch -h -d "@$t.000000001" empty'
    link_mtime_ns 't=$(stat -c %Y "$S/links/rel"); touch -h -d "@$t.000000001" links/rel'
    owner 'chown root owned/file'
    group 'chgrp -h root owned/link'
    content 'flip_byte files/mib1 5; touch -r "$S/files/mib1" files/mib1'
    sparse_end 'flip_byte files/sparse $((64 * 1048576 - 1)); touch -r "$S/files/sparse" files/sparse'
    link_text 'rm links/rel; ln -s ../files/empty links/rel; touch -h -r "$S/links/rel" links/rel; touch -r "$S/links" links'
    hard_broken 'cp -p hard/sub/two.b x; mv x hard/sub/two.b; touch -r "$S/hard/sub" hard/sub; touch -r "$S" .'
    extra ': >extra; touch -r "$S" .'
    missing_dir 'rmdir empty/inner; touch -r "$S/empty" empty'
    fifo_to_file 'rm special/fifo; : >special/fifo; touch -r "$S/special/fifo" special/fifo; touch -r "$S/special" special'
)

for ((i = 0; i < ${#MUTATIONS[@]}; i += 2)); do
    run_case "${MUTATIONS[i]}" mutated "${MUTATIONS[i + 1]}"
done
run_case odd_tree case_odd_tree
run_case cp_a_passes case_cp_a_passes
run_case evil_source case_evil_source
finish
