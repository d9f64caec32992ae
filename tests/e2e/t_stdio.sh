#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_stdio: '-' as the source (standard input) and as the destination
# (standard output), locally and from a daemon, and progress lines while
# standard input is slow.
source "$PCOPY_TEST_LIB"

# 5 MiB and a bit: 81 blocks of 64 KiB, so that with several streams the
# blocks arrive out of order and standard output must put them back.
INPUT_SIZE=$((5 * 1048576 + 4321))

case_stdin_to_file() {
    local s
    mkfile "$T/in" "$INPUT_SIZE"
    for s in 1 4; do
        expect_exit 0 "$PCOPY" -s "$s" -B 64k - "$T/out.$s" <"$T/in"
        same_file "$T/in" "$T/out.$s"
        expect_summary "$INPUT_SIZE" 1 "$s"
        # From a pipe, whose size is unknown in advance.
        cat "$T/in" | expect_exit 0 "$PCOPY" -s "$s" -B 64k - "$T/pipe.$s"
        same_file "$T/in" "$T/pipe.$s"
    done
    # Empty standard input makes an empty file.
    expect_exit 0 "$PCOPY" - "$T/empty" </dev/null
    [[ -f $T/empty && ! -s $T/empty ]] || fail "empty stdin did not give an empty file"
    # Into a directory, the file is called "stdin".
    mkdir -p "$T/d"
    expect_exit 0 "$PCOPY" -B 64k - "$T/d" <"$T/in"
    same_file "$T/in" "$T/d/stdin"
    no_temp_files "$T"
}

case_file_to_stdout() {
    local s
    mkfile "$T/in" "$INPUT_SIZE"
    for s in 1 4 8; do
        expect_exit 0 "$PCOPY" -s "$s" -B 64k "$T/in" - >"$T/out.$s"
        same_file "$T/in" "$T/out.$s"
        expect_summary "$INPUT_SIZE" 1 "$s"
        # Through a pipe, which cannot seek.
        expect_exit 0 "$PCOPY" -s "$s" -B 64k "$T/in" - | cat >"$T/pipe.$s"
        same_file "$T/in" "$T/pipe.$s"
    done
    # An empty file gives no output.
    : >"$T/empty"
    expect_exit 0 "$PCOPY" "$T/empty" - >"$T/empty.out"
    [[ ! -s $T/empty.out ]] || fail "an empty file produced output"
    # Only one source may go to standard output.
    expect_exit 1 "$PCOPY" "$T/in" "$T/in" - >"$T/two.out"
    expect_stderr_contains "'-'"
    [[ ! -s $T/two.out ]] || fail "two sources to '-' wrote to stdout"
    # Nor a directory (-r): the user's mistake (1), not a protocol error.
    mkdir -p "$T/dir"
    cp "$T/in" "$T/dir/f"
    expect_exit 1 "$PCOPY" -r "$T/dir" - >"$T/dir.out"
    expect_stderr_contains "cannot write 'dir' to standard output: it is a directory"
    [[ ! -s $T/dir.out ]] || fail "a directory to '-' wrote to stdout"
    # -n says what it would do, and writes none of the file.
    expect_exit 0 "$PCOPY" -n "$T/in" - >"$T/dry.out"
    [[ $(cat "$T/dry.out") == "copy standard output" ]] ||
        fail "-n to '-' printed '$(head -c 200 "$T/dry.out")', not 'copy standard output'"
}

case_stdin_to_stdout() {
    local s
    mkfile "$T/in" "$INPUT_SIZE"
    for s in 1 4; do
        cat "$T/in" | expect_exit 0 "$PCOPY" -s "$s" -B 64k - - | cat >"$T/out.$s"
        same_file "$T/in" "$T/out.$s"
    done
    # With the default block size too.
    expect_exit 0 "$PCOPY" - - <"$T/in" >"$T/out.default"
    same_file "$T/in" "$T/out.default"
}

case_daemon_to_stdout() {
    local s
    mkdir -p "$T/root"
    mkfile "$T/root/file" "$INPUT_SIZE"
    start_daemon "$T/root"
    for s in 1 4; do
        expect_exit 0 "$PCOPY" -s "$s" -B 64k "$DAEMON_URL/file" - --key-file "$DAEMON_KEY" >"$T/out.$s"
        same_file "$T/root/file" "$T/out.$s"
        expect_summary "$INPUT_SIZE" 1 "$s"
    done
    # And standard input pushed to the daemon.
    expect_exit 0 "$PCOPY" -s 4 -B 64k - "$DAEMON_URL/pushed" --key-file "$DAEMON_KEY" <"$T/root/file"
    same_file "$T/root/file" "$T/root/pushed"
    wait_no_temp_files "$T/root"
}

case_fifo_source() {
    # A named pipe as a source is read as a stream, to its end.
    mkfile "$T/in" "$INPUT_SIZE"
    mkfifo "$T/fifo"
    cat "$T/in" >"$T/fifo" &
    track_pid $!
    expect_exit 0 "$PCOPY" -s 4 -B 64k "$T/fifo" "$T/out"
    same_file "$T/in" "$T/out"
}

case_slow_stdin_progress() {
    # Standard input that pauses: the copy still completes, and -P 1 prints
    # progress lines meanwhile.
    {
        head -c 100000 /dev/urandom
        sleep 3
        head -c 100000 /dev/urandom
    } | tee "$T/in" | expect_exit 0 "$PCOPY" -P 1 - "$T/out"
    same_file "$T/in" "$T/out"
    expect_stderr_matches '^pcopy: progress: '
    log "progress lines: $(grep -c '^pcopy: progress: ' "$LAST_STDERR")"
    grep '^pcopy: progress: ' "$LAST_STDERR" | head -n 3 >&2
    # -q silences progress.
    { head -c 1000 /dev/urandom; sleep 2; } | expect_exit 0 "$PCOPY" -q -P 1 - "$T/quiet"
    expect_stderr_empty
}

case_stdout_closed_early() {
    # A reader that goes away: pcopy fails (EPIPE), names standard output,
    # and does not hang.
    mkfile "$T/in" 20M
    local st
    set +e
    timeout -k 5 $((60 * SLOW)) "$PCOPY" -B 64k "$T/in" - 2>"$T/pcopy.err" | head -c 1000 >/dev/null
    st=${PIPESTATUS[0]}
    set -e
    log "stdout closed early: exit $st: $(head -n1 "$T/pcopy.err")"
    [[ $st -ne 124 ]] || fail "pcopy hung after its standard output was closed"
    [[ $st -eq 11 ]] || fail "pcopy exited $st, not 11, when its standard output was closed"
    grep -q "writing 'standard output': Broken pipe" "$T/pcopy.err" ||
        fail "the message does not say the pipe broke: $(cat "$T/pcopy.err")"
}

run_case stdin-to-file case_stdin_to_file
run_case file-to-stdout case_file_to_stdout
run_case stdin-to-stdout case_stdin_to_stdout
run_case daemon-to-stdout case_daemon_to_stdout
run_case fifo-source case_fifo_source
run_case slow-stdin-progress case_slow_stdin_progress
run_case stdout-closed-early case_stdout_closed_early
finish
