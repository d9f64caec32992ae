#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_deb: the Debian package. Builds it from a copy of the source tree with
# `dpkg-buildpackage -us -uc -b` in a network namespace with no network
# but loopback (the build must not download anything; its unit tests use
# loopback), checks it with lintian (no error, no warning) and
# hardening-check, installs it with `apt-get install ./pcopy_*.deb`, and
# then uses what it installed: pcopy --version, man -w pcopy, a local copy
# with /usr/bin/pcopy, the completions (sourced, complete -p pcopy; zsh -n),
# the units (systemd-analyze verify, and security with an exposure of at
# most 2.0), and the daemon, started with pcopy.service's own ExecStart=
# line, as its user, with the key handed over as systemd's LoadCredential=
# does, serving a push and a pull, and logging for the journal when
# $JOURNAL_STREAM is its stderr. Systemd itself does not run here (no PID
# 1 of its own in CI), so the unit's sandbox is checked by systemd-analyze
# only. At the end it purges the package (and removes the user pcopy when
# the package created it), leaving the machine as it found it.
# ctest: packaging
# ctest: cost 90
# ctest: lock system_pcopy
source "$PCOPY_TEST_LIB"
needs_root "it installs the package it builds with apt-get and runs the daemon as the user pcopy"

ROOT=$(cd "$(dirname "$PCOPY_TEST_LIB")/../.." && pwd)
UNITDIR=/lib/systemd/system
MAX_EXPOSURE=2.0

# require CMD PACKAGE: CMD is installed, or fail naming its package.
require() {
    command -v "$1" >/dev/null ||
        fail "$1 is missing (package $2): run tools/install-deps"
}

# project_version: the version in CMakeLists.txt's project().
project_version() {
    sed -nE 's/^project\(pcopy VERSION ([0-9.]+) .*/\1/p' "$ROOT/CMakeLists.txt"
}

# build_deb DIR: the package built from a copy of the source in DIR/pcopy;
# sets DEB to the .deb and CHANGES to the .changes.
build_deb() {
    local dir=$1 version
    mkdir -p "$dir/pcopy"
    tar -C "$ROOT" --exclude='./build*' --exclude=./.git --exclude=./obj-* \
        --exclude=./debian/build --exclude=./debian/pcopy --exclude=./debian/.debhelper \
        --exclude=./debian/files --exclude='./debian/*.substvars' \
        --exclude=./debian/debhelper-build-stamp -cf - . | tar -C "$dir/pcopy" -xf - ||
        fail "cannot copy the source tree into $dir/pcopy"
    version=$(dpkg-parsechangelog -l "$dir/pcopy/debian/changelog" -S Version)
    [[ $version == "$(project_version)" ]] ||
        fail "debian/changelog says $version, CMakeLists.txt $(project_version): keep them the same"
    log "dpkg-buildpackage -us -uc -b, without network"
    # A network namespace of its own: loopback only.
    if ! (cd "$dir/pcopy" && DEB_BUILD_OPTIONS=parallel=2 unshare --net -- \
        sh -c 'ip link set lo up && exec dpkg-buildpackage -us -uc -b') >"$dir/build.log" 2>&1; then
        tail -n 60 "$dir/build.log" >&2
        fail "dpkg-buildpackage failed (log: $dir/build.log)"
    fi
    grep -q '100% tests passed' "$dir/build.log" ||
        fail "the build did not run the unit tests, or not all passed (log: $dir/build.log)"
    DEB=$dir/pcopy_${version}_$(dpkg --print-architecture).deb
    CHANGES=$dir/pcopy_${version}_$(dpkg --print-architecture).changes
    [[ -f $DEB && -f $CHANGES ]] || fail "dpkg-buildpackage made no $DEB or $CHANGES"
}

