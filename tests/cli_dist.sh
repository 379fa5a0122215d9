#!/bin/sh
# Data-parallel training from the command line: 2 ranks (mpirun, or RANK/WORLD_SIZE and a
# TCP rendezvous) give the losses and the weights of one process with the same global
# batch: bit for bit against gradient accumulation of 2 micro-batches, within rounding
# against one batch twice as large; reruns repeat bit for bit; checkpoints resume on
# another rank count and with the sharded optimizer; a rank that hangs or dies makes the
# job stop with a message within the timeout, leaving the last checkpoint whole.
# usage: cli_dist.sh GRADUS BUILD_DIR SOURCE_DIR   (exit 77: no mpirun, the MPI part skipped)
set -u
G=$1
T=$(mktemp -d "$2/cli_dist.XXXXXX") || exit 1
S=$3
fails=0
checks=0
skipped=""
# CI runs as root on 2 cores
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
# a ThreadSanitizer build: what is reported inside MPI is not gradus's (tests/tsan.supp)
export TSAN_OPTIONS="suppressions=$S/tests/tsan.supp${TSAN_OPTIONS:+ $TSAN_OPTIONS}"
run() { "$@" > "$T/out" 2>&1 < /dev/null; rc=$?; }
check() { # check NAME WANT_RC PATTERN... (grep -E over stdout+stderr)
    name=$1; want=$2; shift 2
    checks=$((checks + 1))
    if [ "$rc" != "$want" ]; then echo "FAIL $name: exit $rc, want $want"; sed 's/^/    /' "$T/out"; fails=$((fails + 1)); return; fi
    for p in "$@"; do
        if ! grep -Eq -- "$p" "$T/out"; then echo "FAIL $name: no /$p/ in:"; sed 's/^/    /' "$T/out"; fails=$((fails + 1)); return; fi
    done
    echo "ok   $name"
}
must() {
    name=$1; shift
    checks=$((checks + 1))
    if "$@"; then echo "ok   $name"; else echo "FAIL $name: $*"; fails=$((fails + 1)); fi
}
same() { cmp -s "$T/$1/ckpt-00000006/model.safetensors" "$T/$2/ckpt-00000006/model.safetensors"; }
losses() { sed 's/.*"loss":\([^,]*\),.*/\1/' "$T/$1/metrics.jsonl" | tr '\n' ' '; }
# the losses of two runs agree to within rel (relative), step by step
close() {
    awk -v a="$(losses "$1")" -v b="$(losses "$2")" -v rel="$3" 'BEGIN {
        n = split(a, x, " "); m = split(b, y, " "); if (n != m || n == 0) exit 1
        for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > rel * x[i]) exit 1 }
    }'
}
port=$((20000 + $$ % 20000))
# two ranks through the TCP rendezvous; extra arguments go to both
tcp2() {
    port=$((port + 1))
    RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$G" train lm "$@" > "$T/out1" 2>&1 < /dev/null &
    p1=$!
    RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$G" train lm "$@" > "$T/out" 2>&1 < /dev/null
    rc=$?
    wait $p1 || rc=$?
}

run "$G" tokenize --data "$S/docs" --out "$T/tok" --vocab 400
check "tokenize" 0 "data.tok"
C="--preset tiny --seq 32 --threads 1 --steps 6 --warmup 1 --val-every 3 --val-batches 4 --data $T/tok/data.tok
   --tokenizer $T/tok/tokenizer.json"

# ---- the references: one process ------------------------------------------------------------
run "$G" train lm $C --batch 2 --accum 2 --out "$T/one"
check "one process, 2 micro-batches of 2" 0 "step 6/6" "checkpoint: "
quick=${GRADUS_TEST_QUICK:-} # the sanitizers' pass: the checks of exactness and faults, not every variant
run "$G" train lm $C --batch 4 --out "$T/big"
check "one process, one batch of 4" 0 "step 6/6"

# ---- two ranks through TCP (no MPI needed) ----------------------------------------------------
tcp2 $C --batch 2 --out "$T/tcp"
check "2 ranks over TCP" 0 "data parallel: 2 ranks over tcp, global batch 4 x 32" "step 6/6"
must "TCP: the weights of accumulation, bit for bit" same one tcp
must "TCP: the losses of a batch of 4, within 1e-4" close tcp big 1e-4
run env RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((port + 50)) "$G" train lm $C --batch 2 --out "$T/e1" --dist-timeout 1
check "TCP: a rank that never comes" 1 "rendezvous: 1 of 2 ranks connected to 127.0.0.1:[0-9]+ within 1 s"
run env RANK=2 WORLD_SIZE=2 "$G" train lm $C --batch 2 --out "$T/e1"
check "TCP: a rank outside the job" 1 "RANK=2, WORLD_SIZE=2.*want 0 <= RANK < WORLD_SIZE"

