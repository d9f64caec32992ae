#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_errors: each kind of failure gives its exit status and a message that
# names the file, host or option, and writes nothing it should not.
# ctest: cost 35
source "$PCOPY_TEST_LIB"
needs_root "it runs pcopy as the user nobody to be refused permission"

AS_NOBODY=(setpriv --reuid=nobody --regid=nogroup --clear-groups)

case_missing_source() {
    expect_exit 3 "$PCOPY" "$T/nope" "$T/out"
    expect_stderr_contains "$T/nope"
    [[ ! -e $T/out ]] || fail "$T/out was created from a missing source"
    # Into a directory.
    mkdir -p "$T/d"
    expect_exit 3 "$PCOPY" "$T/nope" "$T/d"
    expect_stderr_contains "$T/nope"
    dir_is_empty "$T/d" || fail "files appeared in $T/d"
}

case_missing_among_several() {
    mkdir -p "$T/d"
    mkfile "$T/a" 1500000
    mkfile "$T/b" 300
    expect_exit 3 "$PCOPY" "$T/a" "$T/nope" "$T/b" "$T/d"
    expect_stderr_contains "$T/nope"
    same_file "$T/a" "$T/d/a"
    same_file "$T/b" "$T/d/b"
    [[ ! -e $T/d/nope ]] || fail "$T/d/nope was created"
    # Reported once, not twice.
    [[ $(grep -cF "$T/nope" "$LAST_STDERR") -eq 1 ]] || {
        cat "$LAST_STDERR" >&2
        fail "the missing source is reported more than once"
    }
    no_temp_files "$T/d"
}

case_unreadable_source() {
    # root reads everything, so this runs pcopy as the user nobody.
    command -v setpriv >/dev/null || fail "setpriv is needed for this case"
    mkdir -p "$T/w"
    chmod 0777 "$T/w"
    mkfile "$T/w/secret" 1000
    chmod 000 "$T/w/secret"
    mkfile "$T/w/open" 200000
    chmod 644 "$T/w/open"
    "${AS_NOBODY[@]}" test -r "$T/w/open" ||
        fail "user nobody cannot reach $T/w (check the modes of $PCOPY_TEST_TMP)"
    expect_exit 3 "${AS_NOBODY[@]}" "$PCOPY" "$T/w/secret" "$T/w/out"
    expect_stderr_contains "$T/w/secret"
    expect_stderr_contains "Permission denied"
    [[ ! -e $T/w/out ]] || fail "$T/w/out was created from an unreadable source"
    # With a readable one, into a directory: the readable one is copied.
    mkdir -p "$T/w/d"
    chmod 0777 "$T/w/d"
    expect_exit 3 "${AS_NOBODY[@]}" "$PCOPY" "$T/w/secret" "$T/w/open" "$T/w/d"
    expect_stderr_contains "$T/w/secret"
    same_file "$T/w/open" "$T/w/d/open"
    [[ ! -e $T/w/d/secret ]] || fail "$T/w/d/secret was created"
    no_temp_files "$T/w"
}

case_directory_source() {
    mkdir -p "$T/srcdir" "$T/d"
    mkfile "$T/a" 1000
    expect_exit 3 "$PCOPY" "$T/srcdir" "$T/out"
    expect_stderr_contains "$T/srcdir"
    [[ ! -e $T/out ]] || fail "$T/out was created from a directory"
    expect_exit 3 "$PCOPY" "$T/srcdir" "$T/a" "$T/d"
    expect_stderr_contains "$T/srcdir"
    same_file "$T/a" "$T/d/a"
    [[ ! -e $T/d/srcdir ]] || fail "$T/d/srcdir was created"
}

# bad_option TEXT ARGS...: `pcopy ARGS... a b` is a usage error (exit 1)
# that names TEXT, and creates nothing.
bad_option() {
    local text=$1
    shift
    expect_exit 1 "$PCOPY" "$@" "$T/a" "$T/out"
    expect_stderr_contains "$text"
    [[ ! -e $T/out ]] || fail "'pcopy $*' created $T/out"
}

