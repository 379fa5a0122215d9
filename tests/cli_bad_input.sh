#!/bin/sh
# The command's answers to bad input: each row of the table below is an invocation with a
# bad file, value, flag, plugin or command, the exit status it must end with and an
# extended regular expression its output (stdout and stderr, lines joined by spaces) must
# match: the message must name the problem — the file, the flag, the value.
#
#   usage: cli_bad_input.sh GRADUS BUILD_DIR
#
# Exit statuses: 2 for a bad command line (unknown option or command, a bad or missing
# value, an unknown op), 1 when the work cannot be done (a file that cannot be read or
# written, a plugin that does not load, a backend this machine lacks).
set -u
G=$1
B=$2
T=$(mktemp -d "${TMPDIR:-/tmp}/gradus-cli.XXXXXX") || exit 1
trap 'rm -rf "$T"' EXIT
# Plugins come only from where a row says: never from the caller's environment.
unset GRADUS_PLUGIN_PATH GRADUS_TRACE GRADUS_BACKEND GRADUS_DISABLE
TD=$B/plugins-test/libgradus_testdev.so

# ---- the bad files ------------------------------------------------------------------------
mkdir "$T/truncgz" "$T/badidx" "$T/shortidx" "$T/plug_trunc" "$T/plug_nodev" "$T/plug_text"
# a gzip stream cut short, written byte by byte (no gzip program needed): the gzip header,
# one stored deflate block announcing 3936 bytes (an IDX header for 5 images of 28x28 and
# their 3920 pixels), and only the IDX header and 100 pixels of it: the header inflates,
# the images do not
{ printf '\037\213\010\000\000\000\000\000\000\003\001\140\017\237\360'
  printf '\000\000\010\003\000\000\000\005\000\000\000\034\000\000\000\034'
  head -c 100 /dev/zero; } > "$T/truncgz/train-images-idx3-ubyte.gz"
# not an IDX file; an IDX header promising more images than follow
printf 'garbage!garbage!' > "$T/badidx/train-images-idx3-ubyte"
printf '\000\000\010\003\000\000\000\005\000\000\000\034\000\000\000\034' > "$T/shortidx/train-images-idx3-ubyte"
# beside each, a valid label file of 5 labels, so that the image file is what is at fault
for d in truncgz badidx shortidx; do
    printf '\000\000\010\001\000\000\000\005\000\001\002\003\004' > "$T/$d/train-labels-idx1-ubyte"
done
# a regular file where a directory is wanted
printf 'x' > "$T/afile"
# plugins: one cut short by an interrupted install, one declining for lack of a device,
# one that is not a shared object at all
head -c 12000 "$TD" > "$T/plug_trunc/libgradus_td.so"
cp "$B/plugins-test/libgradus_testdev_nodevice.so" "$T/plug_nodev/"
printf '#!/bin/sh\n' > "$T/plug_text/libgradus_txt.so"

# ---- the rows -----------------------------------------------------------------------------
rows=0
failed=0

# row STATUS REGEX COMMAND...: COMMAND must exit with STATUS, its output match REGEX.
row() {
    want=$1 re=$2
    shift 2
    rows=$((rows + 1))
    "$@" > "$T/out" 2>&1 < /dev/null
    got=$?
    flat=$(tr '\n' ' ' < "$T/out")
    if [ "$got" -ne "$want" ] || ! printf '%s\n' "$flat" | grep -Eq -- "$re"; then
        failed=$((failed + 1))
        printf 'FAIL %s\n     exit %s (want %s), output must match: %s\n     output: %s\n' "$*" "$got" "$want" "$re" "$flat"
    else
        printf 'ok   %s\n' "$*"
    fi
}

# quiet STATUS REGEX COMMAND...: as row, with REGEX matched on stdout and stderr empty.
quiet() {
    want=$1 re=$2
    shift 2
    rows=$((rows + 1))
    "$@" > "$T/out" 2> "$T/err" < /dev/null
    got=$?
    flat=$(tr '\n' ' ' < "$T/out")
    if [ "$got" -ne "$want" ] || ! printf '%s\n' "$flat" | grep -Eq -- "$re" || [ -s "$T/err" ]; then
        failed=$((failed + 1))
        printf 'FAIL %s\n     exit %s (want %s), stdout must match: %s, stderr must be empty\n     stdout: %s\n     stderr: %s\n' \
            "$*" "$got" "$want" "$re" "$flat" "$(tr '\n' ' ' < "$T/err")"
    else
        printf 'ok   %s\n' "$*"
    fi
}

# without STATUS REGEX COMMAND...: COMMAND must exit with STATUS and its output must NOT
# match REGEX.
without() {
    want=$1 re=$2
    shift 2
    rows=$((rows + 1))
    "$@" > "$T/out" 2>&1 < /dev/null
    got=$?
    flat=$(tr '\n' ' ' < "$T/out")
    if [ "$got" -ne "$want" ] || printf '%s\n' "$flat" | grep -Eq -- "$re"; then
        failed=$((failed + 1))
        printf 'FAIL %s\n     exit %s (want %s), output must not match: %s\n     output: %s\n' "$*" "$got" "$want" "$re" "$flat"
    else
        printf 'ok   %s\n' "$*"
    fi
}

# commands
row 2 'usage: gradus <command>'                                   "$G"
row 2 'unknown command "nosuch".*train .*devices .*sweep'          "$G" nosuch
row 2 'no command "nosuch".*train .*devices .*sweep'               "$G" help nosuch
row 2 'gradus devices: unknown option --frob'                      "$G" devices --frob