# check_package: lintian and the package's contents, before installing it.
check_package() {
    local out rc=0
    # Every tag, pedantic and informational ones too, is shown; errors and
    # warnings fail. (As root lintian says it would rather not be: that
    # note is no tag.)
    out=$(lintian --pedantic --info --display-experimental --fail-on error,warning \
        "$CHANGES" "$DEB" 2>&1) || rc=$?
    out=$(grep -v 'running with root privileges is not recommended' <<<"$out" || true)
    [[ -z $out ]] || printf '  lintian: %s\n' "$out" >&2
    [[ $rc -eq 0 ]] || fail "lintian reports errors or warnings, or failed (exit $rc)"
    log "lintian: no error or warning ($(grep -c . <<<"$out") other tags)"
    local listing f
    listing=$(dpkg -c "$DEB")
    for f in ./usr/bin/pcopy ./usr/share/man/man1/pcopy.1.gz \
        ./usr/share/bash-completion/completions/pcopy ./usr/share/zsh/vendor-completions/_pcopy \
        ./lib/systemd/system/pcopy.service ./lib/systemd/system/pcopy@.service \
        ./usr/lib/sysusers.d/pcopy.conf ./etc/default/pcopy ./usr/share/doc/pcopy/copyright; do
        grep -qE " $f$" <<<"$listing" || fail "the package lacks $f"
    done
    dpkg-deb -f "$DEB" Depends | grep -q libssl || fail "the package does not depend on libssl"
    dpkg-deb -e "$DEB" "$T/control"
    grep -qx /etc/default/pcopy "$T/control/conffiles" || fail "/etc/default/pcopy is no conffile"
    # hardening-check's verdict on what dpkg-buildflags gives on Debian 12.
    # (Its stack-clash and control-flow lines are left out: the binary has
    # the probes and endbr64, but its patterns do not find the one, and the
    # other needs a property note the C library's start files lack.)
    dpkg-deb -x "$DEB" "$T/unpacked"
    hardening-check "$T/unpacked/usr/bin/pcopy" >"$T/hardening" 2>&1 || true
    sed 's/^/  /' "$T/hardening" >&2
    local want
    for want in 'Position Independent Executable: yes' 'Stack protected: yes' \
        'Fortify Source functions: yes' 'Read-only relocations: yes' 'Immediate binding: yes'; do
        grep -qF "$want" "$T/hardening" || fail "hardening-check: no '$want'"
    done
}

# purge_pcopy: remove the package and its conffiles; and the user pcopy,
# when this test's installation created it.
purge_pcopy() {
    if dpkg-query -W -f='${db:Status-Abbrev}' pcopy 2>/dev/null | grep -q '^[ir]'; then
        DEBIAN_FRONTEND=noninteractive apt-get purge -y -q pcopy >"$T/purge.log" 2>&1 ||
            { cat "$T/purge.log" >&2; return 1; }
    fi
    if [[ ${USER_CREATED-0} == 1 ]] && getent passwd pcopy >/dev/null; then
        userdel pcopy 2>/dev/null || true
        getent group pcopy >/dev/null && groupdel pcopy 2>/dev/null
    fi
    return 0
}

# unit_value UNIT KEY: the values of KEY= in UNIT, one per line.
unit_value() {
    sed -n "s/^$2=//p" "$1"
}

