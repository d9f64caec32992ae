#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_cli: --help, --version, --gen-key, the summary and stats lines, -q, and
# options placed after the operands.
source "$PCOPY_TEST_LIB"

# Every option of the usage, short and long.
OPTIONS=(-s --streams -w --window -B --block-size -P --progress --timeout
    --key-file --serve --root --gen-key -v --verbose -q --quiet -h --help
    -V --version --max-sessions --max-startups --max-per-source --data-via -3
    --no-progress --json)

case_help() {
    local out=$T/help.out
    expect_exit 0 "$PCOPY" --help >"$out"
    expect_stderr_empty
    grep -q '^Usage: pcopy' "$out" || fail "--help does not start with 'Usage: pcopy'"
    local opt
    for opt in "${OPTIONS[@]}"; do
        grep -qE -- "(^|[ ,])$opt([ ,=]|\$)" "$out" || fail "--help does not mention $opt"
    done
    for opt in pcopy:// '--serve' '--gen-key' 'Exit status'; do
        grep -qF -- "$opt" "$out" || fail "--help does not mention '$opt'"
    done
    # Each exit status of the contract is listed.
    local code
    for code in 0 1 2 3 5 10 11 12 13 14 20 30; do
        grep -qE "(^|[ ,])$code [a-z]" "$out" || fail "--help does not explain exit status $code"
    done
    # -h is the same text.
    expect_exit 0 "$PCOPY" -h >"$T/h.out"
    cmp -s "$out" "$T/h.out" || fail "-h and --help print different text"
    # Every long option of the man page is in --help too (the man page is
    # generated next to the binary), except the internal ones it lists as
    # "not meant to be typed".
    local man internal
    man=$(dirname "$PCOPY")/pcopy.1
    if [[ -f $man ]]; then
        internal=" $(sed -n '/also accepts/,/not meant to be typed/p' "$man" |
            grep -o '\\-\\-[a-z][a-z-]*' | sed 's/\\//g' | tr '\n' ' ') "
        for opt in $(grep -o '\\-\\-[a-z][a-z-]*' "$man" | sed 's/\\//g' | sort -u); do
            [[ $internal == *" $opt "* ]] && continue
            grep -qF -- "$opt" "$out" || fail "$opt is in pcopy.1 but not in --help"
        done
    fi
}

case_version() {
    local out=$T/version.out
    expect_exit 0 "$PCOPY" --version >"$out"
    expect_stderr_empty
    grep -qE '^pcopy [0-9]+\.[0-9]+\.[0-9]+$' "$out" ||
        fail "--version printed '$(cat "$out")', not 'pcopy X.Y.Z'"
    [[ $(wc -l <"$out") -eq 1 ]] || fail "--version printed more than one line"
    expect_exit 0 "$PCOPY" -V >"$T/V.out"
    cmp -s "$out" "$T/V.out" || fail "-V and --version differ"
}

case_gen_key() {
    local k=$T/k1 k2=$T/k2
    expect_exit 0 "$PCOPY" --gen-key "$k"
    [[ $(mode_of "$k") == 600 ]] || fail "key file has mode $(mode_of "$k"), not 600"
    grep -qxE '[0-9a-f]{64}' "$k" || fail "key file is not 64 hex digits: $(cat "$k")"
    [[ $(wc -l <"$k") -eq 1 && $(stat -c %s "$k") -eq 65 ]] ||
        fail "key file is not one line of 64 hex digits and a newline"
    # Mode 0600 even with a permissive umask.
    (umask 000 && "$PCOPY" --gen-key "$k2") || fail "--gen-key $k2 failed"
    [[ $(mode_of "$k2") == 600 ]] || fail "with umask 000 the key has mode $(mode_of "$k2")"
    [[ $(cat "$k") != "$(cat "$k2")" ]] || fail "two generated keys are equal"
    # The daemon and the client accept the key it makes.
    mkdir -p "$T/root"
    start_daemon "$T/root"
    mkfile "$T/src" 1000
    expect_exit 0 "$PCOPY" "$T/src" "$DAEMON_URL/src" --key-file "$DAEMON_KEY"
    same_file "$T/src" "$T/root/src"
}

