#compdef pcopy
# SPDX-License-Identifier: Apache-2.0
# zsh completion for pcopy(1), installed as _pcopy in a directory of zsh's
# $fpath (CMakeLists.txt: PCOPY_ZSH_COMPLETIONDIR).
#
# Completes the options of `pcopy --help` (tests/e2e/t_completion.sh keeps
# the two in step), the values of -c, --data-via, --cipher and the other
# options that take a word from a fixed set, local paths, and remote
# HOST:PATH operands with zsh's own remote file completion (_remote_files,
# which lists them through ssh in batch mode). The options pcopy keeps for
# its own use (--server, --attach, --ssh-dial, --control-fd, --bind, --notices) are not
# offered.

# _pcopy_compress_one: one element of -c's SPEC: a level, a codec, or
# after zlib:, lz4: or bz2: that codec's level.
(( $+functions[_pcopy_compress_one] )) ||
_pcopy_compress_one() {
  local -a specs expl
  case $PREFIX in
  zlib:*)
    compset -P '*:'
    _wanted levels expl 'level' compadd -- {0..9}
    return
    ;;
  bz2:*)
    compset -P '*:'
    _wanted levels expl 'level' compadd -- {1..9}
    return
    ;;
  lz4:*)
    compset -P '*:'
    _wanted levels expl 'level' compadd -- {1..12}
    return
    ;;
  esac
  specs=(
    '0:no compression'
    '1:zlib level 1' '2:zlib level 2' '3:zlib level 3' '4:zlib level 4' '5:zlib level 5'
    '6:zlib level 6' '7:zlib level 7' '8:zlib level 8' '9:zlib level 9'
    'none:no compression'
    'auto:choose the codec by measuring'
    'zlib:zlib, level 6 (zlib\:LEVEL, 0 to 9)'
    'lz4:lz4, fast (lz4\:LEVEL, 1 to 12)'
    'bz2:bzip2, level 9 (bz2\:LEVEL, 1 to 9)'
  )
  _describe -t specs 'compression spec' specs
}

# _pcopy_compress: the SPEC of -c: one element, or a comma-separated list
# of them (one per stream).
(( $+functions[_pcopy_compress] )) ||
_pcopy_compress() {
  _sequence -s , _pcopy_compress_one
}

# _pcopy_operand: a SRC or DST: HOST:PATH through ssh, a pcopy:// URL (not
# completed), or a local path; a host name completes to HOST:.
(( $+functions[_pcopy_operand] )) ||
_pcopy_operand() {
  # A colon before any slash: HOST:PATH (pcopy's own rule).
  if [[ $PREFIX == [^/]#:* ]] && compset -P 1 '*:'; then
    [[ $IPREFIX == pcopy:* ]] && return 1
    # ssh in batch mode (never a prompt) under a time limit, so that an
    # unreachable host costs a few seconds at most. Not "-- ssh", which
    # would drop the ConnectTimeout.
    _remote_files -h "${IPREFIX%:}" -- timeout 5 \
      ssh -o BatchMode=yes -o ConnectTimeout=5 -a -x
    return
  fi
  _alternative \
    'files:file:_files' \
    'hosts:remote host:_hosts -r: -S:'
}

_pcopy() {
  _arguments -s -S \
    '(-r -R --recursive)'{-r,-R,--recursive}'[copy directories and everything in them]' \
    '(-p --preserve)'{-p,--preserve}'[keep modes, times and owners]' \
    '--numeric-ids[with -p: owners by number, not by name]' \
    '(-L --dereference)'{-L,--dereference}'[follow symbolic links in the sources]' \
    '(-H --hard-links)'{-H,--hard-links}'[keep hard links among the copied files]' \
    '(-u --update)'{-u,--update}'[keep files already there with the same size and time]' \
    '(-e --verify)'{-e,--verify}'[read each file written back from the disk before putting it in place]' \
    '(-n --dry-run)'{-n,--dry-run}'[change nothing: list what would be copied and removed]' \
    '--delete[with -r and -u, --checksum or -a: remove from the copy what the source no longer has]' \
    '--checksum[as -u, but compare contents: only the blocks that differ travel]' \
    '--inplace[with --checksum: write those blocks into the file already there]' \
    '(-a --append --resume)'{-a,--append,--resume}'[as -u, and make an interrupted copy resumable]' \
    '*--exclude=[leave out what PATTERN matches]:pattern' \
    '*--include=[copy what PATTERN matches, even if a later rule excludes it]:pattern' \
    '*--exclude-from=[read filter rules from FILE]:rules file:_files' \
    '(-s --streams)'{-s+,--streams=}'[data streams]:streams (1-64):(1 2 4 8 16 32 64)' \
    '(-w --window)'{-w+,--window=}'[TCP window per stream]:size:(256k 1M 4M 16M)' \
    '(-B --block-size)'{-B+,--block-size=}'[block size]:size:(64k 256k 1M 4M 16M 64M)' \
    '(-c --compress)'{-c+,--compress=}'[compress]:spec:_pcopy_compress' \
    '(-P --progress)'{-P+,--progress=}'[print progress every SEC seconds]:seconds' \
    '--no-progress[no progress bar on a terminal]' \
    '--probe[measure the path to a host and advise -s, -w and -c]' \
    '--json=-[the summary as JSON on stdout, or in FILE]::file:_files' \
    '--timeout=[fail when the data streams are idle SEC seconds]:seconds' \
    '(-x --bwlimit)'{-x+,--bwlimit=}'[cap the data rate of all streams together]:rate:(512k 1M 10M 100M 10mbit 100mbit 1gbit)' \
    '--key-file=[key shared with a daemon]:key file:_files' \
    '--rsh=[command that reaches a host]:command:_command_names -e' \
    '--remote-pcopy=[pcopy on the remote host]:remote path' \
    '(-Z --port-range)'{-Z+,--port-range=}'[data ports the listening side may use]:range (LO-HI)' \
    '(-z --reverse)'{-z,--reverse}'[the local side listens for data]' \
    '--data-via=[how data streams travel through ssh]:how:(auto direct ssh)' \
    '-3[third party: the data goes through this host]' \
    '(-4 --ipv4 -6 --ipv6)'{-4,--ipv4}'[data over IPv4 only]' \
    '(-4 --ipv4 -6 --ipv6)'{-6,--ipv6}'[data over IPv6 only]' \
    '(--no-encrypt)--encrypt[encrypt a local copy too]' \
    '(--encrypt)--no-encrypt[send data in clear]' \
    '--cipher=[the TLS cipher]:cipher:(auto aes128-gcm chacha20-poly1305)' \
    '--allow-unencrypted[with --serve: also serve --no-encrypt clients]' \
    '--serve=[run a daemon]:[address\:]port' \
    '--root=[the directory a daemon serves]:directory:_directories' \
    '--max-sessions=[with --serve: sessions at once]:sessions (1-1024)' \
    '--max-startups=[with --serve: connections waiting to be handed on]:connections (1-4096)' \
    '--max-per-source=[with --serve: waiting connections from one address]:connections (1-4096)' \
    '--gen-key=[write a new random key to FILE]:key file:_files' \
    '(-q --quiet)*'{-v,--verbose}'[more messages]' \
    '(-v --verbose -q --quiet)'{-q,--quiet}'[no summary, only errors]' \
    '(- *)'{-h,--help}'[show the help]' \
    '(- *)'{-V,--version}'[show the version]' \
    '*:source or destination:_pcopy_operand'
}

_pcopy "$@"