case_bad_options() {
    mkfile "$T/a" 1000
    bad_option -s -s 0
    bad_option -s -s 65
    bad_option -s -s many
    bad_option -s -s -3
    bad_option -w -w banana
    bad_option -w -w 2G
    bad_option -B -B 1
    bad_option -B -B 0
    bad_option -B -B 4095
    bad_option -B -B 65M
    bad_option -B -B banana
    bad_option -P -P soon
    bad_option -P -P 0
    bad_option --timeout --timeout forever
    bad_option -Z -Z 2000-1000
    bad_option "below 1024" -Z 80-90
    bad_option -s --streams=0
    bad_option --bogus --bogus
    bad_option "unknown option -@" -@
    bad_option "unknown option '--no-such-option'" --no-such-option=1
    # A control character reaches the terminal escaped, never raw.
    bad_option "unknown option '--\\x1b[31m'" $'--\e[31m'
    expect_stderr_lacks $'\e'
    bad_option "option '--recursive' takes no value" --recursive=yes
    bad_option "option '--exc' is ambiguous" --exc=x
    bad_option "unknown option -k" --delete -kr
    bad_option "-P: '0' is not a number of seconds from 1 to 86400" -P 0
    bad_option "--root is for a daemon" --root "$T"
    # Opposite options are refused, not the last one taken.
    bad_option "--encrypt and --no-encrypt do not go together" --encrypt --no-encrypt
    bad_option "-4 and -6 do not go together" -6 -4
    # Sizes: one message, with the option's own range.
    bad_option "-B: '4095' is not a size from 4k to 64M" -B 4095
    bad_option "-w: '1x' is not a size up to 1G" -w 1x
    # Operands that an action does not take are refused, not ignored.
    bad_option "--gen-key FILE takes no operands, and '$T/a' is one" --gen-key "$T/k9"
    [[ ! -e $T/k9 ]] || fail "--gen-key with extra operands wrote $T/k9"
    bad_option "--serve takes no operands" --serve 127.0.0.1:1 --root "$T" --key-file "$T/k9"
    # Missing operands.
    expect_exit 1 "$PCOPY"
    expect_stderr_contains operand
    expect_exit 1 "$PCOPY" "$T/a"
    expect_stderr_contains operand
    expect_exit 1 "$PCOPY" -s
    expect_stderr_matches "(-s|'s')"
    # A long option without its value is named as written.
    expect_exit 1 "$PCOPY" "$T/a" "$T/out" --exclude
    expect_stderr_contains "option '--exclude' needs a value"
    expect_exit 1 "$PCOPY" "$T/a" "$T/out" --key-file
    expect_stderr_contains "option '--key-file' needs a value"
    # An empty operand.
    expect_exit 1 "$PCOPY" "" "$T/out"
    [[ ! -e $T/out ]] || fail "an empty source created $T/out"
    # The block size limits themselves are accepted.
    expect_exit 0 "$PCOPY" -B 4k "$T/a" "$T/ok4k"
    expect_exit 0 "$PCOPY" -B 64M "$T/a" "$T/ok64M"
    expect_exit 0 "$PCOPY" -s 64 "$T/a" "$T/ok64"
    same_file "$T/a" "$T/ok64"
}

case_connection_refused() {
    local port
    port=$(free_port)
    "$PCOPY" --gen-key "$T/key"
    mkfile "$T/a" 1000
    expect_exit 10 "$PCOPY" "$T/a" "pcopy://127.0.0.1:$port/a" --key-file "$T/key"
    expect_stderr_matches "127\.0\.0\.1(:| port )$port"
    expect_exit 10 "$PCOPY" "pcopy://127.0.0.1:$port/a" "$T/pulled" --key-file "$T/key"
    expect_stderr_matches "127\.0\.0\.1(:| port )$port"
    [[ ! -e $T/pulled ]] || fail "$T/pulled was created"
}