# ENV: the service's environment: the unit's Environment= defaults, then
# its EnvironmentFile (VAR=VALUE lines, optionally quoted).
declare -A ENV
load_env() {
    local unit=$1 word file line name value
    for word in $(unit_value "$unit" Environment); do
        ENV[${word%%=*}]=${word#*=}
    done
    file=$(unit_value "$unit" EnvironmentFile)
    file=${file#-}
    [[ -f $file ]] || fail "$unit reads $file, which the package did not install"
    while IFS= read -r line; do
        [[ $line =~ ^[[:space:]]*(#|$) ]] && continue
        [[ $line =~ ^([A-Z_][A-Z0-9_]*)=(.*)$ ]] || fail "$file: cannot read the line '$line'"
        name=${BASH_REMATCH[1]}
        value=${BASH_REMATCH[2]}
        [[ $value =~ ^\"(.*)\"$ || $value =~ ^\'(.*)\'$ ]] && value=${BASH_REMATCH[1]}
        ENV[$name]=$value
    done <"$file"
}

# exec_start UNIT CREDDIR: fills CMD with the unit's ExecStart=, as systemd
# expands it: ${VAR} as one word, $VAR split into words, %d the credentials
# directory. Any other specifier or quoting fails (this reader knows no more).
declare -a CMD
exec_start() {
    local line word name out
    line=$(unit_value "$1" ExecStart)
    [[ -n $line && $line != *[\"\']* ]] || fail "$1: ExecStart= is '$line'"
    CMD=()
    for word in $line; do
        word=${word//%d/$2}
        [[ $word == *%* ]] && fail "$1: ExecStart= has a specifier this test does not know: $word"
        if [[ $word =~ ^\$([A-Z_][A-Z0-9_]*)$ ]]; then
            # shellcheck disable=SC2206 # split into words, as systemd does
            CMD+=(${ENV[${BASH_REMATCH[1]}]-})
            continue
        fi
        out=$word
        while [[ $out =~ \$\{([A-Z_][A-Z0-9_]*)\} ]]; do
            name=${BASH_REMATCH[1]}
            out=${out//\$\{$name\}/${ENV[$name]-}}
        done
        [[ $out == *\$* ]] && fail "$1: ExecStart= word '$word' left unexpanded"
        CMD+=("$out")
    done
}

# The daemon's user, group and umask, from the unit.
unit_user() { unit_value "$UNITDIR/pcopy.service" User; }
unit_group() { unit_value "$UNITDIR/pcopy.service" Group; }

check_units() {
    local u exposure out
    # The template differs from pcopy.service only where its instance does.
    diff <(sed -n '/^ExecStart=/,$p' "$UNITDIR/pcopy.service") \
        <(sed -n '/^ExecStart=/,$p' "$UNITDIR/pcopy@.service" | sed 's|/srv/pcopy-%i|/srv/pcopy|') >&2 ||
        fail "pcopy@.service's [Service] settings from ExecStart= on differ from pcopy.service's"
    # The one directory the daemon may write is the one it serves.
    [[ $(unit_value "$UNITDIR/pcopy.service" ReadWritePaths) == "-$(unit_value "$UNITDIR/pcopy.service" Environment |
        tr ' ' '\n' | sed -n 's/^PCOPY_ROOT=//p')" ]] ||
        fail "pcopy.service: ReadWritePaths= is not its PCOPY_ROOT"
    [[ $(unit_value "$UNITDIR/pcopy@.service" ReadWritePaths) == "-$(unit_value "$UNITDIR/pcopy@.service" Environment |
        tr ' ' '\n' | sed -n 's/^PCOPY_ROOT=//p')" ]] ||
        fail "pcopy@.service: ReadWritePaths= is not its PCOPY_ROOT"
    mkdir -p "$T/units"
    cp "$UNITDIR/pcopy.service" "$T/units/"
    cp "$UNITDIR/pcopy@.service" "$T/units/pcopy@t-deb.service"
    for u in pcopy.service pcopy@t-deb.service; do
        systemd-analyze verify "$T/units/$u" >"$T/verify.out" 2>&1 || {
            cat "$T/verify.out" >&2
            fail "systemd-analyze verify $u failed"
        }
        [[ ! -s $T/verify.out ]] || {
            cat "$T/verify.out" >&2
            fail "systemd-analyze verify $u has complaints (above)"
        }
        out=$(systemd-analyze security --offline=yes "$T/units/$u" 2>&1) ||
            fail "systemd-analyze security --offline=yes $u failed: $out"
        exposure=$(sed -nE 's/.*Overall exposure level for [^:]*: ([0-9.]+).*/\1/p' <<<"$out")
        [[ -n $exposure ]] || fail "systemd-analyze security printed no exposure for $u: $out"
        awk -v e="$exposure" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(e <= m) }' ||
            fail "$u: exposure $exposure is above $MAX_EXPOSURE: $(grep '✗' <<<"$out")"
        log "systemd-analyze security $u: exposure $exposure"
    done
}

# run_daemon: the installed daemon, by pcopy.service's ExecStart=, serving
# $T/root on a free loopback port, as the unit's user, with its key handed
# over as LoadCredential= does (a copy of mode 0400 owned by that user) and
# the unit's UMask=; its stderr is a file that JOURNAL_STREAM names, as the
# journal's stream would be. Then a push and a pull through it.
check_daemon() {
    local user group umask cred port key=$T/etc-pcopy.key log=$T/journal
    user=$(unit_user)
    group=$(unit_group)
    umask=$(unit_value "$UNITDIR/pcopy.service" UMask)
    getent passwd "$user" >/dev/null || fail "the package did not create the user $user"
    load_env "$UNITDIR/pcopy.service"
    [[ ${ENV[PCOPY_LISTEN]-} =~ ^[0-9]+$ ]] ||
        fail "/etc/default/pcopy's PCOPY_LISTEN is '${ENV[PCOPY_LISTEN]-}', not a port"
    # What an administrator changes: the address (in /etc/default/pcopy),
    # and the root (with its ReadWritePaths=, in a drop-in).
    port=$(free_port)
    ENV[PCOPY_LISTEN]=127.0.0.1:$port
    ENV[PCOPY_ROOT]=$T/root
    install -d -o "$user" -g "$group" -m 0750 "$T/root"
    /usr/bin/pcopy --gen-key "$key" || fail "pcopy --gen-key failed"
    cred=$T/credentials
    install -d -o "$user" -g "$group" -m 0500 "$cred"
    install -o "$user" -g "$group" -m 0400 "$key" "$cred/$(unit_value "$UNITDIR/pcopy.service" LoadCredential | cut -d: -f1)"
    exec_start "$UNITDIR/pcopy.service" "$cred"
    [[ ${CMD[0]} == /usr/bin/pcopy ]] || fail "ExecStart= runs ${CMD[0]}, not /usr/bin/pcopy"
    log "as $user: ${CMD[*]}"
    : >"$log"
    (
        exec 2>>"$log"
        umask "$umask"
        JOURNAL_STREAM=$(stat -c '%d:%i' "$log") exec setpriv --reuid="$user" \
            --regid="$group" --clear-groups --no-new-privs -- "${CMD[@]}"
    ) &
    DAEMON_PID=$!
    echo "$DAEMON_PID $(_starttime "$DAEMON_PID")" >>"$_LIB_STATE/daemons"
    # shellcheck disable=SC2034 # lib.sh's, read by wait_daemon_logged
    DAEMON_LOG=$log
    wait_until 20 _daemon_or_exit "$DAEMON_PID" "$port"
    _daemon_listening "$DAEMON_PID" "$port" || {
        cat "$log" >&2
        fail "the daemon of ExecStart= does not listen on 127.0.0.1:$port"
    }
    mkfile "$T/push.bin" 3M
    expect_exit 0 /usr/bin/pcopy --key-file "$key" "$T/push.bin" "pcopy://127.0.0.1:$port/"
    same_file "$T/push.bin" "$T/root/push.bin"
    [[ $(stat -c %U "$T/root/push.bin") == "$user" ]] || fail "the pushed file is not owned by $user"
    expect_exit 0 /usr/bin/pcopy --key-file "$key" "pcopy://127.0.0.1:$port/push.bin" "$T/pulled.bin"
    same_file "$T/push.bin" "$T/pulled.bin"
    # A client with another key is refused, and the daemon logs it for the
    # journal: <N> priorities, no prefix of its own, no time stamp.
    /usr/bin/pcopy --gen-key "$T/wrong.key"
    expect_exit 5 /usr/bin/pcopy --key-file "$T/wrong.key" "$T/push.bin" "pcopy://127.0.0.1:$port/x"
    wait_daemon_logged '^<[34]>' "a refusal with a journal priority"
    if grep -vqE '^<[0-7]>' "$log"; then
        cat "$log" >&2
        fail "a daemon line lacks its <N> priority under JOURNAL_STREAM"
    fi
    if grep -qE '^<[0-7]>(pcopy: |[0-9]{4}-[0-9]{2}-[0-9]{2}|[A-Z][a-z]{2} +[0-9]+ [0-9:]{8})' "$log"; then
        cat "$log" >&2
        fail "a daemon line carries its own prefix or a time stamp"
    fi
    stop_daemon
}

case_deb() {
    local t
    require dpkg-buildpackage dpkg-dev
    require dh debhelper
    require lintian lintian
    require systemd-analyze systemd
    require man man-db
    require zsh zsh
    require unshare util-linux
    require setpriv util-linux
    require hardening-check devscripts
    if dpkg-query -W -f='${db:Status-Abbrev}' pcopy 2>/dev/null | grep -q '^ii'; then
        fail "a package pcopy is installed already; this test would replace it (apt-get purge pcopy first)"
    fi
    USER_CREATED=0
    getent passwd pcopy >/dev/null || USER_CREATED=1
    trap 'purge_pcopy' EXIT

    t=$(now)
    build_deb "$T/deb"
    log "built $(basename "$DEB") in $(secs_since "$t") s"
    check_package

    # Docker's Debian images may keep dpkg from unpacking manual pages
    # (path-exclude in /etc/dpkg/dpkg.cfg.d/); pcopy's own is let through
    # (a later --path-include wins), so that man -w tests the package.
    t=$(now)
    (cd "$(dirname "$DEB")" && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends -o Dpkg::Options::=--path-include=/usr/share/man/man1/pcopy.1.gz \
        "./$(basename "$DEB")") >"$T/install.log" 2>&1 || {
        cat "$T/install.log" >&2
        fail "apt-get install ./$(basename "$DEB") failed"
    }
    log "installed in $(secs_since "$t") s"

    [[ $(/usr/bin/pcopy --version) == "pcopy $(project_version)" ]] ||
        fail "/usr/bin/pcopy --version says '$(/usr/bin/pcopy --version)'"
    local man
    man=$(man -w pcopy) || fail "man -w pcopy finds no manual page"
    [[ $man == /usr/share/man/man1/pcopy.1.gz ]] || fail "man -w pcopy says $man"
    # Through a file: grep -q stops at its match, and zcat writing the rest
    # of a page larger than a pipe would then fail the pipeline (pipefail).
    zcat "$man" >"$T/pcopy.1" || fail "cannot read $man"
    grep -q "^\.TH PCOPY 1 \"[0-9-]*\" \"pcopy $(project_version)\"" "$T/pcopy.1" ||
        fail "the installed man page's header is $(grep '^\.TH' "$T/pcopy.1")"

    # A local copy with the installed binary, as an unprivileged user.
    mkdir -p "$T/local"
    chown nobody:nogroup "$T/local"
    mkfile "$T/local/src.bin" 5M
    chown nobody:nogroup "$T/local/src.bin"
    expect_exit 0 setpriv --reuid=nobody --regid=nogroup --clear-groups \
        /usr/bin/pcopy "$T/local/src.bin" "$T/local/dst.bin"
    same_file "$T/local/src.bin" "$T/local/dst.bin"

    local comp=/usr/share/bash-completion/completions/pcopy
    bash -c 'source "$1" && complete -p pcopy' _ "$comp" >"$T/complete.out" 2>&1 ||
        fail "sourcing $comp: $(cat "$T/complete.out")"
    grep -qx 'complete -F _pcopy pcopy' "$T/complete.out" ||
        fail "complete -p pcopy says: $(cat "$T/complete.out")"
    zsh -n /usr/share/zsh/vendor-completions/_pcopy || fail "zsh -n _pcopy failed"

    check_units
    check_daemon

    t=$(now)
    purge_pcopy || fail "apt-get purge pcopy failed"
    trap - EXIT
    [[ ! -e /usr/bin/pcopy && ! -e /etc/default/pcopy && ! -e $UNITDIR/pcopy.service ]] ||
        fail "apt-get purge pcopy left files behind"
    ! dpkg-query -W -f='${db:Status-Abbrev}' pcopy 2>/dev/null | grep -q '^[ir]' ||
        fail "pcopy is still installed, or its conffiles are, after the purge"
    log "purged in $(secs_since "$t") s"
}

run_case deb case_deb
finish