# sums overlapped with the backward pass (the default: a bucket is summed as soon as the
# last micro-batch's backward finished its gradients) against sums after it
# (GRADUS_DP_OVERLAP=0): the same losses and weights, bit for bit; small buckets, so that
# there are many
tcp2 $C --batch 2 --bucket-mb 0.01 --out "$T/tov"
check "TCP: small buckets, summed during the backward" 0 "step 6/6" "gradients summed on host, during the backward"
export GRADUS_DP_OVERLAP=0
tcp2 $C --batch 2 --bucket-mb 0.01 --out "$T/tno"
unset GRADUS_DP_OVERLAP
check "TCP: small buckets, summed after the backward" 0 "step 6/6" "gradients summed on host$"
must "TCP: overlapped and not, the weights bit for bit" same tov tno
must "TCP: overlapped and not, the losses" test "$(losses tov)" = "$(losses tno)"
must "TCP: overlapped, the weights of accumulation" same one tov
if [ -z "$quick" ]; then
    # with accumulation: only the last micro-batch overlaps
    tcp2 $C --batch 1 --accum 2 --bucket-mb 0.01 --out "$T/tov2"
    check "TCP: 2 micro-batches a rank, overlapped" 0 "step 6/6" "during the backward"
    export GRADUS_DP_OVERLAP=0
    tcp2 $C --batch 1 --accum 2 --bucket-mb 0.01 --out "$T/tno2"
    unset GRADUS_DP_OVERLAP
    check "TCP: 2 micro-batches a rank, not overlapped" 0 "step 6/6"
    must "TCP: 2 micro-batches a rank, overlapped and not, the weights bit for bit" same tov2 tno2
    must "TCP: 2 micro-batches a rank, overlapped and not, the losses" test "$(losses tov2)" = "$(losses tno2)"
fi

