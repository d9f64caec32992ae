#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_resume: -a (--resume) makes an interrupted copy resumable. A copy is
# killed (kill -9 of the client, of the source, of the sink; SIGINT) at
# several points; what it wrote stays in ".NAME.pcopy-part"
# beside its journal ".NAME.pcopy-jrnl"; running the same command again
# keeps exactly the blocks the journal names, once the source has proved
# them (bytes_unchanged), sends the rest, and puts a byte-identical file in
# place. In a tree, the files finished before are kept too. A block
# tampered with between the runs travels again; a source that changed
# meanwhile is copied afresh; journals and partial files that no run of
# ours left (cut short, garbage, a damaged header, bits past the end, a
# symlink or a hard link to a file elsewhere) are removed with a notice,
# and nothing outside is touched. Without -a, a killed copy leaves nothing.
# A source named as a partial file or journal is not copied with -a.
# ctest: cost 150
source "$PCOPY_TEST_LIB"
needs_root "it runs an sshd that logs in as root"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"

MB=1048576
# The 1 GiB file of the kill points (the issue's size); smaller elsewhere.
BIG=${PCOPY_TEST_RESUME_BIG:-1G}

RUN_PID=
# start_copy ERR ARGS...: pcopy ARGS... in the background, stderr to ERR.
start_copy() {
    local err=$1
    shift
    "${WITH_SIGINT[@]}" "$PCOPY" "$@" 2>"$err" &
    RUN_PID=$!
    track_pid "$RUN_PID"
}

# interrupt WHO SIGNAL JOURNAL BLOCKS: once JOURNAL names BLOCKS blocks,
# send SIGNAL to the client (WHO=client) or to the process that writes the
# partial file (WHO=sink); wait until the client and the sink have exited
# and nothing holds the partial file open. The sink is found as soon as
# it holds the partial file, before the wait for the blocks.
interrupt() {
    local who=$1 sig=$2 j=$3 n=$4 part victim=$RUN_PID
    part=${j%.pcopy-jrnl}.pcopy-part
    if [[ $who == sink ]]; then
        wait_until 120 file_held "$part" || fail "no process ever wrote $part"
        victim=$(file_writers "$part")
    fi
    wait_until 120 journal_at_least "$j" "$n" || fail "the copy never wrote $n blocks ($j)"
    [[ -n $victim ]] || fail "no process writes $part"
    kill -"$sig" $victim 2>/dev/null || fail "cannot signal the $who ($victim): it is gone"
    wait_exit 30 "$RUN_PID" || fail "the client did not exit after the $who got SIG$sig"
    wait_until 30 file_unheld "$part" || fail "$part is still open after the copy ended"
    [[ -f $part ]] ||
        fail "the interrupted copy left no partial file $part (it finished before SIG$sig?)"
}

# resumed_run JSON KEPT NBLOCKS B ARGS...: pcopy -a ARGS... succeeds; the
# summary counts one file resumed, exactly KEPT blocks not sent, and little
# more than the NBLOCKS - KEPT missing ones on the wire.
resumed_run() {
    local json=$1 kept=$2 nblocks=$3 bs=$4 same wire
    shift 4
    expect_exit 0 "$PCOPY" -a --json="$json" "$@"
    same=$(jget "$json" 'j["files"]["bytes_unchanged"]')
    wire=$(jget "$json" 'j["source"]["wire_bytes"]')
    [[ $(jget "$json" 'j["files"]["resumed"]') == 1 ]] || fail "not one file resumed"
    [[ $same == $((kept * bs)) ]] ||
        fail "bytes_unchanged is $same, want the $kept blocks the journal named ($((kept * bs)))"
    ((wire <= (nblocks - kept + 2) * bs)) ||
        fail "$wire bytes on the wire, want at most the $((nblocks - kept)) missing blocks and two more"
}

