#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# t_dest_rules: how a local copy names its destination (as cp does), and
# that a destination is replaced only by a complete, verified copy.
source "$PCOPY_TEST_LIB"
needs_root "it mounts tmpfs file systems and runs pcopy as the user nobody"

case_into_existing_dir() {
    mkfile "$T/a" 300000
    mkdir -p "$T/d" "$T/real"
    expect_exit 0 "$PCOPY" "$T/a" "$T/d"
    same_file "$T/a" "$T/d/a"
    # With a trailing slash.
    rm -f "$T/d/a"
    expect_exit 0 "$PCOPY" "$T/a" "$T/d/"
    same_file "$T/a" "$T/d/a"
    # Through a symbolic link to a directory.
    ln -s real "$T/link"
    expect_exit 0 "$PCOPY" "$T/a" "$T/link"
    same_file "$T/a" "$T/real/a"
    [[ -L $T/link ]] || fail "the symlink $T/link was replaced"
    # A relative destination, from the source's directory.
    rm -f "$T/d/a"
    (cd "$T" && exec "$PCOPY" -q a d) || fail "pcopy a d (relative) failed"
    same_file "$T/a" "$T/d/a"
    no_temp_files "$T"
}

case_new_name() {
    mkfile "$T/a" 2M
    mkdir -p "$T/d"
    expect_exit 0 "$PCOPY" "$T/a" "$T/d/newname"
    same_file "$T/a" "$T/d/newname"
    [[ ! -e $T/d/a ]] || fail "copied as $T/d/a instead of newname"
    # An existing file of that name is replaced.
    mkfile "$T/b" 5000
    expect_exit 0 "$PCOPY" "$T/b" "$T/d/newname"
    same_file "$T/b" "$T/d/newname"
    # A destination that is a symlink to a file: record what happens and
    # check the copy is readable under the name given.
    ln -s newname "$T/d/flink"
    expect_exit 0 "$PCOPY" "$T/a" "$T/d/flink"
    same_file "$T/a" "$T/d/flink"
    # The source copied onto itself is refused (onto-itself), and intact.
    expect_exit 1 "$PCOPY" "$T/a" "$T/a"
    [[ -s $T/a && $(stat -c %s "$T/a") -eq 2097152 ]] || fail "copying $T/a onto itself damaged it"
    no_temp_files "$T"
}

case_several_into_dir() {
    mkdir -p "$T/d"
    mkfile "$T/x" 1500000
    mkfile "$T/y" 0
    mkfile "$T/z" 77
    expect_exit 0 "$PCOPY" -s 2 "$T/x" "$T/y" "$T/z" "$T/d"
    expect_summary $((1500000 + 77)) 3 2
    same_file "$T/x" "$T/d/x"
    same_file "$T/y" "$T/d/y"
    same_file "$T/z" "$T/d/z"
    no_temp_files "$T/d"
}

