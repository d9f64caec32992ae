#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_delta: --checksum sends only the blocks that differ, in every mode: a
# local copy, a push and a pull through ssh, a push and a pull with a
# daemon, a third-party copy and one relayed through the client (-3). The
# destination holds an earlier copy of a tree; then, in the source, two
# blocks of a big file change with its size and mtime kept (what -u cannot
# see), a file grows, one is rewritten whole, one is new. One --checksum
# run makes the copy exact, and sends little more than what changed; a
# second sends no block of data at all. And a SAME block whose bytes are
# not what they should be (read back with -e, or, with -a, taken from an
# old file that changed after it was hashed) fails that file alone, leaves
# it as it was, and the next run mends it.
# ctest: cost 30
source "$PCOPY_TEST_LIB"
needs_root "it runs an sshd that logs in as root"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"

BS=65536 # -B: the block the delta works in

# make_tree DIR: the source as it was first copied.
make_tree() {
    local d=$1 i
    mkdir -p "$d/sub"
    mkfile "$d/big" 2M
    mkfile "$d/sub/grown" 300k
    mkfile "$d/sub/other" 200k
    for i in 1 2 3; do
        echo "small $i" >"$d/sub/small.$i"
    done
}

# change_tree DIR: what changes in the source after that copy: 2 blocks of
# big (10 and 20 bytes, size and mtime kept), grown by 100k, other
# rewritten whole, new added. Unchanged: 30 blocks of big and the first 4
# of grown, whose 5th block now lies past its old end.
change_tree() {
    local d=$1
    touch -r "$d/big" "$T/big.time"
    head -c 10 /dev/urandom | dd of="$d/big" bs=1 seek=$((3 * BS + 100)) conv=notrunc status=none
    head -c 20 /dev/urandom | dd of="$d/big" bs=1 seek=$((20 * BS)) conv=notrunc status=none
    touch -r "$T/big.time" "$d/big"
    head -c 100k /dev/urandom >>"$d/sub/grown"
    mkfile "$d/sub/other" 200k
    mkfile "$d/new" 100k
}

# big_inodes DIR: the inodes of the tree's four big files, in DIR's copy.
big_inodes() {
    stat -c %i "$1/big" "$1/sub/grown" "$1/sub/other" "$1/new" | tr '\n' ' '
}

# delta_run JSON SRC DST ARGS...: pcopy -r -p --checksum, which must succeed.
delta_run() {
    local json=$1
    shift
    expect_exit 0 "$PCOPY" -r -p --checksum -B "$BS" -s 3 --json="$json" "$@"
}