# One 1 GiB file, interrupted three times at growing points (kill -9 of
# the client at a quarter, SIGINT, as a user's ^C, at half, kill -9 of the
# sink at three quarters), each run resuming the last; then the last run
# finishes it.
case_local_points() {
    local n=$(($(to_bytes "$BIG") / MB)) j=$T/.dst.pcopy-jrnl prev=0 d point at who sig
    mkfile "$T/src" "$BIG"
    for point in 25:client:KILL 50:client:INT 75:sink:KILL; do
        IFS=: read -r at who sig <<<"$point"
        start_copy "$T/copy.$at.err" -a -x "$(pace_rest $((n * MB * (100 - at) / 100)))" \
            "$T/src" "$T/dst"
        interrupt "$who" "$sig" "$j" $((n * at / 100))
        d=$(journal_done "$j")
        ((d >= prev)) || fail "the journal lost blocks: $d after $prev"
        prev=$d
        [[ ! -e $T/dst ]] || fail "a partial copy was put in place"
    done
    resumed_run "$T/j" "$d" "$n" "$MB" "$T/src" "$T/dst"
    same_file "$T/src" "$T/dst"
    no_temp_files "$T"
    expect_exit 0 "$PCOPY" -a "$T/src" "$T/dst"
    expect_stderr_matches '^pcopy: 0 bytes in 0 files, 1 unchanged \([0-9]+ bytes not sent\), 0 resumed, '
}

# ssh_point SRC DST LSRC LDST WHO [ARGS...]: a 256 MiB copy from SRC to
# DST (LSRC and LDST here), the client or the sink killed at a quarter;
# the same command with -a resumes it.
ssh_point() {
    local src=$1 dst=$2 lsrc=$3 ldst=$4 who=$5 d
    shift 5
    start_copy "$T/copy.err" -a -x "$(pace_rest $((192 * MB)))" -s 3 "$@" "$src" "$dst"
    interrupt "$who" KILL "${ldst%/*}/.${ldst##*/}.pcopy-jrnl" 64
    d=$(journal_done "${ldst%/*}/.${ldst##*/}.pcopy-jrnl")
    resumed_run "$T/j.$who" "$d" 256 "$MB" -s 3 "$@" "$src" "$dst"
    same_file "$lsrc" "$ldst"
    no_temp_files "${ldst%/*}"
}

case_ssh() {
    mkdir -p "$T/a" "$T/b" "$T/c"
    mkfile "$T/a/f" 256M
    ssh_point "$T/a/f" "pctest:$T/b/f" "$T/a/f" "$T/b/f" client   # push, source killed
    rm "$T/b/f"
    ssh_point "$T/a/f" "pctest:$T/b/f" "$T/a/f" "$T/b/f" sink     # push, sink killed
    ssh_point "pctest:$T/a/f" "$T/c/f" "$T/a/f" "$T/c/f" client   # pull: the sink is local
}

case_daemon() {
    mkdir -p "$T/root"
    mkfile "$T/f" 256M
    start_daemon "$T/root"
    ssh_point "$T/f" "$DAEMON_URL/f" "$T/f" "$T/root/f" client --key-file "$DAEMON_KEY"
}

# A tree of big files and small ones, killed twice (in big.2, then in
# big.4 by the run that resumed the first); the last run keeps what was
# finished (unchanged), resumes what was being written, copies the rest.
case_tree() {
    local i d=0 f at
    mkdir -p "$T/src/sub" "$T/dst"
    for i in 1 2 3 4; do
        mkfile "$T/src/sub/big.$i" 16M
    done
    for i in $(seq 1 300); do
        echo "small $i" >"$T/src/s.$i"
    done
    for at in 2 4; do
        start_copy "$T/copy.$at.err" -r -p -a -x "$(pace_rest $((14 * MB)))" -s 2 "$T/src" "$T/dst/"
        wait_until 60 journal_at_least "$T/dst/src/sub/.big.$at.pcopy-jrnl" 2 ||
            fail "the tree copy never got to big.$at"
        kill -KILL "$RUN_PID"
        wait_exit 30 "$RUN_PID" || fail "pcopy did not die"
        wait_until 30 file_unheld "$T/dst/src/sub/.big.$at.pcopy-part" ||
            fail "big.$at is still being written"
    done
    [[ -f $T/dst/src/sub/big.2 ]] || fail "the second run did not finish big.2"
    for f in "$T"/dst/src/sub/.*.pcopy-jrnl; do
        d=$((d + $(journal_done "$f")))
    done
    ((d >= 2)) || fail "nothing was left to resume ($d blocks)"
    expect_exit 0 "$PCOPY" -r -p -a -s 2 --json="$T/j" "$T/src" "$T/dst/"
    check_tree --no-owner "$T/src" "$T/dst/src"
    no_temp_files "$T/dst"
    [[ $(jget "$T/j" 'j["files"]["resumed"]') -ge 1 ]] || fail "no file was resumed"
    [[ $(jget "$T/j" 'j["files"]["unchanged"]') -ge 2 ]] ||
        fail "the files finished before the kills (big.1, big.2) were not kept"
    local same
    same=$(jget "$T/j" 'j["files"]["bytes_unchanged"]')
    ((same >= d * MB + 2 * 16 * MB)) ||
        fail "bytes_unchanged $same: not big.1, big.2 and the $d blocks journalled"
}