case_summary() {
    mkfile "$T/a" 3M
    mkfile "$T/b" 12345
    mkdir -p "$T/d"
    expect_exit 0 "$PCOPY" -s 3 "$T/a" "$T/b" "$T/d"
    expect_summary $((3 * 1048576 + 12345)) 2 3
    expect_exit 0 "$PCOPY" -s 1 "$T/b" "$T/one"
    expect_summary 12345 1 1
    expect_stderr_lacks 'pcopy: stats'
    # -v adds the stats line.
    expect_exit 0 "$PCOPY" -v "$T/a" "$T/two"
    expect_summary $((3 * 1048576)) 1 4
    # A line of name=value pairs; later versions may add more pairs.
    expect_stderr_matches '^pcopy: stats( [a-z_]+=[0-9.]+)+$'
    local key
    for key in src_cpu_s src_maxrss_kib sink_cpu_s sink_maxrss_kib wall_s; do
        expect_stderr_matches "^pcopy: stats (.* )?$key=[0-9.]+( |\$)"
    done
    # -q prints nothing at all on success.
    expect_exit 0 "$PCOPY" -q "$T/a" "$T/three"
    expect_stderr_empty
    same_file "$T/a" "$T/three"
    # And only errors otherwise: which entry failed, and the last word.
    mkdir -p "$T/qtree/sub"
    cp "$T/a" "$T/qtree/sub/f"
    mkfifo "$T/qtree/sub/fifo"
    expect_exit 3 "$PCOPY" -q -r "$T/qtree" "$T/qcopy"
    expect_stderr_matches "^pcopy: .*qtree/sub/fifo"
    expect_stderr_matches "^pcopy: 1 entry was not copied\$"
    [[ $(wc -l <"$LAST_STDERR") -eq 2 ]] || fail "-q printed more than errors: $(cat "$LAST_STDERR")"
}

case_options_after_operands() {
    mkfile "$T/src" 200k
    expect_exit 0 "$PCOPY" "$T/src" "$T/dst" -s 2 -B 64k
    expect_summary 204800 1 2
    same_file "$T/src" "$T/dst"
    expect_exit 0 "$PCOPY" --streams=5 --block-size=16k --window=256k "$T/src" "$T/dst2"
    expect_summary 204800 1 5
    same_file "$T/src" "$T/dst2"
}

case_window_warning() {
    # A window above the kernel's limit: the copy goes on with a warning
    # that gives both numbers; -q silences it.
    local max
    max=$(cat /proc/sys/net/core/rmem_max)
    mkfile "$T/src" 300k
    expect_exit 0 "$PCOPY" -w 1G "$T/src" "$T/dst"
    same_file "$T/src" "$T/dst"
    if ((max < 1073741824)); then
        expect_stderr_contains 1073741824
        expect_stderr_contains rmem_max
    fi
    expect_exit 0 "$PCOPY" -q -w 1G "$T/src" "$T/dst2"
    expect_stderr_empty
    same_file "$T/src" "$T/dst2"
}

# The README opens with the two commands for a new user (a copy, the whole
# test suite), and CI runs that very test command. It once went out 5 MB
# long, its opening buried, after a bad edit: this catches that kind.
case_client_or_daemon() {
    # An option that only the other role uses is refused, named, exit 1,
    # rather than silently ignored.
    local opt
    mkdir -p "$T/root"
    "$PCOPY" --gen-key "$T/key" || fail "pcopy --gen-key failed"
    for opt in "--cipher aes128-gcm" --encrypt --no-encrypt; do
        # shellcheck disable=SC2086 # opt is one or two words
        # (timeout: a daemon that ignored it would serve forever)
        expect_exit 1 timeout 10 "$PCOPY" --serve 127.0.0.1:1 --root "$T/root" --key-file "$T/key" $opt
        expect_stderr_contains "${opt%% *} is a client's choice"
    done
    mkfile "$T/src" 1000
    expect_exit 1 "$PCOPY" --allow-unencrypted "$T/src" "$T/dst"
    expect_stderr_contains "--allow-unencrypted is for a daemon (--serve)"
    [[ ! -e $T/dst ]] || fail "a refused copy wrote $T/dst"
    for opt in --max-sessions --max-startups --max-per-source; do
        expect_exit 1 "$PCOPY" "$opt" 4 "$T/src" "$T/dst"
        expect_stderr_contains "$opt is for a daemon (--serve)"
        [[ ! -e $T/dst ]] || fail "a copy with $opt wrote $T/dst"
    done
}