case_protocol_error() {
    # A server that answers with garbage: exit 2, naming it.
    local port pid
    port=$(free_port)
    "$PCOPY" --gen-key "$T/key"
    mkfile "$T/a" 1000
    head -c 4096 /dev/urandom >"$T/garbage"
    timeout 30 nc -l 127.0.0.1 "$port" <"$T/garbage" >/dev/null &
    pid=$!
    track_pid "$pid"
    wait_until 10 port_in_use "$port" || fail "nc did not listen on $port"
    expect_exit 2 "$PCOPY" --timeout 5 "$T/a" "pcopy://127.0.0.1:$port/a" --key-file "$T/key"
    expect_stderr_contains "127.0.0.1:$port"
}

case_wrong_key() {
    mkdir -p "$T/root"
    mkfile "$T/a" 100000
    start_daemon "$T/root"
    "$PCOPY" --gen-key "$T/wrong.key"
    expect_exit 5 "$PCOPY" "$T/a" "$DAEMON_URL/a" --key-file "$T/wrong.key"
    expect_stderr_contains "127.0.0.1:$DAEMON_PORT"
    expect_stderr_contains "key"
    dir_is_empty "$T/root" || fail "something was written under the root: $(ls -A "$T/root")"
    # A pull with the wrong key gets nothing either.
    cp "$T/a" "$T/root/a"
    expect_exit 5 "$PCOPY" "$DAEMON_URL/a" "$T/pulled" --key-file "$T/wrong.key"
    [[ ! -e $T/pulled ]] || fail "a pull with the wrong key created $T/pulled"
    # The daemon logged the refusal, and still serves the right key.
    grep -qi 'key\|auth' "$DAEMON_LOG" || fail "the daemon did not log the failed authentication"
    expect_exit 0 "$PCOPY" "$DAEMON_URL/a" "$T/pulled" --key-file "$DAEMON_KEY"
    same_file "$T/a" "$T/pulled"
}

case_key_file_checks() {
    local mode url
    mkfile "$T/a" 1000
    mkdir -p "$T/root"
    start_daemon "$T/root"
    url=$DAEMON_URL/a
    cp "$DAEMON_KEY" "$T/key"
    # A key file others may read or write is refused, by client and daemon
    # alike; nothing is written.
    for mode in 644 640 604 620 660 606; do
        chmod "$mode" "$T/key"
        expect_exit 1 "$PCOPY" "$T/a" "$url" --key-file "$T/key"
        expect_stderr_contains "$T/key"
        expect_stderr_contains "chmod 600"
    done
    chmod 644 "$T/key"
    PCOPY_KEY_FILE=$T/key expect_exit 1 "$PCOPY" "$T/a" "$url"
    expect_stderr_contains "$T/key"
    expect_exit 1 "$PCOPY" "$url" "$T/pulled" --key-file "$T/key"
    expect_stderr_contains "$T/key"
    [[ ! -e $T/pulled ]] || fail "a pull with a mode 0644 key created $T/pulled"
    expect_exit 1 "$PCOPY" --serve "127.0.0.1:$(free_port)" --root "$T/root" --key-file "$T/key"
    expect_stderr_contains "$T/key"
    expect_stderr_contains "chmod 600"
    # A missing key file.
    expect_exit 1 "$PCOPY" "$T/a" "$url" --key-file "$T/nokey"
    expect_stderr_contains "$T/nokey"
    # A key file that is not a key.
    echo "not a key" >"$T/junk.key"
    chmod 600 "$T/junk.key"
    expect_exit 1 "$PCOPY" "$T/a" "$url" --key-file "$T/junk.key"
    expect_stderr_contains "$T/junk.key"
    # A directory as the key file.
    mkdir -p "$T/keydir"
    chmod 700 "$T/keydir"
    expect_exit 1 "$PCOPY" "$T/a" "$url" --key-file "$T/keydir"
    expect_stderr_contains "$T/keydir"
    # No key at all for a daemon URL.
    expect_exit 1 env -u PCOPY_KEY_FILE "$PCOPY" "$T/a" "$url"
    expect_stderr_contains "--key-file"
    dir_is_empty "$T/root" || fail "files appeared under the root: $(ls -A "$T/root")"
    # The right key, mode 0600 (or 0400), works.
    chmod 400 "$T/key"
    expect_exit 0 "$PCOPY" "$T/a" "$url" --key-file "$T/key"
    same_file "$T/a" "$T/root/a"
}

