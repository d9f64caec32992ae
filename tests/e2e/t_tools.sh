#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_tools: the layout of tools/ holds together. Every tools/ path that the
# docs, the build and the scripts name exists; every script there carries
# its SPDX line and answers --help; tools/bench lists its scenarios and
# refuses unknown ones and bad options with a message naming the option;
# the bench's reading of pcopy's summary line (how the data travelled, which
# labels its rows) matches what this pcopy prints. Nothing here runs a
# benchmark (a benchmark is a tool, never a test).
source "$PCOPY_TEST_LIB"

ROOT=$(cd "$(dirname "$PCOPY_TEST_LIB")/../.." && pwd)

# tool_scripts: every executable file with a #! line under tools/, one per
# line, relative to the repository.
tool_scripts() {
    local f
    while IFS= read -r f; do
        [[ $(head -c 2 "$f") == '#!' ]] && echo "${f#"$ROOT"/}"
    done < <(find "$ROOT/tools" -type f -perm -u+x | sort)
}

# Every tools/ path named in the docs, the man page, the build files, the
# CI scripts and the scripts under tools/ exists. A path counts when it
# stands on its own (`tools/bench`) or follows $root/ (the scripts' own
# name for the repository); build-tree paths such as build/tools/linkem/linkem
# are not the source tree's and are left out.
case_paths() {
    local -a files=("$ROOT/README.md" "$ROOT/man/pcopy.1.in" "$ROOT/CMakeLists.txt"
        "$ROOT/tests/run-all" "$ROOT/.ci/run")
    local f p n=0 missing=()
    # shellcheck disable=SC2016 # $root/ is literal: the scripts' own text
    local pat='(?<![\w./$-])tools/[\w./-]+|\$root/tools/[\w./-]+'
    for f in "$ROOT"/docs/*.md; do files+=("$f"); done
    while IFS= read -r f; do files+=("$ROOT/$f"); done < <(tool_scripts)
    for f in "${files[@]}"; do
        [[ -f $f ]] || fail "$f is missing"
        while IFS= read -r p; do
            p=${p#\$root/}
            p=${p%%[.,:;]}
            n=$((n + 1))
            [[ -e $ROOT/$p ]] || missing+=("${f#"$ROOT"/} names $p")
        done < <(grep -oP "$pat" "$f" | sort -u || true)
    done
    ((n > 20)) || fail "found only $n tools/ paths in the docs and scripts; the pattern is broken"
    if ((${#missing[@]} > 0)); then
        printf '  %s\n' "${missing[@]}" >&2
        fail "${#missing[@]} tools/ path(s) named that do not exist"
    fi
}

# Every script has the SPDX line right after its #! line, and every entry
# point (not the bench's helpers in tools/bench.d/, which only tools/bench
# calls) exits 0 on --help with a usage text on stdout.
case_scripts() {
    local s n=0
    while IFS= read -r s; do
        n=$((n + 1))
        [[ $(sed -n 2p "$ROOT/$s") == '# SPDX-License-Identifier: Apache-2.0' ]] ||
            fail "$s: line 2 is not the SPDX line"
        [[ $s != tools/bench.d/* ]] || continue
        expect_exit 0 "$ROOT/$s" --help >"$T/help.out"
        grep -qi '^usage' "$T/help.out" || fail "$s --help prints no usage line"
        ! grep -q SPDX-License "$T/help.out" || fail "$s --help prints its SPDX line"
    done < <(tool_scripts)
    # The ones the docs name, at least; a script that was moved or lost
    # shows up here.
    ((n >= 6)) || fail "only $n scripts under tools/"
    for s in tools/bench tools/mktree tools/install-deps tools/linkem/linkem-setup tools/linkem/linkem-selftest; do
        [[ -x $ROOT/$s ]] || fail "$s is not an executable"
    done
}

# tools/bench is the one benchmark: its help lists every scenario, and
# the older single-question scripts are gone.
case_bench_help() {
    local sc old
    expect_exit 0 "$ROOT/tools/bench" --help >"$T/bench.out"
    grep -q -- '--only LIST' "$T/bench.out" || fail "tools/bench --help does not explain --only"
    for sc in a b c d e f g h i; do
        grep -qE "^  $sc  [a-z]" "$T/bench.out" || fail "tools/bench --help does not describe scenario $sc"
    done
    grep -qF 'a,b,c,d,e,f,g,h,i' "$T/bench.out" || fail "tools/bench --help does not list a,b,c,d,e,f,g,h,i for --only"
    for old in bench-loopback bench-ssh bench-compress linkem-setup linkem-selftest; do
        [[ ! -e $ROOT/tools/$old ]] || fail "tools/$old is still there"
    done
}

# Bad options end with exit 1 and a message that names the option, before
# the bench needs root or builds anything.
case_bench_errors() {
    expect_exit 1 "$ROOT/tools/bench" --only a,j
    expect_stderr_contains "--only: unknown scenario 'j'"
    expect_exit 1 "$ROOT/tools/bench" --only ''
    expect_stderr_contains "--only is empty"
    expect_exit 1 "$ROOT/tools/bench" --runs 0
    expect_stderr_contains "--runs '0'"
    expect_exit 1 "$ROOT/tools/bench" --runs
    expect_stderr_contains "--runs needs a value"
    expect_exit 1 "$ROOT/tools/bench" --frobnicate
    expect_stderr_contains "unknown argument '--frobnicate'"
}

# enc_is LOG WANT: tools/bench.d/util.py enc gives WANT for pcopy's stderr
# LOG, and for LOG with a timestamp before each line, as tools/bench logs it.
enc_is() {
    local util=$ROOT/tools/bench.d/util.py got
    got=$(python3 "$util" enc "$1") || fail "util.py enc $1 failed"
    [[ $got == "$2" ]] || fail "util.py enc: '$got' for $(grep -m1 'bytes in' "$1" || echo 'no summary line'), wanted '$2'"
    sed 's/^/1795552273.177381 /' "$1" >"$1.stamped"
    got=$(python3 "$util" enc "$1.stamped") || fail "util.py enc $1.stamped failed"
    [[ $got == "$2" ]] || fail "util.py enc: '$got' for the timestamped log, wanted '$2'"
}

# tools/bench labels each pcopy row with how its runs sent the data, read
# from pcopy's summary line by `util.py enc`: the parser must understand
# what this pcopy prints, as it is and with the bench's timestamps in front
# of each line. Local copies of a small file (not a benchmark): forced into
# TLS with each cipher, in clear by default, and with --no-encrypt; a log
# with no summary line (a run that failed early) is unknown, "-".
case_bench_enc() {
    local c n=0
    command -v python3 >/dev/null || fail "python3 is missing (tools/install-deps installs it)"
    mkfile "$T/src" 64k
    for c in aes128-gcm:TLS_AES_128_GCM_SHA256 chacha20-poly1305:TLS_CHACHA20_POLY1305_SHA256; do
        n=$((n + 1))
        expect_exit 0 "$PCOPY" -vv --encrypt --cipher "${c%%:*}" "$T/src" "$T/out.$n"
        same_file "$T/src" "$T/out.$n"
        enc_is "$LAST_STDERR" "${c#*:}"
    done
    expect_exit 0 "$PCOPY" -vv "$T/src" "$T/out.clear"
    enc_is "$LAST_STDERR" clear
    expect_exit 0 "$PCOPY" -vv --no-encrypt "$T/src" "$T/out.no-encrypt"
    enc_is "$LAST_STDERR" clear
    # Through ssh (issue 18; the summary of a run whose data streams went
    # through ssh, as pcopy prints it; t_ssh_firewall checks that pcopy does).
    printf 'pcopy: 1024 bytes in 1 file, 1.458 s, 0.0 MB/s, 4 streams, encrypted (ssh)\n' >"$T/ssh.log"
    enc_is "$T/ssh.log" ssh
    printf 'pcopy: sent HELLO to 127.0.0.1:1\n' >"$T/early.log"
    enc_is "$T/early.log" -
}

# tools/install-deps on a machine that has everything (the suite runs after
# it): done, by any user, with neither root nor sudo (README's first command
# for a user without sudo).
case_install_deps_done() {
    local as=()
    [[ $(id -u) -ne 0 ]] || as=(setpriv --reuid=nobody --regid=nogroup --clear-groups)
    expect_exit 0 "${as[@]}" "$ROOT/tools/install-deps" --runtime-only
    expect_stderr_empty
    expect_exit 0 "${as[@]}" "$ROOT/tools/install-deps"
}

run_case install-deps-done case_install_deps_done
run_case paths case_paths
run_case scripts case_scripts
run_case bench-help case_bench_help
run_case bench-errors case_bench_errors
run_case bench-enc case_bench_enc
finish
