#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_tree_hostile: a source that lies (issue #10). The remote end of an ssh
# pull is tests/e2e/evil_source.c instead of pcopy: `pcopy -r -p -H
# --remote-pcopy WRAPPER 127.0.0.1:a ... DST` runs WRAPPER, which runs
# `evil_source SCENARIO OUTSIDE "$@"`. It speaks protocol version 3 with its
# own encoder and sends:
#   benign    a valid little tree, with a symlink pointing at OUTSIDE: copied,
#             exit 0 (the control: the encoder is right, so the refusals
#             below come from the hostile entries);
#   symlink   SYMLINK a -> OUTSIDE, then REG a/passwd, DIR a/sub, SYMLINK a/l,
#             HARDLINK a/h and a top-level HARDLINK b, both to a/passwd. All
#             valid on the wire: the sink must refuse every entry beneath the
#             symlink (each named on stderr), never write through it;
#   error-text  an ERROR whose text holds a newline, an escape sequence and a
#             carriage return: printed escaped, on one line;
#   dotdot, absolute, empty, dot, trailing: a path with "..", a leading
#             '/', an empty component, a "." component, a trailing '/': a
#             protocol error (exit 2), with a message naming the path.
# In every case nothing appears in, or changes in, OUTSIDE (a directory
# holding a file `passwd` that a hard link could otherwise reach), and
# nothing appears in the test's directory outside DST.
source "$PCOPY_TEST_LIB"
needs_root "it runs an sshd that logs in as root"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"

: "${PCOPY_EVIL_SOURCE:?PCOPY_EVIL_SOURCE must name the evil_source program (ctest sets it)}"
[[ -x $PCOPY_EVIL_SOURCE ]] || fail "PCOPY_EVIL_SOURCE=$PCOPY_EVIL_SOURCE is not an executable"

sshd_start

# evil_setup SCENARIO: OUTSIDE ($T/outside, with passwd in it), DST ($T/dst,
# empty) and WRAP (the --remote-pcopy script) for SCENARIO; records what
# OUTSIDE and $T hold, for evil_check.
evil_setup() {
    OUTSIDE=$T/outside
    DST=$T/dst
    WRAP=$T/evil-$1.sh
    mkdir -p "$OUTSIDE" "$DST"
    echo "root:x:0:0:the real one:/root:/bin/sh" >"$OUTSIDE/passwd"
    printf '#!/bin/sh\nexec %q %q %q "$@"\n' "$PCOPY_EVIL_SOURCE" "$1" "$OUTSIDE" >"$WRAP"
    chmod 0755 "$WRAP"
    snapshot "$OUTSIDE" >"$T/outside.before"
    find "$T" -mindepth 1 -maxdepth 1 -printf "%f\n" >"$T/top.before"
}

# snapshot DIR: every entry under DIR with its type, inode, link count, size,
# mode and mtime.
snapshot() {
    find "$1" -printf '%y %i %n %s %m %T@ %P\n' | sort
}

# evil_check: OUTSIDE is as it was, and $T holds nothing new but stderr
# files (escape, abs, a stray copy ...).
evil_check() {
    local extra
    if ! diff <(snapshot "$OUTSIDE") "$T/outside.before" >&2; then
        fail "$OUTSIDE changed during the copy (above: now <, before >)"
    fi
    extra=$(find "$T" -mindepth 1 -maxdepth 1 -printf "%f\n" | grep -vxF -f "$T/top.before" | grep -vE '^(fail-)?stderr\.' || true)
    [[ -z $extra ]] || fail "new entries appeared next to the destination: $extra"
}

# evil_pull SCENARIO CODES SOURCES...: pull SOURCES (127.0.0.1:PATH) into DST
# from evil_source SCENARIO; the exit status is one of CODES.
evil_pull() {
    local scenario=$1 codes=$2
    shift 2
    evil_setup "$scenario"
    # In clear: evil_source speaks no TLS, and the entries are what is tested.
    expect_exit "$codes" "$PCOPY" -r -p -H -s 2 --no-encrypt --remote-pcopy "$WRAP" "$@" "$DST"
    evil_check
}

case_benign() {
    evil_pull benign 0 127.0.0.1:a
    [[ -f $DST/a/f && -d $DST/a/d ]] || fail "the benign tree was not copied: $(ls -R "$DST")"
    [[ -L $DST/a/l && $(readlink "$DST/a/l") == "$OUTSIDE" ]] ||
        fail "a/l is not the symlink to $OUTSIDE it should be"
}

case_symlink() {
    local p
    evil_pull symlink 3 127.0.0.1:a 127.0.0.1:b
    # The symlink itself is a valid entry and may be there; nothing else
    # went through it (evil_check), and every entry beneath it is refused.
    for p in a/passwd a/sub a/l a/h; do
        expect_stderr_contains "$p"
    done
    expect_stderr_lacks "protocol"
    [[ ! -e $DST/b ]] || [[ $(stat -c %i "$DST/b") != "$(stat -c %i "$OUTSIDE/passwd")" ]] ||
        fail "$DST/b is a hard link to $OUTSIDE/passwd"
    [[ -z $(find "$DST" -samefile "$OUTSIDE/passwd" 2>/dev/null) ]] ||
        fail "a name in $DST reaches $OUTSIDE/passwd"
    if [[ -e $DST/a && ! -L $DST/a ]]; then
        fail "$DST/a is not the symlink the source sent"
    fi
}

# case_bad_path SCENARIO PATH-IN-MESSAGE: a protocol error naming the path.
case_bad_path() {
    evil_pull "$1" 2 127.0.0.1:a
    expect_stderr_contains "$2"
    [[ ! -e $T/escape && ! -e $OUTSIDE/abs && ! -e $DST/a/x && ! -e $DST/x ]] ||
        fail "the entry with the bad path was written"
}

# The far end's ERROR text reaches the user escaped: one line, control
# characters as \xNN, no line of its own forged, no escape sequence.
case_error_text() {
    evil_pull error-text 1,2,3,10,11 127.0.0.1:a
    expect_stderr_contains 'no such file\x0a\x1b[2Jpcopy: 0 bytes in 0 files, done\x0d'
    ! grep -q $'\x1b' "$LAST_STDERR" || fail "an escape character reached the terminal"
    ! grep -q $'\r' "$LAST_STDERR" || fail "a carriage return reached the terminal"
    ! grep -q '^pcopy: 0 bytes in 0 files, done' "$LAST_STDERR" || fail "the peer forged a line"
}

run_case benign case_benign
run_case error-text case_error_text
run_case symlink case_symlink
run_case dotdot case_bad_path dotdot "a/../../escape"
run_case absolute case_bad_path absolute "/abs"
run_case empty case_bad_path empty "a//x"
run_case dot case_bad_path dot "a/./x"
run_case trailing case_bad_path trailing "a/x/"
finish
