#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_tree: `pcopy -r` (issue #10). The odd tree of lib.sh (make_odd_tree:
# every entry type, odd names, 60 levels, sparse, hard links, a FIFO, modes,
# ns mtimes, entries owned by nobody:nogroup) copied with `-r -p -H` in
# every mode, each copy checked with check_tree:
#   local        pcopy -r -p -H SRC NEW           (and --numeric-ids)
#   ssh push     pcopy -r -p -H SRC pctest:DIR/   (into an existing dir)
#   ssh pull     pcopy -r -p -H pctest:SRC NEW
#   third party  pcopy -r -p -H h1:SRC h2:NEW
#   daemon push  pcopy -r -p -H SRC pcopy://127.0.0.1:PORT/odd
#   daemon pull  pcopy -r -p -H pcopy://127.0.0.1:PORT/odd NEW
# Every sink of these runs as root (the local client, the remote pcopy that
# sshd starts as root, a daemon started by this root test), so owners and
# groups are compared too (by name: both ends share /etc/passwd). One more
# local copy runs as the user nobody: an unprivileged sink keeps modes and
# times with -p but cannot give files away, so that one is compared without
# owners (check_tree --no-owner).
# Then: destination naming (cp -r / scp -r rules), a copy without -p (modes
# masked by the umask, the copier's own times and owner, the FIFO skipped
# with exit 3), -L, a copy without -H, 20,000 small files from tools/mktree
# (local, and an ssh pull: the two directions of the walk and the sink; an
# ssh push would add nothing a local copy does not, for 10 s or more), the
# -v summary's counts, and a directory without -r.
source "$PCOPY_TEST_LIB"
needs_root "it runs an sshd that logs in as root, and checks owners that only root can give"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"

ROOT=$(cd "$(dirname "$PCOPY_TEST_LIB")/../.." && pwd)
sshd_start

# One odd tree and one bulk tree for every case (they only read them).
TOP=$T
ODD=$TOP/src/odd
make_odd_tree "$ODD"
# 20,000 files of 1 to 4 KiB (about 45 MB): tools/mktree's default sizes
# (up to 64 KiB, about 300 MB) would take most of this test's time budget
# for no more coverage of the walk.
BULK=$TOP/bulk/t
"$ROOT/tools/mktree" --seed 1 --files 20000 --max 4K "$BULK" 2>/dev/null ||
    fail "tools/mktree could not write $BULK"

# is_sparse FILE: FILE takes less than 1 MiB of disk (the odd tree's sparse
# file has 8 KiB of data in 64 MiB).
is_sparse() {
    local blocks
    blocks=$(stat -c %b "$1")
    ((blocks * 512 < 1048576)) || fail "'$1' is not sparse: $((blocks * 512)) bytes on disk"
}

case_local() {
    expect_exit 0 "$PCOPY" -r -p -H "$ODD" "$T/copy"
    check_tree "$ODD" "$T/copy"
    is_sparse "$T/copy/files/sparse"
    no_temp_files "$T/copy"
    # The same with owners by number.
    expect_exit 0 "$PCOPY" -r -p -H --numeric-ids "$ODD" "$T/numeric"
    check_tree --numeric "$ODD" "$T/numeric"
}

# An unprivileged sink with -p: modes and times are kept, owners cannot be
# given away, and that is no error. pcopy runs as nobody, on a copy of the
# odd tree that nobody may read (u+r, a+rX: private/ and files/secret lose
# their 0700 and 0600), into a directory nobody owns; compared without
# owners (check_tree --no-owner: rsync -rlptDHn, no -o/-g).
case_local_unprivileged() {
    cp -a "$ODD" "$T/readable"
    chmod -R a+rX "$T/readable"
    mkdir "$T/out"
    chown nobody:nogroup "$T/out"
    expect_exit 0 setpriv --reuid=nobody --regid=nogroup --clear-groups \
        "$PCOPY" -r -p -H "$T/readable" "$T/out/copy"
    check_tree --no-owner "$T/readable" "$T/out/copy"
    [[ $(stat -c %U "$T/out/copy/files/one") == nobody ]] || fail "files/one is not owned by nobody, the copier"
}

case_ssh_push() {
    mkdir "$T/remote"
    # An existing directory: the copy goes in as remote/odd.
    expect_exit 0 "$PCOPY" -r -p -H "$ODD" "pctest:$T/remote/"
    check_tree "$ODD" "$T/remote/odd"
    is_sparse "$T/remote/odd/files/sparse"
    no_temp_files "$T/remote"
    wait_until 10 sshd_no_remote_pcopy || fail "remote pcopy processes are left: $(sshd_remote_pids)"
}