# ---- device sums (the test device's collective module, ABI 2.2): the path GPUs take through
# NCCL. Each rank adds its gradients into the sums on its device, the device sums them over
# the ranks bucket by bucket while the backward runs (the test device: in shared memory, in
# rank order), and nothing goes through the host; the same bits as the host's sums -----------
if [ -e "$2/plugins-test/libgradus_testdev.so" ]; then
    export GRADUS_PLUGIN_PATH="$2/plugins-test"
    run "$G" train lm $C --batch 2 --backend testdev --out "$T/td"
    check "test device, one process" 0 "step 6/6"
    run env RANK=0 WORLD_SIZE=1 "$G" train lm $C --batch 2 --backend testdev --out "$T/tdc"
    check "test device, a job of one rank" 0 "data parallel: 1 ranks" "gradients summed on testdev, during the backward"
    must "test device: the device's sums give the plain run's weights" same td tdc
    run "$G" train lm $C --batch 2 --accum 2 --backend testdev --out "$T/td2"
    check "test device, one process, 2 micro-batches of 2" 0 "step 6/6"
    tcp2 --backend testdev $C --batch 2 --bucket-mb 0.01 --out "$T/tdd"
    check "test device, 2 ranks: device sums during the backward" 0 "data parallel: 2 ranks" \
        "gradients summed on testdev, during the backward"
    gbuf() { sed -n 's/.*gradient buffers \([0-9.]*\) MB.*/\1/p' "$T/$1"; }
    cp "$T/out" "$T/tdd.out"
    must "test device, 2 ranks: the weights of accumulation, bit for bit" same td2 tdd
    must "test device, 2 ranks: the losses of accumulation" test "$(losses td2)" = "$(losses tdd)"
    export GRADUS_DEVICE_COLLECTIVE=0
    tcp2 --backend testdev $C --batch 2 --out "$T/tdh"
    unset GRADUS_DEVICE_COLLECTIVE
    check "test device, 2 ranks: sums on the host" 0 "gradients summed on host"
    must "test device, 2 ranks: device and host sums, the weights bit for bit" same tdh tdd
    export GRADUS_DP_OVERLAP=0
    tcp2 --backend testdev $C --batch 2 --out "$T/tdn"
    unset GRADUS_DP_OVERLAP
    check "test device, 2 ranks: device sums after the backward" 0 "gradients summed on testdev$"
    must "test device, 2 ranks: overlapped and not, the weights bit for bit" same tdn tdd
    if [ -z "$quick" ]; then
        # 2 micro-batches a rank: each rank's gradients add up on its device (and each
        # step's reset empties the sums), as they do in the host's buffer
        tcp2 --backend testdev $C --batch 1 --accum 2 --bucket-mb 0.01 --out "$T/tda"
        check "test device, 2 ranks of 2 micro-batches" 0 "step 6/6" "summed on testdev, during the backward"
        export GRADUS_DEVICE_COLLECTIVE=0
        tcp2 --backend testdev $C --batch 1 --accum 2 --bucket-mb 0.01 --out "$T/tdah"
        unset GRADUS_DEVICE_COLLECTIVE
        check "test device, 2 ranks of 2 micro-batches, sums on the host" 0 "step 6/6" "summed on host"
        must "test device, 2 ranks of 2 micro-batches: device and host sums, the weights bit for bit" same tdah tda
        must "test device, 2 ranks of 2 micro-batches: ... and the losses" test "$(losses tdah)" = "$(losses tda)"
        tcp2 --backend testdev $C --batch 2 --zero1 --out "$T/tdz"
        check "test device, 2 ranks, ZeRO-1" 0 "optimizer sharded \\(ZeRO-1\\)" "summed on testdev"
        must "test device, 2 ranks, ZeRO-1: the weights bit for bit" same td2 tdz
        # the parameters go from rank to rank on the device: no host buffer for them
        must "test device, 2 ranks, ZeRO-1: no host buffer ($(gbuf out) MB of gradient buffers, $(gbuf tdd.out) MB without ZeRO-1)" \
            test "$(gbuf out)" = "$(gbuf tdd.out)"
    fi
    # a rank that hangs (SIGSTOP after the checkpoint of step 2) while the device sums (or
    # while the ranks trade validation losses, when the stop lands there): the other gives
    # up within the timeout, saying so, and the checkpoint loads
    rm -rf "$T/tdf"
    port=$((port + 1))
    for r in 1 0; do
        RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$G" train lm $C --backend testdev \
            --steps 400 --batch 2 --ckpt-every 2 --dist-timeout 3 --out "$T/tdf" > "$T/out$r" 2>&1 < /dev/null &
        eval "p$r=\$!"
    done
    i=0
    while [ ! -e "$T/tdf/latest" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
    kill -STOP "$p1"
    start=$(date +%s)
    wait "$p0"
    rc=$?
    took=$(($(date +%s) - start))
    kill -KILL "$p1"
    wait "$p1" 2> /dev/null
    [ "$rc" != 0 ] && rc=1
    cp "$T/out0" "$T/out"
    check "test device: a rank that hangs stops the job" 1 \
        "rank 0 of 2: .*(waited 3 s for the other ranks|no answer from (the other ranks|rank 1) within 3 s)"
    must "test device: ... within the timeout (took ${took} s)" test "$took" -le 30
    run "$G" generate --model "$T/tdf" --prompt-ids 1,2 --max-tokens 2
    check "test device: the checkpoint written before the fault loads" 0 "prefill: 2 tokens"
    unset GRADUS_PLUGIN_PATH
fi

# ---- two ranks through MPI -----------------------------------------------------------------------
if ! command -v mpirun > /dev/null 2>&1; then
    skipped="no mpirun"
elif "$G" train lm --help | grep -q "mpirun" && ! OMPI_COMM_WORLD_SIZE=2 "$G" train lm $C --out "$T/probe" 2>&1 | grep -q "built without MPI"; then
    # Open MPI's components are unloaded at exit, so LeakSanitizer cannot name (nor a
    # suppression match) what they keep: leaks are checked on the TCP runs above, which
    # share all of gradus's data-parallel code but the MPI transport
    nolsan="${LSAN_OPTIONS:+$LSAN_OPTIONS:}detect_leaks=0"
    mpi() { run env LSAN_OPTIONS="$nolsan" mpirun -n 2 "$G" train lm "$@"; }
    mpi $C --batch 2 --out "$T/mpi"
    check "2 ranks over MPI" 0 "data parallel: 2 ranks over mpi, global batch 4 x 32" "step 6/6" "memory of rank 0 of 2"
    cp "$T/out" "$T/mpi.out"
    must "MPI: the weights of accumulation, bit for bit" same one mpi
    must "MPI: the losses of accumulation" test "$(losses one)" = "$(losses mpi)"
    must "MPI: the losses of a batch of 4, within 1e-4" close mpi big 1e-4
    if [ -z "$quick" ]; then
        mpi $C --batch 2 --out "$T/mpi2"
        must "MPI: a rerun repeats bit for bit" same mpi mpi2
    fi
    must "MPI and TCP agree bit for bit" same mpi tcp
    mpi $C --batch 2 --bucket-mb 0.01 --out "$T/mov"
    check "MPI: small buckets, summed during the backward" 0 "step 6/6" "gradients summed on host, during the backward"
    export GRADUS_DP_OVERLAP=0
    mpi $C --batch 2 --bucket-mb 0.01 --out "$T/mno"
    unset GRADUS_DP_OVERLAP
    check "MPI: small buckets, summed after the backward" 0 "step 6/6" "gradients summed on host$"
    must "MPI: overlapped and not, the weights bit for bit" same mov mno
    must "MPI: overlapped and not, the losses" test "$(losses mov)" = "$(losses mno)"

    # resume on another rank count: 2 ranks to step 3, then one process (2 micro-batches)
    mpi $C --batch 2 --stop-at 3 --ckpt-every 3 --out "$T/r"
    check "MPI: stopped at step 3" 0 "checkpoint: .*ckpt-00000003"
    run "$G" train lm --resume "$T/r" --steps 6 --batch 2 --accum 2 --seq 32 --threads 1 --warmup 1 --val-every 3 --val-batches 4
    check "resumed by one process" 0 "resumed" "checkpoint: .*ckpt-00000006"
    must "2 ranks then 1: the weights of the uninterrupted run" same one r
    # and one process to step 3, then 2 ranks
    if [ -z "$quick" ]; then
        run "$G" train lm $C --batch 2 --accum 2 --stop-at 3 --ckpt-every 3 --out "$T/r2"
        mpi --resume "$T/r2" --steps 6 --batch 2 --seq 32 --threads 1 --warmup 1 --val-every 3 --val-batches 4
        check "resumed by 2 ranks" 0 "data parallel: 2 ranks" "checkpoint: .*ckpt-00000006"
        must "1 then 2 ranks: the weights of the uninterrupted run" same one r2
    fi

    # the sharded optimizer: fewer moments per rank, the same bits, a checkpoint that resumes
    mpi $C --batch 2 --zero1 --stop-at 3 --ckpt-every 3 --out "$T/z"
    check "ZeRO-1: stopped at step 3" 0 "optimizer sharded \\(ZeRO-1\\)" "memory of rank 0 of 2: .*optimizer moments"
    mom=$(sed -n 's/.*optimizer moments \([0-9.]*\) MB.*/\1/p' "$T/out")
    mpi --resume "$T/z" --zero1 --steps 6 --batch 2 --seq 32 --threads 1 --warmup 1 --val-every 3 --val-batches 4
    check "ZeRO-1: resumed by 2 ranks" 0 "checkpoint: .*ckpt-00000006"
    must "ZeRO-1: the weights of the uninterrupted run" same one z
    if [ -z "$quick" ]; then
        run "$G" train lm --resume "$T/z/ckpt-00000006" --steps 7 --batch 2 --accum 2 --seq 32 --threads 1 --warmup 1 \
            --val-every 3
        check "ZeRO-1's checkpoint resumed by one process" 0 "checkpoint: .*ckpt-00000007"
    fi
    full=$(sed -n 's/.*optimizer moments \([0-9.]*\) MB.*/\1/p' "$T/mpi.out")
    must "ZeRO-1: rank 0 keeps fewer moments ($mom MB of $full MB)" awk -v a="$mom" -v b="$full" 'BEGIN { exit !(a > 0 && a < 0.75 * b) }'

    # faults: rank 1 stops (SIGSTOP) after the checkpoint of step 2; rank 0 gives up within
    # the timeout (5 s: long enough for rank 0's checkpoints under the sanitizers, which
    # rank 1 waits through), naming what it waited for, and the checkpoint loads
    rm -rf "$T/f"
    env LSAN_OPTIONS="$nolsan" mpirun -n 2 "$G" train lm $C --steps 400 --batch 2 --ckpt-every 2 --dist-timeout 5 --out "$T/f" > "$T/out" 2>&1 < /dev/null &
    mp=$!
    i=0
    while [ ! -e "$T/f/latest" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
    r1=""
    for p in $(ps -o pid= --ppid $mp); do
        if tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1"; then r1=$p; fi
    done
    [ -n "$r1" ] && kill -STOP "$r1"
    start=$(date +%s)
    wait $mp
    rc=$?
    took=$(($(date +%s) - start))
    [ "$rc" != 0 ] && rc=1
    check "MPI: a rank that hangs stops the job" 1 "rank 0 of 2: the [a-z ]+( of step [0-9]+)?: no answer from the other ranks within 5 s"
    must "MPI: ... within the timeout (took ${took} s)" test "$took" -le 30
    run "$G" generate --model "$T/f" --prompt-ids 1,2 --max-tokens 2
    check "MPI: the checkpoint written before the fault loads" 0 "prefill: 2 tokens"
else
    skipped="gradus built without MPI"
fi

rm -rf "$T"
echo "cli_dist: $checks checks, $fails failed${skipped:+; the MPI part skipped: $skipped}"
[ "$fails" -eq 0 ] || exit 1
[ -z "$skipped" ] || exit 77
exit 0