# Sources of the same name, as cp: a file whose copy would replace the
# copy just made of an earlier source is not copied (exit 3, named), and
# the first one's copy stays; directories of the same name merge; a
# source named twice is copied once (with a message: exit 3). The check is
# the source's (srclist), so a pull makes it at the far end alike.
case_same_names() {
    mkdir -p "$T/A/x" "$T/B/x" "$T/C" "$T/d" "$T/m" "$T/p"
    mkfile "$T/A/f" 3000
    mkfile "$T/B/f" 5000
    mkfile "$T/A/x/one" 10
    mkfile "$T/B/x/two" 20
    mkfile "$T/C/x" 30
    expect_exit 3 "$PCOPY" "$T/A/f" "$T/B/f" "$T/d/"
    expect_stderr_contains "source '$T/B/f' is not copied: it would replace the copy of '$T/A/f', which has the same name"
    same_file "$T/A/f" "$T/d/f"
    expect_exit 0 "$PCOPY" -r "$T/A/x" "$T/B/x" "$T/m/"
    same_file "$T/A/x/one" "$T/m/x/one"
    same_file "$T/B/x/two" "$T/m/x/two"
    expect_exit 3 "$PCOPY" -r "$T/A/x" "$T/C/x" "$T/A/f" "$T/A/f" "$T/p/"
    expect_stderr_contains "source '$T/C/x' is not copied"
    expect_stderr_contains "source '$T/A/f' is named more than once: it is copied once"
    [[ -d $T/p/x ]] || fail "the directory A/x was not copied first"
    same_file "$T/A/f" "$T/p/f"
    # One file in two spellings, one directory twice: copied once.
    mkdir -p "$T/q" "$T/r"
    expect_exit 3 "$PCOPY" "$T/B/f" "$T/B/./f" "$T/q/"
    expect_stderr_contains "source '$T/B/./f' is named more than once"
    same_file "$T/B/f" "$T/q/f"
    expect_exit 3 "$PCOPY" -r "$T/A/x" "$T/A/x/" "$T/r/"
    expect_stderr_contains "source '$T/A/x/' is named more than once"
    same_file "$T/A/x/one" "$T/r/x/one"
    # Without -r directories are not copied, and stand in no file's way.
    mkdir -p "$T/s"
    expect_exit 3 "$PCOPY" "$T/A/x" "$T/C/x" "$T/s/"
    expect_stderr_lacks "would replace"
    same_file "$T/C/x" "$T/s/x"
    no_temp_files "$T"
}

case_several_into_non_dir() {
    mkfile "$T/x" 1000
    mkfile "$T/y" 2000
    # DST does not exist.
    expect_exit 1,11 "$PCOPY" "$T/x" "$T/y" "$T/nodir"
    log "several sources into a missing DST: exit $LAST_RC: $(head -n1 "$LAST_STDERR")"
    expect_stderr_contains "$T/nodir"
    [[ ! -e $T/nodir ]] || fail "$T/nodir was created"
    # DST is an existing file: it is left alone.
    mkfile "$T/file" 3000
    cp "$T/file" "$T/file.orig"
    expect_exit 1,11 "$PCOPY" "$T/x" "$T/y" "$T/file"
    log "several sources into an existing file: exit $LAST_RC: $(head -n1 "$LAST_STDERR")"
    expect_stderr_contains "$T/file"
    same_file "$T/file.orig" "$T/file"
    no_temp_files "$T"
}

case_several_into_non_dir_one_missing() {
    # Several sources, one of them missing: DST must still be an existing
    # directory; the remaining source must not be written as the file DST.
    mkfile "$T/x" 1000
    expect_exit 1,11 "$PCOPY" "$T/x" "$T/missing" "$T/nodir"
    expect_stderr_contains "$T/nodir"
    [[ ! -e $T/nodir ]] || fail "with sources x and a missing one, x was written as the file $T/nodir"
}

case_several_into_non_dir_one_dir() {
    mkfile "$T/x" 1000
    mkdir -p "$T/sub"
    expect_exit 1,11 "$PCOPY" "$T/x" "$T/sub" "$T/nodir"
    expect_stderr_contains "$T/nodir"
    [[ ! -e $T/nodir ]] || fail "with sources x and a directory, x was written as the file $T/nodir"
}

case_dest_dir_missing() {
    mkfile "$T/a" 1000
    expect_exit 11 "$PCOPY" "$T/a" "$T/nodir/x"
    expect_stderr_contains "$T/nodir"
    [[ ! -e $T/nodir ]] || fail "$T/nodir was created"
    # A trailing slash names a directory, which does not exist.
    expect_exit 11 "$PCOPY" "$T/a" "$T/nodir2/"
    expect_stderr_contains "nodir2"
    [[ ! -e $T/nodir2 ]] || fail "$T/nodir2 was created"
    # Several sources into a missing directory.
    expect_exit 1,11 "$PCOPY" "$T/a" "$T/a" "$T/nodir3/"
    expect_stderr_contains "nodir3"
    [[ ! -e $T/nodir3 ]] || fail "$T/nodir3 was created"
}