case_ssh_pull() {
    expect_exit 0 "$PCOPY" -r -p -H -s 4 "pctest:$ODD" "$T/back"
    check_tree "$ODD" "$T/back"
    is_sparse "$T/back/files/sparse"
    no_temp_files "$T/back"
}

case_third_party() {
    expect_exit 0 "$PCOPY" -r -p -H -s 4 "h1:$ODD" "h2:$T/third"
    check_tree "$ODD" "$T/third"
    no_temp_files "$T/third"
}

case_daemon_push() {
    mkdir "$T/root"
    start_daemon "$T/root"
    expect_exit 0 "$PCOPY" -r -p -H -s 4 "$ODD" "$DAEMON_URL/odd" --key-file "$DAEMON_KEY"
    check_tree "$ODD" "$T/root/odd"
    wait_no_temp_files "$T/root"
}

case_daemon_pull() {
    start_daemon "$TOP/src"
    expect_exit 0 "$PCOPY" -r -p -H -s 4 "$DAEMON_URL/odd" "$T/back" --key-file "$DAEMON_KEY"
    check_tree "$ODD" "$T/back"
    no_temp_files "$T/back"
    stop_daemon
    # A path through a symlink that stays inside the root: followed, as
    # the walk follows it, for the files' opens too.
    mkdir -p "$T/root/real/src/d"
    mkfile "$T/root/real/src/f" 70000
    mkfile "$T/root/real/src/d/g" 1000
    ln -s real "$T/root/lnk"
    start_daemon "$T/root"
    expect_exit 0 "$PCOPY" -r "$DAEMON_URL/lnk/src" "$T/vialink" --key-file "$DAEMON_KEY"
    diff -r "$T/root/real/src" "$T/vialink" || fail "a pull through an in-root symlink differs"
    expect_exit 0 "$PCOPY" -r "$DAEMON_URL/lnk/src/f" "$T/vialink.f" --key-file "$DAEMON_KEY"
    same_file "$T/root/real/src/f" "$T/vialink.f"
}

# small_tree DIR: a directory with two files and a subdirectory.
small_tree() {
    mkdir -p "$1/sub"
    mkfile "$1/a" 1000
    mkfile "$1/sub/b" 70000
}

