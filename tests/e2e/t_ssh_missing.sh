#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_ssh_missing: a copy of several sources of which some cannot be opened
# (missing, or a directory) copies the others and exits 3, the same way in
# every direction: push (local -> ssh), pull (ssh -> local) and a
# third-party copy (h1 -> h2), with the bad source first, in the middle
# and last, and with every source bad. Each source not copied is named
# once on stderr, with the host of a remote one and the reason; the others
# arrive byte-identical; nothing appears under the name of a bad source,
# and no temporary file is left. (A pull from a daemon: t_daemon.sh.)
source "$PCOPY_TEST_LIB"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"
needs_root "it runs an sshd that logs in as root"

sshd_start

NAMES=(a b c)

# make_sources DIR: a (3 MiB: blocks on every stream), b and c.
make_sources() {
    mkdir -p "$1"
    mkfile "$1/a" 3M
    mkfile "$1/b" 1000
    mkfile "$1/c" 77777
}

# named_once TEXT [HOST]: exactly one line of the last stderr contains TEXT,
# and that line also names HOST (when given).
named_once() {
    local n line
    n=$(grep -cF -- "$1" "$LAST_STDERR" || true)
    if [[ $n -ne 1 ]]; then
        sed 's/^/  stderr: /' "$LAST_STDERR" >&2
        fail "'$1' is named $n times on stderr, not once"
    fi
    line=$(grep -F -- "$1" "$LAST_STDERR")
    [[ -z ${2-} || $line == *"$2"* ]] || fail "the line naming '$1' does not name the host $2: $line"
}

# check_partial SRC DST BAD REASON [HOST]: the last command copied every
# name of NAMES but BAD from SRC into the directory DST, exited 3, named
# SRC/BAD once (with HOST and REASON), and wrote nothing else into DST.
check_partial() {
    local src=$1 dst=$2 bad=$3 reason=$4 host=${5-} f want=() got
    [[ $LAST_RC -eq 3 ]] || fail "exit status $LAST_RC, wanted 3"
    named_once "'$src/$bad'" "$host"
    expect_stderr_contains "'$src/$bad': $reason"
    expect_stderr_contains "1 of 3 files were not copied"
    for f in "${NAMES[@]}"; do
        [[ $f == "$bad" ]] && continue
        same_file "$src/$f" "$dst/$f"
        want+=("$f")
    done
    no_temp_files "$dst"
    got=$(cd "$dst" && find . -mindepth 1 -printf '%P\n' | sort | tr '\n' ' ')
    [[ $got == "${want[*]} " ]] || fail "$dst holds '$got', wanted '${want[*]} '"
}

# sources_with SRC POS BAD: the names of NAMES under SRC, with the one at
# POS replaced by BAD; one per line.
sources_with() {
    local i
    for i in "${!NAMES[@]}"; do
        if [[ $i -eq $2 ]]; then
            echo "$1/$3"
        else
            echo "$1/${NAMES[i]}"
        fi
    done
}

# missing_each_position push|pull: for each position of the three
# sources, moves that source away, copies the three in the given
# direction and checks that the other two arrive (check_partial).
missing_each_position() {
    local dir=$1 pos srcs from dst to host=()
    make_sources "$T/src"
    for pos in 0 1 2; do
        # The missing source takes the name of the one it replaces.
        mv "$T/src/${NAMES[pos]}" "$T/src/${NAMES[pos]}.away"
        if [[ $dir == push ]]; then
            from=$T/src dst=$T/remote.$pos to=pctest:$T/remote.$pos/
        else
            from=pctest:$T/src dst=$T/back.$pos to=$T/back.$pos host=(pctest)
        fi
        mkdir -p "$dst"
        mapfile -t srcs < <(sources_with "$from" "$pos" "${NAMES[pos]}")
        expect_exit 3 "$PCOPY" -s 4 "${srcs[@]}" "$to"
        check_partial "$T/src" "$dst" "${NAMES[pos]}" "No such file or directory" "${host[@]}"
        mv "$T/src/${NAMES[pos]}.away" "$T/src/${NAMES[pos]}"
    done
    wait_until 10 sshd_no_remote_pcopy || fail "remote pcopy processes are left: $(sshd_remote_pids)"
}

case_push_missing() { missing_each_position push; }
case_pull_missing() { missing_each_position pull; }

case_pull_directory() {
    # A source that exists but cannot be copied: a directory.
    local srcs
    make_sources "$T/src"
    mv "$T/src/b" "$T/src/b.away"
    mkdir "$T/src/b"
    mkdir -p "$T/back"
    mapfile -t srcs < <(sources_with "pctest:$T/src" 1 b)
    expect_exit 3 "$PCOPY" -s 2 "${srcs[@]}" "$T/back"
    named_once "'$T/src/b'" pctest
    expect_stderr_contains "omitting directory '$T/src/b'"
    same_file "$T/src/a" "$T/back/a"
    same_file "$T/src/c" "$T/back/c"
    [[ ! -e $T/back/b ]] || fail "$T/back/b was created from a directory"
    no_temp_files "$T/back"
}

case_all_missing() {
    # Nothing can be opened: nothing is copied, and the exit status is
    # still 3, both ways.
    mkdir -p "$T/src" "$T/remote" "$T/back"
    expect_exit 3 "$PCOPY" -s 2 "$T/src/x" "$T/src/y" "pctest:$T/remote/"
    named_once "'$T/src/x'"
    named_once "'$T/src/y'"
    dir_is_empty "$T/remote" || fail "files appeared in $T/remote: $(ls -A "$T/remote")"
    expect_exit 3 "$PCOPY" -s 2 "pctest:$T/src/x" "pctest:$T/src/y" "$T/back"
    named_once "'$T/src/x'" pctest
    named_once "'$T/src/y'" pctest
    expect_stderr_contains "2 of 2 files were not copied"
    dir_is_empty "$T/back" || fail "files appeared in $T/back: $(ls -A "$T/back")"
    # One missing source to a new file name: no file of that name.
    expect_exit 3 "$PCOPY" "pctest:$T/src/x" "$T/back/new"
    named_once "'$T/src/x'" pctest
    [[ ! -e $T/back/new ]] || fail "$T/back/new was created"
    wait_until 10 sshd_no_remote_pcopy || fail "remote pcopy processes are left: $(sshd_remote_pids)"
}

case_third_party_missing() {
    local srcs
    make_sources "$T/src"
    mv "$T/src/b" "$T/src/b.away"
    mkdir -p "$T/dst"
    mapfile -t srcs < <(sources_with "h1:$T/src" 1 b)
    expect_exit 3 "$PCOPY" -s 4 "${srcs[@]}" "h2:$T/dst/"
    check_partial "$T/src" "$T/dst" b "No such file or directory" h1
    wait_until 10 sshd_no_remote_pcopy || fail "remote pcopy processes are left: $(sshd_remote_pids)"
}

run_case push-missing case_push_missing
run_case pull-missing case_pull_missing
run_case pull-directory case_pull_directory
run_case all-missing case_all_missing
run_case third-party-missing case_third_party_missing
finish
