#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_completion: the shell completions in completion/ stay in step with
# `pcopy --help` (every option it lists is offered by both, and they offer
# nothing it does not list), and the bash completion, sourced with
# bash-completion's helpers, answers what it should: options, -c specs,
# --data-via, local paths, and remote paths listed through a stand-in ssh
# that records how it was called (batch mode, a time limit). The zsh file
# must parse (zsh -n), and zsh, run on a pseudo-terminal, must complete
# options, option values and local paths with it.
# ctest: packaging
source "$PCOPY_TEST_LIB"

ROOT=$(cd "$(dirname "$PCOPY_TEST_LIB")/../.." && pwd)
BASH_COMP=$ROOT/completion/pcopy.bash
ZSH_COMP=$ROOT/completion/pcopy.zsh
BASH_COMPLETION_LIB=/usr/share/bash-completion/bash_completion

# help_options: every option of `pcopy --help`, one per line: the words
# starting with - at the start of its option lines ("  -r, -R, --recursive").
help_options() {
    "$PCOPY" --help | grep -oE '^ +-[-A-Za-z0-9]+(, -[-A-Za-z0-9]+)*' | tr -s ' ,' '\n' |
        grep . | sort -u
}

# bash_options: the options the bash completion offers ($_pcopy_options).
bash_options() {
    bash -c 'source "$1" && printf "%s\n" $_pcopy_options' _ "$BASH_COMP" | sort -u
}

# zsh_options: the options in the zsh completion's _arguments specs: each
# '-x[', '--opt=[', '--opt=-[' or {-x,--opt} group.
zsh_options() {
    {
        grep -oE "'(\([^)]*\))?\*?-[-A-Za-z0-9]+(=-|[=+])?\[" "$ZSH_COMP" |
            sed -E "s/^'(\([^)]*\))?\*?//; s/(=-|[=+])?\[$//"
        grep -oE '\{-[-A-Za-z0-9,=+]+\}' "$ZSH_COMP" | tr -d '{}' | tr ',' '\n' | sed 's/[=+]$//'
    } | sort -u
}

case_options_in_step() {
    local help bash zsh
    help=$(help_options)
    (($(grep -c . <<<"$help") > 40)) ||
        fail "found only $(grep -c . <<<"$help") options in --help; the pattern is broken"
    bash=$(bash_options)
    zsh=$(zsh_options)
    local missing extra
    missing=$(comm -23 <(echo "$help") <(echo "$bash"))
    [[ -z $missing ]] || fail "options of --help missing from $BASH_COMP: $(tr "\n" " " <<<"$missing")"
    extra=$(comm -13 <(echo "$help") <(echo "$bash"))
    [[ -z $extra ]] || fail "$BASH_COMP offers options --help does not list: $(tr "\n" " " <<<"$extra")"
    missing=$(comm -23 <(echo "$help") <(echo "$zsh"))
    [[ -z $missing ]] || fail "options of --help missing from $ZSH_COMP: $(tr "\n" " " <<<"$missing")"
    extra=$(comm -13 <(echo "$help") <(echo "$zsh"))
    [[ -z $extra ]] || fail "$ZSH_COMP offers options --help does not list: $(tr "\n" " " <<<"$extra")"
    # The values --data-via and --cipher take, from --help.
    local via
    for via in auto direct ssh; do
        "$PCOPY" --help | grep -A3 -e '--data-via' | grep -qw "$via" ||
            fail "--help no longer lists '$via' for --data-via; update the completions"
        grep -qE "data-via.*\b$via\b" "$ZSH_COMP" || fail "$ZSH_COMP lacks --data-via $via"
    done
}

case_zsh_parses() {
    command -v zsh >/dev/null || fail "zsh is not installed (tools/install-deps installs it)"
    zsh -n "$ZSH_COMP" || fail "zsh -n $ZSH_COMP failed"
    head -n 1 "$ZSH_COMP" | grep -qx '#compdef pcopy' || fail "$ZSH_COMP does not start with #compdef pcopy"
}