case_dest_read_only() {
    mkfile "$T/a" 100000
    mount_tmpfs "$T/ro" ro,size=1m
    expect_exit 11 "$PCOPY" "$T/a" "$T/ro"
    expect_stderr_contains "$T/ro"
    expect_exit 11 "$PCOPY" "$T/a" "$T/ro/newname"
    expect_stderr_contains "$T/ro"
    dir_is_empty "$T/ro" || fail "files appeared in the read-only $T/ro"
    # An existing file in a file system that became read-only stays.
    mount_tmpfs "$T/rw" size=1m
    mkfile "$T/rw/keep" 4000
    cp "$T/rw/keep" "$T/keep.orig"
    mount -o remount,ro "$T/rw" || fail "cannot remount $T/rw read-only"
    expect_exit 11 "$PCOPY" "$T/a" "$T/rw/keep"
    expect_stderr_contains "$T/rw"
    same_file "$T/keep.orig" "$T/rw/keep"
    no_temp_files "$T/rw"
}

case_dest_not_writable_user() {
    # A directory the (unprivileged) user may not write to.
    mkfile "$T/a" 100000
    chmod 644 "$T/a"
    mkdir -p "$T/locked"
    chmod 755 "$T/locked"
    command -v setpriv >/dev/null || fail "setpriv is needed for this case"
    setpriv --reuid=nobody --regid=nogroup --clear-groups test -r "$T/a" ||
        fail "user nobody cannot reach $T (check the modes of $PCOPY_TEST_TMP)"
    expect_exit 11 setpriv --reuid=nobody --regid=nogroup --clear-groups "$PCOPY" "$T/a" "$T/locked"
    expect_stderr_contains "cannot write to destination directory '$T/locked'"
    # A new name in it: the message says the directory is what refuses.
    expect_exit 11 setpriv --reuid=nobody --regid=nogroup --clear-groups "$PCOPY" "$T/a" \
        "$T/locked/x"
    expect_stderr_contains "cannot write destination '$T/locked/x': its directory is not writable"
    dir_is_empty "$T/locked" || fail "files appeared in $T/locked"
}

case_replaced_only_on_success() {
    mkfile "$T/old" 70000
    cp "$T/old" "$T/old.orig"
    mkdir -p "$T/dir"
    # A missing source leaves the destination alone.
    expect_exit 3 "$PCOPY" "$T/missing" "$T/old"
    same_file "$T/old.orig" "$T/old"
    # So does a directory as the source.
    expect_exit 3 "$PCOPY" "$T/dir" "$T/old"
    same_file "$T/old.orig" "$T/old"
    # A successful copy replaces it, with the source's mode.
    mkfile "$T/new" 1234567
    chmod 600 "$T/new"
    chmod 644 "$T/old"
    expect_exit 0 "$PCOPY" "$T/new" "$T/old"
    same_file "$T/new" "$T/old"
    [[ $(mode_of "$T/old") == 600 ]] || fail "the replaced file has mode $(mode_of "$T/old"), not the source's 600"
    # A read-only destination file (mode 0444) is replaced too, since the
    # copy is renamed into place.
    chmod 444 "$T/old"
    expect_exit 0 "$PCOPY" "$T/old.orig" "$T/old"
    same_file "$T/old.orig" "$T/old"
    no_temp_files "$T"
}

