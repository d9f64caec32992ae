# SPDX-License-Identifier: Apache-2.0
# bash completion for pcopy(1). Installed where bash-completion loads
# completions on demand (CMakeLists.txt: PCOPY_BASH_COMPLETIONDIR); it uses
# that package's helpers (_init_completion, _filedir, _known_hosts_real).
#
# Completes the options of `pcopy --help` (tests/e2e/t_completion.sh keeps
# the two in step), the values of the options that take a word from a fixed
# set (-c SPEC, --data-via, --cipher, -s), local paths, host names as HOST:,
# and remote paths HOST:PATH by listing them through ssh, as scp's completion
# does: in batch mode (never a password or passphrase prompt) and with a
# time limit, so that an unreachable host costs at most a few seconds and
# completes nothing.

# Every option pcopy's --help lists, long and short. The options that
# pcopy accepts but --help leaves out (--server, --attach, --ssh-dial, --control-fd,
# --bind, --notices) are for pcopy's own use and are not offered.
_pcopy_options='-r -R --recursive -p --preserve --numeric-ids -L --dereference
-H --hard-links -u --update --checksum --inplace -a --append --resume -e --verify -n --dry-run --delete --exclude --include --exclude-from -s --streams -w --window -B --block-size -c --compress
-P --progress --no-progress --json --timeout -x --bwlimit --key-file --rsh --remote-pcopy -Z --port-range
-z --reverse --data-via -3 -4 --ipv4 -6 --ipv6 --encrypt --no-encrypt
--cipher --allow-unencrypted --serve --root --max-sessions --max-startups
--max-per-source --gen-key --probe -v --verbose -q --quiet -h --help -V --version'

# Seconds that listing a remote directory may take, ssh's connection included.
_pcopy_ssh_timeout=${PCOPY_COMPLETION_SSH_TIMEOUT:-5}

# _pcopy_codec_words: every single codec spec of -c, for one element of the
# list (pcopy accepts one per stream: 1,1,6,6).
_pcopy_codec_words()
{
    local i words='0 1 2 3 4 5 6 7 8 9 none auto zlib lz4 bz2 zlib:0'
    for i in 1 2 3 4 5 6 7 8 9; do
        words+=" zlib:$i bz2:$i"
    done
    for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
        words+=" lz4:$i"
    done
    printf '%s\n' "$words"
}

# _pcopy_compress: COMPREPLY for the SPEC of -c. With commas, the elements
# typed before the last stay as they are and the last one is completed.
_pcopy_compress()
{
    local head='' last=$cur w
    if [[ $cur == *,* ]]; then
        head=${cur%,*},
        last=${cur##*,}
    fi
    COMPREPLY=()
    for w in $(compgen -W "$(_pcopy_codec_words)" -- "$last"); do
        COMPREPLY+=("$head$w")
    done
    # zlib, lz4 and bz2 may still take :LEVEL: no space after them.
    [[ ${#COMPREPLY[@]} -gt 1 || ${COMPREPLY[0]-} == *[a-z] ]] && compopt -o nospace
    # bash split the word at ':' (COMP_WORDBREAKS): give back only what
    # follows the last colon of the word typed so far.
    __ltrim_colon_completions "$cur"
}

# _pcopy_unquote WORD: WORD as typed on the command line with its quoting
# taken off: an opening ' or " and backslash escapes. (Not eval: completing
# a word must never run what it contains.)
_pcopy_unquote()
{
    local w=$1
    case $w in
    \'* | \"*) w=${w:1} ;;
    esac
    printf '%s' "$w" | sed 's/\\\(.\)/\1/g'
}

# _pcopy_remote: COMPREPLY for HOST:PATH (cur, with the colon): the entries
# of PATH* on HOST, listed through ssh, each as HOST:ENTRY; a directory with
# a trailing slash and no space, so that one can go on into it. A relative
# PATH is relative to the home directory on HOST, as for pcopy itself.
_pcopy_remote()
{
    local host=${cur%%:*} path qpath line out
    path=$(_pcopy_unquote "${cur#*:}")
    # For the remote shell: quoted, then the glob.
    qpath=''
    [[ -n $path ]] && printf -v qpath '%q' "$path"
    # -F marks directories with '/' (and executables, FIFOs and sockets with
    # * | =, which are no part of the name); -L looks through links; -d
    # lists a directory itself, not its contents; -1 one per line.
    out=$(timeout "$_pcopy_ssh_timeout" ssh -o BatchMode=yes \
        -o ConnectTimeout="$_pcopy_ssh_timeout" -- "$host" \
        "command ls -aF1dL -- ${qpath}*" </dev/null 2>/dev/null) || true
    COMPREPLY=()
    while IFS= read -r line; do
        case $line in
        '' | ./ | ../) continue ;;
        */) COMPREPLY+=("$host:$(printf '%q' "${line%/}")/") ;;
        *[*\|=]) COMPREPLY+=("$host:$(printf '%q' "${line%?}") ") ;;
        *) COMPREPLY+=("$host:$(printf '%q' "$line") ") ;;
        esac
    done <<<"$out"
    # The space after a file is in the word itself, none after a directory.
    compopt -o nospace
    # bash split the word at ':' (COMP_WORDBREAKS): give back only what
    # follows the colon.
    __ltrim_colon_completions "$cur"
}

