#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_repro: the build as a packager runs it. It is reproducible: two copies
# of the source tree, in directories of different names and lengths, each
# configured and built in a build directory of its own name, give
# byte-identical pcopy binaries, which name neither directory; with
# SOURCE_DATE_EPOCH set, the man pages are identical too and carry that
# date. And it honours CFLAGS, CPPFLAGS and LDFLAGS from the environment:
# they reach the compiler and the linker, and no flag of the build's own
# comes after CFLAGS to undo them. `cmake --install` puts every file where
# GNUInstallDirs says, beneath CMAKE_INSTALL_PREFIX and DESTDIR. Builds
# only the pcopy target (without the tests).
# ctest: packaging
# ctest: cost 60
source "$PCOPY_TEST_LIB"

ROOT=$(cd "$(dirname "$PCOPY_TEST_LIB")/../.." && pwd)
JOBS=${PCOPY_JOBS:-2}

# copy_source DIR: the source tree (no build directories, no .git) in DIR.
copy_source() {
    mkdir -p "$1"
    tar -C "$ROOT" --exclude='./build*' --exclude=./.git --exclude=./obj-* \
        --exclude=./debian/.debhelper --exclude=./debian/pcopy --exclude=./debian/build \
        -cf - . | tar -C "$1" -xf - ||
        fail "cannot copy the source tree into $1"
}

# build SRC BUILD: configure and build pcopy and its man page.
build() {
    mkdir -p "$(dirname "$2")"
    cmake -S "$1" -B "$2" -DBUILD_TESTING=OFF >"$2.log" 2>&1 &&
        cmake --build "$2" -j "$JOBS" --target pcopy >>"$2.log" 2>&1 || {
        tail -n 30 "$2.log" >&2
        fail "building $1 in $2 failed (log: $2.log)"
    }
}

case_same_binary() {
    local a=$T/src-one b=$T/a-much-longer-source-directory-name
    copy_source "$a"
    copy_source "$b"
    # 2026-01-02 03:04:05 UTC
    export SOURCE_DATE_EPOCH=1767323045
    build "$a" "$T/build-one"
    build "$b" "$T/b/another-build"
    [[ -x $T/build-one/pcopy && -x $T/b/another-build/pcopy ]] || fail "a build made no pcopy"
    cmp "$T/build-one/pcopy" "$T/b/another-build/pcopy" ||
        fail "two builds of one source in different directories differ: not reproducible"
    local d
    for d in "$T" src-one a-much-longer-source-directory-name build-one another-build; do
        if grep -qaF -- "$d" "$T/build-one/pcopy"; then
            fail "the binary names its build directory ($d): $(strings "$T/build-one/pcopy" | grep -F -- "$d" | head -n 3)"
        fi
    done
    cmp "$T/build-one/pcopy.1" "$T/b/another-build/pcopy.1" || fail "the two man pages differ"
    grep -q '^\.TH PCOPY 1 "2026-01-02" ' "$T/build-one/pcopy.1" ||
        fail "the man page's date is not SOURCE_DATE_EPOCH's: $(grep '^\.TH' "$T/build-one/pcopy.1")"
    log "identical: $(sha256sum <"$T/build-one/pcopy" | cut -c1-16)... ($(stat -c %s "$T/build-one/pcopy") bytes)"
}