# delta_mode LSRC SRC_SPEC DST_SPEC LDST ARGS...: the story through one
# mode (t_sync's arguments): LDST already holds an earlier copy.
delta_mode() {
    local lsrc=$1 src=$2 dst=$3 ldst=$4/${1##*/}
    shift 4
    make_tree "$lsrc"
    cp -a "$lsrc" "$ldst"
    change_tree "$lsrc"
    delta_run "$T/j1" "$src" "$dst" "$@"
    check_tree --no-owner "$lsrc" "$ldst"
    # Unchanged: 30 blocks of big, 4 of grown. Sent: 2 blocks of big, 2
    # of grown (the last one short), other and new whole, the small files:
    # 572 KiB and headers.
    local same wire
    same=$(jget "$T/j1" 'j["files"]["bytes_unchanged"]')
    wire=$(jget "$T/j1" 'j["source"]["wire_bytes"]')
    [[ $same == $((34 * BS)) ]] || fail "bytes_unchanged is $same, want $((34 * BS))"
    ((wire >= 572 * 1024 && wire < 600 * 1024)) ||
        fail "$wire bytes on the wire, want 572 KiB of changed data and headers"
    [[ $(jget "$T/j1" 'j["files"]["copied"]') == 7 ]] || fail "not 7 files written"
    # Again: every block is there already; only the small files, which
    # travel whole in a pack, and headers move. The big files stay the
    # files they are (their inodes), counted unchanged.
    local inodes
    inodes=$(big_inodes "$ldst")
    delta_run "$T/j2" "$src" "$dst" "$@"
    check_tree --no-owner "$lsrc" "$ldst"
    [[ $(big_inodes "$ldst") == "$inodes" ]] ||
        fail "second run: a file every block of which matched was replaced"
    [[ $(jget "$T/j2" 'j["files"]["unchanged"]') == 4 ]] ||
        fail "second run: not the 4 big files unchanged"
    same=$(jget "$T/j2" 'j["files"]["bytes_unchanged"]')
    wire=$(jget "$T/j2" 'j["source"]["wire_bytes"]')
    [[ $same == $(du -cb "$lsrc/big" "$lsrc/sub/grown" "$lsrc/sub/other" "$lsrc/new" | tail -1 | cut -f1) ]] ||
        fail "second run: bytes_unchanged is $same, not every big file's bytes"
    ((wire < 4096)) || fail "second run: $wire bytes on the wire, want headers only"
}

case_local() {
    mkdir "$T/dst"
    delta_mode "$T/src" "$T/src" "$T/dst/" "$T/dst"
    # The line a person reads counts the bytes that did not travel.
    echo changed >>"$T/src/sub/small.1"
    expect_exit 0 "$PCOPY" -r --checksum -B "$BS" "$T/src" "$T/dst/"
    # (the four big files matched block by block: kept as they were)
    expect_stderr_matches '^pcopy: [0-9]+ bytes in 3 files, [0-9]+ directories, 0 links, 4 unchanged \([0-9]+ bytes not sent\), '
    # -u would keep big (the same size and mtime, other bytes): the
    # checksum is what finds it.
    same_file "$T/src/big" "$T/dst/src/big"
    # -e reads the new file back, the blocks taken from the old one too.
    printf 'again' | dd of="$T/src/big" bs=1 seek=$((7 * BS)) conv=notrunc status=none
    expect_exit 0 "$PCOPY" -r --checksum -e -B "$BS" --json="$T/je" "$T/src" "$T/dst/"
    same_file "$T/src/big" "$T/dst/src/big"
    [[ $(jget "$T/je" 'j["files"]["bytes_unchanged"]') -gt $((30 * BS)) ]] ||
        fail "--checksum -e: the unchanged blocks travelled"
}

# A file every block of which matched the old one is that old file still,
# untouched once its times are the source's; one that changed since it was
# hashed (the fault moves its ctime on), or reads back other than its
# blocks did with -e (the fault inverts a byte of the read), is not kept:
# the copy made as it was hashed takes its place, and the run succeeds.
case_kept() {
    local before one
    mkdir "$T/dst"
    make_tree "$T/src"
    mkfile "$T/src/new" 100k
    expect_exit 0 "$PCOPY" -r -p -B "$BS" "$T/src" "$T/dst/"
    delta_run "$T/j1" "$T/src" "$T/dst/" # the source's atimes, moved by reading, settle
    before=$(big_inodes "$T/dst/src"; stat -c %z "$T/dst/src/big" "$T/dst/src/sub/grown" \
        "$T/dst/src/sub/other" "$T/dst/src/new")
    delta_run "$T/j2" "$T/src" "$T/dst/"
    [[ $(big_inodes "$T/dst/src"; stat -c %z "$T/dst/src/big" "$T/dst/src/sub/grown" \
        "$T/dst/src/sub/other" "$T/dst/src/new") == "$before" ]] ||
        fail "a file every block of which matched was replaced or touched"
    [[ $(jget "$T/j2" 'j["files"]["unchanged"]') == 4 && $(jget "$T/j2" 'j["files"]["copied"]') == 3 ]] ||
        fail "not the 4 big files unchanged and the 3 small ones copied"
    expect_stderr_matches '^pcopy: [0-9]+ bytes in 3 files, [0-9]+ directories, 0 links, 4 unchanged \([0-9]+ bytes not sent\), '
    # In place, the same: nothing written, nothing set, counted unchanged;
    # and so with -e, whose read back must not set the size either.
    for opt in --inplace -e; do
        delta_run "$T/j2" "$T/src" "$T/dst/" --inplace "$opt"
        [[ $(big_inodes "$T/dst/src"; stat -c %z "$T/dst/src/big" "$T/dst/src/sub/grown" \
            "$T/dst/src/sub/other" "$T/dst/src/new") == "$before" ]] ||
            fail "--inplace $opt: a file every block of which matched was touched"
        [[ $(jget "$T/j2" 'j["files"]["unchanged"]') == 4 ]] || fail "--inplace $opt: not 4 files unchanged"
    done
    before=$(big_inodes "$T/dst/src")
    PCOPY_TEST_FAULT=sink_kept:1 delta_run "$T/j3" "$T/src" "$T/dst/" -s 1
    check_tree --no-owner "$T/src" "$T/dst/src"
    one=$(paste -d' ' <(tr ' ' '\n' <<<"$before") <(big_inodes "$T/dst/src" | tr ' ' '\n') |
        awk 'NF == 2 && $1 != $2' | wc -l)
    [[ $one == 1 ]] || fail "sink_kept: $one files replaced, want the one the fault hit"
    [[ $(jget "$T/j3" 'j["files"]["unchanged"]') == 3 ]] || fail "sink_kept: not 3 files unchanged"
    # One file, for the fault to hit its first read back: the kept one's.
    before=$(stat -c %i "$T/dst/src/new")
    PCOPY_TEST_FAULT=sink_verify:1 expect_exit 0 "$PCOPY" -p --checksum -e -B "$BS" \
        "$T/src/new" "$T/dst/src/new"
    same_file "$T/src/new" "$T/dst/src/new"
    [[ $(stat -c %i "$T/dst/src/new") != "$before" ]] ||
        fail "sink_verify: a file that read back wrong was kept"
    # A sink that does not own a matched file (its read moves the atime,
    # O_NOATIME being the owner's) keeps it where nothing it may not set
    # is needed: without -p the atime is not looked at.
    mkdir -p "$T/nb/d"
    cp -a "$T/src" "$T/nb/src"
    cp -a "$T/src" "$T/nb/d/src"
    chown -R nobody:nogroup "$T/nb"
    chown root:root "$T/nb/d/src/big"
    sleep 1.1 # past the atime the copy gave it
    before=$(stat -c %i "$T/nb/d/src/big")
    expect_exit 0 setpriv --reuid=nobody --regid=nogroup --clear-groups \
        "$PCOPY" -r --checksum -B "$BS" "$T/nb/src" "$T/nb/d/"
    same_file "$T/src/big" "$T/nb/d/src/big"
    [[ $(stat -c %i "$T/nb/d/src/big") == "$before" ]] || fail "not its owner: a matched file was replaced"
    # One whose mode it may not set is replaced by the copy, a rename in a
    # directory it may write, as before: no failure.
    chmod 604 "$T/nb/d/src/big" # (readable still, so hashed; not the source's mode)
    expect_exit 0 setpriv --reuid=nobody --regid=nogroup --clear-groups \
        "$PCOPY" -r --checksum -B "$BS" "$T/nb/src" "$T/nb/d/"
    same_file "$T/src/big" "$T/nb/d/src/big"
    [[ $(stat -c %i "$T/nb/d/src/big") != "$before" ]] || fail "not its owner: a file that needed a mode kept"
}

# -e reads the blocks of the copy back from it; the copy is written
# without its zeros and not extended over them, so a block of zeros at
# its end, or at the end of a chunk of 64 hashed before the next one,
# lies past its end for a while: it reads as the zeros it is.
case_copy_zeros() {
    local f
    mkdir -p "$T/src" "$T/dst"
    f=$T/src/z
    head -c $((63 * BS)) /dev/urandom >"$f"
    head -c "$BS" /dev/zero >>"$f"               # block 63: the last of the first chunk
    head -c $((10 * BS)) /dev/urandom >>"$f"
    head -c $((16 * BS + 1000)) /dev/zero >>"$f" # the end
    cp -p "$f" "$T/dst/z"
    expect_exit 0 "$PCOPY" -p --checksum -e -B "$BS" -s 1 "$f" "$T/dst/z"
    expect_stderr_matches ' 1 unchanged '
    printf 'x' | dd of="$f" bs=1 seek=10 conv=notrunc status=none
    expect_exit 0 "$PCOPY" -p --checksum -e -B "$BS" -s 1 "$f" "$T/dst/z"
    same_file "$f" "$T/dst/z"
}

# A file as big as its old version, and as old, owes the blocks that match
# to its copy until one that differs comes: a file that matches whole costs no copy,
# so it is no trouble on a file system without room for one (it was exit
# 11, no space, where rsync -c does nothing); one that differs takes them
# from the old file then, each checked against its hash, or fails by name
# if they are not what was hashed any more (the fault inverts a byte).
# Where no copy can be made (a directory the sink may not write), a file
# that matches whole is left as it is, as rsync -c leaves it; so is a
# sparse one, whose holes match zeros.
case_owed() {
    local f=$T/src/f n=$((128 * BS)) before
    mkdir -p "$T/src"
    head -c "$n" /dev/urandom >"$f"
    mount_tmpfs "$T/full" size=$((n * 3 / 2))
    cp -p "$f" "$T/full/f"
    before=$(stat -c %i "$T/full/f")
    expect_exit 0 "$PCOPY" -p --checksum -B "$BS" -s 3 "$f" "$T/full/f"
    expect_stderr_matches ' 1 unchanged '
    [[ $(stat -c %i "$T/full/f") == "$before" ]] || fail "a file that matched was replaced"
    # Its last block changed: the copy needs room the file system lacks,
    # and the old file stays; --inplace needs none.
    cp -p "$f" "$T/f.before"
    printf 'x' | dd of="$f" bs=1 seek=$((n - 1)) conv=notrunc status=none
    expect_exit 11 "$PCOPY" -p --checksum -B "$BS" "$f" "$T/full/f"
    expect_stderr_contains "No space left on device (its new copy is made beside the old file; --inplace updates that file itself and needs no room for a second copy)"
    same_file "$T/f.before" "$T/full/f"
    expect_exit 0 "$PCOPY" -p --checksum --inplace -B "$BS" "$f" "$T/full/f"
    same_file "$f" "$T/full/f"
    # In a directory the sink may not write, no copy can be made: a file
    # that matches needs none, one that differs fails, by name.
    mkdir -p "$T/nb/src/ro" "$T/nb/dst/src/ro"
    cp -p "$f" "$T/nb/src/ro/f"
    cp -p "$f" "$T/nb/src/ro/g"
    cp -p "$f" "$T/nb/dst/src/ro/f"
    cp -p "$T/f.before" "$T/nb/dst/src/ro/g"
    chown -R nobody:nogroup "$T/nb"
    chown root:root "$T/nb/dst/src/ro" # (nor may it change its mode)
    before=$(stat -c %i "$T/nb/dst/src/ro/f")
    expect_exit 3 setpriv --reuid=nobody --regid=nogroup --clear-groups \
        "$PCOPY" -r --checksum -B "$BS" -s 3 "$T/nb/src" "$T/nb/dst/"
    expect_stderr_matches "'$T/nb/dst/src/ro/g'.*Permission denied"
    expect_stderr_matches ' 1 unchanged '
    [[ $(stat -c %i "$T/nb/dst/src/ro/f") == "$before" ]] || fail "a file that matched was replaced"
    same_file "$T/f.before" "$T/nb/dst/src/ro/g"
    # With room: 127 blocks owed until the last one, out of order over 3
    # streams, then written from the old file; one block travels. (Owed
    # where the file looks unchanged: its mtime too.)
    touch -r "$T/f.before" "$f"
    cp -p "$T/f.before" "$T/g"
    expect_exit 0 "$PCOPY" -p --checksum -B "$BS" -s 3 --json="$T/j" "$f" "$T/g"
    same_file "$f" "$T/g"
    [[ $(jget "$T/j" 'j["files"]["bytes_unchanged"]') == $((127 * BS)) ]] ||
        fail "not 127 blocks unchanged"
    # The old file no longer as hashed when they are taken: that file
    # fails, named, and stays as it was; the next run mends it.
    cp -p "$T/f.before" "$T/g"
    PCOPY_TEST_FAULT=sink_same:1 expect_exit 3 "$PCOPY" -p --checksum -B "$BS" "$f" "$T/g"
    expect_stderr_matches "'$T/g' changed while it was being updated \(its bytes at offset [0-9]+ are no longer the source's\): copy it again"
    same_file "$T/f.before" "$T/g"
    expect_exit 0 "$PCOPY" -p --checksum -B "$BS" "$f" "$T/g"
    same_file "$f" "$T/g"
    # A sparse file: its holes, where the old file has zeros, are SAME
    # blocks too, so one that matches is kept; one that changed is copied
    # with its holes.
    mkfile "$T/sp" 1M
    truncate -s 16M "$T/sp"
    cp --sparse=always "$T/sp" "$T/sp.old"
    before=$(stat -c %i "$T/sp.old")
    expect_exit 0 "$PCOPY" --checksum -B "$BS" -s 3 "$T/sp" "$T/sp.old"
    expect_stderr_matches ' 1 unchanged '
    [[ $(stat -c %i "$T/sp.old") == "$before" ]] || fail "a sparse file that matched was replaced"
    printf 'x' | dd of="$T/sp" bs=1 seek=10 conv=notrunc status=none
    expect_exit 0 "$PCOPY" --checksum -B "$BS" -s 3 "$T/sp" "$T/sp.old"
    same_file "$T/sp" "$T/sp.old"
    (($(du -k "$T/sp.old" | cut -f1) < 2 * 1024)) || fail "the sparse file's copy lost its holes"
    # Changed at its end: the blocks owed until then, most of them holes,
    # are checked as zeros and left holes.
    printf 'y' | dd of="$T/sp" bs=1 seek=$((16 * 1024 * 1024 - 5)) conv=notrunc status=none
    touch -r "$T/sp.old" "$T/sp"
    expect_exit 0 "$PCOPY" --checksum -B "$BS" -s 3 "$T/sp" "$T/sp.old"
    same_file "$T/sp" "$T/sp.old"
    (($(du -k "$T/sp.old" | cut -f1) < 2 * 1024)) || fail "the sparse file's copy lost its holes"
    # In place, the source's holes make zeros written out holes again.
    cp --sparse=never "$T/sp" "$T/sp.full"
    printf 'z' | dd of="$T/sp.full" bs=1 seek=20 conv=notrunc status=none
    expect_exit 0 "$PCOPY" --checksum --inplace -B "$BS" "$T/sp" "$T/sp.full"
    same_file "$T/sp" "$T/sp.full"
    (($(du -k "$T/sp.full" | cut -f1) < 2 * 1024)) || fail "--inplace: the source's holes are not holes"
    [[ -z $(find "$T" -name '.pcopy-*') ]] || fail "a copy was left behind"
}

case_ssh() {
    mkdir -p "$T/push" "$T/pull" "$T/pushed" "$T/pulled"
    delta_mode "$T/push/src" "$T/push/src" "pctest:$T/pushed/" "$T/pushed"
    delta_mode "$T/pull/src" "pctest:$T/pull/src" "$T/pulled/" "$T/pulled"
}

case_third_party() {
    mkdir -p "$T/direct" "$T/relayed" "$T/d1" "$T/d3"
    delta_mode "$T/direct/src" "h1:$T/direct/src" "h2:$T/d1/" "$T/d1"
    delta_mode "$T/relayed/src" "h1:$T/relayed/src" "h2:$T/d3/" "$T/d3" -3
}

case_daemon() {
    mkdir -p "$T/root/in" "$T/root/out" "$T/pulled" "$T/here"
    start_daemon "$T/root"
    delta_mode "$T/here/src" "$T/here/src" "$DAEMON_URL/in/" "$T/root/in" --key-file "$DAEMON_KEY"
    delta_mode "$T/root/out/src" "$DAEMON_URL/out/src" "$T/pulled/" "$T/pulled" \
        --key-file "$DAEMON_KEY"
}

# The bytes a SAME block stands for are checked where they are taken.
# --checksum writes each block of the old file into the new one as it
# hashes it, so a change of the old file after that cannot reach the copy
# (test_engine's sink_same_changed shows it, with -e too); -e reads each
# such block back from the copy, for the digest it checks the new file by,
# and -a (a partial file, not filled so) takes each SAME block's bytes
# from there. A block no longer what it should be (the fault inverts one:
# with -a, as a change after hashing would; with -e, as a bad read of the
# copy) fails its file, by name: exit 3, or 12 (integrity) with -e. The
# old file stays as it was, the rest is copied, and the next run mends it.
case_changed_underneath() {
    local opt
    for opt in -e -a; do
        rm -rf -- "$T/src" "$T/dst"
        changed_underneath "$opt"
    done
    # --delete keeps a tree in step with --checksum as with -u.
    echo x >"$T/dst/src/stale"
    expect_exit 0 "$PCOPY" -r -p --checksum --delete "$T/src" "$T/dst/"
    [[ ! -e $T/dst/src/stale ]] || fail "--checksum --delete left a file the source lacks"
    expect_exit 1 "$PCOPY" --checksum --delete "$T/src" "$T/dst/"
    expect_stderr_contains "pcopy: --delete needs -r and -u (or --checksum, or -a)"
}

# changed_underneath OPTION: case_changed_underneath with --checksum
# OPTION, the fault inverting the first SAME block's bytes.
changed_underneath() {
    local opt=$1 failed
    mkdir "$T/dst"
    make_tree "$T/src"
    cp -a "$T/src" "$T/dst/src"
    change_tree "$T/src"
    cp -p "$T/dst/src/big" "$T/big.before"
    cp -p "$T/dst/src/sub/grown" "$T/grown.before"
    if [[ $opt == -e ]]; then
        PCOPY_TEST_FAULT=sink_same:1 expect_exit 12 "$PCOPY" -r -p --checksum "$opt" -B "$BS" -s 1 \
            --json="$T/j" "$T/src" "$T/dst/"
        expect_stderr_matches "': its new copy read back other than written at offset [0-9]+ \(--verify\): not put in place"
    else
        PCOPY_TEST_FAULT=sink_same:1 expect_exit 3 "$PCOPY" -r -p --checksum "$opt" -B "$BS" -s 1 \
            --json="$T/j" "$T/src" "$T/dst/"
        expect_stderr_matches "changed while it was being updated \(its bytes at offset [0-9]+ are no longer the source's\): copy it again"
    fi
    [[ $(jget "$T/j" 'j["files"]["failed"]') == 1 ]] || fail "$opt: not exactly one file failed"
    failed=$(jget "$T/j" 'j["files"]["not_copied"][0]["path"]')
    case $failed in
    */src/big)
        same_file "$T/big.before" "$T/dst/src/big"
        same_file "$T/src/sub/grown" "$T/dst/src/sub/grown" ;;
    */src/sub/grown)
        same_file "$T/grown.before" "$T/dst/src/sub/grown"
        same_file "$T/src/big" "$T/dst/src/big" ;;
    *) fail "$opt: the file that failed is '$failed', not big nor grown" ;;
    esac
    same_file "$T/src/sub/other" "$T/dst/src/sub/other"
    same_file "$T/src/new" "$T/dst/src/new"
    expect_exit 0 "$PCOPY" -r -p --checksum "$opt" -B "$BS" "$T/src" "$T/dst/"
    check_tree --no-owner "$T/src" "$T/dst/src"
}