case_naming() {
    small_tree "$T/x"
    small_tree "$T/y"
    mkfile "$T/f" 500
    mkdir "$T/exists"
    # Into an existing directory: exists/x. With a trailing slash on the
    # source too (its name is still x, as with cp -r).
    expect_exit 0 "$PCOPY" -r -p "$T/x" "$T/exists"
    check_tree "$T/x" "$T/exists/x"
    expect_exit 0 "$PCOPY" -r -p "$T/y/" "$T/exists/"
    check_tree "$T/y" "$T/exists/y"
    # A new name: the copy is that name itself.
    expect_exit 0 "$PCOPY" -r -p "$T/x" "$T/new"
    check_tree "$T/x" "$T/new"
    [[ ! -e $T/new/x ]] || fail "pcopy -r x new made new/x; new itself should be the copy"
    # A new name ending in '/' is a directory: the same copy, as with
    # cp -r and rsync; a file is refused (exit 11) and nothing is made.
    expect_exit 0 "$PCOPY" -r -p "$T/x/" "$T/newslash/"
    check_tree "$T/x" "$T/newslash"
    [[ ! -e $T/newslash/x ]] || fail "pcopy -r x/ new/ made new/x; new itself should be the copy"
    # A dry run names what is below it with one slash.
    "$PCOPY" -r -n "$T/x/" "$T/drynew/" >"$T/dry.out" 2>&1 || fail "pcopy -r -n x/ drynew/ failed"
    grep -q "^copy $T/drynew/" "$T/dry.out" || fail "the dry run lists nothing under drynew/"
    ! grep -q "drynew//" "$T/dry.out" || fail "the dry run shows 'drynew//': $(cat "$T/dry.out")"
    [[ ! -e $T/drynew ]] || fail "a dry run made $T/drynew"
    expect_exit 11 "$PCOPY" "$T/f" "$T/fslash/"
    expect_stderr_contains "is a directory, and 'f' is not one"
    [[ ! -e $T/fslash ]] || fail "pcopy f new/ made $T/fslash"
    expect_exit 11 "$PCOPY" "$T/f" "$T/f/"
    expect_stderr_contains "destination '$T/f/' is not a directory"
    # A directory into itself, or into a directory inside it: refused
    # (exit 1) as cp refuses it, before anything is written; the walk
    # would otherwise meet what the copy writes and copy it again.
    local before
    before=$(find "$T/x" | sort | md5sum)
    expect_exit 1 "$PCOPY" -r "$T/x" "$T/x"
    expect_stderr_contains "cannot copy directory '$T/x' into itself, '$T/x'"
    expect_exit 1 "$PCOPY" -r "$T/x/" "$T/x/sub/new/"
    expect_stderr_contains "into itself"
    expect_exit 1 "$PCOPY" -r "$T/y" "$T/x" "$T/x/sub"
    expect_stderr_contains "cannot copy directory '$T/x' into itself"
    [[ $(find "$T/x" | sort | md5sum) == "$before" ]] || fail "a refused copy into itself changed $T/x"
    # A directory beside it is no such thing.
    mkdir "$T/beside"
    expect_exit 0 "$PCOPY" -r -p "$T/x/sub" "$T/beside"
    check_tree "$T/x/sub" "$T/beside/sub"
    # A directory onto a file: one message (a file is in the way), as
    # cp's refusal, not one for each entry inside; the file stays.
    cp "$T/f" "$T/f.keep"
    expect_exit 11 "$PCOPY" -r "$T/x" "$T/f"
    expect_stderr_matches "^pcopy: cannot create directory '$T/f': .*in the way"
    (($(grep -c '^pcopy: cannot' "$LAST_STDERR") == 1)) || fail "more than one error: $(cat "$LAST_STDERR")"
    same_file "$T/f.keep" "$T/f"
    # Several sources (directories and a file) into an existing directory.
    mkdir "$T/many"
    expect_exit 0 "$PCOPY" -r -p "$T/x" "$T/y" "$T/f" "$T/many"
    check_tree "$T/x" "$T/many/x"
    check_tree "$T/y" "$T/many/y"
    same_file "$T/f" "$T/many/f"
    # Several sources into something that is not a directory: a usage
    # error, exit 1, naming the target; nothing is written.
    expect_exit 1 "$PCOPY" -r "$T/x" "$T/y" "$T/f"
    expect_stderr_contains "$T/f"
    same_file "$T/many/f" "$T/f"
    expect_exit 1 "$PCOPY" -r "$T/x" "$T/y" "$T/nothere"
    expect_stderr_contains "$T/nothere"
    [[ ! -e $T/nothere ]] || fail "$T/nothere was created"
    # The same rules for a remote destination.
    mkdir "$T/rexists"
    expect_exit 0 "$PCOPY" -r -p "$T/x" "pctest:$T/rexists"
    check_tree "$T/x" "$T/rexists/x"
    expect_exit 0 "$PCOPY" -r -p "$T/x" "pctest:$T/rnew"
    check_tree "$T/x" "$T/rnew"
    expect_exit 0 "$PCOPY" -r -p "$T/x/" "pctest:$T/rnewslash/"
    check_tree "$T/x" "$T/rnewslash"
    expect_exit 11 "$PCOPY" "$T/f" "pctest:$T/rfslash/"
    expect_stderr_contains "is a directory, and 'f' is not one"
    [[ ! -e $T/rfslash ]] || fail "pcopy f host:new/ made $T/rfslash"
    expect_exit 1 "$PCOPY" -r "$T/x" "$T/y" "pctest:$T/f"
    expect_stderr_contains "$T/f"
    same_file "$T/many/f" "$T/f"
    expect_exit 11 "$PCOPY" -r "$T/x" "pctest:$T/f"
    expect_stderr_contains "cannot create directory '$T/f'"
    same_file "$T/many/f" "$T/f"
}

