#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_sync: -u (--update) keeps what is already there, in every mode: a local
# copy, a push and a pull through ssh, a push and a pull with a daemon, a
# third-party copy and one relayed through the client (-3). In each, a tree
# copied with -u into an existing directory, then again: the second run
# sends no byte of file data and counts every file unchanged (--json);
# then four files change (new contents, an append, touches that change
# only the time) and exactly those four travel; the copy is exact each
# time, its files keep the source's mtimes without -p. And the quick check
# looks only where it should: a symlink at a file's name, even to a file of
# the same size and time, is replaced; a file of the same size and time
# but other bytes is kept (that is what size and time can tell: --checksum
# is the remedy, pcopy(1)). --delete (with -u) removes what the source
# does not have, in every mode, but what --exclude protects, and never
# follows a symlink out of the copy; -n lists exactly what it and an update
# would do, and changes nothing. With -p, what is kept takes the source's
# mode and owner, and a FIFO or device already there is not made again. As
# another user than root, an update fills a read-only directory of its own.
# ctest: cost 30
source "$PCOPY_TEST_LIB"
needs_root "it runs an sshd that logs in as root"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"

# make_tree DIR: a small tree: packed small files, an empty one, files of
# several blocks, nested directories.
make_tree() {
    local d=$1 i
    mkdir -p "$d/a/b/c" "$d/empty_dir"
    for i in $(seq 1 40); do
        head -c $((i * 97)) /dev/urandom >"$d/a/small.$i"
    done
    : >"$d/a/b/zero"
    mkfile "$d/a/b/c/big" 3M
    mkfile "$d/mid" 300k
    ln -s a/small.1 "$d/link"
}

# sync_run JSON SRC DST ARGS...: pcopy -r -p -u --json=JSON SRC DST ARGS
# (a mirror, as rsync -a makes one), which must succeed.
sync_run() {
    local json=$1
    shift
    expect_exit 0 "$PCOPY" -r -p -u -s 4 --json="$json" "$@"
}

# tree_state DIR: every name below DIR with its type, size and mtime (ns),
# sorted: what a dry run must leave as it was.
tree_state() {
    (cd "$1" && find . -printf '%y %s %T@ %P\n' | LC_ALL=C sort -k4)
}

# file_times DIR: each regular file's mtime (ns) and path, sorted.
file_times() {
    (cd "$1" && find . -type f -printf '%T@ %P\n' | sort -k2)
}

# expect_counts JSON COPIED UNCHANGED: the summary's files.copied and
# files.unchanged; with nothing copied, no byte of file data moved.
expect_counts() {
    local copied unchanged bytes
    copied=$(jget "$1" 'j["files"]["copied"]')
    unchanged=$(jget "$1" 'j["files"]["unchanged"]')
    bytes=$(jget "$1" 'j["bytes"]')
    [[ $copied == "$2" && $unchanged == "$3" ]] ||
        fail "$1: $copied copied and $unchanged unchanged, want $2 and $3"
    [[ $2 != 0 || $bytes == 0 ]] || fail "$1: nothing copied, but $bytes bytes moved"
}

