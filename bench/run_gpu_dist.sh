#!/usr/bin/env bash
# The one-rank NCCL check of data-parallel training on the GPU machine (after bench/run_gpu.sh
# built build-gpu): the tiny preset trained 20 steps on cuda as a plain run and as a job of one
# rank (RANK=0 WORLD_SIZE=1), in f32 and bf16; the job's gradients are summed through the CUDA
# plugin's collective module (NCCL), queued bucket by bucket during the backward. Expect
# "gradients summed on cuda, during the backward", equal losses and bitwise-equal weights.
# With DATA (a folder holding bible/data.tok and bible/tokenizer.json, as run_gpu_lm.sh
# takes), also GPT-2 124M's tokens/s as a plain run and as a job of one rank: what the
# device path costs (its additions into the sums, their resets, the segments cut at the
# buckets). Logs go to $OUT.
#
#   bench/run_gpu_dist.sh          (BE=cpu B=build runs the same check on the CPU backend)
set -uo pipefail
OUT=${OUT:-gpu-out}
G=${B:-build-gpu}/gradus
mkdir -p "$OUT"
$G devices | grep -i "${BE:-cuda}"
$G tokenize --data docs --out "$OUT/tok" --vocab 2048 >/dev/null || exit 1
C=(--preset tiny --seq 128 --batch 8 --steps 20 --warmup 2 --val-every 10 --backend "${BE:-cuda}"
   --data "$OUT/tok/data.tok" --tokenizer "$OUT/tok/tokenizer.json")
rc=0
for dt in f32 bf16; do
  $G train lm "${C[@]}" --dtype $dt --out "$OUT/plain-$dt" >"$OUT/plain-$dt.log" 2>&1 || { tail "$OUT/plain-$dt.log"; exit 1; }
  env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 $G train lm "${C[@]}" --dtype $dt --out "$OUT/dp1-$dt" >"$OUT/dp1-$dt.log" 2>&1 ||
    { tail "$OUT/dp1-$dt.log"; exit 1; }
  grep -h "data parallel\|summed on" "$OUT/dp1-$dt.log"
  for r in plain dp1; do sed 's/,"tokens_per_s.*//' "$OUT/$r-$dt/metrics.jsonl" >"$OUT/$r-$dt.loss"; done
  if cmp -s "$OUT/plain-$dt.loss" "$OUT/dp1-$dt.loss"; then echo "$dt: losses equal"; else echo "$dt: LOSSES DIFFER"; rc=1; fi
  if cmp -s "$OUT/plain-$dt/ckpt-00000020/model.safetensors" "$OUT/dp1-$dt/ckpt-00000020/model.safetensors"; then
    echo "$dt: weights bitwise equal"
  else
    echo "$dt: WEIGHTS DIFFER"
    rc=1
  fi
done
if [ -n "${DATA:-}" ]; then
  for r in plain dp1; do
    env $([ $r = dp1 ] && echo RANK=0 WORLD_SIZE=1 LOCAL_RANK=0) $G train lm --preset gpt2-124m --batch 16 --seq 1024 \
      --steps 30 --val-every 0 --backend "${BE:-cuda}" --data "$DATA/bible/data.tok" \
      --tokenizer "$DATA/bible/tokenizer.json" --out "$OUT/gpt2-$r" >"$OUT/gpt2-$r.log" 2>&1 || { tail "$OUT/gpt2-$r.log"; rc=1; continue; }
    # tokens/s over steps 6..29 (warm-up before; the last step saves)
    python3 -c 'import json,sys
r=[json.loads(l) for l in open(sys.argv[1])]; a,z=r[4],r[-2]
print("gpt2-124m %s: %.0f tokens/s" % (sys.argv[2], (z["step"]-a["step"])*16*1024/(z["elapsed_s"]-a["elapsed_s"])))' \
      "$OUT/gpt2-$r/metrics.jsonl" $r
  done
  grep -h "summed on" "$OUT/gpt2-dp1.log"
fi
exit $rc