# More hashes than the control channel holds (4 MiB of them for 256 MiB
# at 4 KiB blocks, beside 6,000 small files in other batches, which get no
# hashes and travel whole) through ssh's pipes: the copy goes through, and
# exactly the 4 changed blocks travel.
case_many_hashes() {
    local i
    mkdir -p "$T/src/many" "$T/dst"
    for i in 1 2 3 4; do
        mkfile "$T/src/big.$i" 64M
    done
    for i in $(seq 1 6000); do
        echo "$i" >"$T/src/many/$i"
    done
    cp -a "$T/src" "$T/dst/src"
    for i in 1 2 3 4; do
        printf 'changed' | dd of="$T/src/big.$i" bs=1 seek=$((i * 1000000)) conv=notrunc status=none
    done
    expect_exit 0 timeout 300 "$PCOPY" -r -p --checksum -B 4k -s 2 --json="$T/j" \
        "$T/src" "pctest:$T/dst/"
    check_tree --no-owner "$T/src" "$T/dst/src"
    local same
    same=$(jget "$T/j" 'j["files"]["bytes_unchanged"]')
    [[ $same == $((4 * (64 * 1048576 - 4096))) ]] ||
        fail "bytes_unchanged is $same: not every block but the 4 changed ones"
}

# The old file's blocks are written into the new one as they are hashed
# only while that pays: once more of them came back as DATA than as SAME,
# the rest is hashed alone, and its SAME blocks are taken from the old
# file as they come. half: its first half rewritten, its second as it was
# (the copy stops, and the second half is still not sent); same: as it
# was (the copy goes on to its end). Both come out exact. The fault holds
# the sink for 0.5 s after its first SUMS, so that the source's answers to
# it are in before the next is judged, however fast the sink hashes.
case_copy_stops() {
    mkdir -p "$T/src" "$T/dst"
    mkfile "$T/src/half" 16M
    mkfile "$T/src/same" 4M
    cp -p "$T/src/half" "$T/src/same" "$T/dst/"
    head -c 8M /dev/urandom | dd of="$T/src/half" conv=notrunc status=none
    touch -d '-1 day' "$T/dst/half" "$T/dst/same"
    copy_stops half 8
    expect_stderr_matches "'[^']*/half': [0-9]+ of the blocks hashed came as DATA, [0-9]+ as SAME: the rest of the old file is not copied ahead"
    copy_stops same 4
    expect_stderr_lacks "not copied ahead"
}

