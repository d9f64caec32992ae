#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_json: `pcopy --json` writes one summary object that is valid against
# docs/pcopy-summary.schema.json (checked by tests/e2e/check_json.py with
# python3-jsonschema), in every case and mode:
#   local        a file and a tree: bytes, files, streams, data_via "local"
#   partial      as nobody, a tree with an unreadable file and directory:
#                exit 3 and "not_copied" names both with their reason
#   missing      a source that does not exist: exit 3, ok false, its path
#   unreachable  a daemon port nobody listens on: exit 10, the error names it
#   ssh          push, pull (a missing remote source listed), --data-via
#                ssh, third party and -3: data_via direct / ssh / hosts / relay
#   daemon       push to and pull from a daemon
#   progress     -P 1 --json on a slow stdin: progress events, then the summary
#   file         --json=FILE; --json with the destination '-' is refused
#   quiet        -q --json: the JSON, nothing on stderr
source "$PCOPY_TEST_LIB"
needs_root "it runs pcopy as the user nobody and runs an sshd"
source "${PCOPY_TEST_LIB%/*}/sshd.sh"

ROOT=$(cd "$(dirname "$PCOPY_TEST_LIB")/../.." && pwd)
SCHEMA=$ROOT/docs/pcopy-summary.schema.json
CHECK=$ROOT/tests/e2e/check_json.py
AS_NOBODY=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
# python3 on PATH may be a pyenv shim without the module: the system's.
/usr/bin/python3 -c 'import jsonschema' 2>/dev/null ||
    fail "/usr/bin/python3 has no jsonschema module (tools/install-deps installs python3-jsonschema)"
sshd_start

# valid FILE [TYPES]: FILE's lines are valid against the schema, of TYPES.
valid() {
    /usr/bin/python3 "$CHECK" "$SCHEMA" "$@" || fail "$1 is not valid pcopy --json output"
}


# jis FILE EXPR WANT: EXPR (as jget) prints WANT.
jis() {
    local got
    got=$(jget "$1" "$2")
    [[ $got == "$3" ]] || fail "$1: $2 is '$got', wanted '$3'"
}

case_local() {
    mkfile "$T/f" 3M
    expect_exit 0 "$PCOPY" --json "$T/f" "$T/g" >"$T/j"
    cp "$LAST_STDERR" "$T/j.err"
    valid "$T/j"
    same_file "$T/f" "$T/g"
    jis "$T/j" 'j["ok"], j["exit_code"], j["error"]' "(True, 0, None)"
    jis "$T/j" 'j["bytes"], j["files"]["copied"], j["files"]["not_copied"]' "(3145728, 1, [])"
    jis "$T/j" 'j["data_via"], j["streams"]["count"], len(j["streams"]["per_stream"])' "('local', 4, 4)"
    jis "$T/j" 'sum(s["bytes"] for s in j["streams"]["per_stream"])' 3145728
    jis "$T/j" 'j["source"]["cpu_s"] > 0 and j["sink"]["maxrss_kib"] > 0' True
    # The human summary is still there, on stderr.
    expect_summary 3145728 1 4
    # The bottleneck as the summary's last line names it, with every stage.
    jis "$T/j" 'len(j["bottleneck"]["stages"]), j["bottleneck"]["name"] in open(sys.argv[1] + ".err").read()' "(7, True)"
    mkdir -p "$T/tree/d"
    mkfile "$T/tree/a" 1000
    mkfile "$T/tree/d/b" 2000
    expect_exit 0 "$PCOPY" -r -c lz4 --json "$T/tree" "$T/tree2" >"$T/j2"
    valid "$T/j2"
    jis "$T/j2" 'j["files"]["copied"], j["files"]["directories"]' "(2, 2)"
    jis "$T/j2" 'j["compression"]["codec"], j["compression"]["ratio"] > 0' "('lz4', True)"
    # -c none, 0 or zlib:0 compress nothing: no ratio, as without -c.
    local c
    for c in none 0 zlib:0; do
        expect_exit 0 "$PCOPY" -r -c "$c" --json "$T/tree" "$T/tree.$c" >"$T/j3"
        jis "$T/j3" 'j["compression"]["ratio"]' None
        expect_stderr_lacks "compression"
    done
}