# A device named as the destination is written into, as cp and scp do
# (`pcopy host:f /dev/null`, an image onto a disk), never replaced by a
# file (a copy to /dev/null as root replaced /dev/null); a FIFO or socket
# named so, or a symlink to any of those, is neither replaced nor written
# (pcopy writes at any offset): the file is not copied, and the message
# says to copy to '-'. At a name pcopy makes up (inside a tree, or a file
# copied into a directory) whatever stands there is replaced, as rsync
# does: an old copy's device node never takes a file's bytes to a disk.
case_devices() {
    mkfile "$T/f" 3M
    mknod -m 666 "$T/null" c 1 3
    for opts in "" "-s 8 -B 64k" "-a" "-u" "--checksum" "--inplace --checksum"; do
        # shellcheck disable=SC2086 # opts is a list of options
        expect_exit 0 "$PCOPY" $opts "$T/f" "$T/null"
        [[ -c $T/null ]] || fail "pcopy $opts replaced the device $T/null: $(ls -l "$T/null")"
        [[ $(mode_of "$T/null") == 666 ]] || fail "pcopy $opts changed the mode of the device"
    done
    # Inside a tree, and into a directory: replaced, in every mode, and a
    # FIFO too.
    mkdir -p "$T/src/sub" "$T/into"
    mkfile "$T/src/sub/a" 100000
    mkfile "$T/src/sub/p" 1000
    for opts in "" "-u" "--checksum" "--inplace --checksum" "-a"; do
        rm -rf "$T/dst" && mkdir -p "$T/dst/src/sub"
        mknod -m 600 "$T/dst/src/sub/a" c 1 3
        mkfifo "$T/dst/src/sub/p"
        # shellcheck disable=SC2086 # opts is a list of options
        expect_exit 0 "$PCOPY" -r $opts "$T/src" "$T/dst/"
        [[ -f $T/dst/src/sub/a && -f $T/dst/src/sub/p ]] ||
            fail "pcopy -r $opts left a device or FIFO of the tree: $(ls -l "$T/dst/src/sub")"
        same_file "$T/src/sub/a" "$T/dst/src/sub/a"
        same_file "$T/src/sub/p" "$T/dst/src/sub/p"
    done
    mknod -m 600 "$T/into/f" c 1 3
    expect_exit 0 "$PCOPY" "$T/f" "$T/into/"
    [[ -f $T/into/f ]] || fail "a device in the destination directory was not replaced"
    same_file "$T/f" "$T/into/f"
    # Through ssh is the same sink; a pull to /dev/null is the benchmark
    # idiom, and /dev/null must survive it.
    expect_exit 0 "$PCOPY" "$T/f" /dev/null
    [[ -c /dev/null ]] || fail "pcopy replaced /dev/null"
    no_temp_files "$T"
    # An image onto a block device (a loop device over a file of other
    # bytes): every byte lands, the zeros too (a hole or a zero page is
    # not written into a new file, but a device holds old bytes there),
    # with -a and -e as well.
    head -c 4M /dev/urandom >"$T/disk.img"
    { head -c 1M /dev/urandom; head -c 1M /dev/zero; head -c 1M /dev/urandom
      head -c 4096 /dev/zero; head -c 1044480 /dev/urandom; } >"$T/image"
    local loopdev
    loop_attach loopdev "$T/disk.img"
    mknod -m 600 "$T/disk" b "$(stat -c '%Hr' "$loopdev")" "$(stat -c '%Lr' "$loopdev")"
    for opts in "-s 4" "-a" "-e -B 64k"; do
        head -c 4M /dev/urandom >"$loopdev"
        # shellcheck disable=SC2086 # opts is a list of options
        expect_exit 0 "$PCOPY" $opts "$T/image" "$T/disk"
        cmp "$T/image" "$loopdev" || fail "pcopy $opts left other bytes on the device"
        [[ -b $T/disk ]] || fail "pcopy $opts replaced the block device"
    done
    # Hard links (-H): inside a tree, a device at a name is replaced by the
    # file or the link, as by a file.
    mkdir -p "$T/hs/s" "$T/hd1/s" "$T/hd2/s"
    mkfile "$T/hs/s/a" 1000
    ln "$T/hs/s/a" "$T/hs/s/b"
    mknod -m 666 "$T/hd1/s/a" c 1 3
    mknod -m 666 "$T/hd1/s/b" c 1 3
    mknod -m 666 "$T/hd2/s/a" c 1 3
    mknod -m 666 "$T/hd2/s/b" c 1 3
    expect_exit 0 "$PCOPY" -r -H "$T/hs/s" "$T/hd1/"
    [[ -f $T/hd1/s/a && $(stat -c %h "$T/hd1/s/a") -eq 2 &&
        $(stat -c %i "$T/hd1/s/a") == "$(stat -c %i "$T/hd1/s/b")" ]] ||
        fail "-H did not replace the devices with the two names: $(ls -li "$T/hd1/s")"
    rm "$T/hd2/s/a"
    expect_exit 0 "$PCOPY" -r -H "$T/hs/s" "$T/hd2/"
    [[ -f $T/hd2/s/b && $(stat -c %h "$T/hd2/s/b") -eq 2 ]] ||
        fail "-H did not replace the device: $(ls -li "$T/hd2/s")"
    # A daemon writes files only: a device node in its tree is no way onto
    # the host's devices for a client (nor is it replaced).
    mkdir -p "$T/root"
    mknod -m 666 "$T/root/node" c 1 3
    start_daemon "$T/root"
    expect_exit 3 "$PCOPY" "$T/f" "$DAEMON_URL/node" --key-file "$DAEMON_KEY"
    expect_stderr_contains "it is a device, which a daemon neither replaces nor writes into"
    [[ -c $T/root/node ]] || fail "the daemon replaced a device node"
    # A FIFO: left as it is, the file not copied (exit 3), named.
    mkfifo "$T/fifo"
    expect_exit 3 "$PCOPY" "$T/f" "$T/fifo"
    [[ -p $T/fifo ]] || fail "the FIFO $T/fifo was replaced"
    expect_stderr_contains "cannot write '$T/fifo': it is a FIFO or socket"
    expect_stderr_contains "copy to '-'"
    # A symbolic link to a device (/dev/stdout is one): neither replaced
    # (as a symlink to a file is) nor written through.
    ln -s "$T/null" "$T/to-null"
    expect_exit 3 "$PCOPY" "$T/f" "$T/to-null"
    [[ -L $T/to-null && -c $T/null ]] || fail "the symlink to a device was replaced"
    expect_stderr_contains "cannot write '$T/to-null': it is a symbolic link to a device"
    no_temp_files "$T"
}