# copy_stops NAME MIB: case_copy_stops's --checksum of src/NAME over
# dst/NAME, of which MIB MiB are unchanged.
copy_stops() {
    local kept
    PCOPY_TEST_FAULT=sums_slow:1 expect_exit 0 "$PCOPY" -vv --checksum -B 4k --json="$T/j" \
        "$T/src/$1" "$T/dst/$1"
    same_file "$T/src/$1" "$T/dst/$1"
    kept=$(jget "$T/j" 'j["files"]["bytes_unchanged"]')
    [[ $kept == $(($2 * 1048576)) ]] || fail "$1: bytes_unchanged is $kept, not $2 MiB"
}

# Holes over an old file of other bytes. The source sends a hole without
# waiting for hashes, so holes come while the sink still copies the old
# file into the new one ahead of its hashes: the copying must leave alone
# a block that came. Each file's first 4 MiB (the first SUMS) are as they
# were (SAME: the copying goes on), the rest are holes but one block of
# data; the fault holds the sink 0.5 s after that SUMS, and the holes come
# meanwhile, before most of the copying. end: that block last; start: that block
# first of the holes, so that the file can be complete while the copying
# goes on. Both come out exact, and sparse.
case_holes_over_old() {
    local f
    mkdir -p "$T/src" "$T/dst"
    mkfile "$T/head" 4M
    mkfile "$T/blk" 64k
    for f in end start; do
        cp "$T/head" "$T/src/$f"
        truncate -s 32M "$T/src/$f"
        { cat "$T/head"; head -c 28M /dev/urandom; } >"$T/dst/$f"
        touch -d '-1 day' "$T/dst/$f"
    done
    dd if="$T/blk" of="$T/src/end" bs=64k seek=511 conv=notrunc status=none
    dd if="$T/blk" of="$T/src/start" bs=64k seek=64 conv=notrunc status=none
    for f in end start; do
        PCOPY_TEST_FAULT=sums_slow:1 expect_exit 0 "$PCOPY" --checksum -B 64k \
            "$T/src/$f" "$T/dst/$f"
        same_file "$T/src/$f" "$T/dst/$f"
        (($(du -k "$T/dst/$f" | cut -f1) < 5 * 1024)) || fail "$f: the copy's holes hold bytes"
    done
}