case_gen_key_refusals() {
    "$PCOPY" --gen-key "$T/key"
    cp "$T/key" "$T/key.orig"
    expect_exit 1,11 "$PCOPY" --gen-key "$T/key"
    expect_stderr_contains "$T/key"
    same_file "$T/key.orig" "$T/key"
    # Not through a symlink either, even a dangling one.
    ln -s "$T/elsewhere" "$T/link"
    expect_exit 1,11 "$PCOPY" --gen-key "$T/link"
    expect_stderr_contains "$T/link"
    [[ ! -e $T/elsewhere ]] || fail "--gen-key followed a dangling symlink to $T/elsewhere"
    # A directory that does not exist.
    expect_exit 1,11 "$PCOPY" --gen-key "$T/nodir/key"
    expect_stderr_contains "$T/nodir/key"
}

case_dotdot_url() {
    local p
    mkdir -p "$T/root/sub"
    mkfile "$T/a" 1000
    mkfile "$T/root/sub/f" 1000
    start_daemon "$T/root"
    local k=(--key-file "$DAEMON_KEY")
    for p in ../x .. sub/../../x sub/.. a/../b ./../x; do
        expect_exit 1 "$PCOPY" "$T/a" "$DAEMON_URL/$p" "${k[@]}"
        expect_stderr_contains ".."
    done
    for p in ../x sub/../f sub/../../etc/passwd; do
        expect_exit 1 "$PCOPY" "$DAEMON_URL/$p" "$T/pulled" "${k[@]}"
        expect_stderr_contains ".."
        [[ ! -e $T/pulled ]] || fail "a pull of '$p' created $T/pulled"
    done
    [[ ! -e $T/x && ! -e $T/b && ! -e $T/root/b ]] || fail "a '..' path wrote a file"
    [[ $(find "$T/root" -type f | wc -l) -eq 1 ]] || fail "files appeared under the root"
}

case_symlink_escape() {
    # Links inside the root that point outside it cannot be followed.
    mkdir -p "$T/root" "$T/outside"
    echo "outside file" >"$T/outside/f"
    cp "$T/outside/f" "$T/f.orig"
    ln -s ../outside "$T/root/esc"
    ln -s ../outside/f "$T/root/escf"
    ln -s "$T/outside" "$T/root/abs"
    ln -s ../outside/new "$T/root/dangling"
    mkfile "$T/a" 200000
    start_daemon "$T/root"
    local k=(--key-file "$DAEMON_KEY") p
    for p in esc esc/ esc/new escf abs/new abs dangling; do
        expect_exit 1,2,3,11 "$PCOPY" "$T/a" "$DAEMON_URL/$p" "${k[@]}"
        log "push to '$p' through a symlink: exit $LAST_RC: $(head -n1 "$LAST_STDERR")"
        expect_stderr_contains "${p%%/*}"
    done
    for p in escf esc/f abs/f; do
        expect_exit 1,2,3,11 "$PCOPY" "$DAEMON_URL/$p" "$T/pulled" "${k[@]}"
        log "pull of '$p' through a symlink: exit $LAST_RC: $(head -n1 "$LAST_STDERR")"
        expect_stderr_contains "$p"
        [[ ! -e $T/pulled ]] || fail "the pull of '$p' created $T/pulled"
    done
    # Nothing was written outside the root, and the file there is intact.
    [[ $(ls -A "$T/outside") == f ]] || fail "files appeared outside the root: $(ls -A "$T/outside")"
    same_file "$T/f.orig" "$T/outside/f"
    wait_no_temp_files "$T/root"
    # A link inside the root to a file inside the root is fine.
    cp "$T/a" "$T/root/real"
    ln -s real "$T/root/inside"
    expect_exit 0 "$PCOPY" "$DAEMON_URL/inside" "$T/pulled.inside" "${k[@]}"
    same_file "$T/a" "$T/pulled.inside"
}