# sync_mode LSRC SRC_SPEC DST_SPEC LDST ARGS...: the whole story through one
# mode: LSRC is the source tree on this machine and SRC_SPEC the same as the
# mode names it; LDST an existing directory, DST_SPEC the same as the mode
# names it, in which the copy appears under LSRC's name.
sync_mode() {
    local lsrc=$1 src=$2 dst=$3 ldst=$4/${1##*/}
    shift 4
    sync_run "$T/j1" "$src" "$dst" "$@"
    expect_counts "$T/j1" 43 0
    check_tree --no-owner "$lsrc" "$ldst"
    sync_run "$T/j2" "$src" "$dst" "$@"
    expect_counts "$T/j2" 0 43
    check_tree --no-owner "$lsrc" "$ldst"
    # Four changes: other contents of the same size (and another time),
    # an append, a new mtime only, on a big file and a small one (two small
    # files with kept ones between them: they travel in PACKs).
    head -c 1940 /dev/urandom >"$lsrc/a/small.20"
    touch -d '2001-02-03 04:05:06' "$lsrc/a/small.20"
    echo more >>"$lsrc/mid"
    touch "$lsrc/a/b/c/big" "$lsrc/a/small.5"
    sync_run "$T/j3" "$src" "$dst" "$@"
    expect_counts "$T/j3" 4 39
    [[ $(jget "$T/j3" 'j["files"]["bytes_unchanged"]') -gt 0 ]] ||
        fail "bytes_unchanged is 0 with 39 files unchanged"
    check_tree --no-owner "$lsrc" "$ldst"
    # --delete: what the source does not have goes from every directory of
    # the copy (a tree, a file, a symlink to a directory outside, which is
    # removed and not followed), but what an --exclude rule leaves out.
    mkdir -p "$ldst/gone/deep" "$T/outside"
    echo x >"$ldst/gone/deep/f"
    echo y >"$ldst/a/stale"
    echo z >"$T/outside/z"
    ln -sfn "$T/outside" "$ldst/a/b/out"
    echo k >"$ldst/a/local.keep"
    echo more >>"$lsrc/a/small.3"
    # -n first: it lists what the real run then does, on stdout, and
    # changes nothing (every name and mtime below as before).
    tree_state "$ldst" >"$T/state.before"
    tree_state "$T/outside" >>"$T/state.before"
    sync_run "$T/jn" "$src" "$dst" -n --delete --exclude '*.keep' "$@" >"$T/listing"
    tree_state "$ldst" >"$T/state.after"
    tree_state "$T/outside" >>"$T/state.after"
    diff "$T/state.before" "$T/state.after" >&2 || fail "-n changed the destination"
    sed -E 's#^(copy|update|delete) .*/src/#\1 src/#' "$T/listing" | LC_ALL=C sort >"$T/listed"
    printf '%s\n' 'delete src/a/b/out' 'delete src/a/stale' 'delete src/gone' \
        'delete src/gone/deep' 'delete src/gone/deep/f' 'update src/a/small.3' >"$T/want"
    diff "$T/want" "$T/listed" >&2 || fail "-n listed other entries than it should"
    expect_counts "$T/jn" 1 42
    # bytes: what the run would write, small.3 alone.
    [[ $(jget "$T/jn" 'j["files"]["deleted"]') == 5 &&
        $(jget "$T/jn" 'j["bytes"]') == "$(stat -c %s "$lsrc/a/small.3")" &&
        $(jget "$T/jn" 'j["mb_per_s"]') == None ]] ||
        fail "-n: counts other than 5 to delete and the bytes of small.3"
    sync_run "$T/j4" "$src" "$dst" --delete --exclude '*.keep' "$@"
    expect_counts "$T/j4" 1 42
    [[ $(jget "$T/j4" 'j["files"]["deleted"]') == 5 ]] ||
        fail "--delete removed $(jget "$T/j4" 'j["files"]["deleted"]') entries, not 5"
    [[ -f $ldst/a/local.keep ]] || fail "--delete removed a file an --exclude rule protects"
    [[ -f $T/outside/z ]] || fail "--delete followed a symlink out of the copy"
    rm "$ldst/a/local.keep"
    touch -r "$lsrc/a" "$ldst/a" # as -p left it, before that rm
    check_tree --no-owner "$lsrc" "$ldst"
}

case_local() {
    make_tree "$T/src"
    mkdir "$T/dst"
    sync_mode "$T/src" "$T/src" "$T/dst/" "$T/dst"
    # The line a person reads says it too.
    expect_exit 0 "$PCOPY" -r -u "$T/src" "$T/dst/"
    expect_stderr_matches '^pcopy: 0 bytes in 0 files, [0-9]+ directories, [0-9]+ links?, 43 unchanged \([0-9]+ bytes not sent\), '
    # Without -p, -u still gives the files it writes the source's mtime
    # (to the nanosecond), so that the next -u finds them unchanged.
    mkdir "$T/plain"
    expect_exit 0 "$PCOPY" -r -u "$T/src" "$T/plain/"
    [[ $(file_times "$T/src") == "$(file_times "$T/plain/src")" ]] ||
        fail "-u without -p: the files' mtimes differ from the source's"
    expect_exit 0 "$PCOPY" -r -u --json="$T/j4" "$T/src" "$T/plain/"
    expect_counts "$T/j4" 0 43
}

case_ssh() {
    make_tree "$T/push/src"
    make_tree "$T/pull/src"
    mkdir "$T/pushed" "$T/pulled"
    sync_mode "$T/push/src" "$T/push/src" "pctest:$T/pushed/" "$T/pushed"
    sync_mode "$T/pull/src" "pctest:$T/pull/src" "$T/pulled/" "$T/pulled"
}

case_third_party() {
    make_tree "$T/direct/src"
    make_tree "$T/relayed/src"
    mkdir "$T/d1" "$T/d3"
    sync_mode "$T/direct/src" "h1:$T/direct/src" "h2:$T/d1/" "$T/d1"
    sync_mode "$T/relayed/src" "h1:$T/relayed/src" "h2:$T/d3/" "$T/d3" -3
}

case_daemon() {
    mkdir -p "$T/root/in" "$T/pulled"
    make_tree "$T/src"
    make_tree "$T/root/out/src"
    start_daemon "$T/root"
    sync_mode "$T/src" "$T/src" "$DAEMON_URL/in/" "$T/root/in" --key-file "$DAEMON_KEY"
    sync_mode "$T/root/out/src" "$DAEMON_URL/out/src" "$T/pulled/" "$T/pulled" \
        --key-file "$DAEMON_KEY"
}

case_quick_check_limits() {
    make_tree "$T/src"
    mkdir "$T/dst"
    expect_exit 0 "$PCOPY" -r -u "$T/src" "$T/dst/"
    # A symlink at a file's name, to a file of the same size and mtime.
    cp -p "$T/src/mid" "$T/decoy"
    rm "$T/dst/src/mid"
    ln -s "$T/decoy" "$T/dst/src/mid"
    # Other bytes of the same size and mtime: the quick check cannot see them.
    head -c 97 /dev/urandom >"$T/dst/src/a/small.1"
    touch -r "$T/src/a/small.1" "$T/dst/src/a/small.1"
    expect_exit 0 "$PCOPY" -r -u --json="$T/j" "$T/src" "$T/dst/"
    expect_counts "$T/j" 1 42
    [[ -f $T/dst/src/mid && ! -L $T/dst/src/mid ]] || fail "the symlink at mid was kept"
    same_file "$T/src/mid" "$T/dst/src/mid"
    cmp -s "$T/src/a/small.1" "$T/dst/src/a/small.1" &&
        fail "a file of the same size and time was rewritten: -u looks only at those"
    [[ -f $T/decoy && ! -L $T/decoy ]] || fail "the symlink's target was touched"
    # --delete only keeps a tree in step: it needs -r and -u.
    expect_exit 1 "$PCOPY" -r --delete "$T/src" "$T/dst/"
    expect_stderr_contains "pcopy: --delete needs -r and -u"
    expect_exit 1 "$PCOPY" -u --delete "$T/src/mid" "$T/dst/"
    expect_stderr_contains "pcopy: --delete needs -r and -u"
    # Without -u everything is copied again, as always.
    expect_exit 0 "$PCOPY" -r --json="$T/j2" "$T/src" "$T/dst/"
    expect_counts "$T/j2" 43 0
    diff -r --no-dereference "$T/src" "$T/dst/src" || fail "the copy without -u differs"
}

# -p with -u or -a: what is kept as it is still takes the source's mode
# and owner (a chmod 600 at the source reaches the copy, as with rsync -a),
# and a FIFO or device already there is left as it is, not made again; -n
# changes none of it and lists none of it.
case_kept_attrs() {
    local o
    mkdir -p "$T/src/sub"
    echo secret >"$T/src/sub/key"
    mkfifo "$T/src/pipe"
    mknod "$T/src/null" c 1 3
    ln -s sub/key "$T/src/lnk"
    mkdir "$T/first"
    expect_exit 0 "$PCOPY" -r -p "$T/src" "$T/first/"
    chmod 600 "$T/src/sub/key" "$T/src/pipe"
    chown nobody "$T/src/sub/key"
    chown -h nobody "$T/src/lnk"
    for o in -u -a; do
        rm -rf "$T/d$o"
        cp -a "$T/first" "$T/d$o"
        stat -c '%n %i' "$T/d$o/src/pipe" "$T/d$o/src/null" >"$T/ino$o"
        expect_exit 0 "$PCOPY" -r -p -n "$o" "$T/src" "$T/d$o/" >"$T/n.out"
        [[ ! -s $T/n.out ]] || fail "-n $o listed: $(cat "$T/n.out")"
        [[ $(stat -c %a "$T/d$o/src/sub/key") == 644 ]] || fail "-n $o changed a mode"
        expect_exit 0 "$PCOPY" -r -p "$o" "$T/src" "$T/d$o/"
        [[ $(stat -c '%a %U' "$T/d$o/src/sub/key") == "600 nobody" ]] ||
            fail "pcopy -p $o left $(stat -c '%a %U' "$T/d$o/src/sub/key") on a kept file"
        [[ $(stat -c '%a' "$T/d$o/src/pipe") == 600 ]] || fail "-p $o left the FIFO's mode"
        [[ $(stat -c '%U' "$T/d$o/src/lnk") == nobody ]] || fail "-p $o left the link's owner"
        stat -c '%n %i' "$T/d$o/src/pipe" "$T/d$o/src/null" | cmp -s - "$T/ino$o" ||
            fail "pcopy -p $o made the FIFO or the device again"
    done
}

# Not as root: an update fills a read-only directory (mode 0555) that an
# earlier copy filled, as rsync does; the directory gets the source's mode
# back with -p, and its own without.
case_read_only_dir() {
    local as=(setpriv --reuid=nobody --regid=nogroup --clear-groups) o
    mkdir -p "$T/src/ro" "$T/dst"
    echo f >"$T/src/ro/f"
    chmod 555 "$T/src/ro"
    chown -R nobody:nogroup "$T/src" "$T/dst"
    expect_exit 0 "${as[@]}" "$PCOPY" -r -p "$T/src" "$T/dst/"
    for o in -u -a; do
        chmod 755 "$T/src/ro"
        mkfile "$T/src/ro/new$o" 300000
        chmod 555 "$T/src/ro"
        expect_exit 0 "${as[@]}" "$PCOPY" -r -p "$o" "$T/src" "$T/dst/"
        same_file "$T/src/ro/new$o" "$T/dst/src/ro/new$o"
        [[ $(stat -c %a "$T/dst/src/ro") == 555 ]] ||
            fail "-p $o left mode $(stat -c %a "$T/dst/src/ro") on the directory"
    done
    chmod 755 "$T/src/ro"
    echo h >"$T/src/ro/h"
    chmod 500 "$T/dst/src/ro"
    expect_exit 0 "${as[@]}" "$PCOPY" -r -u "$T/src" "$T/dst/"
    [[ -f $T/dst/src/ro/h && $(stat -c %a "$T/dst/src/ro") == 500 ]] ||
        fail "-u without -p: $(ls -ld "$T/dst/src/ro"), $(ls "$T/dst/src/ro")"
}

# -n lists a path longer than a LIST carries (1024 bytes) cut in the
# middle, with its end (the entry's own name) kept and the cut marked.
case_dry_run_long() {
    local p=$T/src/deep i
    for i in 0 1 2 3 4 5 6; do
        p=$p/$(printf "%0200d" "$i")
    done
    mkdir -p "$p" "$T/dst"
    mkfile "$p/leaf-one" 10
    mkfile "$p/leaf-two" 10
    expect_exit 0 "$PCOPY" -r -n "$T/src" "$T/dst/" >"$T/n.out"
    grep -qE '^copy .{256}\.\.\..*/leaf-one$' "$T/n.out" ||
        fail "-n did not list leaf-one cut in the middle: $(grep leaf "$T/n.out" | head -c 300)"
    grep -qE '/leaf-two$' "$T/n.out" || fail "-n did not list leaf-two"
    [[ -z $(sort "$T/n.out" | uniq -d) ]] || fail "-n listed two entries alike"
}

# An entry of another kind in the way. Without --delete, refused: a
# directory whose name holds a symlink or a file, and a file or a link
# whose name holds a directory, fail in the rehearsal as in the run, with
# the same message and exit 3, and nothing changes. With --delete they are
# replaced, as rsync replaces them: the directory with all in it, the
# symlink never followed; -n lists them as updates, and the copy is exact.
case_dry_run_blocked() {
    mkdir -p "$T/src/S/b" "$T/src/S/k" "$T/dst/S/f/sub" "$T/dst/S/l" "$T/elsewhere"
    mkfile "$T/src/S/b/f" 1000
    mkfile "$T/src/S/f" 1000
    ln -s k "$T/src/S/l"
    ln -s "$T/elsewhere" "$T/dst/S/b"
    mkfile "$T/dst/S/f/sub/old" 10
    mkfile "$T/elsewhere/keep" 10
    local m
    for m in "" -n; do
        # shellcheck disable=SC2086 # m is an option or nothing
        expect_exit 3 "$PCOPY" -r -u $m "$T/src/S" "$T/dst/"
        expect_stderr_contains "cannot create directory '$T/dst/S/b': a symlink is in the way"
        expect_stderr_contains "cannot finish '$T/dst/S/f': Is a directory"
        expect_stderr_contains "cannot create symlink '$T/dst/S/l': Is a directory"
        [[ -L $T/dst/S/b && -d $T/dst/S/f/sub && -d $T/dst/S/l ]] ||
            fail "pcopy -r -u $m replaced an entry of another kind without --delete"
    done
    # With -p too, and the refused directory is reported once, not again
    # when its attributes would be set.
    expect_exit 3 "$PCOPY" -r -p -u "$T/src/S" "$T/dst/"
    expect_stderr_contains "cannot create directory '$T/dst/S/b': a symlink is in the way"
    ! grep -q "cannot set the attributes" "$LAST_STDERR" ||
        fail "the refused directory was reported twice: $(cat "$LAST_STDERR")"
    [[ -L $T/dst/S/b && -f $T/dst/S/f/sub/old && -d $T/dst/S/l ]] ||
        fail "a refused copy changed something"
    # --delete: the rehearsal lists the three as updates, the run replaces them.
    expect_exit 0 "$PCOPY" -r -u -n --delete "$T/src/S" "$T/dst/" >"$T/n.out"
    for m in b f l; do
        grep -qx "update $T/dst/S/$m" "$T/n.out" || fail "-n --delete did not list $m: $(cat "$T/n.out")"
    done
    [[ -L $T/dst/S/b && -f $T/dst/S/f/sub/old && -d $T/dst/S/l ]] ||
        fail "the rehearsal changed something"
    expect_exit 0 "$PCOPY" -r -p -u --delete "$T/src/S" "$T/dst/"
    diff -r --no-dereference "$T/src/S" "$T/dst/S" || fail "--delete did not replace them"
    [[ -f $T/elsewhere/keep ]] || fail "--delete went through the symlink"
}

sshd_start
run_case local case_local
run_case ssh case_ssh
run_case third-party case_third_party
run_case daemon case_daemon
run_case quick-check-limits case_quick_check_limits
run_case dry-run-blocked case_dry_run_blocked
run_case kept-attrs case_kept_attrs
run_case dry-run-long case_dry_run_long
run_case read-only-dir case_read_only_dir
finish