# Without -B, --checksum works in blocks of 256 KiB (pcopy(1)): a byte
# changed costs that block, not a whole 1 MiB one; with -B, the block given.
case_default_block() {
    local wire
    mkdir "$T/src" "$T/dst"
    mkfile "$T/src/f" 4M
    cp -p "$T/src/f" "$T/dst/f"
    flip_byte "$T/src/f" $((3 * 1048576 + 10))
    expect_exit 0 "$PCOPY" --checksum --json="$T/j" "$T/src/f" "$T/dst/f"
    same_file "$T/src/f" "$T/dst/f"
    wire=$(jget "$T/j" 'j["source"]["wire_bytes"]')
    ((wire >= 256 * 1024 && wire < 257 * 1024)) ||
        fail "$wire bytes on the wire, want one block of 256 KiB and headers"
    [[ $(jget "$T/j" 'j["files"]["bytes_unchanged"]') == $((15 * 256 * 1024)) ]] ||
        fail "not 15 blocks of 256 KiB kept"
    flip_byte "$T/src/f" 10
    expect_exit 0 "$PCOPY" --checksum -B 1M --json="$T/j" "$T/src/f" "$T/dst/f"
    same_file "$T/src/f" "$T/dst/f"
    wire=$(jget "$T/j" 'j["source"]["wire_bytes"]')
    ((wire >= 1048576 && wire < 1049600)) ||
        fail "-B 1M: $wire bytes on the wire, want one block of 1 MiB and headers"
}