# The compression failures below are made by the test-only fault hook
# (src/sys/fault.h): PCOPY_TEST_FAULT=compress:N makes the Nth block that
# pcopy tries to compress fail as if the codec ran out of memory.

# textfile PATH: 8 MiB that compress well, so every block is compressed.
textfile() {
    yes "pcopy sends this line compressed, block after block" | head -c 8M >"$1" || true
}

case_compress_fails_local() {
    # A local failure, late in the transfer: exit 13 with the codec and the
    # file named, not "lost data connection" (exit 10); the old file stays.
    mkdir -p "$T/d"
    textfile "$T/text"
    mkfile "$T/d/text" 1000
    cp "$T/d/text" "$T/old"
    expect_exit 13 env PCOPY_TEST_FAULT=compress:3 "$PCOPY" -c 1 -B 64k "$T/text" "$T/d/text"
    expect_stderr_contains "compressing '$T/text' with zlib:1 failed: Cannot allocate memory"
    expect_stderr_lacks "lost data connection"
    same_file "$T/old" "$T/d/text"
    no_temp_files "$T/d"
    # Other codecs are named as the user wrote them.
    expect_exit 13 env PCOPY_TEST_FAULT=compress:5 "$PCOPY" -c lz4 -B 64k -s 1 "$T/text" "$T/d/text"
    expect_stderr_contains "compressing '$T/text' with lz4 failed"
    same_file "$T/old" "$T/d/text"
    no_temp_files "$T/d"
    # A malformed spec is refused up front.
    expect_exit 1 env PCOPY_TEST_FAULT=compress "$PCOPY" "$T/text" "$T/d/text"
    expect_stderr_contains "PCOPY_TEST_FAULT: 'compress' is not SITE:N"
    same_file "$T/old" "$T/d/text"
}

case_compress_fails_pull() {
    # The daemon, as the source, fails to compress: its ERROR crosses the
    # wire with the code, and the client exits 13 with the daemon's words.
    mkdir -p "$T/root" "$T/d"
    textfile "$T/root/text"
    start_daemon "$T/root" PCOPY_TEST_FAULT=compress:3
    expect_exit 13 "$PCOPY" -c 6 -B 64k "$DAEMON_URL/text" "$T/d/text" --key-file "$DAEMON_KEY"
    expect_stderr_contains "compressing 'text' with zlib failed"
    expect_stderr_lacks "lost data connection"
    [[ ! -e $T/d/text ]] || fail "$T/d/text appeared"
    no_temp_files "$T/d"
}

# Every port of -Z in use: exit 10, with advice that fits who listens
# (with -z the client does: "try -z" would be no advice).
case_ports_in_use() {
    local port holder
    port=$(free_port)
    python3 -c "
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('0.0.0.0', $port)); s.listen()
t = socket.socket(socket.AF_INET6); t.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
t.bind(('::', $port)); t.listen(); print('ok', flush=True); time.sleep(60)" >"$T/holder" &
    holder=$!
    track_pid "$holder"
    wait_until 10 grep -q ok "$T/holder" || fail "could not take port $port"
    mkfile "$T/f" 1000
    expect_exit 10 "$PCOPY" -z -Z "$port-$port" "$T/f" "$T/out"
    expect_stderr_contains "every data port from $port to $port is in use"
    expect_stderr_lacks "-z"
    expect_exit 10 "$PCOPY" -Z "$port-$port" "$T/f" "$T/out"
    expect_stderr_contains "try another -Z range, or -z"
    kill "$holder"
}

run_case missing-source case_missing_source
run_case missing-among-several case_missing_among_several
run_case unreadable-source case_unreadable_source
run_case directory-source case_directory_source
run_case bad-options case_bad_options
run_case connection-refused case_connection_refused
run_case protocol-error case_protocol_error
run_case wrong-key case_wrong_key
run_case key-file-checks case_key_file_checks
run_case gen-key-refusals case_gen_key_refusals
run_case dotdot-url case_dotdot_url
run_case symlink-escape case_symlink_escape
run_case compress-fails-local case_compress_fails_local
run_case compress-fails-pull case_compress_fails_pull
run_case ports-in-use case_ports_in_use
finish
