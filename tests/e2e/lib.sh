# SPDX-License-Identifier: Apache-2.0
# lib.sh: helpers for the pcopy end-to-end tests.
#
# Each tests/e2e/t_*.sh starts with
#
#   source "$PCOPY_TEST_LIB"
#
# and ends with `finish`. ctest sets the environment:
#   PCOPY           the pcopy binary under test
#   PCOPY_TEST_TMP  a scratch directory shared by all tests
#   PCOPY_TEST_LIB  this file
#   PCOPY_SHIM      corrupt_shim.so, an LD_PRELOAD library that flips a byte
#                   in a big sendmsg() once PCOPY_CORRUPT_AFTER bytes were sent
# Optional:
#   PCOPY_TEST_KEEP=1      keep the scratch directory of a failed test
#   PCOPY_TEST_CMD_TIMEOUT seconds one command under expect_exit may take
#                          (default 120, times $SLOW)
#   PCOPY_TEST_CASES       run only the cases whose names match one of these
#                          shell patterns (separated by spaces or commas),
#                          e.g. PCOPY_TEST_CASES='bastion open-*'; the test
#                          fails when they match no case at all
#
# A test that cannot run here calls `skip_test REASON` (or, for the tests
# that need root, `needs_root REASON` right after sourcing this file): it
# exits with status 77, which ctest reports as skipped (SKIP_RETURN_CODE),
# never as passed, and tests/run-all counts as a failure. ctest labels a
# script that calls needs_root "root", so `ctest -LE root` leaves it out.
#
# A script is a list of cases. `run_case NAME FUNCTION [ARGS...]` runs one in a
# subshell with errexit on: `fail` or any failing command ends that case only,
# and the script goes on with the next one, so one bug does not hide the
# results of the other cases. `finish` prints "ok: <test>" when every case
# passed, and otherwise lists the failed cases and exits 1.
#
# Processes, daemons and mounts are recorded in files under the scratch
# directory (not in shell variables), so that the ones a case starts in its
# subshell are still cleaned up by the EXIT trap of the main shell.

set -euo pipefail
# The last command of a pipeline runs in this shell, so that
# `producer | expect_exit ...` keeps LAST_STDERR and LAST_RC.
shopt -s lastpipe

: "${PCOPY:?PCOPY must name the pcopy binary (ctest sets it)}"
: "${PCOPY_TEST_TMP:?PCOPY_TEST_TMP must name a scratch directory (ctest sets it)}"
[[ -x $PCOPY ]] || { echo "FAIL: PCOPY=$PCOPY is not an executable" >&2; exit 1; }

TEST_NAME=$(basename "$0" .sh)
# PROTO_VERSION: the protocol version pcopy speaks, from src/wire/proto.h,
# for the tests that write or read its bytes by hand.
PROTO_VERSION=$(sed -n 's/^#define PROTO_VERSION \([0-9]*\)u.*/\1/p' \
    "${BASH_SOURCE[0]%/*}/../../src/wire/proto.h")
[[ $PROTO_VERSION =~ ^[0-9]+$ ]] ||
    { echo "FAIL: no PROTO_VERSION in src/wire/proto.h" >&2; exit 1; }
mkdir -p "$PCOPY_TEST_TMP"
# T: this test's scratch directory. Mode 0755 so that the unprivileged user
# of the permission tests can reach files in it.
T=$PCOPY_TEST_TMP/$TEST_NAME.$$
rm -rf "$T"
mkdir -p "$T"
chmod 0755 "$T"
_LIB_STATE=$T/.lib
# pcopy's per-user cache (the hosts whose direct data connections failed,
# roles/datamemo.h) stays in the scratch directory, one per case (run_case),
# beside the cases' directories rather than in them: never the caller's
# home, and no case depends on another's copies.
export XDG_CACHE_HOME=$_LIB_STATE/cache
mkdir -p "$_LIB_STATE"
: >"$_LIB_STATE/pids"
: >"$_LIB_STATE/daemons"
: >"$_LIB_STATE/mounts"
: >"$_LIB_STATE/loops"

# SLOW: factor for every wait and time limit; sanitizer builds run slower.
PCOPY_SANITIZER=none
SLOW=1
if grep -qa __tsan_init "$PCOPY"; then
    PCOPY_SANITIZER=thread
    SLOW=5
elif grep -qa __asan_init "$PCOPY"; then
    PCOPY_SANITIZER=address
    SLOW=3
fi
# A fixed umask, so that the mode checks do not depend on the caller's.
umask 022

# WITH_SIGINT: a command prefix that starts a program with SIGINT and
# SIGQUIT at their default. A script's background jobs start with them
# ignored; a user's pcopy, started from a terminal, does not.
WITH_SIGINT=(env)
if env --default-signal=INT,QUIT true 2>/dev/null; then
    WITH_SIGINT=(env --default-signal=INT,QUIT)
fi

_LIB_CASES_RUN=0
_LIB_CASES_FAILED=()
_LIB_CASES_LEFT_OUT=()
_LIB_START=$EPOCHREALTIME

# log MSG...: a progress note on stderr.
log() {
    printf '%s: %s\n' "$TEST_NAME" "$*" >&2
}

# fail MSG...: report a failed check and exit 1 (ends the current case).
fail() {
    printf 'FAIL: %s: %s\n' "$TEST_NAME" "$*" >&2
    exit 1
}

# E2E_SKIP_CODE: the exit status of a skipped test; ctest's SKIP_RETURN_CODE
# for the e2e tests (PCOPY_TEST_SKIP_CODE in tests/CMakeLists.txt).
E2E_SKIP_CODE=77