# A file copied onto itself (the same name, its own directory, another
# hard link of it) is refused as cp refuses it (exit 1), and left whole.
case_onto_itself() {
    mkfile "$T/f" 3000
    cp "$T/f" "$T/ref"
    ln "$T/f" "$T/link"
    expect_exit 1 "$PCOPY" "$T/f" "$T/f"
    expect_stderr_contains "'$T/f' and '$T/f' are the same file"
    expect_exit 1 "$PCOPY" "$T/f" "$T/"
    expect_stderr_contains "are the same file"
    expect_exit 1 "$PCOPY" "$T/f" "$T/link"
    expect_stderr_contains "'$T/f' and '$T/link' are the same file"
    same_file "$T/ref" "$T/f"
    [[ $(stat -c %h "$T/f") -eq 2 ]] || fail "the hard link was broken"
}

run_case into-existing-dir case_into_existing_dir
run_case new-name case_new_name
run_case several-into-dir case_several_into_dir
run_case same-names case_same_names
run_case several-into-non-dir case_several_into_non_dir
run_case several-into-non-dir-one-missing case_several_into_non_dir_one_missing
run_case several-into-non-dir-one-dir case_several_into_non_dir_one_dir
run_case dest-dir-missing case_dest_dir_missing
run_case dest-read-only case_dest_read_only
run_case dest-not-writable-user case_dest_not_writable_user
run_case replaced-only-on-success case_replaced_only_on_success
run_case devices case_devices
run_case onto-itself case_onto_itself
finish