# train: flags and values
row 2 'which model\? want mlp or cnn'                              "$G" train
row 2 'unknown model "rnn" \(want mlp or cnn\)'                    "$G" train rnn
row 2 'unexpected argument "cnn"'                                  "$G" train mlp cnn
row 2 'gradus train: unknown option --frob'                        "$G" train mlp --frob
row 2 'gradus train: unknown option -x'                            "$G" train -x mlp
row 2 'option --epochs needs a value'                              "$G" train mlp --epochs
row 2 'option --data needs a value'                                "$G" train cnn --data
row 2 'bad value "-1" for --epochs \(want an integer in \[1, 1000\]\)' "$G" train mlp --epochs -1
row 2 'bad value "0" for --batch'                                  "$G" train mlp --batch 0
row 2 'bad value "2x" for --batch'                                 "$G" train mlp --batch 2x
row 2 'bad value "nan" for --lr'                                   "$G" train mlp --lr nan
row 2 'bad value "inf" for --lr'                                   "$G" train mlp --lr inf
row 2 'bad value "-0.1" for --lr'                                  "$G" train mlp --lr -0.1
row 2 'bad value "abc" for --seed'                                 "$G" train cnn --seed abc
row 2 'bad value "-2" for --threads'                               "$G" train cnn --threads -2
row 1 'no backend "nosuch"; available: ref'                        "$G" train mlp --data shapes --backend nosuch

# train: data files
row 1 "$T/missing/train-images-idx3-ubyte.gz: cannot open: No such file" "$G" train mlp --data "$T/missing"
row 1 "$T/afile/train-images-idx3-ubyte.gz: cannot open: Not a directory" "$G" train mlp --data "$T/afile"
row 1 "$T/truncgz/train-images-idx3-ubyte.gz: deflate stream is truncated" "$G" train mlp --data "$T/truncgz"
row 1 "$T/badidx/train-images-idx3-ubyte: bad magic 0x67617262"    "$G" train mlp --data "$T/badidx"
row 1 "$T/shortidx/train-images-idx3-ubyte: truncated: the header promises 5 images" "$G" train cnn --data "$T/shortidx"

# sweep: names, files, plugins
row 2 'gradus sweep: no op named "nosuch"'                         "$G" sweep -q --op nosuch
row 2 'no op named "norm" \(did you mean add_layer_norm, add_rms_norm, global_norm, layer_norm'  "$G" sweep -q --op norm
row 2 'gradus sweep: --op needs an op name, got an empty one'      "$G" sweep -q --op ''
row 2 'option --op needs a value'                                  "$G" sweep --op
row 1 'gradus sweep: no backend named "nosuch" \(loaded: ref'      "$G" sweep -q --backend nosuch
row 2 'gradus sweep: unknown option --frob'                        "$G" sweep --frob
row 2 'gradus sweep: at most 8 --plugin files'                     "$G" sweep -q --plugin a --plugin a --plugin a \
    --plugin a --plugin a --plugin a --plugin a --plugin a --plugin a
row 1 'gradus sweep: plugin testdev_nodevice declined: testdev: no device present' \
    "$G" sweep -q --op relu --plugin "$B/plugins-test/libgradus_testdev_nodevice.so"
row 1 'gradus sweep: plugin testdev_earlyfail failed: testdev: simulated failure before the ABI version is set' \
    "$G" sweep -q --op relu --plugin "$B/plugins-test/libgradus_testdev_earlyfail.so"
row 1 "gradus sweep: plugin $T/plug_trunc/libgradus_td.so: truncated: segment [0-9]+ ends at byte [0-9]+ but the file has 12000 bytes" \
    "$G" sweep -q --op relu --plugin "$T/plug_trunc/libgradus_td.so"
row 1 'gradus sweep: plugin /nonexistent/libgradus_x.so: cannot open: No such file' \
    "$G" sweep -q --op relu --plugin /nonexistent/libgradus_x.so
row 1 "gradus sweep: cannot write $T/nodir/ops.md: No such file or directory" "$G" sweep -q --op relu --doc "$T/nodir/ops.md"
if [ -w /dev/full ]; then
    row 1 'gradus sweep: cannot write /dev/full: No space left on device' "$G" sweep -q --op relu --doc /dev/full
    without 1 'wrote /dev/full'                                    "$G" sweep -q --op relu --doc /dev/full
fi
# one op swept: the other ops' kernels are not reported as broken registrations
without 0 'broken registrations'                                   "$G" sweep -q --op relu

# devices: plugins that do not load are reported, with the reason, and the command lives
row 0 "td +failed +$T/plug_trunc/libgradus_td.so: truncated: segment [0-9]+ ends at byte [0-9]+ but the file has 12000 bytes" \
    env GRADUS_PLUGIN_PATH="$T/plug_trunc" "$G" devices
row 0 "txt +failed +$T/plug_text/libgradus_txt.so: not an ELF file" env GRADUS_PLUGIN_PATH="$T/plug_text" "$G" devices
# a decline for lack of a device: listed by devices, silent on stderr, logged under the trace
quiet 0 'testdev_nodevice +declined +.*no device present'          env GRADUS_PLUGIN_PATH="$T/plug_nodev" "$G" devices
row 0 'gradus: plugin testdev_nodevice declined: testdev: no device present' \
    env GRADUS_TRACE=1 GRADUS_PLUGIN_PATH="$T/plug_nodev" "$G" devices

echo "cli_bad_input: $rows rows, $failed failed"
[ "$failed" -eq 0 ]