# skip_test REASON...: end the whole test as skipped, saying why. Only in the
# main shell: inside a case it would end that case only.
skip_test() {
    [[ $BASHPID == "$$" ]] || fail "skip_test called inside a case: $*"
    printf 'SKIP: %s: %s\n' "$TEST_NAME" "$*" >&2
    exit "$E2E_SKIP_CODE"
}

# needs_root REASON...: skip the test, saying why, unless it runs as root.
# tests/CMakeLists.txt gives every script with a line starting with
# `needs_root` the ctest label "root".
needs_root() {
    [[ $(id -u) -eq 0 ]] && return 0
    skip_test "needs root ($*); run it as root, or leave it out with: ctest -LE root"
}

# now: seconds since the epoch, with microseconds.
now() {
    printf '%s\n' "$EPOCHREALTIME"
}

# secs_since START: seconds elapsed since START (a `now` value), 0.1 s steps.
secs_since() {
    awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f\n", b - a }'
}

# to_bytes SIZE: SIZE with an optional k/M/G suffix (powers of 1024) as bytes.
to_bytes() {
    local s=$1 n mult=1
    case $s in
    *[kK]) n=${s%?} mult=1024 ;;
    *[mM]) n=${s%?} mult=$((1024 * 1024)) ;;
    *[gG]) n=${s%?} mult=$((1024 * 1024 * 1024)) ;;
    *) n=$s ;;
    esac
    [[ $n =~ ^[0-9]+$ ]] || fail "to_bytes: bad size '$s'"
    echo $((n * mult))
}

# ---------------------------------------------------------------- processes

# _starttime PID: the start time of PID (field 22 of /proc/PID/stat), so
# that a recorded PID is never confused with a later process of that number.
_starttime() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    stat=${stat##*) }
    set -- $stat
    echo "${20}"
}

# track_pid PID: kill PID (TERM, then KILL) at the end of the case, or of
# the test.
track_pid() {
    echo "$1 $(_starttime "$1")" >>"$_LIB_STATE/pids"
}