# zsh_complete LINE: the matches zsh's completion offers for the command
# line LINE (typed, then TAB), one per line, sorted. It runs an interactive
# zsh on a pseudo-terminal (zsh/zpty) with the completion in its fpath, and
# wraps compadd to print each match it is given.
zsh_complete() {
    mkdir -p "$T/fpath"
    cp "$ZSH_COMP" "$T/fpath/_pcopy"
    cat >"$T/zdriver.zsh" <<'EOF'
zmodload zsh/zpty || exit 2
fp=$1
zpty z zsh -f -i
zpty -w z "PROMPT=''; RPROMPT=''; fpath=($fp \$fpath); autoload -Uz compinit; compinit -u -D"
zpty -w z 'compadd() { local -a m; builtin compadd -O m "$@"; (( $#m )) && print -rl -- "${(@)m/(#m)*/MATCH<<$MATCH>>}"; builtin compadd "$@" }'
# The markers are computed, so that the echo of a command is not taken for
# its output.
zpty -w z 'setopt extendedglob; zstyle ":completion:*" menu no; print READY$((6*7))'
wait_for() {
    local i chunk
    out=""
    for i in {1..500}; do
        if zpty -r -t z chunk; then
            out+=$chunk
            [[ $out == *$1* ]] && return 0
        else
            sleep 0.02
        fi
    done
    print -u2 "zsh did not answer ($1)"
    exit 1
}
wait_for READY42
zpty -w -n z "$2"$'\t\C-u'
zpty -w z 'print DONE$((6*7))'
wait_for DONE42
print -r -- "$out" | grep -ao 'MATCH<<[^>]*>>' | sed 's/^MATCH<<//; s/>>$//' | sort -u
zpty -d z
EOF
    (cd "$T/cwd" && HOME=$T/home PATH=$T/bin:$PATH timeout 30 zsh -f "$T/zdriver.zsh" "$T/fpath" "pcopy $1")
}

# expect_zsh LINE WANT...: zsh completes `pcopy LINE` exactly to WANT.
expect_zsh() {
    local line=$1 got want
    shift
    got=$(zsh_complete "$line") || fail "zsh completion of 'pcopy $line' failed"
    want=$(printf '%s\n' "$@" | sort)
    [[ $got == "$want" ]] ||
        fail "zsh completes 'pcopy $line' to [$(tr '\n' ' ' <<<"$got")], not [$(tr '\n' ' ' <<<"$want")]"
}

case_zsh_completes() {
    command -v zsh >/dev/null || fail "zsh is not installed (tools/install-deps installs it)"
    bash_setup
    expect_zsh '--data-via ' auto direct ssh
    expect_zsh '--ci' --cipher
    expect_zsh '--no-e' --no-encrypt
    expect_zsh '--max-s' --max-sessions --max-startups
    expect_zsh '-c au' auto
    expect_zsh '-c 1,1,bz' bz2
    # After the colon, the levels (zsh keeps "lz4:" as the match's prefix).
    expect_zsh '-c lz4:' 1 2 3 4 5 6 7 8 9 10 11 12
    expect_zsh '-c 6,zlib:' 0 1 2 3 4 5 6 7 8 9
    # (Names without spaces: _path_files hands compadd a name both quoted
    # and not, which this wrapper cannot tell apart.)
    expect_zsh 'file' file.txt
    expect_zsh '--root da' data
}

# Remote paths through a stand-in ssh, as for bash.
case_zsh_remote_paths() {
    command -v zsh >/dev/null || fail "zsh is not installed (tools/install-deps installs it)"
    bash_setup
    cat >"$T/bin/ssh" <<EOF
#!/bin/sh
printf '%s\n' "\$@" >"$T/ssh.args"
printf '%s\n' 'logs/' 'logs.tar*'
EOF
    chmod +x "$T/bin/ssh"
    local got
    got=$(zsh_complete 'server:lo') || fail "zsh completion of 'pcopy server:lo' failed"
    [[ -f $T/ssh.args ]] || fail "zsh's remote completion did not run ssh"
    grep -qx 'BatchMode=yes' "$T/ssh.args" || fail "ssh ran without -o BatchMode=yes: $(tr '\n' ' ' <"$T/ssh.args")"
    grep -qx 'ConnectTimeout=5' "$T/ssh.args" || fail "ssh ran without a ConnectTimeout: $(tr '\n' ' ' <"$T/ssh.args")"
    grep -qx 'server' "$T/ssh.args" || fail "ssh was not called for host 'server'"
    grep -qx 'logs' <<<"$got" || fail "zsh's remote completion lacks the directory logs: $(tr '\n' ' ' <<<"$got")"
    grep -qx 'logs.tar' <<<"$got" || fail "zsh's remote completion lacks logs.tar: $(tr '\n' ' ' <<<"$got")"
}

