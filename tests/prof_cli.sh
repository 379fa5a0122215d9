#!/bin/sh
# The profiling commands as users meet them: `gradus train --profile --metrics`, the summary
# it prints, `gradus profile` and `gradus plot` on what it wrote, and their refusals of
# missing or malformed files (naming the file and line). A trace that cannot be written
# must not lose the training: the run finishes, says what was lost, and exits 1.
# usage: prof_cli.sh GRADUS BUILD_DIR
G="$1"
T=$(mktemp -d "$2/prof_cli.XXXXXX") || exit 1
fails=0
check() { # check NAME WANT_RC PATTERN... (patterns are grep -E over stdout+stderr)
    name=$1; want=$2; shift 2
    if [ "$rc" != "$want" ]; then echo "FAIL $name: exit $rc, want $want"; sed 's/^/    /' "$T/out"; fails=$((fails + 1)); return; fi
    for p in "$@"; do
        if ! grep -Eq -- "$p" "$T/out"; then echo "FAIL $name: no /$p/ in:"; sed 's/^/    /' "$T/out"; fails=$((fails + 1)); return; fi
    done
    echo "ok   $name"
}
run() { "$@" > "$T/out" 2>&1; rc=$?; }

train="train cnn --data shapes --limit 192 --threads 2"
run "$G" $train --profile "$T/p.json" --metrics "$T/m.jsonl"
check "train --profile --metrics" 0 "profiling into $T/p.json" "metrics log: $T/m.jsonl" "test accuracy" \
    "profile written to $T/p.json" "by op" "by node" "conv2d" "metrics log written to $T/m.jsonl"
run "$G" profile "$T/p.json" --top 5
check "profile" 0 "spans of node work" "with updates" "by op" "GFLOP/s"
run "$G" profile "$T/p.json" --top 5 --skip 1
check "profile --skip 1" 0 "the first 1 run of each program left out" "by op"
run "$G" plot "$T/m.jsonl" -o "$T/c.svg"
check "plot" 0 "wrote $T/c.svg"
head -c 5 "$T/c.svg" | grep -q '<?xml' || { echo "FAIL plot: $T/c.svg is not an SVG document"; fails=$((fails + 1)); }

run "$G" profile "$T/missing.json"
check "profile: missing trace" 1 "missing.json: cannot open"
printf '{"traceEvents":[\n{"name":"a","ph":"X","ts":1,"dur":1,"pid":1},\n{"name":' > "$T/bad.json"
run "$G" profile "$T/bad.json"
check "profile: truncated trace" 1 "bad.json:3:"
printf '{"step": 1, "lr": 0.1}\n' > "$T/noloss.jsonl"
run "$G" plot "$T/noloss.jsonl" -o "$T/x.svg"
check "plot: no loss column" 1 'noloss.jsonl: no "loss" column'
printf '{"step": 1, "loss": 2}\n{"step": 2, "loss": 1.9\n' > "$T/badline.jsonl"
run "$G" plot "$T/badline.jsonl" -o "$T/x.svg"
check "plot: malformed line" 1 "badline.jsonl:2:"
run "$G" plot "$T/missing.jsonl" -o "$T/x.svg"
check "plot: missing log" 1 "missing.jsonl: cannot open"
run "$G" plot "$T/m.jsonl" -o "$T/no-such-dir/x.svg"
check "plot: unwritable output" 1 "no-such-dir/x.svg"

run "$G" $train --profile "$T/no-such-dir/p.json"
check "train: unwritable profile" 1 "no-such-dir/p.json" "test accuracy"
run "$G" $train --metrics "$T/no-such-dir/m.jsonl"
check "train: unwritable metrics" 1 "no-such-dir/m.jsonl"
GRADUS_PROFILE="$T/env.json" run "$G" $train
check "GRADUS_PROFILE" 0 "profile written to $T/env.json" "by node"
[ -s "$T/env.json" ] || { echo "FAIL GRADUS_PROFILE: no $T/env.json"; fails=$((fails + 1)); }

if [ "$fails" -eq 0 ]; then rm -rf "$T"; echo "prof_cli: ok"; exit 0; fi
echo "prof_cli: $fails failed (files in $T)"
exit 1