# The compile and link lines of the pcopy target, as make runs them.
case_env_flags() {
    local src=$T/src b=$T/build cc link
    copy_source "$src"
    mkdir -p "$b"
    CFLAGS='-O1 -g0 -DPCOPY_T_CFLAGS' CPPFLAGS='-DPCOPY_T_CPPFLAGS=1' \
        LDFLAGS='-Wl,-z,now -Wl,--defsym=pcopy_t_ldflags=0' \
        cmake -S "$src" -B "$b" -DBUILD_TESTING=OFF >"$b.log" 2>&1 || {
        tail -n 30 "$b.log" >&2
        fail "configuring with CFLAGS, CPPFLAGS and LDFLAGS failed"
    }
    cmake --build "$b" -j "$JOBS" --target pcopy -- VERBOSE=1 >>"$b.log" 2>&1 || {
        tail -n 30 "$b.log" >&2
        fail "building with CFLAGS, CPPFLAGS and LDFLAGS failed"
    }
    cc=$(grep -E ' -c [^ ]*src/main\.c' "$b.log" | head -n 1)
    link=$(grep -E ' -o pcopy( |$)' "$b.log" | head -n 1)
    [[ -n $cc && -n $link ]] || fail "cannot find main.c's compile line or pcopy's link line in $b.log"
    [[ $cc == *' -O1 -g0 -DPCOPY_T_CFLAGS'* ]] || fail "CFLAGS did not reach the compiler: $cc"
    [[ $cc == *' -DPCOPY_T_CPPFLAGS=1'* ]] || fail "CPPFLAGS did not reach the compiler: $cc"
    # Nothing after CFLAGS changes the optimisation or the debug level.
    local after=${cc#*-DPCOPY_T_CFLAGS}
    if [[ $after =~ (^| )(-O[0-9sgz]?|-g[0-9]?)( |$) ]]; then
        fail "the build puts ${BASH_REMATCH[2]} after CFLAGS, undoing them: $cc"
    fi
    [[ $link == *'--defsym=pcopy_t_ldflags=0'* ]] || fail "LDFLAGS did not reach the linker: $link"
}

# DESTDIR and the prefix: every file beneath both, at its place.
case_install() {
    local src=$T/src b=$T/build stage=$T/stage got want
    copy_source "$src"
    mkdir -p "$b"
    cmake -S "$src" -B "$b" -DBUILD_TESTING=OFF -DCMAKE_INSTALL_PREFIX=/opt/pc >"$b.log" 2>&1 &&
        cmake --build "$b" -j "$JOBS" --target pcopy >>"$b.log" 2>&1 &&
        DESTDIR=$stage cmake --install "$b" >>"$b.log" 2>&1 || {
        tail -n 30 "$b.log" >&2
        fail "configure, build or install with DESTDIR and a prefix failed"
    }
    got=$(cd "$stage" && find . -type f | sort)
    want=$(printf '%s\n' ./opt/pc/bin/pcopy ./opt/pc/share/man/man1/pcopy.1 \
        ./opt/pc/share/doc/pcopy/README.md ./opt/pc/share/doc/pcopy/examples/default-pcopy \
        ./opt/pc/share/zsh/site-functions/_pcopy ./opt/pc/lib/systemd/system/pcopy.service \
        ./opt/pc/lib/systemd/system/pcopy@.service ./opt/pc/lib/sysusers.d/pcopy.conf \
        "./opt/pc/$(bash_completion_dir)/pcopy" | sort)
    [[ $got == "$want" ]] || fail "installed files: $(tr '\n' ' ' <<<"$got"); expected: $(tr '\n' ' ' <<<"$want")"
    grep -q '^ExecStart=/opt/pc/bin/pcopy --serve ' "$stage/opt/pc/lib/systemd/system/pcopy.service" ||
        fail "the unit does not run the installed binary: $(grep ExecStart= "$stage/opt/pc/lib/systemd/system/pcopy.service")"
    grep -q '^\.TH PCOPY 1 "[0-9-]*" "pcopy [0-9.]*"' "$stage/opt/pc/share/man/man1/pcopy.1" ||
        fail "the installed man page has no version: $(grep '^\.TH' "$stage/opt/pc/share/man/man1/pcopy.1")"
    "$stage/opt/pc/bin/pcopy" --version >/dev/null || fail "the installed pcopy does not run"
}

# bash_completion_dir: where the install puts bash completion, relative to
# the prefix: bash-completion's completionsdir, or the usual place.
bash_completion_dir() {
    local dir prefix
    dir=$(pkg-config --variable=completionsdir bash-completion 2>/dev/null || true)
    prefix=$(pkg-config --variable=prefix bash-completion 2>/dev/null || true)
    if [[ -n $dir && -n $prefix && $dir == "$prefix"/* ]]; then
        echo "${dir#"$prefix"/}"
    else
        echo share/bash-completion/completions
    fi
}

run_case same-binary case_same_binary
run_case install case_install
run_case env-flags case_env_flags
finish