case_daemon_limits() {
    # The daemon's limits refuse what is out of range, naming the option
    # (timeout: a daemon that took it would serve forever).
    local spec opt val
    mkdir -p "$T/root"
    "$PCOPY" --gen-key "$T/key" || fail "pcopy --gen-key failed"
    for spec in --max-sessions:0 --max-sessions:1025 --max-startups:0 --max-startups:4097 \
        --max-per-source:0 --max-per-source:4097 --max-sessions:x --max-per-source:-1; do
        opt=${spec%%:*}
        val=${spec#*:}
        expect_exit 1 timeout 10 "$PCOPY" --serve 127.0.0.1:1 --root "$T/root" --key-file "$T/key" "$opt" "$val"
        expect_stderr_contains "pcopy: $opt: '$val' is not a number of"
    done
}

case_readme() {
    local root readme first
    root=$(cd "$(dirname "$PCOPY_TEST_LIB")/../.." && pwd)
    readme=$root/README.md
    [[ -f $readme ]] || fail "no README.md at $readme"
    (($(wc -c <"$readme") < 65536)) || fail "README.md is $(wc -c <"$readme") bytes long"
    [[ $(head -n 1 "$readme") == "# pcopy" ]] || fail "README.md does not start with '# pcopy'"
    # The first code block, before the first section.
    first=$(awk '/^## / { exit } /^```/ { n++; next } n == 1 { print }' "$readme")
    grep -qE '(^|[ ;&|])\./build/pcopy [^ ]+ [^ ]+' <<<"$first" ||
        fail "the README's first block runs no copy"
    # Exactly this, with no sudo: as root there may be none, and as another
    # user run-all runs itself through sudo.
    grep -qx 'tests/run-all' <<<"$first" ||
        fail "the README's first block does not run plain 'tests/run-all' on a line of its own"
    grep -qE '^exec tests/run-all' "$root/.ci/run" || fail ".ci/run does not run tests/run-all"
}

# The licence is in the tree, and every source, script and build file says
# which it is under (distributions read the SPDX line).
case_licence() {
    local root f missing=()
    root=$(cd "$(dirname "$PCOPY_TEST_LIB")/../.." && pwd)
    grep -q 'Apache License' "$root/LICENSE" 2>/dev/null || fail "no Apache-2.0 text in $root/LICENSE"
    while IFS= read -r f; do
        case $f in
        *.c | *.h | *.sh | *.py | *.gp | *.in | CMakeLists.txt | */CMakeLists.txt) ;;
        tools/* | tests/run-all | .ci/*) [[ $(head -c 2 "$root/$f") == '#!' ]] || continue ;;
        *) continue ;;
        esac
        head -n 3 "$root/$f" | grep -q 'SPDX-License-Identifier: Apache-2.0' || missing+=("$f")
    done < <(git -C "$root" ls-files 2>/dev/null ||
        (cd "$root" && find . -path ./.git -prune -o -path './build*' -prune -o -type f -print | sed 's|^\./||'))
    ((${#missing[@]} == 0)) || fail "no SPDX-License-Identifier line in: ${missing[*]}"
}

run_case help case_help
run_case readme case_readme
run_case licence case_licence
run_case version case_version
run_case gen-key case_gen_key
run_case summary case_summary
run_case options-after-operands case_options_after_operands
run_case window-warning case_window_warning
run_case client-or-daemon case_client_or_daemon
run_case daemon-limits case_daemon_limits
finish