case_partial() {
    local src=$T/src
    mkdir -p "$src/baddir" "$T/out"
    mkfile "$src/a" 1000
    mkfile "$src/baddir/y" 10
    mkfile "$src/badfile" 5000
    chmod 000 "$src/badfile" "$src/baddir"
    chown nobody:nogroup "$T/out"
    expect_exit 3 "${AS_NOBODY[@]}" "$PCOPY" -r --json "$src" "$T/out/copy" >"$T/j"
    valid "$T/j"
    jis "$T/j" 'j["ok"], j["exit_code"]' "(False, 3)"
    jis "$T/j" 'j["files"]["skipped"] + j["files"]["failed"], len(j["files"]["not_copied"])' "(2, 2)"
    # Each one named, by its path or in its reason, with why.
    jis "$T/j" 'sum(1 for f in j["files"]["not_copied"] if "badfile" in (f["path"] or "") + f["reason"] and "Permission denied" in f["reason"])' 1
    jis "$T/j" 'sum(1 for f in j["files"]["not_copied"] if "baddir" in (f["path"] or "") + f["reason"] and "Permission denied" in f["reason"])' 1
    # Each one's path itself, where the client read it: the file, and the
    # directory the walk could not open.
    jis "$T/j" 'sorted(f["path"] for f in j["files"]["not_copied"])' "['$src/baddir', '$src/badfile']"
    # A name that is not UTF-8: the path has U+FFFD (JSON strings are
    # UTF-8), the reason the \xNN the message printed, which gives it back.
    rm -rf "$src" "$T/out/copy"
    mkdir -p "$src"
    mkfile "$src/bad"$'\xff' 10
    chmod 000 "$src/bad"$'\xff'
    expect_exit 3 "${AS_NOBODY[@]}" "$PCOPY" -r --json "$src" "$T/out/copy" >"$T/j"
    valid "$T/j"
    jis "$T/j" 'j["files"]["not_copied"][0]["reason"].count("bad\\xff")' 1
}

case_missing() {
    expect_exit 3 "$PCOPY" --json "$T/nothing" "$T/g" >"$T/j"
    valid "$T/j"
    jis "$T/j" 'j["ok"], j["exit_code"], j["files"]["skipped"]' "(False, 3, 1)"
    jis "$T/j" 'j["files"]["not_copied"][0]["path"]' "$T/nothing"
    jis "$T/j" '"No such file" in j["files"]["not_copied"][0]["reason"]' True
    jis "$T/j" 'j["bottleneck"]' None
    # One missing among others, and a directory without -r: named by path.
    mkfile "$T/here" 10
    mkdir -p "$T/dir" "$T/into"
    expect_exit 3 "$PCOPY" --json "$T/here" "$T/nothing" "$T/dir" "$T/into/" >"$T/j2"
    jis "$T/j2" 'sorted(f["path"] for f in j["files"]["not_copied"])' "['$T/dir', '$T/nothing']"
}

case_unreachable() {
    local port
    port=$(free_port)
    "$PCOPY" --gen-key "$T/key"
    mkfile "$T/f" 100
    expect_exit 10 "$PCOPY" --key-file "$T/key" --json "$T/f" "pcopy://127.0.0.1:$port/x" >"$T/j"
    valid "$T/j"
    jis "$T/j" 'j["ok"], j["exit_code"], "127.0.0.1" in j["error"]' "(False, 10, True)"
    expect_stderr_contains "127.0.0.1"
}

