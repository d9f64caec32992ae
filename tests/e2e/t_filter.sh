#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_filter: --exclude, --include and --exclude-from leave out exactly what
# their rules say, in every mode: a local copy, a push and a pull through
# ssh, a push and a pull with a daemon, a third-party copy and one relayed
# through the client (-3). The rules exercise each form pcopy(1) documents:
# a last-component glob, an include that wins because it comes first, a
# directory-only pattern (a file of that name is copied), an anchored
# pattern with "**", and a rules file with comments, "+ "/"- " lines and
# CRLF line ends. Bad rules are refused with a message that names the
# option, the file and the line.
source "$PCOPY_TEST_LIB"
needs_root "it runs an sshd that logs in as root"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"

# make_tree DIR: what the rules below pick from.
make_tree() {
    local d=$1
    mkdir -p "$d/a/build" "$d/b" "$d/build" "$d/logs/2026"
    echo c >"$d/a/x.c"
    echo o >"$d/a/x.o"
    echo k >"$d/a/keep.o"
    echo t >"$d/a/build.txt"
    echo y >"$d/a/build/y"
    echo f >"$d/b/build"        # a file named build: 'build/' spares it
    echo out >"$d/build/out"
    echo l >"$d/logs/2026/a.log"
    echo l >"$d/logs/b.log"     # "**" then '/' needs a directory between
    echo k >"$d/logs/keep.txt"
    mkfile "$d/a/big.o" 2M       # blocks of an excluded file never travel
}

# The rules, on the command line and in a file.
RULES=(--include keep.o --exclude '*.o' --exclude 'build/' --exclude '/src/logs/**/*.log')

# What is left of make_tree's tree under those rules, every path below it.
WANT='./a
./a/build.txt
./a/keep.o
./a/x.c
./b
./b/build
./logs
./logs/2026
./logs/b.log
./logs/keep.txt'

# expect_filtered DIR: DIR holds exactly WANT, with the source's bytes.
expect_filtered() {
    local got
    got=$(cd "$1" && find . -mindepth 1 | LC_ALL=C sort)
    [[ $got == "$WANT" ]] || fail "$1 holds:"$'\n'"$got"$'\n'"not:"$'\n'"$WANT"
    for f in a/build.txt a/keep.o a/x.c b/build logs/b.log logs/keep.txt; do
        cmp -s "$2/$f" "$1/$f" || fail "$1/$f differs from $2/$f"
    done
}

# filter_mode LSRC SRC_SPEC DST_SPEC LDST ARGS...: copy with the rules
# through one mode (LSRC named "src"; the copy appears in LDST/src), check
# it, and that the excluded 2 MiB did not travel.
filter_mode() {
    local lsrc=$1 src=$2 dst=$3 ldst=$4/src bytes
    shift 4
    expect_exit 0 "$PCOPY" -r -s 3 --json="$T/j" "${RULES[@]}" "$src" "$dst" "$@"
    expect_filtered "$ldst" "$lsrc"
    bytes=$(jget "$T/j" 'j["bytes"]')
    ((bytes < 1000)) || fail "$bytes bytes of file data moved: an excluded file travelled"
}

case_local() {
    make_tree "$T/src"
    mkdir "$T/dst"
    filter_mode "$T/src" "$T/src" "$T/dst/" "$T/dst"
    # The order decides: with the include after the exclude, keep.o goes.
    mkdir "$T/dst2"
    expect_exit 0 "$PCOPY" -r --exclude '*.o' --include keep.o "$T/src" "$T/dst2/"
    [[ ! -e $T/dst2/src/a/keep.o ]] || fail "an include after the exclude brought keep.o back"
    # A top-level source is tested too: excluded, it is left out silently.
    mkdir "$T/dst3"
    expect_exit 0 "$PCOPY" -r --exclude '*.c' "$T/src/a/x.c" "$T/src/b" "$T/dst3/"
    [[ ! -e $T/dst3/x.c && -f $T/dst3/b/build ]] || fail "a top-level source was not filtered"
}

case_rules_file() {
    make_tree "$T/src"
    mkdir "$T/dst" "$T/dst2"
    # The same rules as RULES, as a file: a bare pattern excludes.
    printf '# rules for t_filter\r\n\r\n; another comment\n+ keep.o\r\n*.o\n- build/\n- /src/logs/**/*.log\n' \
        >"$T/rules"
    expect_exit 0 "$PCOPY" -r --exclude-from "$T/rules" "$T/src" "$T/dst/"
    expect_filtered "$T/dst/src" "$T/src"
    # From standard input, and mixed with options (in order).
    expect_exit 0 "$PCOPY" -r --include keep.o --exclude-from - "$T/src" "$T/dst2/" \
        < <(printf '*.o\nbuild/\n/src/logs/**/*.log\n')
    expect_filtered "$T/dst2/src" "$T/src"
}

case_bad_rules() {
    make_tree "$T/src"
    expect_exit 1 "$PCOPY" -r --exclude '' "$T/src" "$T/dst"
    expect_stderr_contains "pcopy: --exclude: a pattern of 1 to 1022 bytes is needed, not 0 bytes"
    expect_exit 1 "$PCOPY" -r --exclude-from "$T/missing" "$T/src" "$T/dst"
    expect_stderr_contains "pcopy: --exclude-from: cannot read '$T/missing': No such file or directory"
    { echo ok; head -c 1023 /dev/zero | tr '\0' x; echo; } >"$T/long"
    expect_exit 1 "$PCOPY" -r --exclude-from "$T/long" "$T/src" "$T/dst"
    expect_stderr_contains "pcopy: --exclude-from '$T/long', line 2: a pattern of 1 to 1022 bytes is needed, not 1023 bytes"
    seq 1 257 | sed 's/^/p/' >"$T/many"
    expect_exit 1 "$PCOPY" -r --exclude-from "$T/many" "$T/src" "$T/dst"
    expect_stderr_contains "pcopy: --exclude-from '$T/many', line 257: too many filter rules: at most 256 rules"
    [[ ! -e $T/dst ]] || fail "a refused command wrote $T/dst"
}

case_ssh() {
    make_tree "$T/push/src"
    make_tree "$T/pull/src"
    mkdir "$T/pushed" "$T/pulled"
    filter_mode "$T/push/src" "$T/push/src" "pctest:$T/pushed/" "$T/pushed"
    filter_mode "$T/pull/src" "pctest:$T/pull/src" "$T/pulled/" "$T/pulled"
}

case_third_party() {
    make_tree "$T/direct/src"
    make_tree "$T/relayed/src"
    mkdir "$T/d1" "$T/d3"
    filter_mode "$T/direct/src" "h1:$T/direct/src" "h2:$T/d1/" "$T/d1"
    filter_mode "$T/relayed/src" "h1:$T/relayed/src" "h2:$T/d3/" "$T/d3" -3
}

case_daemon() {
    mkdir -p "$T/root/in" "$T/pulled"
    make_tree "$T/src"
    make_tree "$T/root/out/src"
    start_daemon "$T/root"
    filter_mode "$T/src" "$T/src" "$DAEMON_URL/in/" "$T/root/in" --key-file "$DAEMON_KEY"
    filter_mode "$T/root/out/src" "$DAEMON_URL/out/src" "$T/pulled/" "$T/pulled" \
        --key-file "$DAEMON_KEY"
}

sshd_start
run_case local case_local
run_case rules-file case_rules_file
run_case bad-rules case_bad_rules
run_case ssh case_ssh
run_case third-party case_third_party
run_case daemon case_daemon
finish