case_no_preserve() {
    local f want got out
    # A umask of 027 for the copy: without -p, files and directories get
    # mode & 0777 & ~umask (cp's rule), the copier's times and owner.
    expect_exit 3 bash -c 'umask 027 && exec "$@"' - "$PCOPY" -r -H "$ODD" "$T/copy"
    expect_stderr_contains "special/fifo"
    [[ ! -e $T/copy/special/fifo ]] || fail "the FIFO was copied without -p"
    for f in files/secret:600 files/script:750 files/one:640 ro:550 private:700 deep:750 \
        empty/inner:750 owned/file:640; do
        want=${f##*:}
        got=$(mode_of "$T/copy/${f%:*}")
        [[ $got == "$want" ]] || fail "${f%:*} has mode $got without -p under umask 027, wanted $want"
    done
    got=$(stat -c %U:%G "$T/copy/owned/file")
    [[ $got == root:root ]] || fail "owned/file is owned by $got without -p, wanted root:root (the copier)"
    # Times are the copy's own: the odd tree's are from 2009.
    (($(stat -c %Y "$T/copy/files/one") > 1600000000)) || fail "files/one kept its mtime without -p"
    # Contents, symlinks and hard links (-H) are copied all the same.
    out=$(diff -r --no-dereference "$ODD" "$T/copy" 2>&1 | grep -v "special: fifo" || true)
    [[ -z $out ]] || fail "the copy without -p differs: $out"
    [[ $(readlink "$T/copy/links/todir") == ../deep ]] || fail "links/todir is not a symlink to ../deep"
    [[ $(stat -c %h "$T/copy/hard/three.a") == 3 ]] || fail "hard/three.a lost its hard links"
}

case_deref() {
    small_tree "$T/t"
    ln -s sub "$T/t/todir"
    ln -s a "$T/t/tofile"
    expect_exit 0 "$PCOPY" -r -L "$T/t" "$T/copy"
    [[ -d $T/copy/todir && ! -L $T/copy/todir ]] || fail "with -L, todir (a symlink to a directory) is not a directory"
    [[ -f $T/copy/tofile && ! -L $T/copy/tofile ]] || fail "with -L, tofile is not a regular file"
    same_file "$T/t/sub/b" "$T/copy/todir/b"
    same_file "$T/t/a" "$T/copy/tofile"
    # Without -L the links stay links.
    expect_exit 0 "$PCOPY" -r "$T/t" "$T/copy2"
    [[ -L $T/copy2/todir && $(readlink "$T/copy2/todir") == sub ]] || fail "without -L, todir is not the symlink 'sub'"
}

case_no_hardlinks() {
    local i1 i2
    expect_exit 0 "$PCOPY" -r -p "$ODD/hard" "$T/copy"
    same_file "$ODD/hard/three.a" "$T/copy/sub/three.c"
    i1=$(stat -c %i "$T/copy/three.a")
    i2=$(stat -c %i "$T/copy/three.b")
    [[ $i1 != "$i2" ]] || fail "without -H, three.a and three.b are still one file"
    [[ $(stat -c %h "$T/copy/three.a") == 1 && $(stat -c %h "$T/copy/sub/two.b") == 1 ]] ||
        fail "without -H, the copies have more than one link"
    diff -r "$ODD/hard" "$T/copy" || fail "the copy without -H differs in contents"
}

case_bulk() {
    expect_exit 0 "$PCOPY" -r -s 4 "$BULK" "$T/local"
    diff -r "$BULK" "$T/local" >/dev/null || fail "the local copy of 20,000 files differs (diff -r)"
    expect_exit 0 "$PCOPY" -r -s 4 "pctest:$BULK" "$T/back"
    diff -r "$BULK" "$T/back" >/dev/null || fail "the ssh pull of 20,000 files differs (diff -r)"
}

# The -v summary counts files, directories, links, bytes and skipped
# entries. Its exact wording is the integrator's choice: this checks each
# count next to its noun (singular or plural) on the summary lines.
case_summary() {
    local re
    small_tree "$T/t"
    : >"$T/t/c"
    ln -s a "$T/t/l"
    mkfifo "$T/t/fifo"
    # 3 files (a, sub/b, c) of 71000 bytes, 2 directories (t, sub), 1 link,
    # 1 skipped (the FIFO, without -p).
    expect_exit 3 "$PCOPY" -r -v "$T/t" "$T/copy"
    for re in '(^|[^0-9])71000 bytes' '(^|[^0-9])3 files?([^a-z]|$)' '(^|[^0-9])2 director(y|ies)' \
        '(^|[^0-9])1 (symbolic )?links?([^a-z]|$)' '(^|[^0-9])1 skipped|skipped:? 1([^0-9]|$)'; do
        grep '^pcopy: ' "$LAST_STDERR" | grep -qE -- "$re" || {
            sed 's/^/  stderr: /' "$LAST_STDERR" >&2
            fail "the -v summary has no count matching /$re/"
        }
    done
}

case_no_recursive() {
    small_tree "$T/d"
    expect_exit 3 "$PCOPY" "$T/d" "$T/dst"
    expect_stderr_contains "omitting directory '$T/d'"
    expect_stderr_contains "use -r"
    [[ ! -e $T/dst ]] || fail "pcopy without -r created $T/dst"
}

run_case local case_local
run_case local_unprivileged case_local_unprivileged
run_case ssh_push case_ssh_push
run_case ssh_pull case_ssh_pull
run_case third_party case_third_party
run_case daemon_push case_daemon_push
run_case daemon_pull case_daemon_pull
run_case naming case_naming
run_case no_preserve case_no_preserve
run_case deref case_deref
run_case no_hardlinks case_no_hardlinks
run_case bulk case_bulk
run_case summary case_summary
run_case no_recursive case_no_recursive
finish
