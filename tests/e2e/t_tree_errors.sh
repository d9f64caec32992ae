#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_tree_errors: `pcopy -r` when part of a tree cannot be copied (issue #10).
#   unreadable   pcopy, as the user nobody, copies a tree holding a file, an
#                empty file and a directory of mode 000: each is named on
#                stderr with the reason, everything else is copied, exit 3;
#   swapped      a directory swapped for a symlink, and a file for a FIFO,
#                after the walk: both refused by name, nothing read through
#                the link, no hang, exit 3;
#   delete_unreadable  --delete spares a directory the source could not read
#                whole (locally as nobody, and through ssh), and prunes the
#                ones read whole;
#   disk_full    the destination, a small tmpfs, fills up in the middle of a
#                tree (locally and through ssh): exit 11, "No space left on
#                device", no temporary file left, and every file that has its
#                final name is complete (same size and contents as its source);
#   truncated    a 128 MiB file of the tree is truncated to 1 MiB while it is
#                being sent (-B 4k -s 1 -w 4k to keep the window wide): either
#                it is reported (named on stderr, exit 3, nothing under its
#                name), or the copy holds the file as it was at one instant
#                (before or after the truncation); never a mix;
#   vanishing    a tree of 5,000 files, of which half the top directories are
#                deleted, 100 files at a time, once the copy writes: exit 0 or 3 (then with a
#                message); every file in the copy equals the saved original, no
#                temporary file is left, and the directories nobody touched
#                are copied whole.
source "$PCOPY_TEST_LIB"
needs_root "it runs pcopy as the user nobody, mounts tmpfs file systems and runs an sshd"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"

ROOT=$(cd "$(dirname "$PCOPY_TEST_LIB")/../.." && pwd)
AS_NOBODY=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
command -v setpriv >/dev/null || fail "setpriv (util-linux) is needed to run pcopy as nobody"
sshd_start

# complete_files SRC DST: every regular file under DST equals the file at the
# same path under SRC (DST may hold fewer files than SRC, or not exist).
# One diff -rq for the whole tree: "Only in SRC" lines are files not copied,
# which is allowed; any other line (a file that differs, or is only in DST)
# is not.
complete_files() {
    local src=$1 dst=$2 out
    [[ -e $dst ]] || return 0
    out=$(diff -rq --no-dereference -- "$src" "$dst" 2>&1 | grep -vF -e "Only in $src/" -e "Only in $src: " || true)
    if [[ -n $out ]]; then
        printf '%s\n' "$out" | head -n 20 | sed 's/^/  diff: /' >&2
        fail "files under '$dst' differ from their sources in '$src' (above)"
    fi
    log "$(find "$dst" -type f | wc -l) files under $dst are complete"
}

# stderr_line_has A B: one line of the last stderr contains both A and B.
stderr_line_has() {
    grep -F -- "$1" "$LAST_STDERR" | grep -qF -- "$2" || {
        sed 's/^/  stderr: /' "$LAST_STDERR" >&2
        fail "no stderr line names both '$1' and '$2'"
    }
}

case_unreadable() {
    local src=$T/src
    mkdir -p "$src/sub" "$src/baddir/inner" "$T/out"
    mkfile "$src/a" 1000
    mkfile "$src/sub/b" 70000
    mkfile "$src/baddir/y" 10
    mkfile "$src/baddir/inner/x" 10
    mkfile "$src/badfile" 5000
    : >"$src/z"
    : >"$src/badempty" # never read for data, but unreadable all the same
    # The reference: what must be copied.
    cp -a "$src" "$T/ref"
    rm -rf "$T/ref/badfile" "$T/ref/baddir" "$T/ref/badempty"
    chmod 000 "$src/badfile" "$src/baddir" "$src/badempty"
    chown nobody:nogroup "$T/out"
    expect_exit 3 "${AS_NOBODY[@]}" "$PCOPY" -r "$src" "$T/out/copy"
    stderr_line_has "$src/badfile" "Permission denied"
    stderr_line_has "$src/badempty" "Permission denied"
    stderr_line_has "$src/baddir" "Permission denied"
    [[ ! -e $T/out/copy/badfile ]] || fail "the unreadable file was created in the copy"
    [[ ! -e $T/out/copy/baddir ]] || dir_is_empty "$T/out/copy/baddir" ||
        fail "the unreadable directory has contents in the copy"
    rmdir "$T/out/copy/baddir" 2>/dev/null || true
    diff -r "$T/ref" "$T/out/copy" || fail "the readable part of the tree was not copied whole"
    no_temp_files "$T/out"
}