# half_copy SRC DST BS: a -a copy of SRC whose sink is killed once a
# quarter of it is written (the sink: what is in flight could finish a
# small file after its client is gone).
half_copy() {
    local size n
    size=$(stat -c %s "$1")
    n=$((size / $3))
    start_copy "$T/copy.err" -a -B "$3" -x "$(pace_rest $((size * 3 / 4)))" -s 2 "$1" "$2"
    interrupt sink KILL "${2%/*}/.${2##*/}.pcopy-jrnl" $((n / 4))
}

# A block the journal names, changed between the runs, is sent again.
case_tampered() {
    local j=$T/.dst.pcopy-jrnl d first
    mkfile "$T/src" 32M
    half_copy "$T/src" "$T/dst" $((256 * 1024))
    d=$(journal_done "$j")
    first=$(/usr/bin/python3 -c 'import sys
d = open(sys.argv[1], "rb").read()[48:]
print(next(i for i in range(len(d) * 8) if d[i // 8] >> (i % 8) & 1))' "$j")
    flip_byte "$T/.dst.pcopy-part" $((first * 262144 + 77))
    resumed_run "$T/j" $((d - 1)) 128 262144 -B 256k "$T/src" "$T/dst"
    same_file "$T/src" "$T/dst"
}

# A source that changed since: its journal is of another version, and the
# file is copied afresh, without a word.
case_source_changed() {
    mkfile "$T/src" 16M
    half_copy "$T/src" "$T/dst" 65536
    touch -d '2001-02-03 04:05:06' "$T/src"
    expect_exit 0 "$PCOPY" -a -B 64k --json="$T/j" "$T/src" "$T/dst"
    expect_stderr_lacks "journal"
    [[ $(jget "$T/j" 'j["files"]["resumed"]') == 0 ]] || fail "a stale partial file was resumed"
    [[ $(jget "$T/j" 'j["files"]["bytes_unchanged"]') == 0 ]] || fail "stale blocks were kept"
    same_file "$T/src" "$T/dst"
    no_temp_files "$T"
}

# Two -a runs at once into the same destination (a cron job that overlaps
# itself, with a source that changed in between): the second finds the
# first's journal locked, and neither takes nor removes what the first
# writes; it reports the file (exit 3). The first puts its own complete
# file in place (a run renamed the second's half-written partial file
# over the destination, and said exit 0). One command naming two sources
# of the same name with -a meets the same lock.
case_overlap() {
    local pid
    mkfile "$T/src" 24M
    mkdir -p "$T/d"
    "$PCOPY" -a -x 8M -B 64k "$T/src" "$T/d/" 2>"$T/first.err" &
    pid=$!
    track_pid "$pid"
    wait_until 20 test -s "$T/d/.src.pcopy-part" || fail "the first run wrote no partial file"
    touch -d '2001-02-03 04:05:06' "$T/src"
    expect_exit 3 "$PCOPY" -a -B 64k "$T/src" "$T/d/"
    expect_stderr_contains "cannot write '$T/d/src': another pcopy -a is writing it"
    wait_exit 60 "$pid" || fail "the first run did not finish"
    # The first run read the source before and after the touch: it may
    # say the source changed (exit 3), but never put a wrong file in place.
    if [[ $WAIT_RC -eq 0 ]]; then
        same_file "$T/src" "$T/d/src"
    else
        [[ ! -e $T/d/src ]] || cmp -s "$T/src" "$T/d/src" ||
            fail "the first run left a wrong file in place (exit $WAIT_RC): $(cat "$T/first.err")"
    fi
    # Nothing of the first run's is left behind once it is over, and the
    # next run completes the copy.
    expect_exit 0 "$PCOPY" -a -B 64k "$T/src" "$T/d/"
    same_file "$T/src" "$T/d/src"
    no_temp_files "$T/d"
}

# hostile WHAT MESSAGE: after a half copy, spoil() has done WHAT to the
# journal or partial file; the next run says MESSAGE, keeps nothing,
# copies the file whole, and the file outside is as it was.
hostile() {
    local what=$1 msg=$2
    mkdir -p "$T/$what"
    mkfile "$T/$what/src" 8M
    half_copy "$T/$what/src" "$T/$what/dst" 65536
    spoil "$what" "$T/$what/.dst.pcopy-jrnl" "$T/$what/.dst.pcopy-part"
    expect_exit 0 "$PCOPY" -a -B 64k --json="$T/$what/j" "$T/$what/src" "$T/$what/dst"
    expect_stderr_contains "$msg: it is removed and the file copied afresh"
    [[ $(jget "$T/$what/j" 'j["files"]["resumed"]') == 0 ]] || fail "$what: resumed"
    [[ $(jget "$T/$what/j" 'j["files"]["bytes_unchanged"]') == 0 ]] || fail "$what: blocks kept"
    same_file "$T/$what/src" "$T/$what/dst"
    same_file "$T/outside.orig" "$T/outside"
    no_temp_files "$T/$what"
}

spoil() {
    local j=$2 p=$3
    case $1 in
    truncated) truncate -s 20 "$j" ;;
    garbage) head -c "$(stat -c %s "$j")" /dev/urandom >"$j" ;;
    header) printf '\377' | dd of="$j" bs=1 seek=17 conv=notrunc status=none ;;
    longer) printf 'more' >>"$j" ;;
    symlink) rm "$p"; ln -s "$T/outside" "$p" ;;
    hardlink) rm "$p"; ln "$T/outside" "$p" ;;
    jsymlink) cp "$j" "$T/jcopy"; rm "$j"; ln -s "$T/jcopy" "$j" ;;
    esac
}

