#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_local_sizes: local copies of files around the block size, with 1 to 8
# streams and two block sizes, several files at once, a 100 MiB file, and
# the mode bits of the copy.
source "$PCOPY_TEST_LIB"

# sizes_around B: 0, 1, B-1, B, B+1, and a few blocks and a bit.
sizes_around() {
    local b=$1
    echo 0 1 $((b - 1)) "$b" $((b + 1)) $((3 * b + 17))
}

# matrix BLOCK [OPTS...]: every stream count times every size, each copied
# to a new name; checks contents, the summary, and that no temp file is left.
matrix() {
    local block=$1 b s n src dst
    shift
    b=$(to_bytes "$block")
    mkdir -p "$T/src.$block" "$T/dst.$block"
    for n in $(sizes_around "$b"); do
        mkfile "$T/src.$block/f$n" "$n"
    done
    for s in 1 2 4 8; do
        for n in $(sizes_around "$b"); do
            src=$T/src.$block/f$n
            dst=$T/dst.$block/f$n.s$s
            expect_exit 0 "$PCOPY" -s "$s" "$@" "$src" "$dst"
            same_file "$src" "$dst"
            expect_summary "$n" 1 "$s"
        done
    done
    no_temp_files "$T/dst.$block"
}

case_default_block() {
    matrix 1M
}

case_block_64k() {
    matrix 64k -B 64k
}

case_block_4k_many_streams() {
    # The smallest block size with many streams: many small blocks in flight.
    mkfile "$T/src" 1000001
    expect_exit 0 "$PCOPY" -B 4k -s 16 "$T/src" "$T/dst"
    same_file "$T/src" "$T/dst"
    expect_exit 0 "$PCOPY" -B 4k -s 64 "$T/src" "$T/dst64"
    same_file "$T/src" "$T/dst64"
    no_temp_files "$T"
}

case_many_files_into_dir() {
    # All sizes at once into a directory: each lands under its basename.
    local n total=0 count=0
    mkdir -p "$T/src" "$T/into"
    for n in $(sizes_around 1048576); do
        mkfile "$T/src/g$n" "$n"
        total=$((total + n))
        count=$((count + 1))
    done
    expect_exit 0 "$PCOPY" -s 4 "$T"/src/g* "$T/into"
    expect_summary "$total" "$count" 4
    for n in $(sizes_around 1048576); do
        same_file "$T/src/g$n" "$T/into/g$n"
    done
    [[ $(find "$T/into" -mindepth 1 | wc -l) -eq $count ]] || fail "extra files in $T/into"
}

case_big_file() {
    # 100 MiB of random data with 4 and 8 streams.
    mkfile "$T/big" 100M
    expect_exit 0 "$PCOPY" -s 4 "$T/big" "$T/big.s4"
    same_file "$T/big" "$T/big.s4"
    expect_summary 104857600 1 4
    rm -f "$T/big.s4"
    expect_exit 0 "$PCOPY" -s 8 -w 1M "$T/big" "$T/big.s8"
    same_file "$T/big" "$T/big.s8"
    expect_summary 104857600 1 8
    no_temp_files "$T"
}

# check_mode MODE UMASK WANT: a source of MODE copied under UMASK gets WANT.
check_mode() {
    local mode=$1 mask=$2 want=$3 src=$T/m.$1 dst=$T/out/m.$1.$2
    mkdir -p "$T/out"
    [[ -e $src ]] || { mkfile "$src" 5000 && chmod "$mode" "$src"; }
    (umask "$mask" && exec "$PCOPY" -q "$src" "$dst") || fail "copy of mode $mode failed"
    same_file "$src" "$dst"
    [[ $(mode_of "$dst") == "$want" ]] ||
        fail "source mode $mode with umask $mask gave $(mode_of "$dst"), wanted $want"
}

case_modes() {
    check_mode 644 022 644
    check_mode 600 022 600
    check_mode 640 022 640
    check_mode 755 022 755
    check_mode 777 022 755
    check_mode 777 077 700
    check_mode 444 022 444
    check_mode 400 000 400
    check_mode 666 000 666
    # set-user-ID, set-group-ID and sticky bits are not copied.
    check_mode 4755 022 755
    check_mode 2755 022 755
    check_mode 1777 022 755
    # Into a directory the mode follows the source too.
    chmod 640 "$T/m.640"
    mkdir -p "$T/mdir"
    expect_exit 0 "$PCOPY" "$T/m.640" "$T/m.755" "$T/mdir"
    [[ $(mode_of "$T/mdir/m.640") == 640 && $(mode_of "$T/mdir/m.755") == 755 ]] ||
        fail "modes into a directory: $(mode_of "$T/mdir/m.640") $(mode_of "$T/mdir/m.755")"
}

run_case default-block case_default_block
run_case block-64k case_block_64k
run_case block-4k-many-streams case_block_4k_many_streams
run_case many-files-into-dir case_many_files_into_dir
run_case big-file case_big_file
run_case modes case_modes
finish