# --delete never takes what the source could not read for gone: a
# directory that lost an entry to an error (its listing, or a file that
# could not be read) is spared whole (rsync stops deleting after an I/O
# error), while the directories read whole are pruned as before. Local
# (as nobody, who cannot read baddir) and through ssh (the walker's second
# directory open fails: the DIR_END's INCOMPLETE crosses the wire to the
# far sink).
case_delete_unreadable() {
    local src=$T/src
    mkdir -p "$src/sub" "$src/baddir" "$src/lk" "$T/out"
    mkfile "$src/f" 1000
    mkfile "$src/sub/a" 1000
    mkfile "$src/baddir/x" 10
    mkfile "$src/lk/ok" 10
    mkfile "$src/lk/secret" 10
    expect_exit 0 "$PCOPY" -r -p -u "$src" "$T/out/"
    echo stale >"$T/out/src/stale"
    echo stale >"$T/out/src/sub/stale"
    echo stale >"$T/out/src/lk/stale"
    chown -R nobody:nogroup "$T/out"
    chmod 000 "$src/baddir" "$src/lk/secret"
    touch "$src/lk/secret" # so that -u reads it again
    # A FIFO without -p is left out by the rules, not for an error: it
    # does not spare its directory.
    mkfifo "$src/sub/fifo"
    expect_exit 3 "${AS_NOBODY[@]}" "$PCOPY" -r -u --delete "$src" "$T/out/"
    stderr_line_has "$src/baddir" "Permission denied"
    expect_stderr_contains "--delete: nothing deleted in '$T/out/src', which the source could not read whole"
    [[ -f $T/out/src/baddir/x ]] || fail "--delete removed what the source could not read"
    [[ -f $T/out/src/stale ]] || fail "--delete pruned a directory the source could not read whole"
    # A file that could not be read spares its directory as well.
    stderr_line_has "$src/lk/secret" "Permission denied"
    expect_stderr_contains "--delete: nothing deleted in '$T/out/src/lk', where an entry was not copied"
    [[ -f $T/out/src/lk/stale ]] || fail "--delete pruned a directory where a file could not be read"
    [[ ! -e $T/out/src/sub/stale ]] || fail "--delete spared a directory read whole"
    expect_stderr_lacks "nothing deleted in '$T/out/src/sub'"
    chmod 755 "$src/baddir"
    rm -rf "$src/lk"
    # Through ssh: src holds one directory, the walker's second open.
    rm -rf "$src/sub"
    mkdir -p "$T/far"
    expect_exit 0 "$PCOPY" -r -p -u "$src" "pctest:$T/far/"
    echo stale >"$T/far/src/stale"
    expect_exit 3 env PCOPY_TEST_FAULT=walk_opendir:2 "$PCOPY" -r -u --delete "$src" "pctest:$T/far/"
    stderr_line_has "$src/baddir" "Permission denied"
    expect_stderr_contains "nothing deleted in '$T/far/src'"
    [[ -f $T/far/src/baddir/x && -f $T/far/src/stale ]] ||
        fail "--delete through ssh removed what the source could not read"
    expect_exit 0 "$PCOPY" -r -u --delete "$src" "pctest:$T/far/"
    [[ ! -e $T/far/src/stale && -f $T/far/src/baddir/x ]] ||
        fail "a whole read did not prune, or pruned what the source has"
}

# What the walk saw is swapped for something else before it is read: a
# directory for a symlink to a directory the copy must not read (a root's
# copy of a user's tree would hand its files to that user), a file for a
# FIFO (whose open would wait for a writer forever, deaf to ^C). Both are
# refused by name, the rest is copied, exit 3, in good time.
case_swapped() {
    local pid
    # The secret lies beside the sources, beneath their parent (the base
    # they are opened from), where a symlink that stays beneath was followed.
    mkdir -p "$T/src/d" "$T/src/e" "$T/src/secret" "$T/out"
    mkfile "$T/src/big" 4M
    echo mine >"$T/src/d/v"
    echo mine >"$T/src/e/w"
    echo SECRET >"$T/src/secret/v"
    # The sources in this order: big is read first, for 8 s at 512 KiB/s.
    "$PCOPY" -r -s 1 -B 64k -x 512k "$T/src/big" "$T/src/d" "$T/src/e" "$T/out/" \
        2>"$T/err" &
    pid=$!
    track_pid "$pid"
    wait_until 30 test -d "$T/out/e" || fail "the copy made no directory e"
    mv "$T/src/d" "$T/src/d.orig"
    ln -s secret "$T/src/d"
    rm "$T/src/e/w"
    mkfifo "$T/src/e/w"
    wait_exit 60 "$pid" || fail "pcopy did not finish in 60 s (a FIFO waited on?)"
    [[ $WAIT_RC -eq 3 ]] || fail "exit $WAIT_RC, wanted 3: $(cat "$T/err")"
    LAST_STDERR=$T/err
    stderr_line_has "$T/src/d/v" "beyond a symbolic link"
    stderr_line_has "$T/src/e/w" "no longer a regular file"
    ! grep -rq SECRET "$T/out" || fail "the copy read through the swapped-in symlink"
    same_file "$T/src/big" "$T/out/big"
    no_temp_files "$T/out"
}

# fill_tree DIR: 40 files of 100 KiB in DIR and DIR/d (4 MB), and a 3 MiB one.
fill_tree() {
    local i
    mkdir -p "$1/d"
    for ((i = 0; i < 20; i++)); do
        mkfile "$1/f$i" 100k
        mkfile "$1/d/g$i" 100k
    done
    mkfile "$1/d/big" 3M
}