case_hostile() {
    mkfile "$T/outside" 8M
    cp "$T/outside" "$T/outside.orig"
    hostile truncated "is cut short"
    hostile garbage "is not a pcopy journal"
    hostile header "has a damaged header"
    hostile longer "has the wrong length"
    hostile symlink "has a partial file that is not a file of ours"
    hostile hardlink "has a partial file that is not a file of ours"
    hostile jsymlink "is not a file of ours"
    [[ $(stat -c %h "$T/outside") == 1 ]] || fail "the hard link to the outside file is still there"
}

# Without -a, a killed copy leaves nothing behind; a partial file is only
# ever the work of -a. The cap makes the copy last 32 s, far longer than a
# loaded machine takes to see it receiving (at 16 MiB/s, under TSan with
# the suite beside it, the copy once ended before the kill).
case_without_a() {
    mkfile "$T/src" 64M
    start_copy "$T/copy.err" -x 2M "$T/src" "$T/dst"
    wait_until 30 receiving "$T" || fail "the copy did not start"
    sleep 0.5
    kill -KILL "$RUN_PID"
    wait_exit 30 "$RUN_PID" || fail "pcopy did not die"
    no_temp_files "$T"
    [[ ! -e $T/dst ]] || fail "a partial copy was put in place"
}

# A source file named as a partial file or journal of -a is not copied
# (exit 3, named): its copy would take the place of another file's
# partial file, and that file would then be put in place with its bytes.
case_reserved_names() {
    mkdir -p "$T/s" "$T/d"
    mkfile "$T/s/b" 4M
    echo other >"$T/s/.b.pcopy-part"
    echo other >"$T/s/.b.pcopy-jrnl"
    mkdir "$T/s/.c.pcopy-part"
    expect_exit 3 "$PCOPY" -r -a -x 2M "$T/s" "$T/d/"
    expect_stderr_contains "'$T/s/.b.pcopy-part': not copied with -a"
    expect_stderr_contains "'$T/s/.b.pcopy-jrnl': not copied with -a"
    expect_stderr_contains "'$T/s/.c.pcopy-part': not copied with -a"
    same_file "$T/s/b" "$T/d/s/b"
    no_temp_files "$T/d"
    # Named as sources themselves, too.
    expect_exit 3 "$PCOPY" -a "$T/s/b" "$T/s/.b.pcopy-part" "$T/d/"
    expect_stderr_contains "not copied with -a"
    same_file "$T/s/b" "$T/d/b"
    # Without -a they are files like any other.
    expect_exit 0 "$PCOPY" -r "$T/s" "$T/plain"
    [[ $(cat "$T/plain/.b.pcopy-part") == other ]] || fail "without -a, .b.pcopy-part was not copied"
}

sshd_start
run_case reserved-names case_reserved_names
run_case local-points case_local_points
run_case ssh case_ssh
run_case daemon case_daemon
run_case tree case_tree
run_case tampered case_tampered
run_case source-changed case_source_changed
run_case hostile case_hostile
run_case overlap case_overlap
run_case without-a case_without_a
finish