# proc_gone PID: true when PID has exited (is gone or a zombie).
proc_gone() {
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
    stat=${stat##*) }
    [[ ${stat%% *} == Z ]]
}

# wait_until SECONDS CMD...: run CMD every 50 ms until it succeeds; return 1
# if it still fails after SECONDS (a whole number, times $SLOW). CMD may be a
# shell function.
wait_until() {
    local limit=$1 deadline
    shift
    [[ $limit =~ ^[0-9]+$ ]] || fail "wait_until: '$limit' is not a whole number of seconds"
    deadline=$((${EPOCHREALTIME/./} + limit * SLOW * 1000000))
    while :; do
        if "$@"; then
            return 0
        fi
        ((${EPOCHREALTIME/./} < deadline)) || return 1
        sleep 0.05
    done
}

# wait_exit SECONDS PID: wait for our child PID to exit, at most SECONDS
# (times $SLOW). Sets WAIT_RC to its exit status and returns 0; returns 1 and
# leaves PID running when it did not exit in time.
WAIT_RC=
wait_exit() {
    local limit=$1 pid=$2
    WAIT_RC=
    wait_until "$limit" proc_gone "$pid" || return 1
    WAIT_RC=0
    wait "$pid" || WAIT_RC=$?
    return 0
}

# stop_pid PID: TERM, then after 5 s KILL, our child PID, and reap it.
stop_pid() {
    local pid=$1 i
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        proc_gone "$pid" && break
        sleep 0.05
    done
    proc_gone "$pid" || kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
}

# slow_producer FIFO BYTES SECONDS [OUT]: in the background, write BYTES
# random bytes to FIFO (created if needed), then hold it open for SECONDS
# before closing it (EOF). With OUT, the bytes are also saved to OUT, so the
# copy can be compared. Sets PRODUCER_PID (killing it closes the FIFO).
PRODUCER_PID=
slow_producer() {
    local fifo=$1 bytes=$2 secs=$3 out=${4:-/dev/null}
    [[ -p $fifo ]] || mkfifo "$fifo"
    { head -c "$bytes" /dev/urandom | tee "$out"; exec sleep "$secs"; } >"$fifo" &
    PRODUCER_PID=$!
    track_pid "$PRODUCER_PID"
}

# ----------------------------------------------------------- command checks

# LAST_STDERR: the file holding the stderr of the last expect_exit command.
LAST_STDERR=
LAST_RC=
_LIB_N=0

# expect_exit CODES CMD...: run CMD (an executable, not a shell function),
# with its stderr captured to $LAST_STDERR, and check that its exit status is
# one of CODES (a comma-separated list, e.g. "0" or "1,11"). Prints the
# stderr when it is not. CMD gets a time limit; stdin and stdout pass through.
expect_exit() {
    local want=$1 limit rc=0
    shift
    _LIB_N=$((_LIB_N + 1))
    LAST_STDERR=$T/stderr.$BASHPID.$_LIB_N
    limit=$((${PCOPY_TEST_CMD_TIMEOUT:-120} * SLOW))
    timeout -k 10 "$limit" "$@" 2>"$LAST_STDERR" || rc=$?
    LAST_RC=$rc
    if [[ ,$want, != *,$rc,* ]]; then
        {
            printf 'command: '
            printf '%q ' "$@"
            printf '\n--- stderr:\n'
            cat "$LAST_STDERR"
            printf -- '---\n'
        } >&2
        if [[ $rc -eq 124 ]]; then
            fail "command did not finish in ${limit}s (wanted exit $want)"
        fi
        fail "exit status $rc, wanted $want: $*"
    fi
}

# expect_fail CMD...: like expect_exit, but any failure (non-zero, not a
# timeout) will do; the status and stderr are kept in FAIL_RC and
# FAIL_STDERR for a later expect_rc. For checks that must hold whatever the
# status is (nothing written, old file kept), done before the status check.
FAIL_RC= FAIL_STDERR=
expect_fail() {
    expect_exit 1,2,3,5,10,11,12,13,20,30 "$@"
    FAIL_RC=$LAST_RC
    FAIL_STDERR=$T/fail-stderr.$BASHPID.$_LIB_N
    cp "$LAST_STDERR" "$FAIL_STDERR"
}

# expect_rc CODES: the command of the last expect_fail exited with one of
# CODES; afterwards LAST_STDERR is its stderr again, for the stderr checks.
expect_rc() {
    LAST_STDERR=$FAIL_STDERR
    LAST_RC=$FAIL_RC
    if [[ ,$1, != *,$FAIL_RC,* ]]; then
        sed 's/^/  stderr: /' "$FAIL_STDERR" >&2
        fail "exit status $FAIL_RC, wanted $1"
    fi
}

# expect_stderr_contains TEXT: the last captured stderr contains TEXT.
expect_stderr_contains() {
    grep -qF -- "$1" "$LAST_STDERR" || {
        sed 's/^/  stderr: /' "$LAST_STDERR" >&2
        fail "stderr does not contain '$1'"
    }
}

# expect_stderr_matches REGEX: a line of the last stderr matches REGEX (ERE).
expect_stderr_matches() {
    grep -qE -- "$1" "$LAST_STDERR" || {
        sed 's/^/  stderr: /' "$LAST_STDERR" >&2
        fail "no stderr line matches /$1/"
    }
}

# expect_stderr_lacks TEXT: the last captured stderr does not contain TEXT.
expect_stderr_lacks() {
    if grep -qF -- "$1" "$LAST_STDERR"; then
        sed 's/^/  stderr: /' "$LAST_STDERR" >&2
        fail "stderr contains '$1'"
    fi
}

# expect_stderr_empty: the last command printed nothing on stderr.
expect_stderr_empty() {
    if [[ -s $LAST_STDERR ]]; then
        sed 's/^/  stderr: /' "$LAST_STDERR" >&2
        fail "stderr is not empty"
    fi
}

# expect_summary BYTES FILES STREAMS [SECURITY]: the last stderr has the
# summary line "pcopy: BYTES bytes in FILES file(s), S s, R MB/s, STREAMS
# stream(s), SECURITY", where SECURITY (a regex; default: any) is how the
# data travelled: "encrypted (TLS 1.3, CIPHER)" or "not encrypted (WHY)".
expect_summary() {
    local sec='(encrypted|not encrypted) \([^)]*\)'
    [[ -z ${4-} ]] || sec=$4
    expect_stderr_matches "^pcopy: $1 bytes in $2 files?, [0-9]+(\.[0-9]+)? s, [0-9]+(\.[0-9]+)? MB/s, $3 streams?, $sec\$"
}

# ------------------------------------------------------------- file checks

# mkfile PATH SIZE: a file of SIZE (bytes, or with k/M/G) random bytes.
mkfile() {
    head -c "$(to_bytes "$2")" /dev/urandom >"$1"
}

# flip_byte FILE OFFSET: inverts the bits of FILE's byte at OFFSET, in
# place: a change for sure, where writing a fixed byte into random data
# leaves it as it was once in 256 times.
flip_byte() {
    /usr/bin/python3 -c 'import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(int(sys.argv[2]))
    b = f.read(1)
    if len(b) != 1:
        sys.exit("flip_byte: offset %s is past the end of %s" % (sys.argv[2], sys.argv[1]))
    f.seek(int(sys.argv[2]))
    f.write(bytes([b[0] ^ 0xff]))' "$1" "$2" || fail "flip_byte $1 $2 failed"
}

# same_file A B: A and B exist and have the same size and SHA-256.
same_file() {
    [[ -f $1 ]] || fail "same_file: '$1' is missing"
    [[ -f $2 ]] || fail "same_file: '$2' is missing"
    local sa sb
    sa=$(stat -c %s "$1")
    sb=$(stat -c %s "$2")
    [[ $sa == "$sb" ]] || fail "'$2' has $sb bytes, '$1' has $sa"
    sa=$(sha256sum <"$1")
    sb=$(sha256sum <"$2")
    [[ $sa == "$sb" ]] || fail "'$2' differs from '$1' (sha256 ${sb%% *} vs ${sa%% *})"
}

# same_sparse_file A B: like same_file, but reads only the data extents of
# both files (SEEK_DATA/SEEK_HOLE), so a mostly-empty 5 GiB file compares in
# a moment. Bytes outside every extent of both files are holes (zeros) in
# both. Falls back to cmp when python3 is missing.
same_sparse_file() {
    [[ -f $1 && -f $2 ]] || fail "same_sparse_file: '$1' or '$2' is missing"
    if ! command -v python3 >/dev/null; then
        cmp -- "$1" "$2" >/dev/null || fail "'$2' differs from '$1'"
        return 0
    fi
    local why
    why=$(python3 - "$1" "$2" <<'EOF'
import os, sys

def extents(fd, size):
    """The data extents of fd as (start, end) pairs."""
    out, off = [], 0
    while off < size:
        try:
            start = os.lseek(fd, off, os.SEEK_DATA)
        except OSError:  # ENXIO: no data after off
            break
        end = os.lseek(fd, start, os.SEEK_HOLE)
        out.append((start, end))
        off = end
    return out

a, b = (os.open(p, os.O_RDONLY) for p in sys.argv[1:3])
size = os.fstat(a).st_size
if os.fstat(b).st_size != size:
    print(f"sizes differ: {size} vs {os.fstat(b).st_size}")
    sys.exit(1)
spans = sorted(extents(a, size) + extents(b, size))
merged = []
for s, e in spans:
    if merged and s <= merged[-1][1]:
        merged[-1][1] = max(merged[-1][1], e)
    else:
        merged.append([s, e])
for s, e in merged:
    off = s
    while off < e:
        n = min(1 << 20, e - off)
        if os.pread(a, n, off) != os.pread(b, n, off):
            print(f"contents differ in the 1 MiB at offset {off}")
            sys.exit(1)
        off += n
EOF
    ) || fail "'$2' differs from '$1': $why"
}

# mode_of PATH: the permission bits of PATH in octal, e.g. 644.
mode_of() {
    stat -c %a "$1"
}

# no_temp_files DIR: no .NAME.pcopy-XXXXXX temporary file is left in DIR.
no_temp_files() {
    local left
    left=$(find "$1" -name '.*.pcopy-*' 2>/dev/null || true)
    [[ -z $left ]] || fail "temporary files left in $1: $left"
}

# temp_files_gone DIR: true when DIR holds no temporary file (no failure).
temp_files_gone() {
    [[ -z $(find "$1" -name '.*.pcopy-*' 2>/dev/null || true) ]]
}

# wait_no_temp_files DIR: like no_temp_files, for a directory a daemon
# writes to: its session may still be removing its temporary file when the
# client has already exited, so wait up to 10 s for them to go.
wait_no_temp_files() {
    wait_until 10 temp_files_gone "$1" || no_temp_files "$1"
}

# receiving DIR [N]: at least N (default 1) files in DIR are being written
# by a pcopy process and already hold data. A file being received is either
# unnamed (O_TMPFILE: its link reads "DIR/#INODE (deleted)") or named
# .NAME.pcopy-XXXXXX, so look at the open files of the pcopy processes, not
# at the directory listing.
receiving() {
    local dir n=${2:-1} found=0 pid fd target flags size
    dir=$(cd "$1" && pwd -P) || return 1
    for pid in $(pgrep -x pcopy); do
        for fd in /proc/"$pid"/fd/*; do
            target=$(readlink "$fd" 2>/dev/null) || continue
            [[ $target == "$dir"/* ]] || continue
            # Open for writing: O_WRONLY or O_RDWR in the octal flags.
            flags=$(awk '/^flags:/ { print $2 }' "/proc/$pid/fdinfo/${fd##*/}" 2>/dev/null) || continue
            [[ -n $flags ]] && (((8#$flags & 3) != 0)) || continue
            size=$(stat -L -c %s "$fd" 2>/dev/null) || continue
            ((size > 0)) && found=$((found + 1))
        done
    done
    ((found >= n))
}

# has_temp_file DIR NAME: a temporary file for NAME exists in DIR.
has_temp_file() {
    compgen -G "$1/.$2.pcopy-*" >/dev/null
}

# dir_is_empty DIR: DIR has no entries at all.
dir_is_empty() {
    [[ -z $(find "$1" -mindepth 1 -print -quit) ]]
}

# journal_done JOURNAL: how many blocks a -a journal (.NAME.pcopy-jrnl)
# names as written: the bits set past its 48-byte header; 0 if it is not
# there.
journal_done() {
    [[ -f $1 ]] || { echo 0; return; }
    /usr/bin/python3 -c 'import sys
d = open(sys.argv[1], "rb").read()
print(sum(bin(b).count("1") for b in d[48:]))' "$1"
}

# journal_at_least JOURNAL N: the journal names at least N blocks.
journal_at_least() {
    (($(journal_done "$1") >= $2))
}

# pace_rest BYTES: a --bwlimit under which BYTES take 6 s (at least
# 1 MiB/s). A copy killed or cut with this much still to send cannot
# finish the file, from what was in flight, before the kill lands.
pace_rest() {
    local r=$(($1 / 6)) mib=$((1 << 20))
    echo $((r < mib ? mib : r))
}

# file_writers FILE: the pids of the pcopy processes that have FILE open.
# Without a fork per descriptor (-ef compares the inodes), so that it is
# quick on a loaded machine.
file_writers() {
    local pid fd
    [[ -e $1 ]] || return 0
    for pid in $(pgrep -x pcopy); do
        for fd in /proc/"$pid"/fd/*; do
            [[ $fd -ef $1 ]] && { echo "$pid"; break; }
        done
    done
    return 0
}

# file_held FILE: some pcopy process has FILE open.
file_held() {
    [[ -n $(file_writers "$1") ]]
}

# file_unheld FILE: no pcopy process has FILE open.
file_unheld() {
    [[ -z $(file_writers "$1") ]]
}

# ------------------------------------------------------------------- trees

# ODD_TREE_255: a 255-byte file name (the longest one component may have).
ODD_TREE_255=$(printf 'n%.0s' {1..255})

# make_odd_tree DIR: make DIR (it must not exist) holding one of every kind
# of entry a tree copy has to get right:
#   files/    regular files of 0, 1, 4095 and 1 MiB + 1 bytes, modes 0600
#             and 0755, and `sparse`: 64 MiB with 4 KiB of data at each end
#   empty/    an empty directory, and empty/inner/ another one in it
#   deep/     60 nested directories d1/d2/.../d60, a file at the bottom
#   names/    "with space", "new<LF>line", "-dash", $'\xff\xfe' (not
#             UTF-8), and a 255-byte name ($ODD_TREE_255)
#   links/    symlinks: rel -> ../files/one, abs -> /etc/hostname,
#             dangling -> no-such-target, todir -> ../deep (a directory)
#   hard/     two.a + sub/two.b (2 names of one file), three.a, three.b
#             and sub/three.c (3 names of another)
#   special/  fifo, a FIFO
#   ro/       mode 0555 with a file in it; private/: mode 0700
#   owned/    a directory, a file and a symlink owned by nobody:nogroup
#             (when run as root; otherwise left as they are)
# Every entry, DIR itself included, gets its own mtime with nanoseconds
# (from @1234567890.123456789 on, set last, deepest first, on the links
# themselves).
make_odd_tree() {
    local d=$1 p i t
    [[ ! -e $d ]] || fail "make_odd_tree: '$d' already exists"
    mkdir -p "$d"/{files,empty/inner,names,links,hard/sub,special,ro,private,owned}
    : >"$d/files/empty"
    mkfile "$d/files/one" 1
    mkfile "$d/files/f4095" 4095
    mkfile "$d/files/mib1" $((1048576 + 1))
    mkfile "$d/files/secret" 100
    chmod 0600 "$d/files/secret"
    printf '#!/bin/sh\necho odd\n' >"$d/files/script"
    chmod 0755 "$d/files/script"
    # 64 MiB, 4 KiB of data at offset 0 and 4 KiB at the end, a hole between.
    truncate -s 64M "$d/files/sparse"
    head -c 4096 /dev/urandom | dd of="$d/files/sparse" conv=notrunc status=none
    head -c 4096 /dev/urandom |
        dd of="$d/files/sparse" bs=4096 seek=$((64 * 256 - 1)) conv=notrunc status=none

    p=$d/deep
    for ((i = 1; i <= 60; i++)); do
        p=$p/d$i
    done
    mkdir -p "$p"
    echo bottom >"$p/leaf"

    echo space >"$d/names/with space"
    echo newline >"$d/names/new"$'\n'"line"
    echo dash >"$d/names/-dash"
    echo latin1 >"$d/names/"$'\xff\xfe'
    echo long >"$d/names/$ODD_TREE_255"

    ln -s ../files/one "$d/links/rel"
    ln -s /etc/hostname "$d/links/abs"
    ln -s no-such-target "$d/links/dangling"
    ln -s ../deep "$d/links/todir"

    mkfile "$d/hard/two.a" 3000
    ln "$d/hard/two.a" "$d/hard/sub/two.b"
    mkfile "$d/hard/three.a" 5000
    ln "$d/hard/three.a" "$d/hard/three.b"
    ln "$d/hard/three.a" "$d/hard/sub/three.c"

    mkfifo "$d/special/fifo"

    echo inside >"$d/ro/inside"
    chmod 0555 "$d/ro"
    echo private >"$d/private/file"
    chmod 0700 "$d/private"

    mkdir "$d/owned/dir"
    echo owned >"$d/owned/file"
    ln -s file "$d/owned/link"
    if [[ $(id -u) -eq 0 ]]; then
        chown -h nobody:nogroup "$d/owned/dir" "$d/owned/file" "$d/owned/link"
    fi

    # Times last: creating an entry changes its directory's mtime.
    i=0
    find "$d" -depth -print0 | while IFS= read -r -d '' p; do
        i=$((i + 1))
        t=$((1234567890 + i * 3607)).$(printf '%09d' $(((123456789 + i * 7919) % 1000000000)))
        touch -h -d "@$t" -- "$p"
    done
}

# tree_listing DIR [OWNER]: one NUL-terminated record per entry of DIR (DIR
# itself as ""): type, permission bits, mtime with nanoseconds, size for
# regular files, link count for non-directories, and with OWNER=1 the
# numeric owner and group, then the path. Sorted, so that two listings of
# the same tree compare equal with cmp.
tree_listing() {
    local fmt='%y %m %T@ %U:%G %s %n %P\0'
    [[ ${2-} == 1 ]] || fmt='%y %m %T@ %s %n %P\0'
    # The size and link count of a directory depend on the file system.
    find "$1" \( -type d -printf "${fmt/ %s %n/ - -}" \) -o -printf "$fmt" |
        sort -z
}

# check_tree [--no-owner] [--numeric] SRC DST: DST is an exact copy of SRC:
#   - `rsync -aHn --itemize-changes SRC/ DST/` prints nothing: the same
#     entries, types, contents (by size and mtime), permission bits,
#     mtimes (whole seconds), owner and group, symlink texts, and hard links
#     (rsync -H) ... With --no-owner `rsync -rlptDHn` (no -o, -g), for a
#     copy made by an unprivileged sink, which cannot give files away;
#     with --numeric, owners compare by number (--numeric-ids);
#   - `diff -r --no-dereference SRC DST` finds no difference in contents
#     (two FIFOs or two sockets at one path are the same to us);
#   - tree_listing: the mtimes agree to the nanosecond (rsync compares whole
#     seconds only), and so do the link counts.
# Prints what differs and fails otherwise.
check_tree() {
    local owner=1 rsync_opts=(-aHn) out
    while [[ $1 == --* ]]; do
        case $1 in
        --no-owner) owner=0 rsync_opts=(-rlptDHn) ;;
        --numeric) rsync_opts+=(--numeric-ids) ;;
        *) fail "check_tree: unknown option '$1'" ;;
        esac
        shift
    done
    local src=$1 dst=$2
    [[ -d $src ]] || fail "check_tree: the source '$src' is not a directory"
    [[ -d $dst ]] || fail "check_tree: the copy '$dst' is not a directory"
    out=$(rsync "${rsync_opts[@]}" --itemize-changes -- "$src/" "$dst/" 2>&1) ||
        fail "check_tree: rsync ${rsync_opts[*]} '$src/' '$dst/' failed: $out"
    if [[ -n $out ]]; then
        printf '%s\n' "$out" | head -n 50 | sed 's/^/  rsync: /' >&2
        fail "'$dst' differs from '$src' (rsync ${rsync_opts[*]} --itemize-changes, above)"
    fi
    out=$(diff -r --no-dereference -- "$src" "$dst" 2>&1 |
        grep -vE '^File .* is a (fifo|socket) while file .* is a (fifo|socket)$' || true)
    if [[ -n $out ]]; then
        printf '%s\n' "$out" | head -n 50 | sed 's/^/  diff: /' >&2
        fail "'$dst' differs from '$src' (diff -r --no-dereference, above)"
    fi
    if ! cmp -s <(tree_listing "$src" "$owner") <(tree_listing "$dst" "$owner"); then
        diff <(tree_listing "$src" "$owner" | tr '\0' '\n') \
            <(tree_listing "$dst" "$owner" | tr '\0' '\n') | head -n 50 | sed 's/^/  listing: /' >&2
        fail "'$dst' differs from '$src' in mtimes (ns), modes, owners or link counts (above)"
    fi
}

# jget FILE EXPR: the Python expression EXPR on the last line's object j.
jget() {
    /usr/bin/python3 -c 'import json,sys
j = json.loads(open(sys.argv[1]).read().splitlines()[-1])
print(eval(sys.argv[2]))' "$1" "$2"
}

# ------------------------------------------------------------------ mounts

# mount_tmpfs DIR OPTIONS: mount a tmpfs on DIR (created if needed); it is
# unmounted when the test exits.
mount_tmpfs() {
    mkdir -p "$1"
    mount -t tmpfs -o "$2" tmpfs "$1" ||
        fail "cannot mount a tmpfs on $1 (the e2e tests must run as root with CAP_SYS_ADMIN)"
    echo "$1" >>"$_LIB_STATE/mounts"
}

# loop_attach VAR FILE: attaches a loop device over FILE and sets VAR to
# its path; it is detached when the test ends, whatever happens.
loop_attach() {
    local -n _dev=$1
    _dev=$(losetup -f --show "$2") ||
        fail "losetup cannot attach a loop device over $2 (the kernel's loop driver is needed)"
    echo "$_dev" >>"$_LIB_STATE/loops"
}

# ----------------------------------------------------------------- network

# port_in_use PORT: something listens on TCP PORT.
port_in_use() {
    [[ -n $(ss -Hltn "sport = :$1" 2>/dev/null) ]]
}

# free_port: a random TCP port that nothing listens on, from 20000 up to the
# start of the ephemeral range (or to 60000 where that range starts low).
free_port() {
    local port i lo=20000 n=40001 eph
    # Below the kernel's ephemeral range, where no outgoing connection of
    # another test can take the port between our check and our bind.
    read -r eph _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || eph=0
    ((eph - lo > 4000)) && n=$((eph - lo))
    for ((i = 0; i < 200; i++)); do
        port=$((lo + (RANDOM * 32768 + RANDOM) % n))
        if ! port_in_use "$port"; then
            echo "$port"
            return 0
        fi
    done
    fail "free_port: no free port found"
}

# start_capture FILE FILTER: tcpdump on lo with FILTER into FILE, in the
# background, once it listens (root only). Sets CAPTURE_PID. --immediate-mode: each
# packet is written as it comes (-U), not when the kernel hands a block of
# them over (up to a second later, and the last block is lost when tcpdump
# is stopped before that).
CAPTURE_PID=
_capturing() {
    grep -q 'listening on' "$1.err" 2>/dev/null || proc_gone "$2"
}
start_capture() {
    tcpdump -i lo -n --immediate-mode -U -s 0 -Z root -w "$1" "$2" 2>"$1.err" &
    CAPTURE_PID=$!
    track_pid "$CAPTURE_PID"
    if ! wait_until 20 _capturing "$1" "$CAPTURE_PID" || proc_gone "$CAPTURE_PID"; then
        sed 's/^/  tcpdump: /' "$1.err" >&2
        fail "tcpdump did not start capturing on lo"
    fi
}

# stop_capture FILE: stop tcpdump and check that it captured packets.
stop_capture() {
    local n
    kill -INT "$CAPTURE_PID"
    wait_exit 20 "$CAPTURE_PID" || fail "tcpdump did not stop"
    n=$(sed -n 's/^\([0-9][0-9]*\) packets\{0,1\} captured$/\1/p' "$1.err")
    [[ -n $n && $n -gt 10 ]] || { cat "$1.err" >&2; fail "tcpdump captured ${n:-no} packets"; }
}

# _daemon_listening PID PORT: PID itself listens on PORT.
_daemon_listening() {
    ss -Hltnp "sport = :$2" 2>/dev/null | grep -q "pid=$1,"
}

# start_daemon ROOT [VAR=VALUE...]: generate a key and start
# `pcopy --serve 127.0.0.1:PORT --root ROOT --key-file KEY` in the background
# (with VAR=VALUE in its environment), and wait until it listens. Sets
# DAEMON_PID, DAEMON_PORT, DAEMON_KEY, DAEMON_URL (pcopy://127.0.0.1:PORT)
# and DAEMON_LOG (its stderr). The daemon is stopped when the test exits.
DAEMON_PID= DAEMON_PORT= DAEMON_KEY= DAEMON_URL= DAEMON_LOG=
# DAEMON_ARGS: more options for the next daemons (--allow-unencrypted).
DAEMON_ARGS=()
start_daemon() {
    local root=$1 try
    shift
    _LIB_N=$((_LIB_N + 1))
    DAEMON_KEY=$T/daemon.$BASHPID.$_LIB_N.key
    DAEMON_LOG=$T/daemon.$BASHPID.$_LIB_N.log
    "$PCOPY" --gen-key "$DAEMON_KEY" || fail "pcopy --gen-key $DAEMON_KEY failed"
    for ((try = 0; try < 5; try++)); do
        DAEMON_PORT=$(free_port)
        "${WITH_SIGINT[@]}" "$@" "$PCOPY" --serve "127.0.0.1:$DAEMON_PORT" --root "$root" \
            --key-file "$DAEMON_KEY" "${DAEMON_ARGS[@]}" 2>>"$DAEMON_LOG" &
        DAEMON_PID=$!
        echo "$DAEMON_PID $(_starttime "$DAEMON_PID")" >>"$_LIB_STATE/daemons"
        # Another test may have taken the port meanwhile: then the daemon
        # exits, and we try another one.
        if wait_until 20 _daemon_or_exit "$DAEMON_PID" "$DAEMON_PORT" &&
            _daemon_listening "$DAEMON_PID" "$DAEMON_PORT"; then
            DAEMON_URL=pcopy://127.0.0.1:$DAEMON_PORT
            return 0
        fi
        proc_gone "$DAEMON_PID" || break
        wait "$DAEMON_PID" 2>/dev/null || true
    done
    sed 's/^/  daemon: /' "$DAEMON_LOG" >&2
    fail "the daemon did not start listening on 127.0.0.1:$DAEMON_PORT"
}

_daemon_or_exit() {
    proc_gone "$1" || _daemon_listening "$1" "$2"
}

# stop_daemon [PID]: send SIGTERM to the daemon (default $DAEMON_PID) and
# wait for it; sets WAIT_RC to its exit status. Fails if it does not exit.
stop_daemon() {
    local pid=${1:-$DAEMON_PID}
    kill -TERM "$pid" 2>/dev/null || true
    wait_exit 15 "$pid" || fail "daemon $pid did not exit after SIGTERM"
}

# free_test_subnet: prints an N such that no interface or route of this
# namespace uses 10.99.N.0/24 yet (20 <= N < 220, starting from one picked by
# our pid, so that tests running in parallel each take their own); fails
# when all are in use.
free_test_subnet() {
    local i n
    for ((i = 0; i < 200; i++)); do
        n=$((($$ + i) % 200 + 20))
        if [[ -z $(ip -o -4 addr show to "10.99.$n.0/24" 2>/dev/null) ]] &&
            ! ip -o -4 route show 2>/dev/null | grep -q "^10\.99\.$n\."; then
            echo "$n"
            return 0
        fi
    done
    return 1
}

# session_pids [PID]: the session processes of a daemon (its children).
session_pids() {
    pgrep -P "${1:-$DAEMON_PID}" || true
}

# daemon_logged REGEX: a line of the daemon's log matches REGEX (ERE).
daemon_logged() {
    grep -qE -- "$1" "$DAEMON_LOG"
}

# wait_daemon_logged REGEX WHAT: wait up to 10 s for the daemon to log a
# line matching REGEX; fail, saying WHAT was expected, if it does not.
wait_daemon_logged() {
    wait_until 10 daemon_logged "$1" || {
        sed 's/^/  daemon: /' "$DAEMON_LOG" >&2
        fail "the daemon did not log $2 (/$1/)"
    }
}

# ------------------------------------------------------------------ shim

# SHIM_ENV: environment that preloads the corruption shim so that the byte
# after AFTER bytes of block payload sent is flipped; set by shim_env AFTER.
# Under ASan the shim must not be refused for coming before the ASan
# runtime. Under TSan, the shim's own lazy dlsym() of the real sendmsg is a
# (benign) race between the sending threads: suppress reports from it, so
# that only pcopy's races count.
SHIM_ENV=()
shim_env() {
    [[ -n ${PCOPY_SHIM-} && -f $PCOPY_SHIM ]] || fail "PCOPY_SHIM ('${PCOPY_SHIM-}') is not a file"
    local supp=$_LIB_STATE/tsan-shim.supp
    printf 'race:corrupt_shim.c\nrace:libcorrupt_shim.so\n' >"$supp"
    SHIM_ENV=(LD_PRELOAD="$PCOPY_SHIM" PCOPY_CORRUPT_AFTER="$1"
        ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0"
        TSAN_OPTIONS="${TSAN_OPTIONS:+$TSAN_OPTIONS:}suppressions=$supp")
}

# ------------------------------------------------------------- cases, exit

# _lib_sanitizer_reports DIR: fail if a captured stderr or daemon log in DIR
# holds a sanitizer report. UBSan goes on after printing one, and a daemon
# reports leaks only when it exits, so exit statuses alone would miss them.
_lib_sanitizer_reports() {
    local hits
    hits=$(find "$1" -type f \( -name 'stderr.*' -o -name 'fail-stderr.*' -o -name '*.err' \
        -o -name '*.log' \) -exec grep -lE \
        'ERROR: (Address|Leak|Memory|Thread|UndefinedBehavior)Sanitizer|WARNING: ThreadSanitizer|runtime error: ' \
        {} + 2>/dev/null || true)
    [[ -z $hits ]] && return 0
    local f
    for f in $hits; do
        printf 'FAIL: %s: sanitizer report in %s:\n' "$TEST_NAME" "$f" >&2
        head -n 60 "$f" >&2
    done
    return 1
}

# _lib_case_selected NAME: PCOPY_TEST_CASES is unset or empty, or one of
# its patterns matches NAME.
_lib_case_selected() {
    local pat pats=()
    [[ -n ${PCOPY_TEST_CASES-} ]] || return 0
    # read, not word splitting: a pattern must not be expanded as a glob.
    IFS=' ,' read -r -a pats <<<"$PCOPY_TEST_CASES"
    for pat in "${pats[@]}"; do
        # shellcheck disable=SC2053  # a pattern on purpose
        [[ $1 == $pat ]] && return 0
    done
    return 1
}

# run_case NAME FUNCTION [ARGS...]: run one case in a subshell, with T set to
# a fresh directory of its own, and record whether it passed. A case that
# PCOPY_TEST_CASES leaves out is not run (and finish says so).
run_case() {
    local name=$1 rc=0 start=$EPOCHREALTIME
    shift
    if ! _lib_case_selected "$name"; then
        _LIB_CASES_LEFT_OUT+=("$name")
        return 0
    fi
    _LIB_CASES_RUN=$((_LIB_CASES_RUN + 1))
    log "case $name"
    set +e
    (
        set -euo pipefail
        # Each case works in its own directory.
        T=$T/$name
        mkdir -p "$T"
        chmod 0755 "$T"
        export XDG_CACHE_HOME=$_LIB_STATE/cache.$name
        "$@"
    )
    rc=$?
    _lib_reap
    set -e
    _lib_sanitizer_reports "$T/$name" || rc=1
    if [[ $rc -ne 0 ]]; then
        _LIB_CASES_FAILED+=("$name")
        log "case $name FAILED ($(secs_since "$start") s)"
    else
        log "case $name passed ($(secs_since "$start") s)"
    fi
}

# finish: end the test; prints "ok: NAME" if every case passed.
finish() {
    local secs
    secs=$(secs_since "$_LIB_START")
    if [[ $_LIB_CASES_RUN -eq 0 && ${#_LIB_CASES_LEFT_OUT[@]} -ne 0 ]]; then
        printf 'FAIL: %s: PCOPY_TEST_CASES=%q matches none of its cases: %s\n' "$TEST_NAME" \
            "$PCOPY_TEST_CASES" "${_LIB_CASES_LEFT_OUT[*]}" >&2
        exit 1
    fi
    if [[ ${#_LIB_CASES_LEFT_OUT[@]} -ne 0 ]]; then
        log "PCOPY_TEST_CASES=$PCOPY_TEST_CASES left out ${#_LIB_CASES_LEFT_OUT[@]} cases: ${_LIB_CASES_LEFT_OUT[*]}"
    fi
    if [[ ${#_LIB_CASES_FAILED[@]} -ne 0 ]]; then
        printf 'FAIL: %s: %d of %d cases failed in %s s: %s\n' "$TEST_NAME" \
            "${#_LIB_CASES_FAILED[@]}" "$_LIB_CASES_RUN" "$secs" "${_LIB_CASES_FAILED[*]}" >&2
        exit 1
    fi
    log "$_LIB_CASES_RUN cases passed in $secs s (sanitizer: $PCOPY_SANITIZER)"
    echo "ok: $TEST_NAME"
}

# _lib_ours PID START: PID is still the process that was recorded.
_lib_ours() {
    [[ -n $1 && -e /proc/$1 && $(_starttime "$1") == "$2" ]]
}

# _lib_reap: stop every process and daemon recorded so far and unmount the
# recorded mounts: clients and producers first, then daemons with their
# sessions, then the mounts they may still use.
_lib_reap() {
    local pid start m
    while read -r pid start; do
        _lib_ours "$pid" "$start" && kill -TERM "$pid" 2>/dev/null
    done <"$_LIB_STATE/pids"
    while read -r pid start; do
        _lib_ours "$pid" "$start" || continue
        pkill -TERM -P "$pid" 2>/dev/null
        kill -TERM "$pid" 2>/dev/null
    done <"$_LIB_STATE/daemons"
    cat "$_LIB_STATE/pids" "$_LIB_STATE/daemons" | while read -r pid start; do
        for ((m = 0; m < 100; m++)); do
            proc_gone "$pid" && break
            sleep 0.05
        done
        if _lib_ours "$pid" "$start" && ! proc_gone "$pid"; then
            pkill -KILL -P "$pid" 2>/dev/null
            kill -KILL "$pid" 2>/dev/null
        fi
    done
    : >"$_LIB_STATE/pids"
    : >"$_LIB_STATE/daemons"
    tac "$_LIB_STATE/mounts" | while read -r m; do
        umount "$m" 2>/dev/null || umount -l "$m"
    done
    : >"$_LIB_STATE/mounts"
    while read -r l; do
        losetup -d "$l" 2>/dev/null
    done <"$_LIB_STATE/loops"
    : >"$_LIB_STATE/loops"
}

_lib_cleanup() {
    local rc=$?
    set +e
    _lib_reap
    wait 2>/dev/null
    if [[ $rc -ne 0 && ${PCOPY_TEST_KEEP-} == 1 ]]; then
        echo "kept the scratch directory $T" >&2
    else
        rm -rf "$T"
    fi
    exit "$rc"
}
trap _lib_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