case_disk_full() {
    fill_tree "$T/src"
    mount_tmpfs "$T/full" size=2m
    expect_fail "$PCOPY" -r -s 4 "$T/src" "$T/full/copy"
    wait_no_temp_files "$T/full"
    complete_files "$T/src" "$T/full/copy"
    expect_rc 11
    expect_stderr_contains "No space left on device"
    expect_stderr_contains "$T/full/copy"
    # Through ssh, onto the remote side's full disk.
    rm -rf "${T:?}/full/copy"
    expect_fail "$PCOPY" -r -s 4 "$T/src" "pctest:$T/full/copy"
    wait_no_temp_files "$T/full"
    complete_files "$T/src" "$T/full/copy"
    expect_rc 11
    expect_stderr_contains "No space left on device"
}

# _receiving_or_gone PID DST: pcopy PID writes into DST, or has exited.
_receiving_or_gone() {
    proc_gone "$1" || receiving "$2" 2>/dev/null
}

# truncate_when_receiving PID DST FILE: once pcopy PID writes into DST,
# truncate FILE to 1 MiB. Writes to $T/truncated.when whether that was
# "during" the copy or "late" (pcopy had already exited).
truncate_when_receiving() {
    wait_until 60 _receiving_or_gone "$1" "$2" || true
    if proc_gone "$1"; then
        echo late >"$T/truncated.when"
    else
        echo during >"$T/truncated.when"
    fi
    truncate -s 1M "$3"
}

case_truncated() {
    local pid rc
    mkdir -p "$T/src/sub"
    mkfile "$T/src/big" 128M
    mkfile "$T/src/sub/small" 5000
    cp "$T/src/big" "$T/saved"
    "$PCOPY" -r -B 4k -s 1 -w 4k "$T/src" "$T/dst" 2>"$T/err" &
    pid=$!
    track_pid "$pid"
    truncate_when_receiving "$pid" "$T/dst" "$T/src/big"
    wait_exit 120 "$pid" || fail "pcopy did not finish in 120 s"
    rc=$WAIT_RC
    LAST_STDERR=$T/err
    log "truncated $(cat "$T/truncated.when") the copy; exit $rc"
    same_file "$T/src/sub/small" "$T/dst/sub/small"
    if [[ -e $T/dst/big ]]; then
        # A whole state of the file: before the truncation, or after it.
        cmp -s "$T/saved" "$T/dst/big" || cmp -s "$T/src/big" "$T/dst/big" ||
            fail "dst/big ($(stat -c %s "$T/dst/big") bytes) is neither the file before nor after its truncation"
        [[ $rc -eq 0 ]] || fail "exit $rc, though every file was copied: $(cat "$T/err")"
    else
        [[ $rc -eq 3 ]] || fail "exit $rc without dst/big, wanted 3: $(cat "$T/err")"
        expect_stderr_contains "$T/src/big"
    fi
    no_temp_files "$T/dst"
}

# delete_slowly DIR...: remove each DIR one leaf directory (about 100 files)
# at a time, so that the walk meets the deletions over a while.
delete_slowly() {
    local d leaf
    for d in "$@"; do
        for leaf in "$d"/*/; do
            find "$leaf" -delete 2>/dev/null || true
        done
        rm -rf "$d"
    done
}

case_vanishing() {
    local pid rc d gone=() kept=()
    "$ROOT/tools/mktree" --seed 2 --files 5000 --min 1 --max 1K "$T/src" 2>/dev/null ||
        fail "tools/mktree could not write $T/src"
    # Files are only deleted, never changed: hard links keep the originals.
    cp -al "$T/src" "$T/saved"
    for d in "$T"/src/d0*; do
        if (($((10#${d##*/d} % 2)) == 0)); then gone+=("$d"); else kept+=("${d##*/}"); fi
    done
    "$PCOPY" -r -s 2 "$T/src" "$T/dst" 2>"$T/err" &
    pid=$!
    track_pid "$pid"
    wait_until 60 _receiving_or_gone "$pid" "$T/dst" || true
    proc_gone "$pid" && log "the copy was over before the deletions began"
    delete_slowly "${gone[@]}"
    wait_exit 120 "$pid" || fail "pcopy did not finish in 120 s"
    rc=$WAIT_RC
    log "the copy of a vanishing tree exited $rc; $(wc -l <"$T/err") lines on stderr"
    [[ $rc -eq 0 || $rc -eq 3 ]] || fail "exit $rc, wanted 0 or 3: $(head -n 20 "$T/err")"
    [[ $rc -eq 0 || -s $T/err ]] || fail "exit 3 without a message"
    [[ -d $T/dst ]] || fail "nothing was copied"
    complete_files "$T/saved" "$T/dst"
    for d in "${kept[@]}"; do
        diff -r "$T/saved/$d" "$T/dst/$d" >/dev/null || fail "$d, which nobody touched, was not copied whole"
    done
    no_temp_files "$T/dst"
}

run_case unreadable case_unreadable
run_case swapped case_swapped
run_case delete_unreadable case_delete_unreadable
run_case disk_full case_disk_full
run_case truncated case_truncated
run_case vanishing case_vanishing
finish