case_ssh() {
    mkdir -p "$T/src" "$T/remote" "$T/back" "$T/third" "$T/relay"
    mkfile "$T/src/f" 2M
    expect_exit 0 "$PCOPY" --json "$T/src/f" "pctest:$T/remote/" >"$T/push"
    valid "$T/push"
    jis "$T/push" 'j["data_via"], j["bytes"], j["data_via_reason"]' "('direct', 2097152, None)"
    expect_exit 3 "$PCOPY" --json "pctest:$T/remote/f" "pctest:$T/remote/nothing" "$T/back" >"$T/pull"
    valid "$T/pull"
    jis "$T/pull" 'j["data_via"], j["exit_code"], j["files"]["copied"], j["files"]["skipped"]' "('direct', 3, 1, 1)"
    jis "$T/pull" '"nothing" in j["files"]["not_copied"][0]["reason"]' True
    same_file "$T/src/f" "$T/back/f"
    expect_exit 0 "$PCOPY" --data-via ssh --json "$T/src/f" "pctest:$T/remote/g" >"$T/viassh"
    valid "$T/viassh"
    jis "$T/viassh" 'j["data_via"], j["security"]' "('ssh', 'encrypted (ssh)')"
    expect_exit 0 "$PCOPY" --json "h1:$T/src/f" "h2:$T/third/" >"$T/third.j"
    valid "$T/third.j"
    jis "$T/third.j" 'j["data_via"], j["bytes"]' "('hosts', 2097152)"
    expect_exit 0 "$PCOPY" -3 --json "h1:$T/src/f" "h2:$T/relay/" >"$T/relay.j"
    valid "$T/relay.j"
    jis "$T/relay.j" 'j["data_via"], j["bytes"]' "('relay', 2097152)"
}

case_daemon() {
    mkdir -p "$T/root"
    start_daemon "$T/root"
    mkfile "$T/f" 1M
    expect_exit 0 "$PCOPY" --key-file "$DAEMON_KEY" --json "$T/f" "$DAEMON_URL/f" >"$T/push"
    valid "$T/push"
    jis "$T/push" 'j["data_via"], j["bytes"], j["security"].startswith("encrypted (TLS 1.3")' "('direct', 1048576, True)"
    expect_exit 0 "$PCOPY" --key-file "$DAEMON_KEY" --json "$DAEMON_URL/f" "$T/g" >"$T/pull"
    valid "$T/pull"
    same_file "$T/f" "$T/g"
}

case_progress() {
    slow_producer "$T/fifo" 3000000 3
    expect_exit 0 "$PCOPY" -P 1 --json - "$T/out" <"$T/fifo" >"$T/j"
    valid "$T/j" "(progress )+summary"
    jis "$T/j" 'j["bytes"]' 3000000
    # -P's plain lines are still on stderr, for logs.
    expect_stderr_matches '^pcopy: progress: '
    /usr/bin/python3 -c 'import json,sys
p = [json.loads(l) for l in open(sys.argv[1]) if "\"progress\"" in l]
assert p[0]["bytes"] >= 1048576 and not p[0]["total_final"], p[0]' "$T/j" ||
        fail "the progress events do not show stdin's bytes with an open total"
}

case_file() {
    mkfile "$T/f" 1000
    expect_exit 0 "$PCOPY" --json="$T/out.json" "$T/f" - >"$T/data"
    same_file "$T/f" "$T/data"
    valid "$T/out.json"
    expect_exit 1 "$PCOPY" --json "$T/f" - >"$T/data2"
    expect_stderr_contains "--json writes to standard output, and so does the destination '-'"
    [[ ! -s $T/data2 ]] || fail "the refused copy wrote to standard output"
    expect_exit 1 "$PCOPY" --json="$T/no/such/dir/x.json" "$T/f" "$T/g"
    expect_stderr_contains "cannot open '$T/no/such/dir/x.json'"
}

case_quiet() {
    mkfile "$T/f" 1000
    expect_exit 0 "$PCOPY" -q --json "$T/f" "$T/g" >"$T/j"
    valid "$T/j"
    expect_stderr_empty
}

run_case local case_local
run_case partial case_partial
run_case missing case_missing
run_case unreachable case_unreachable
run_case ssh case_ssh
run_case daemon case_daemon
run_case progress case_progress
run_case file case_file
run_case quiet case_quiet
finish
