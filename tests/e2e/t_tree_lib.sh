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
# `pcopy -r` exists, and proves that the tree tests are not no-ops.
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
    content 'printf x | dd of=files/mib1 bs=1 seek=5 conv=notrunc status=none; touch -r "$S/files/mib1" files/mib1'
    sparse_end 'printf x | dd of=files/sparse bs=1 seek=$((64 * 1048576 - 1)) conv=notrunc status=none; touch -r "$S/files/sparse" files/sparse'
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
finish