# inplace_mode SRC DST LSRC LDST ARGS...: LDST, a copy of the file LSRC
# made before one of its blocks changed, is updated through
# `--checksum --inplace` from SRC to DST: the same inode, the source's
# bytes, one block on the wire.
inplace_mode() {
    local src=$1 dst=$2 lsrc=$3 ldst=$4 ino wire
    shift 4
    mkfile "$lsrc" 2M
    cp -p "$lsrc" "$ldst"
    ino=$(stat -c %i "$ldst")
    printf 'changed' | dd of="$lsrc" bs=1 seek=$((5 * BS + 3)) conv=notrunc status=none
    expect_exit 0 "$PCOPY" --checksum --inplace -B "$BS" --json="$T/j" "$@" "$src" "$dst"
    same_file "$lsrc" "$ldst"
    [[ $(stat -c %i "$ldst") == "$ino" ]] || fail "--inplace $*: $ldst was replaced"
    wire=$(jget "$T/j" 'j["source"]["wire_bytes"]')
    ((wire >= BS && wire < BS + 4096)) || fail "--inplace $*: $wire bytes on the wire, want one block"
}

# --inplace writes the blocks that differ into the file already there, in
# every mode; a file with another link is replaced as without it (the
# other name keeps the old bytes); a dry run writes nothing; the file
# shrinks and grows to the source's size; a copy killed half way leaves
# it where it was and the same command finishes it; what it needs is
# asked for.
case_inplace() {
    mkdir -p "$T/l" "$T/push" "$T/pull" "$T/root"
    inplace_mode "$T/l/src" "$T/l/dst" "$T/l/src" "$T/l/dst"
    inplace_mode "$T/push/src" "pctest:$T/push/dst" "$T/push/src" "$T/push/dst"
    inplace_mode "pctest:$T/pull/src" "$T/pull/dst" "$T/pull/src" "$T/pull/dst"
    start_daemon "$T/root"
    inplace_mode "$T/l/src2" "$DAEMON_URL/dst" "$T/l/src2" "$T/root/dst" --key-file "$DAEMON_KEY"
    # Another link: replaced, never written through.
    local ino
    cp -p "$T/l/dst" "$T/l/linked" && ln "$T/l/linked" "$T/l/other"
    printf 'again' | dd of="$T/l/src" bs=1 seek=10 conv=notrunc status=none
    ino=$(stat -c %i "$T/l/linked")
    expect_exit 0 "$PCOPY" --checksum --inplace -B "$BS" "$T/l/src" "$T/l/linked"
    same_file "$T/l/src" "$T/l/linked"
    [[ $(stat -c %i "$T/l/linked") != "$ino" ]] || fail "a hard-linked file was written in place"
    same_file "$T/l/dst" "$T/l/other"
    # A dry run opens nothing for writing.
    ino=$(stat -c %i "$T/l/dst")
    cp -p "$T/l/dst" "$T/l/dst.before"
    expect_exit 0 "$PCOPY" -n --checksum --inplace "$T/l/src" "$T/l/dst"
    same_file "$T/l/dst.before" "$T/l/dst"
    # Shorter, then longer, with -e reading it back.
    head -c $((BS * 7 + 5)) "$T/l/dst.before" >"$T/l/short"
    for src in "$T/l/short" "$T/l/src"; do
        expect_exit 0 "$PCOPY" --checksum --inplace -e -B "$BS" "$src" "$T/l/dst"
        same_file "$src" "$T/l/dst"
        [[ $(stat -c %i "$T/l/dst") == "$ino" ]] || fail "--inplace -e: replaced"
    done
    # Killed half way (a quarter of the changed bytes a second): the file
    # stays where it is, and the same command finishes it.
    mkfile "$T/l/big" 4M
    cp -p "$T/l/big" "$T/l/big.dst"
    ino=$(stat -c %i "$T/l/big.dst")
    for k in 3 20 40 60; do
        head -c "$BS" /dev/urandom | dd of="$T/l/big" bs="$BS" seek="$k" conv=notrunc status=none
    done
    "${WITH_SIGINT[@]}" "$PCOPY" --checksum --inplace -B "$BS" -s 1 --bwlimit $((BS)) \
        "$T/l/big" "$T/l/big.dst" 2>"$T/killed.err" &
    local pid=$!
    track_pid "$pid"
    sleep 1.5
    kill -KILL "$pid"
    wait_exit 30 "$pid" || fail "pcopy did not die"
    [[ $(stat -c %i "$T/l/big.dst") == "$ino" ]] || fail "--inplace, killed: the file was replaced"
    expect_exit 0 "$PCOPY" --checksum --inplace -B "$BS" "$T/l/big" "$T/l/big.dst"
    same_file "$T/l/big" "$T/l/big.dst"
    [[ $(stat -c %i "$T/l/big.dst") == "$ino" ]] || fail "--inplace, again: the file was replaced"
    expect_exit 1 "$PCOPY" --inplace "$T/l/src" "$T/l/dst"
    expect_stderr_contains "pcopy: --inplace needs --checksum"
    expect_exit 1 "$PCOPY" -a --checksum --inplace "$T/l/src" "$T/l/dst"
    expect_stderr_contains "pcopy: --inplace and -a do not go together"
}

sshd_start
run_case local case_local
run_case default-block case_default_block
run_case inplace case_inplace
run_case ssh case_ssh
run_case third-party case_third_party
run_case daemon case_daemon
run_case changed-underneath case_changed_underneath
run_case kept case_kept
run_case copy-zeros case_copy_zeros
run_case owed case_owed
run_case copy-stops case_copy_stops
run_case holes-over-old case_holes_over_old
run_case many-hashes case_many_hashes
finish