# _pcopy_operand: COMPREPLY for a SRC or DST operand: HOST:PATH through
# ssh, nothing for a daemon's pcopy:// URL, else local paths and the known
# hosts as HOST: (a word with a slash before its first colon is a local
# path, as for pcopy).
_pcopy_operand()
{
    if [[ $cur == pcopy:* ]]; then
        COMPREPLY=()
        return
    fi
    if [[ $cur == *:* && ${cur%%:*} != */* ]]; then
        _pcopy_remote
        return
    fi
    _filedir
    # A local name with a colon: bash replaces only what follows the colon.
    __ltrim_colon_completions "$cur"
    if [[ $cur != *[/:]* ]] && declare -F _known_hosts_real >/dev/null; then
        local n=${#COMPREPLY[@]}
        # -c: each host with a colon after it, the start of HOST:PATH.
        _known_hosts_real -c -- "$cur"
        ((${#COMPREPLY[@]} > n)) && compopt -o nospace
    fi
}

_pcopy()
{
    # shellcheck disable=SC2034 # words and cword: set by _init_completion
    local cur prev words cword split
    # -n : keeps HOST:PATH and zlib:6 one word.
    _init_completion -s -n : || return

    case $prev in
    -c | --compress)
        _pcopy_compress
        return
        ;;
    --data-via)
        mapfile -t COMPREPLY < <(compgen -W 'auto direct ssh' -- "$cur")
        return
        ;;
    --cipher)
        mapfile -t COMPREPLY < <(compgen -W 'auto aes128-gcm chacha20-poly1305' -- "$cur")
        return
        ;;
    -s | --streams)
        mapfile -t COMPREPLY < <(compgen -W '1 2 4 8 16 32 64' -- "$cur")
        return
        ;;
    -w | --window)
        mapfile -t COMPREPLY < <(compgen -W '256k 1M 4M 16M' -- "$cur")
        return
        ;;
    -B | --block-size)
        mapfile -t COMPREPLY < <(compgen -W '64k 256k 1M 4M 16M 64M' -- "$cur")
        return
        ;;
    --json)
        # Only --json=FILE takes a file; "--json FILE" would be an operand.
        if $split; then
            _filedir
            return
        fi
        ;;
    --key-file | --gen-key | --exclude-from)
        _filedir
        return
        ;;
    --root)
        _filedir -d
        return
        ;;
    --rsh)
        mapfile -t COMPREPLY < <(compgen -c -- "$cur")
        return
        ;;
    -x | --bwlimit)
        mapfile -t COMPREPLY < <(compgen -W '512k 1M 10M 100M 10mbit 100mbit 1gbit' -- "$cur")
        return
        ;;
    # Numbers, ports, addresses, patterns and remote paths: nothing to offer.
    -P | --progress | --timeout | -Z | --port-range | --serve | --remote-pcopy | \
        --exclude | --include | \
        --max-sessions | --max-startups | --max-per-source)
        COMPREPLY=()
        return
        ;;
    esac
    $split && return

    if [[ $cur == -* ]]; then
        mapfile -t COMPREPLY < <(compgen -W "$_pcopy_options" -- "$cur")
        return
    fi
    _pcopy_operand
}
complete -F _pcopy pcopy