# The driver the bash cases run in a fresh bash: it sources bash-completion
# and the completion, and comp WORD... completes the last WORD of the
# command line `pcopy WORD...` as readline would, the line split into words
# at COMP_WORDBREAKS characters (host:path is three words, as in bash).
# It prints one COMPREPLY entry per line, then "nospace" if the completion
# asked for no space after it.
write_driver() {
    cat >"$T/driver.sh" <<'EOF'
set -u
source "$BASH_COMPLETION_LIB"
source "$BASH_COMP"
NOSPACE=0
# compopt works only inside a real completion; record what it is asked.
compopt() {
    [[ " $* " == *" -o nospace "* ]] && NOSPACE=1
    return 0
}
comp() {
    local line="pcopy $*" w
    COMP_WORDS=()
    for w in pcopy "$@"; do
        while [[ $w == *:* ]]; do
            [[ -n ${w%%:*} ]] && COMP_WORDS+=("${w%%:*}")
            COMP_WORDS+=(:)
            w=${w#*:}
        done
        COMP_WORDS+=("$w")
    done
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMP_LINE=$line
    COMP_POINT=${#line}
    COMPREPLY=()
    NOSPACE=0
    _pcopy pcopy "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
    printf '%s\n' "${COMPREPLY[@]}"
    ((NOSPACE)) && echo nospace
    return 0
}
EOF
}

# complete_bash WORD...: comp WORD... in the driver, from directory $T/cwd.
complete_bash() {
    (cd "$T/cwd" && BASH_COMPLETION_LIB=$BASH_COMPLETION_LIB BASH_COMP=$BASH_COMP \
        HOME=$T/home PATH=$T/bin:$PATH bash -c 'source "$1"; shift; comp "$@"' _ "$T/driver.sh" "$@")
}

# expect_reply WORDS -- WANT...: completing WORDS gives exactly WANT (in
# any order), one entry each.
expect_reply() {
    local -a words=()
    while [[ $1 != -- ]]; do
        words+=("$1")
        shift
    done
    shift
    local got want
    got=$(complete_bash "${words[@]}" | grep -vx nospace | sort)
    want=$(printf '%s\n' "$@" | sort)
    [[ $got == "$want" ]] || fail "completing 'pcopy ${words[*]}' gave [$(tr "\n" " " <<<"$got")], not [$(tr "\n" " " <<<"$want")]"
}

bash_setup() {
    [[ -f $BASH_COMPLETION_LIB ]] ||
        fail "$BASH_COMPLETION_LIB is missing (package bash-completion; tools/install-deps installs it)"
    mkdir -p "$T/cwd/dir one" "$T/cwd/data" "$T/home" "$T/bin"
    : >"$T/cwd/file.txt"
    : >"$T/cwd/fi le"
    write_driver
}

case_bash_options() {
    bash_setup
    expect_reply --str -- --streams
    expect_reply --no- -- --no-encrypt --no-progress
    expect_reply --max-s -- --max-sessions --max-startups
    local all
    all=$(complete_bash - | grep -c .)
    [[ $all -eq $(help_options | grep -c .) ]] ||
        fail "'pcopy -' completes $all options, --help lists $(help_options | grep -c .)"
}

case_bash_option_values() {
    bash_setup
    expect_reply -c 'l' -- lz4 lz4:1 lz4:2 lz4:3 lz4:4 lz4:5 lz4:6 lz4:7 lz4:8 lz4:9 \
        lz4:10 lz4:11 lz4:12
    # After the colon bash replaces only what follows it.
    expect_reply -c 'bz2:' -- 1 2 3 4 5 6 7 8 9
    expect_reply --compress 'zlib:' -- 0 1 2 3 4 5 6 7 8 9
    expect_reply -c 'au' -- auto
    expect_reply -c '1,1,n' -- 1,1,none
    expect_reply --data-via '' -- auto direct ssh
    expect_reply --data-via 'd' -- direct
    expect_reply --cipher 'ch' -- chacha20-poly1305
    expect_reply -s '1' -- 1 16
    expect_reply --root '' -- 'dir one' data
    expect_reply --timeout '' --
}

case_bash_local_paths() {
    bash_setup
    expect_reply 'fi' -- file.txt 'fi le'
    expect_reply 'da' -- data
    expect_reply -r 'dir' -- 'dir one'
    # A slash before the colon: a local path, not a host.
    mkdir -p "$T/cwd/data/a:b"
    expect_reply 'data/a:' -- 'b'
    # A daemon URL is not completed.
    expect_reply 'pcopy://host:7000/' --
}

# A stand-in ssh that records its arguments and lists two entries, the way
# `ls -aF1dL` marks them (a directory, an executable).
case_bash_remote_paths() {
    bash_setup
    cat >"$T/bin/ssh" <<EOF
#!/bin/sh
printf '%s\n' "\$@" >"$T/ssh.args"
printf '%s\n' 'logs/' 'logs.tar*' 'my file'
EOF
    chmod +x "$T/bin/ssh"
    local out
    out=$(complete_bash 'server:lo')
    grep -qx 'logs/' <<<"$out" || fail "remote completion lacks 'logs/': $out"
    grep -qx 'logs.tar ' <<<"$out" || fail "remote completion lacks 'logs.tar ' (the * stays out): $out"
    grep -qxF 'my\ file ' <<<"$out" || fail "remote completion does not quote 'my file': $out"
    grep -qx nospace <<<"$out" || fail "remote completion lets a space follow a directory"
    [[ -f $T/ssh.args ]] || fail "the remote completion did not run ssh"
    grep -qx 'BatchMode=yes' "$T/ssh.args" || fail "ssh ran without -o BatchMode=yes: $(tr "\n" " " <"$T/ssh.args")"
    grep -qx 'server' "$T/ssh.args" || fail "ssh was not called for host 'server'"
    grep -q 'ls -aF1dL -- lo\*$' "$T/ssh.args" || fail "ssh did not list lo*: $(tail -n 1 "$T/ssh.args")"
    # An ssh that hangs costs the time limit, not more, and completes nothing.
    cat >"$T/bin/ssh" <<'EOF'
#!/bin/sh
exec sleep 30
EOF
    local start secs
    start=$(now)
    out=$(PCOPY_COMPLETION_SSH_TIMEOUT=1 complete_bash 'server:lo' | grep -vx nospace || true)
    secs=$(secs_since "$start")
    [[ -z $out ]] || fail "a hanging ssh completed: $out"
    awk -v s="$secs" 'BEGIN { exit !(s < 10) }' || fail "a hanging ssh held the completion $secs s"
}

# `complete -p pcopy` after sourcing the file, as t_deb does with the
# installed copy.
case_bash_registers() {
    bash -c 'source "$1" && complete -p pcopy' _ "$BASH_COMP" >"$T/out" ||
        fail "sourcing $BASH_COMP registers no completion for pcopy"
    grep -qx 'complete -F _pcopy pcopy' "$T/out" || fail "complete -p pcopy says: $(cat "$T/out")"
}

run_case options-in-step case_options_in_step
run_case zsh-parses case_zsh_parses
run_case bash-registers case_bash_registers
run_case bash-options case_bash_options
run_case bash-option-values case_bash_option_values
run_case bash-local-paths case_bash_local_paths
run_case bash-remote-paths case_bash_remote_paths
run_case zsh-completes case_zsh_completes
run_case zsh-remote-paths case_zsh_remote_paths
finish
