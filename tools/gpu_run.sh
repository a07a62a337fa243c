#!/usr/bin/env bash
# One batched call on the GPU machine (the `device` tool): unpacks binaries built here (Release,
# CUDA on; carried as .devcarry/c/carry.tar.xz with their non-system shared libraries, see
# tools/gpu_carry.sh), then runs the steps named on the command line, each bounded by a timeout,
# logging to $OUT. Steps:
#   tests       GPU op tests, CUDA goldens (resident and tiered), the packed three-tier test; goldenscuda:
#               the CUDA goldens alone
#   sanitize    compute-sanitizer memcheck/racecheck of the op tests; sanitize_tier: memcheck of the
#               packed three-tier test; sanitize_kv: both over the KV cache kernels' tests;
#               sanitize_int8: both over the int8 tensor-core products' and the DeltaNet prefill's tests
#   synth35 / synth80      synthetic Qwen3.6-35B-A3B / Qwen3-Next-80B-A3B, 4-bit, into /tmp/m35 /tmp/m80
#   resident35 / resident80  fully resident decode and prefill (512 and 4096-token prompts);
#                          decode35 / decode80 the 512-token one only (GPU time per step logged);
#                          splits35: decode with each forced matvec column split; nopdl35 / nopdl80:
#                          decode without programmatic dependent launch (SLUICE_CUDA_PDL=0)
#   host35 / host80        --gpu-memory 4G, experts in host RAM (warm host cache); host35np / host80np
#                          the same without prefetch
#   disk35 / disk80        --gpu-memory 4G --memory 8G: experts streamed from disk
#   batch35 / batch80      batched decode (bench --sequences): 4 and 16 resident sequences, 8 through the
#                          host tier; one forward per step against one forward per sequence
#   rm35 / rm80            delete a synthetic model (the disk holds one of them at a time)
#   synthds                DeepSeek-V3's real layer shapes (deepseek-v3-671b.json) truncated to DS_LAYERS layers
#                          (default 4: one dense, the rest MoE), 4-bit, into /tmp/mds; residentds: decode and
#                          prefill 512 resident; hostds: experts in host RAM (--gpu-memory 8G); diskds: streamed
#                          from disk (--gpu-memory 8G --memory 6G); cpuds: the CPU streamed from disk (--memory 6G)
#   useb                   the steps after it run the binaries of .devcarry/b (carried beside .devcarry/c for
#                          an A/B comparison; only bin/sluice is needed there), their results named b_*;
#                          usea goes back to .devcarry/c (results a2_*); host35pdl0: host35 without
#                          programmatic dependent launch
#   prefill35 / prefill80  prefill A/B: --gpu-prefill int8 against f32 (3xTF32), alternated, 4096 and 512
#                          tokens, resident, PREFILL_ROUNDS rounds (2); hostprefill35 / hostprefill80: the same through the host tier;
#                          prefillprof35: per-kernel GPU time of one 4096-token prefill, PROF_MODES
#                          (int8 f32)
#   long35                 prefill and decode at 32K and 64K prompts per --kv-bits, --kv-window 0 (and q8 with
#                          its default window); sanitize_flash: memcheck/racecheck of the flash attention test
#   kv35                   decode at 4K and 32K depth and the prompt's prefill (TTFT) per --kv-bits, resident
#   kvdeep35               prefill and decode at 4K, 32K, 100K and 128K (KV_PROMPTS) per --kv-bits (KV_BITS, KV_EXTRA flags);
#                          llamadeep35: llama.cpp -fa 1 at the same prompts and depths (LLAMA_CTK); gputests:
#                          the GPU test binary alone (GPU_FILTER: a gtest filter)
#   prep35                 llamabuild and gguf35 in the background while synth35, the flash attention test and
#                          the CUDA goldens run; vs35: sluice and llama.cpp alternated (prefill 4096/512, 32K prompts)
#   prefix35               prefill with the engine's prefix cache on (the default) against --prefix-cache 0, 32K and 128K
#   gguftests              the GGUF goldens on CUDA (F16 files of the goldens' checkpoints, resident and through
#                          a tiered expert cache) and the GPU op tests of ggml's block formats
#   llamalogits            llama.cpp's logits (tools/llama_logits, built into the llama.cpp tree by llamabuild) at
#                          every position of each golden's prompt, for every file of tests/data/gguf/weights, on the
#                          CPU (-ngl 0) and the GPU (-ngl 99), beside sluice's own (--device cpu and cuda): $RES/logits/
#   gguf35vs               the same GGUF (/tmp/m35.gguf, gguf35) in both engines, alternated: decode and prefill
#                          512/4096 resident, and experts in host RAM (sluice --gpu-memory 4G, llama.cpp -ncmoe 99)
#   famgguf                a synthetic full-size GGUF of another family for the same-file side-by-side, into
#                          /tmp/fam.gguf: FAM_WRITER (tools/synth_gguf_gptoss.py, synth_gguf_glm4moe.py, ...) over
#                          FAM_CONFIG (FAM_ARGS: the writer's flags); when the disk cannot hold it, num_hidden_layers
#                          is cut to what fits (logged)
#   prepfam                llamabuild and famgguf in the background while tests and gguftests run
#   famvs                  /tmp/fam.gguf in both engines, alternated, page cache kept (the file is read once):
#                          decode 128 after a 512 prompt and prefill 4096, resident; experts in host RAM (sluice
#                          --gpu-memory 4G, llama.cpp -ncmoe 99); results named FAM_NAME_*
#   prepfamq               prepfam with the op tests of GPU_FILTER and the CUDA goldens of GOLDEN_FILTER only
#   famab                  /tmp/fam.gguf resident, --gpu-prefill int8 against f32 alternated: prefill 512 and 4096
#   famdecab               /tmp/fam.gguf resident decode: this build, .devcarry/b's bin/sluice and llama.cpp, alternated
#   famprof                ncu's per-kernel GPU time and DRAM bytes over /tmp/fam.gguf: a FAM_PROF_PROMPT-token (64)
#                          prefill and 3 decode tokens (FAM_NAME_ncu.txt, and its top kernels by time in the log)
#   llamabuild             llama.cpp from .devcarry/llama/llama.tgz or .txz (../shared/peer/README.md) into /tmp/llb;
#                          gguf35: the 35B's GGUF of the same shapes (synth_gguf.py) at /tmp/m35.gguf;
#                          llamakv35: llama-bench -fa 1 at f16 and q8_0 KV, the same depths and prompts
#   trainmtp               an MTP head for models/tiny-next, trained on its frozen model (tools/train_tiny.py
#                          --mtp-from): the folder with the head as $OUT/tinymtp/tiny.tar.partN (cat | tar x gives
#                          tiny-next/), mtp_stats.json and mtp_training_log.txt in results.tgz
#   clients35 / clients80  bench --clients 1, 4, 16 (CLIENTS) resident; clientshost35 / clientshost80 through the
#                          host tier (--gpu-memory 4G)
#   mtp                    the MTP head's CUDA goldens and greedy identity (mtptests alone); the default
#                          model's decode with --spec mtp k = 1..4 / auto against plain, alternated (MTP_ROUNDS;
#                          mtpdecode alone, TAG-named after useb)
#   vcurve35 / vcurve80    the verify curve resident only (curve35 adds the host tier); sanitize_rows:
#                          memcheck / racecheck of the multi-row decode products' tests
#   eptests                expert parallelism's GPU tests: the local all-reduce, ranks sharing the GPU against one
#                          GPU and the CPU on the goldens, tiered ranks (the default model's weights in the tree)
#   ep35 / ep80            one GPU against an expert-parallel group (EP_DEVICES, default cuda:0,cuda:0: ranks
#                          sharing the GPU — the path's cost; cuda:0,cuda:1 on two GPUs), alternated EP_ROUNDS (2):
#                          decode 128 after a 512 prompt and prefill 4096, resident
#   epvs35                 two GPUs, the same GGUF (/tmp/m35.gguf, gguf35; llamabuild) in both engines: sluice's expert
#                          parallelism (EP_DEVICES, default cuda:0,cuda:1) against llama.cpp's layer split (-sm layer),
#                          and each engine on one GPU; decode 128 after 512, prefill 4096; EP_ROUNDS (2) alternated
#   synth397               Qwen3.5-397B-A17B's real layer shapes truncated to L397_LAYERS layers (default 12), 4-bit,
#                          into /tmp/m397 (the disk cannot hold all 60)
#   ncu35                  per-kernel GPU time of a short decode (ncu); prof35: the in-graph timeline (nsys,
#                          when installed) and ncu's full sections for one layer; prof35mv: ncu's full sections
#                          for one layer's products; sass: the products' SASS (sm_90)
set -uo pipefail
# Logs and JSON go to $RES, packed into $OUT/results.tgz after every step (the device tool returns at
# most 8 files, and a call cut short keeps what it finished).
OUT=${OUT:-/tmp/gpu_out}
RES=/tmp/gpu_res
if [ -z "${GPU_RUN_NESTED:-}" ]; then  # prep35 runs steps of its own in the background
    rm -rf "$RES"                        # a warm machine keeps the last call's files
    mkdir -p "$OUT" "$RES" /tmp/sl
    for t in .devcarry/c*/carry.tar.xz; do [ -f "$t" ] && tar xJf "$t" -C /tmp/sl; done
    # The generated GGUF fixtures (git-ignored), when carried: FIXTURES=1 tools/gpu_carry.sh.
    [ -f .devcarry/fixtures/gguf-fixtures.tar ] && tar xf .devcarry/fixtures/gguf-fixtures.tar
fi
export LD_LIBRARY_PATH=/tmp/sl/lib
B=/tmp/sl/bin
# Expert parallelism over several GPUs loads NCCL at run time: the machine's (PyTorch's wheel ships one) when
# the loader's path has none.
if [ -z "${SLUICE_NCCL_LIBRARY:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnccl.so.2'; then
    nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(nvidia.nccl.__path__[0], "lib", "libnccl.so.2"))' \
        2>/dev/null)
    [ -n "$nccl" ] && [ -f "$nccl" ] && export SLUICE_NCCL_LIBRARY=$nccl
fi
# The test binaries read tests/data through the absolute path they were built with.
if [ ! -e /work/main/tests/data ]; then mkdir -p /work && ln -sfn "$PWD" /work/main; fi
SHARED=${SHARED:-$PWD/.devcarry/model-configs}
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader | tee "$RES/machine.txt"
nproc >>"$RES/machine.txt"

step() {  # name, seconds, command... (after `useb`, names get the prefix b_)
    local name=${TAG:-}$1 limit=$2
    shift 2
    echo "== $name ($(date +%T)): $*"
    timeout "$limit" "$@" >"$RES/$name.txt" 2>&1
    local rc=$?
    echo "   rc $rc"
    tail -n 12 "$RES/$name.txt"
    # After every step (a call cut short keeps what it finished); renamed into place, as prep35's
    # background steps pack too.
    tar czf "$OUT/results.tgz.$$" -C "$RES" . && mv -f "$OUT/results.tgz.$$" "$OUT/results.tgz"
}
bench() {  # name, seconds, model, flags...
    local name=$1 limit=$2 model=$3
    shift 3
    sync
    [ -n "${NODROP:-}" ] || echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
    step "$name" "$limit" "$B/sluice" bench "$model" --device cuda --json "$RES/${TAG:-}$name.json" "$@"
}

for s in "$@"; do
    case $s in
    tests)
        CUDA_MODULE_LOADING=EAGER step gpu_tests 240 "$B/sluice_gpu_tests"
        step goldens_cuda 240 "$B/sluice_tests" --gtest_filter='Goldens/Golden.OnCuda*'
        SLUICE_CUDA_UNFUSED=1 step goldens_cuda_unfused 240 "$B/sluice_tests" --gtest_filter='Goldens/Golden.OnCuda*'
        ;;
    goldenscuda)  # the CUDA goldens alone (tests runs them after the whole op test binary)
        step goldens_cuda 240 "$B/sluice_tests" --gtest_filter='Goldens/Golden.OnCuda*'
        ;;
    sanitize_tier)
        step memcheck_tier 200 compute-sanitizer --tool memcheck --error-exitcode 3 "$B/sluice_gpu_tests" \
            --gtest_filter='*PackedModelThroughGpuHostAndDiskTiers/qwen3_next_mlx_q4'
        ;;
    sanitize_split)
        step memcheck_split 200 compute-sanitizer --tool memcheck --error-exitcode 3 "$B/sluice_gpu_tests" \
            --gtest_filter='CudaOps.*'
        step racecheck_split 200 compute-sanitizer --tool racecheck --error-exitcode 3 "$B/sluice_gpu_tests" \
            --gtest_filter='CudaOps.Matvec*:CudaOps.GroupedMoe*'
        ;;
    sanitize)
        step memcheck_ops 200 compute-sanitizer --tool memcheck --error-exitcode 3 "$B/sluice_gpu_tests" \
            --gtest_filter='CudaOps.*'
        step racecheck_ops 200 compute-sanitizer --tool racecheck --error-exitcode 3 "$B/sluice_gpu_tests" \
            --gtest_filter='CudaOps.*'
        ;;
    sanitize_flash)
        step memcheck_flash 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$B/sluice_gpu_tests" \
            --gtest_filter='CudaOps.FlashAttention*'
        step racecheck_flash 300 compute-sanitizer --tool racecheck --error-exitcode 3 "$B/sluice_gpu_tests" \
            --gtest_filter='CudaOps.FlashAttention*'
        ;;
    sanitize_int8)
        step memcheck_int8 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$B/sluice_gpu_tests" \
            --gtest_filter='CudaOps.Int8*:CudaOps.GroupedMoeInt8*'
        step racecheck_int8 300 compute-sanitizer --tool racecheck --error-exitcode 3 "$B/sluice_gpu_tests" \
            --gtest_filter='CudaOps.GroupedMoeInt8*:CudaOps.GatedDelta*:CudaOps.Conv1d*'
        step memcheck_delta 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$B/sluice_gpu_tests" \
            --gtest_filter='CudaOps.GatedDelta*:CudaOps.Conv1d*'
        ;;
    sanitize_kv)
        step memcheck_kv 200 compute-sanitizer --tool memcheck --error-exitcode 3 "$B/sluice_gpu_tests" \
            --gtest_filter='CudaOps.Kv*:CudaOps.AttentionOnCompressed*:*CompressedKvCacheMatchesCpu/qwen3_next*'
        step racecheck_kv 200 compute-sanitizer --tool racecheck --error-exitcode 3 "$B/sluice_gpu_tests" \
            --gtest_filter='CudaOps.Kv*:CudaOps.AttentionOnCompressed*'
        ;;
    unfused35)
        SLUICE_CUDA_UNFUSED=1 bench unfused35_p512 120 /tmp/m35 --prompt-tokens 512 --prefill-chunk 512 \
            --gen-tokens 128 --reps 2
        ;;
    ncu35)
        # Per-kernel GPU time (summed per kernel) over the decode steps of a short run.
        step ncu35 300 ncu --clock-control none --metrics gpu__time_duration.sum --launch-skip 1100 \
            --launch-count 1400 --csv --print-summary none "$B/sluice" bench /tmp/m35 --device cuda \
            --prompt-tokens 16 --prefill-chunk 16 --gen-tokens 6 --reps 1
        python3 tools/ncu_per_kernel.py "$RES/ncu35.txt" >"$RES/ncu35_per_kernel.txt" 2>&1
        head -n 30 "$RES/ncu35_per_kernel.txt"
        ;;
    prof35)
        # Where decode time goes: the in-graph kernel timeline (nsys, when installed: durations and the gaps
        # between kernels) and ncu's full sections for one decode layer's launches.
        NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -n 1)
        if [ -n "$NSYS" ]; then
            step nsys35 200 "$NSYS" profile --cuda-graph-trace=node --trace=cuda -o "$RES/nsys35" --force-overwrite true \
                "$B/sluice" bench /tmp/m35 --device cuda --prompt-tokens 16 --prefill-chunk 16 --gen-tokens 48 --reps 1
            step nsys35_stats 200 "$NSYS" stats --report cuda_gpu_trace --format csv -o "$RES/nsys35" "$RES/nsys35.nsys-rep"
            python3 tools/nsys_gaps.py "$RES"/nsys35_cuda_gpu_trace*.csv >"$RES/nsys35_gaps.txt" 2>&1
            head -n 30 "$RES/nsys35_gaps.txt"
            rm -f "$RES"/nsys35.nsys-rep "$RES"/nsys35.sqlite
            xz -f "$RES"/nsys35_cuda_gpu_trace*.csv
        else
            echo "no nsys"
        fi
        step ncufull35 300 ncu --set full -k 'regex:moe_gate_up|deltanet_fused|matvec_multi|moe_down|add_rms|conv1d' \
            --launch-skip 300 --launch-count 10 "$B/sluice" bench /tmp/m35 --device cuda --prompt-tokens 16 \
            --prefill-chunk 16 --gen-tokens 6 --reps 1
        xz -f "$RES/ncufull35.txt"
        ;;
    prof35mv)
        # ncu's full sections, with source-level stall sampling, for one decode layer's products.
        step ncumv35 300 ncu --set full -k 'regex:matvec_multi|moe_gate_up|moe_down' \
            --launch-skip 40 --launch-count 8 "$B/sluice" bench /tmp/m35 --device cuda --prompt-tokens 16 \
            --prefill-chunk 16 --gen-tokens 6 --reps 1
        xz -f "$RES/ncumv35.txt"
        ;;
    kv35)
        for d in 4096 32768; do
            for b in 32 16 8 4 3; do
                bench kv35_d${d}_b$b 200 /tmp/m35 --kv-bits $b --prompt-tokens $d \
                    --prefill-chunk 4096 --gen-tokens 64 --reps 1
            done
        done
        ;;
    gputests)
        # Eager module loading: the expert-parallel tests' ranks wait on each other inside kernels (see
        # src/runtime/cuda/collective.h), which lazy loading can deadlock.
        CUDA_MODULE_LOADING=EAGER step gpu_tests "${GPU_TESTS_S:-300}" "$B/sluice_gpu_tests" --gtest_filter="${GPU_FILTER:-*}"
        ;;
    kvdeep35)
        # Per KV type (default --kv-window): prefill (TTFT) of 4K, 32K, 100K and 128K prompts and decode at
        # that depth after each, one process per type sweeping the prompts (page cache kept: resident runs).
        for b in ${KV_BITS:-16 3 8 4}; do
            step kvdeep35_b$b 400 "$B/sluice" bench /tmp/m35 --device cuda --json "$RES/kvdeep35_b$b.json" \
                --kv-bits $b -p ${KV_PROMPTS:-4096,32768,102400,131072} -n 32 --prefill-chunk 4096 --reps 1 ${KV_EXTRA:-}
        done
        ;;
    prefix35)
        # The prefix cache's cost on a long prefill: --prefix-cache default (stores at every chunk) against 0,
        # alternated, f16 KV, at 32K and 128K (PREFIX_PROMPTS).
        for r in $(seq 1 "${PREFIX_ROUNDS:-2}"); do
            for pc in on off; do
                f=()
                [ "$pc" = off ] && f=(--prefix-cache 0)
                step "prefix35_${pc}_r$r" 400 "$B/sluice" bench /tmp/m35 --device cuda --json "$RES/prefix35_${pc}_r$r.json" \
                    --kv-bits 16 -p "${PREFIX_PROMPTS:-32768,131072}" -n 16 --prefill-chunk 4096 --reps 1 "${f[@]}"
            done
        done
        ;;
    llamadeep35)
        # llama.cpp at the same prompts and depths, -fa 1, per cache type (LLAMA_CTK: f16 q8_0).
        LB=$(ls /tmp/llb/bin/llama-bench /tmp/llb/llama-bench 2>/dev/null | head -n 1)
        for ctk in ${LLAMA_CTK:-f16 q8_0}; do
            step llamadeep35_p_$ctk 400 "$LB" -m /tmp/m35.gguf -ngl 99 -fa 1 -ctk $ctk -ctv $ctk \
                -p 32768,102400 -n 0 -r 1 -b 4096 -ub 4096 -o md
            step llamadeep35_d_$ctk 400 "$LB" -m /tmp/m35.gguf -ngl 99 -fa 1 -ctk $ctk -ctv $ctk \
                -p 0 -n 32 -d 4096,32768,131072 -r 1 -b 4096 -ub 4096 -o md
        done
        ;;
    long35)
        # Long prompts: prefill (TTFT) and decode after it at 32K and 64K, per --kv-bits, with
        # --kv-window 0 (the tensor-core prefill attention's case) and, for q8, the default window.
        for p in 32768 65536; do
            for b in 16 8 4 3; do
                bench long35_p${p}_b$b 300 /tmp/m35 --kv-bits $b --kv-window 0 \
                    --prompt-tokens $p --prefill-chunk 4096 --gen-tokens 32 --reps 1 --warmup 0
            done
        done
        bench long35_p32768_b8_w256 300 /tmp/m35 --kv-bits 8 --prompt-tokens 32768 \
            --prefill-chunk 4096 --gen-tokens 32 --reps 1 --warmup 0
        ;;
    prep35)
        # One call's setup for a side-by-side: llama.cpp's build and its GGUF beside sluice's synthetic
        # 35B and the flash attention test and goldens (the GPU is idle while the CPUs build).
        rm -rf /tmp/llama && mkdir -p /tmp/llama && tar xf "$(ls .devcarry/llama/llama.t*z | head -n 1)" -C /tmp/llama
        LLAMA_SRC_READY=1 GPU_RUN_NESTED=1 bash "$0" llamabuild >"$RES/prep_llamabuild.log" 2>&1 &
        GPU_RUN_NESTED=1 bash "$0" gguf35 >"$RES/prep_gguf35.log" 2>&1 &
        step synth35 300 "$B/sluice" synth "$SHARED/qwen3.6-35b-a3b.json" /tmp/m35 --bits 4
        step flash_test 200 "$B/sluice_gpu_tests" --gtest_filter='CudaOps.FlashAttention*:CudaOps.Attention*'
        step goldens_cuda 240 "$B/sluice_tests" --gtest_filter='Goldens/Golden.OnCuda*'
        wait
        step prep_done 10 ls -la /tmp/llb/bin/llama-bench /tmp/m35.gguf
        ;;
    vs35)
        # sluice against llama.cpp on the same machine, alternated: prefill at 4096 and 512 (resident,
        # default KV), then 32K prompts (prefill, and llama.cpp's decode at that depth) at f16 and q8 KV.
        LB=$(ls /tmp/llb/bin/llama-bench /tmp/llb/llama-bench 2>/dev/null | head -n 1)
        for r in 1 2; do
            bench vs35_sluice_p4096_r$r 200 /tmp/m35 --prompt-tokens 4096 --prefill-chunk 4096 --gen-tokens 32 --reps 1
            step vs35_llama_p4096_r$r 200 "$LB" -m /tmp/m35.gguf -ngl 99 -fa 1 -p 4096 -n 32 -r 1 -b 4096 -ub 4096 -o md
        done
        bench vs35_sluice_p512 200 /tmp/m35 --prompt-tokens 512 --prefill-chunk 512 --gen-tokens 32 --reps 2
        step vs35_llama_p512 200 "$LB" -m /tmp/m35.gguf -ngl 99 -fa 1 -p 512 -n 32 -r 2 -b 512 -ub 512 -o md
        for kv in 16:f16 8:q8_0; do
            bench vs35_sluice_p32k_${kv%%:*} 300 /tmp/m35 --kv-bits ${kv%%:*} --kv-window 0 --prompt-tokens 32768 \
                --prefill-chunk 4096 --gen-tokens 32 --reps 1
            step vs35_llama_p32k_${kv#*:} 300 "$LB" -m /tmp/m35.gguf -ngl 99 -fa 1 -ctk ${kv#*:} -ctv ${kv#*:} \
                -p 32768 -n 0 -r 1 -b 4096 -ub 4096 -o md
            step vs35_llama_d32k_${kv#*:} 300 "$LB" -m /tmp/m35.gguf -ngl 99 -fa 1 -ctk ${kv#*:} -ctv ${kv#*:} \
                -p 0 -n 32 -d 32768 -r 1 -b 4096 -ub 4096 -o md
        done
        ;;
    llamabuild)
        if [ -x /tmp/llb/bin/llama-bench ]; then echo "llamabuild: /tmp/llb is built (a warm machine)"; continue; fi
        if [ -z "${LLAMA_SRC_READY:-}" ]; then  # prep35 unpacks it first (gguf35 reads its gguf-py)
            rm -rf /tmp/llama && mkdir -p /tmp/llama && tar xf "$(ls .devcarry/llama/llama.t*z | head -n 1)" -C /tmp/llama
        fi
        # tools/llama_logits joins llama.cpp's tools as llama-sluice-logits (its public API only).
        mkdir -p /tmp/llama/tools/sluice-logits && cp tools/llama_logits/* /tmp/llama/tools/sluice-logits/
        grep -q sluice-logits /tmp/llama/tools/CMakeLists.txt ||
            sed -i 's/    add_subdirectory(tokenize)/    add_subdirectory(tokenize)\n    add_subdirectory(sluice-logits)/' \
                /tmp/llama/tools/CMakeLists.txt
        gen=""
        command -v ninja >/dev/null && gen="-G Ninja"
        # shellcheck disable=SC2086
        step llamabuild 480 bash -c "cmake -S /tmp/llama -B /tmp/llb $gen -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
            -DCMAKE_CUDA_ARCHITECTURES=90 -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF \
            -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF >/dev/null && \
            cmake --build /tmp/llb -j $(nproc) --target llama-bench llama-sluice-logits"
        ;;
    gguf35)
        step gguf35 540 env GGUF_PY=/tmp/llama/gguf-py python3 .devcarry/llama/synth_gguf.py \
            "$SHARED/qwen3.6-35b-a3b.json" /tmp/m35.gguf
        ;;
    gguftests)
        step gguf_goldens_cuda 300 "$B/sluice_tests" --gtest_filter='Gguf/GgufGolden.OnCuda*'
        step gguf_ops_cuda 300 "$B/sluice_gpu_tests" --gtest_filter='CudaOps.Matvec*:CudaOps.Matmul*:CudaOps.Dequantize*:CudaOps.GroupedMoe*:CudaOps.GatedDelta*'
        ;;
    llamalogits)
        LL=$(ls /tmp/llb/bin/llama-sluice-logits /tmp/llb/llama-sluice-logits 2>/dev/null | head -n 1)
        mkdir -p "$RES/logits"
        for f in tests/data/gguf/weights/*.gguf; do
            n=$(basename "$f" .gguf)
            g=${n%.*}
            [ -f "tests/data/goldens/$g/golden.safetensors" ] || continue  # GLM's: make_fixture_logits.sh
            ids=$(python3 -c "
import json, struct, sys
b = open('tests/data/goldens/$g/golden.safetensors', 'rb').read()
n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n]); s, e = h['input_ids']['data_offsets']
print(','.join(str(v) for v in struct.unpack('<%di' % ((e - s) // 4), b[8 + n + s:8 + n + e])))")
            step "ll_${n}_cpu" 60 "$LL" "$f" "$ids" "$RES/logits/$n.llama_cpu.npy" 0
            step "ll_${n}_cuda" 60 "$LL" "$f" "$ids" "$RES/logits/$n.llama_cuda.npy" 99
            step "sl_${n}_cuda" 60 "$B/sluice" logits -m "$f" --ids "$ids" --out "$RES/logits/$n.sluice_cuda.npy" \
                --device cuda --gpu-prefill f32
        done
        ;;
    gguf35vs)
        # The same file in both engines, alternated (page cache dropped before each sluice run by bench()).
        LB=$(ls /tmp/llb/bin/llama-bench /tmp/llb/llama-bench 2>/dev/null | head -n 1)
        for r in 1 2; do
            bench "gguf35_sluice_r$r" 300 /tmp/m35.gguf --prompt-tokens 512 --prefill-chunk 512 --gen-tokens 128 --reps 1
            step "gguf35_llama_r$r" 300 "$LB" -m /tmp/m35.gguf -ngl 99 -fa 1 -p 512 -n 128 -r 1 -b 512 -ub 512 -o md
        done
        bench gguf35_sluice_p4096 300 /tmp/m35.gguf --prompt-tokens 4096 --prefill-chunk 4096 --gen-tokens 16 --reps 1
        step gguf35_llama_p4096 300 "$LB" -m /tmp/m35.gguf -ngl 99 -fa 1 -p 4096 -n 16 -r 1 -b 4096 -ub 4096 -o md
        bench gguf35_sluice_host 300 /tmp/m35.gguf --gpu-memory 4G --memory 60G --prompt-tokens 512 --prefill-chunk 512 \
            --gen-tokens 64 --reps 1
        step gguf35_llama_host 300 "$LB" -m /tmp/m35.gguf -ngl 99 -ncmoe 99 -fa 1 -p 512 -n 64 -r 1 -b 512 -ub 512 \
            -t 16 -o md
        ;;
    famgguf)
        # Cut the layer count to what the disk holds (the GGUF's size is linear in layers past the embeddings).
        FAM_NAME=${FAM_NAME:-fam}
        python3 - "$FAM_CONFIG" /tmp/fam_config.json "$FAM_WRITER" <<'PY' 2>&1 | tee "$RES/${FAM_NAME}_plan.txt"
import json, os, shutil, subprocess, sys
cfg, out, writer = sys.argv[1:4]
c = json.load(open(cfg))
c = c.get("text_config", c) if "num_hidden_layers" not in c else c
def size(layers):  # bytes of tensor data in the writer's --dry-run plan
    t = dict(c, num_hidden_layers=layers)
    if "layer_types" in t: t["layer_types"] = t["layer_types"][:layers]
    json.dump(t, open(out, "w"))
    r = subprocess.run([sys.executable, writer, out, "/tmp/none.gguf", "--dry-run"] + os.environ.get("FAM_ARGS", "").split(),
                       capture_output=True, text=True,
                       env=dict(os.environ, GGUF_PY="/tmp/llama/gguf-py", SYNTH_GGUF_DIR=".devcarry/llama"))
    total = 0
    for line in r.stdout.splitlines():
        w = line.split()
        if len(w) >= 4 and w[-1].isdigit() and w[0].count(".") >= 1:
            total += int(w[-1])
    return total / 1e9
free = shutil.disk_usage("/tmp").free / 1e9 - 4
n = c["num_hidden_layers"]
full, one = size(n), size(1)
per = (full - one) / max(n - 1, 1)
fit = n if full <= free else max(1, int((free - one) // per) + 1)
for k in ("first_k_dense_replace",):
    if k in c: fit = max(fit, c[k] + 1)
print(f"free {free:.1f} GB (less 4); {n} layers {full:.1f} GB, {per:.2f} GB a layer; writing {fit} layers")
size(fit)
PY
        step "${FAM_NAME}_gguf" 580 env GGUF_PY=/tmp/llama/gguf-py SYNTH_GGUF_DIR=.devcarry/llama python3 "$FAM_WRITER" \
            /tmp/fam_config.json /tmp/fam.gguf ${FAM_ARGS:-}
        ls -la /tmp/fam.gguf >>"$RES/${FAM_NAME}_plan.txt" 2>&1
        df -h /tmp >>"$RES/${FAM_NAME}_plan.txt"
        ;;
    prepfam)
        rm -rf /tmp/llama && mkdir -p /tmp/llama && tar xf "$(ls .devcarry/llama/llama.t*z | head -n 1)" -C /tmp/llama
        LLAMA_SRC_READY=1 GPU_RUN_NESTED=1 bash "$0" llamabuild >"$RES/prep_llamabuild.log" 2>&1 &
        GPU_RUN_NESTED=1 bash "$0" famgguf >"$RES/prep_famgguf.log" 2>&1 &
        step gpu_tests 240 "$B/sluice_gpu_tests"
        step goldens_cuda 240 "$B/sluice_tests" --gtest_filter='Goldens/Golden.OnCuda*'
        step gguf_goldens_cuda 300 "$B/sluice_tests" --gtest_filter='Gguf/GgufGolden.OnCuda*'
        wait
        step prep_done 10 ls -la /tmp/llb/bin/llama-bench /tmp/fam.gguf
        ;;
    prepfamq)
        # prepfam with only the op tests GPU_FILTER names and the CUDA goldens GOLDEN_FILTER names (a short call).
        rm -rf /tmp/llama && mkdir -p /tmp/llama && tar xf "$(ls .devcarry/llama/llama.t*z | head -n 1)" -C /tmp/llama
        LLAMA_SRC_READY=1 GPU_RUN_NESTED=1 bash "$0" llamabuild >"$RES/prep_llamabuild.log" 2>&1 &
        GPU_RUN_NESTED=1 bash "$0" famgguf >"$RES/prep_famgguf.log" 2>&1 &
        step gpu_tests 240 "$B/sluice_gpu_tests" --gtest_filter="${GPU_FILTER:-*}"
        step goldens_cuda 240 "$B/sluice_tests" --gtest_filter="Goldens/Golden.OnCuda*${GOLDEN_FILTER:-}"
        wait
        step prep_done 10 ls -la /tmp/llb/bin/llama-bench /tmp/fam.gguf
        ;;
    famvs)
        LB=$(ls /tmp/llb/bin/llama-bench /tmp/llb/llama-bench 2>/dev/null | head -n 1)
        F=${FAM_NAME:-fam}
        for r in 1 2; do
            NODROP=1 bench "${F}_sluice_p512_r$r" 300 /tmp/fam.gguf --prompt-tokens 512 --prefill-chunk 512 \
                --gen-tokens 128 --reps 1
            step "${F}_llama_p512_r$r" 300 "$LB" -m /tmp/fam.gguf -ngl 99 -fa 1 -p 512 -n 128 -r 1 -b 512 -ub 512 -o md
        done
        NODROP=1 bench "${F}_sluice_p4096" 300 /tmp/fam.gguf --prompt-tokens 4096 --prefill-chunk 4096 --gen-tokens 16 \
            --reps 1
        step "${F}_llama_p4096" 300 "$LB" -m /tmp/fam.gguf -ngl 99 -fa 1 -p 4096 -n 16 -r 1 -b 4096 -ub 4096 -o md
        if [ -z "${FAM_NO_HOST:-}" ]; then
            NODROP=1 bench "${F}_sluice_host" 300 /tmp/fam.gguf --gpu-memory "${FAM_HOST_GPU_MEM:-4G}" --memory 100G \
                --prompt-tokens 512 \
                --prefill-chunk 512 --gen-tokens 64 --reps 1 --warmup 1
            step "${F}_llama_host" 300 "$LB" -m /tmp/fam.gguf -ngl 99 -ncmoe 99 -fa 1 -p 512 -n 64 -r 1 -b 512 \
                -ub 512 -t 16 -o md
        fi
        ;;
    famdecab)
        # Resident decode (128 tokens after a 512-token prompt) on /tmp/fam.gguf: this build (c), the build
        # carried in .devcarry/b (bin/sluice only; an A/B of a decode change) and llama.cpp, alternated.
        F=${FAM_NAME:-fam}
        LB=$(ls /tmp/llb/bin/llama-bench /tmp/llb/llama-bench 2>/dev/null | head -n 1)
        mkdir -p /tmp/slb && tar xJf .devcarry/b/carry.tar.xz -C /tmp/slb
        for r in 1 2; do
            NODROP=1 bench "${F}_new_r$r" 300 /tmp/fam.gguf --prompt-tokens 512 --prefill-chunk 512 --gen-tokens 128 \
                --reps 1
            NODROP=1 step "${F}_old_r$r" 300 /tmp/slb/bin/sluice bench /tmp/fam.gguf --device cuda --prompt-tokens 512 \
                --prefill-chunk 512 --gen-tokens 128 --reps 1
            [ -n "$LB" ] && step "${F}_llama_r$r" 300 "$LB" -m /tmp/fam.gguf -ngl 99 -fa 1 -p 512 -n 128 -r 1 -b 512 \
                -ub 512 -o md
        done
        ;;
    famab)
        # The prefill's products A/B on /tmp/fam.gguf, resident: --gpu-prefill int8 (the default) against f32,
        # alternated, 512 and 4096-token prompts, 16 decode tokens after each.
        F=${FAM_NAME:-fam}
        for r in 1 2; do
            for mode in int8 f32; do
                NODROP=1 bench "${F}_${mode}_p512_r$r" 300 /tmp/fam.gguf --gpu-prefill "$mode" --prompt-tokens 512 \
                    --prefill-chunk 512 --gen-tokens 16 --reps 1
            done
        done
        for mode in int8 f32; do
            NODROP=1 bench "${F}_${mode}_p4096" 300 /tmp/fam.gguf --gpu-prefill "$mode" --prompt-tokens 4096 \
                --prefill-chunk 4096 --gen-tokens 16 --reps 1
        done
        ;;
    famprof)
        # FAM_PROF_PROMPT (64) prompt tokens and 3 decode tokens: each kernel's GPU time and DRAM bytes,
        # summed over its launches, with the bandwidth it reached.
        F=${FAM_NAME:-fam}
        step "${F}_ncu" 420 ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum --csv --print-units base \
            --print-summary per-kernel "$B/sluice" bench /tmp/fam.gguf --device cuda \
            --prompt-tokens "${FAM_PROF_PROMPT:-64}" --prefill-chunk "${FAM_PROF_PROMPT:-64}" --gen-tokens 3 \
            --reps 1 --warmup 0
        python3 - "$RES/${F}_ncu.txt" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
head = next((r for r in rows if "Kernel Name" in r), None)
time, dram, calls = {}, {}, {}
for r in rows:
    if head and len(r) == len(head) and r is not head:
        d = dict(zip(head, r))
        try:
            v = float(d["Average"].replace(",", "")) * int(d["Invocations"].replace(",", ""))
        except (KeyError, ValueError):
            continue
        k = d["Kernel Name"][:110]
        metric = d.get("Metric Name", "gpu__time_duration.sum")
        if metric.startswith("gpu__time_duration"):
            time[k] = time.get(k, 0.0) + v
            calls[k] = calls.get(k, 0) + int(d["Invocations"].replace(",", ""))
        elif metric.startswith("dram__bytes_read"):
            dram[k] = dram.get(k, 0.0) + v
s = sum(time.values()) or 1.0
print(f"total {s / 1e6:.2f} ms GPU time, {sum(dram.values()) / 1e9:.2f} GB read from DRAM")
for k, v in sorted(time.items(), key=lambda x: -x[1])[:30]:
    gbs = dram.get(k, 0.0) / v if v else 0.0  # bytes per ns = GB/s
    print(f"{100 * v / s:5.1f}% {v / 1e6:9.2f} ms {calls[k]:6d} calls {dram.get(k, 0.0) / 1e9:7.3f} GB {gbs:7.0f} GB/s  {k}")
PY
        ;;
    llamakv35)
        LB=$(ls /tmp/llb/bin/llama-bench /tmp/llb/llama-bench 2>/dev/null | head -n 1)
        for ctk in f16 q8_0; do
            step llamakv35_$ctk 400 "$LB" -m /tmp/m35.gguf -ngl 99 -fa 1 -ctk $ctk -ctv $ctk -p 4096,32768 -n 64 \
                -d 0 -r 1 -b 4096 -ub 4096 -o md
            step llamakv35_depth_$ctk 400 "$LB" -m /tmp/m35.gguf -ngl 99 -fa 1 -ctk $ctk -ctv $ctk -p 0 -n 64 \
                -d 4096,32768 -r 1 -b 4096 -ub 4096 -o md
        done
        ;;
    synth35) step synth35 300 "$B/sluice" synth "$SHARED/qwen3.6-35b-a3b.json" /tmp/m35 --bits 4 ;;
    synth80) step synth80 400 "$B/sluice" synth "$SHARED/qwen3-next-80b-a3b.hf.json" /tmp/m80 --bits 4 ;;
    rm35) rm -rf /tmp/m35 ;;
    rm80) rm -rf /tmp/m80 ;;
    decode35 | decode80)
        SLUICE_CUDA_TIMING=1 bench "$s"_p512 120 /tmp/m${s#decode} --prompt-tokens 512 --prefill-chunk 512 \
            --gen-tokens 128 --reps 2
        ;;
    useb)
        # The following steps use the binaries carried in .devcarry/b (an A/B variant build).
        mkdir -p /tmp/slb && tar xJf .devcarry/b/carry.tar.xz -C /tmp/slb
        export LD_LIBRARY_PATH=/tmp/slb/lib
        B=/tmp/slb/bin
        TAG=b_
        ;;
    usea)
        # Back to the binaries of .devcarry/c (for an A/B/A order).
        export LD_LIBRARY_PATH=/tmp/sl/lib
        B=/tmp/sl/bin
        TAG=a2_
        ;;
    host35pdl0)
        SLUICE_CUDA_PDL=0 bench host35pdl0 240 /tmp/m35 --gpu-memory 4G --memory 60G --prompt-tokens 512 \
            --prefill-chunk 512 --gen-tokens 64 --reps 2 --warmup 1
        ;;
    sass)
        # The SASS of the decode product kernels (sm_90), to count the inner loop's instructions.
        CUOBJDUMP=$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)
        "$CUOBJDUMP" -sass "$B/sluice" 2>/dev/null | awk '/Function : /{keep = /matvec_multi_kernelILi1ELb0ELb1ELb1E|moe_gate_up_kernelILi1ELb1ELb1E|moe_down_chunks/} keep' |
            xz >"$RES/sass.txt.xz"
        ls -la "$RES/sass.txt.xz"
        ;;
    nopdl35 | nopdl80)
        # Decode without programmatic dependent launch, against decode35 / decode80.
        SLUICE_CUDA_PDL=0 SLUICE_CUDA_TIMING=1 bench "$s"_p512 120 /tmp/m${s#nopdl} --prompt-tokens 512 \
            --prefill-chunk 512 --gen-tokens 128 --reps 2
        ;;
    splits35)
        # Decode with each forced column split of the matvec kernels (and the automatic choice).
        for sp in 1 2 4 8; do
            SLUICE_CUDA_TIMING=1 SLUICE_CUDA_MATVEC_SPLIT=$sp bench split${sp}_35 120 /tmp/m35 --prompt-tokens 64 \
                --gen-tokens 128 --reps 1
        done
        ;;
    resident35 | resident80)
        m=/tmp/m${s#resident}
        bench "$s"_p512 120 "$m" --prompt-tokens 512 --prefill-chunk 512 --gen-tokens 128 --reps 2
        bench "$s"_p4096 120 "$m" --prompt-tokens 4096 --prefill-chunk 4096 --gen-tokens 32 --reps 1
        ;;
    abhost35 | abhost80)
        # A/B of the host tier, alternated A B A B A B in one call (the order and the machine's drift
        # weigh the same on both): .devcarry/c against .devcarry/b, 3 measured reps of 128 tokens each;
        # AB_ROUNDS pairs (default 3).
        m=/tmp/m${s#abhost}
        mkdir -p /tmp/slb && tar xJf .devcarry/b/carry.tar.xz -C /tmp/slb
        for k in $(seq 1 "${AB_ROUNDS:-3}"); do
            for v in a b; do
                dir=/tmp/sl
                [ "$v" = b ] && dir=/tmp/slb
                LD_LIBRARY_PATH=$dir/lib B=$dir/bin TAG=ab${k}${v}_ bench "host${s#abhost}" 300 "$m" \
                    --gpu-memory 4G --memory 60G --prompt-tokens 512 --prefill-chunk 512 --gen-tokens 128 \
                    --reps 3 --warmup 1
            done
        done
        ;;
    goldens)
        # Regenerates the goldens named in GOLDENS_ONLY (all when empty) with transformers into
        # tests/data/goldens of this tree (the test binaries read it), and every golden's config as
        # save_pretrained writes it; both come back in results.tgz.
        only=()
        for g in ${GOLDENS_ONLY:-}; do only+=(--only "$g"); done
        step make_goldens 600 python3 tools/make_goldens.py --out tests/data/goldens "${only[@]}" \
            --save-configs "$RES/configs"
        mkdir -p "$RES/goldens"
        cp tests/data/goldens/index.json "$RES/goldens/"
        for g in ${GOLDENS_ONLY:-}; do cp -r "tests/data/goldens/$g" "$RES/goldens/"; done
        tar czf "$OUT/results.tgz" -C "$RES" .
        ;;
    trainmtp)
        # Trains only the head (<= 240 s on one H100), exports it and packs the folder before evaluating, so a
        # step cut short still returns the model.
        rm -rf /tmp/tiny-mtp
        mkdir -p "$OUT/tinymtp"
        step trainmtp 540 python3 tools/train_tiny.py --mtp-from models/tiny-next --out /tmp/tiny-mtp \
            --pack-dir "$OUT/tinymtp"
        cp /tmp/tiny-mtp/mtp_stats.json /tmp/tiny-mtp/mtp_training_log.txt "$RES/" 2>/dev/null
        tar czf "$OUT/results.tgz" -C "$RES" .
        ;;
    checkgoldens)
        # The goldens re-derived by tools/check_goldens.py's numpy forward written from the spec.
        step check_goldens 300 python3 tools/check_goldens.py
        ;;
    cpugoldens)
        step goldens_cpu 300 "$B/sluice_tests" --gtest_filter='Goldens/*'
        ;;
    host35 | host80)
        m=/tmp/m${s#host}
        bench "$s" 240 "$m" --gpu-memory 4G --memory 60G --prompt-tokens 512 --prefill-chunk 512 \
            --gen-tokens 64 --reps 2 --warmup 1
        ;;
    host35np | host80np)
        m=/tmp/m${s:4:2}
        bench "$s" 180 "$m" --gpu-memory 4G --memory 60G --prompt-tokens 512 --prefill-chunk 512 \
            --gen-tokens 64 --reps 2 --warmup 1 --no-prefetch
        ;;
    batch35 | batch80)
        m=/tmp/m${s#batch}
        for n in 4 16; do
            bench "$s"_n$n 180 "$m" --sequences $n --prompt-tokens 128 --gen-tokens 32 --reps 2 --warmup 1
        done
        bench "$s"_host_n8 240 "$m" --gpu-memory 4G --memory 60G --sequences 8 --prompt-tokens 128 \
            --gen-tokens 16 --reps 2 --warmup 1
        ;;
    ncuchunk35)  # where a small prefill forward's GPU time goes: every kernel of one 4-token chunk (ncu)
        step ncuchunk35 300 ncu --metrics gpu__time_duration.sum --csv --launch-count 2500 "$B/sluice" bench /tmp/m35 \
            --device cuda --prompt-tokens 8 --prefill-chunk 4 --gen-tokens 1 --reps 1
        python3 - "$RES/ncuchunk35.txt" >"$RES/ncuchunk35_sum.txt" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
head = rows[0]; ki = head.index("Kernel Name"); vi = head.index("Metric Value"); ui = head.index("Metric Unit")
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows[1:]:
    v = float(r[vi].replace(",", "")); v = v / 1e3 if r[ui] == "nsecond" else (v if r[ui] == "usecond" else v * 1e3)
    name = r[ki].split("(")[0].split("<")[0]; tot[name] += v; cnt[name] += 1
for name, us in sorted(tot.items(), key=lambda x: -x[1])[:30]:
    print(f"{us/1e3:10.2f} ms {cnt[name]:6d} launches  {name}")
print(f"total {sum(tot.values())/1e3:.2f} ms over {sum(cnt.values())} launches")
PY
        cat "$RES/ncuchunk35_sum.txt"
        xz -f "$RES/ncuchunk35.txt"
        ;;
    chunks35)  # the prefill forms' cost for small batches: one sequence in chunks of 2, 4, 16 tokens
        for c in 2 4 16; do
            bench chunks35_c$c 120 /tmp/m35 --prompt-tokens 64 --prefill-chunk $c --gen-tokens 4 --reps 2
        done
        ;;
    synthds)
        python3 - "$SHARED/deepseek-v3-671b.json" /tmp/ds_trunc.json "${DS_LAYERS:-4}" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["num_hidden_layers"] = int(sys.argv[3])
c["first_k_dense_replace"] = 1
c["num_nextn_predict_layers"] = 0
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
        rm -rf /tmp/mds
        step synthds 400 "$B/sluice" synth /tmp/ds_trunc.json /tmp/mds --bits 4
        step infods 60 "$B/sluice" info /tmp/mds --no-measure
        ;;
    residentds)
        bench residentds_p512 300 /tmp/mds --prompt-tokens 512 --prefill-chunk 512 --gen-tokens 64 --reps 2 --kv-bits 16
        bench residentds_p3584 300 /tmp/mds --prompt-tokens 3584 --prefill-chunk 3584 --gen-tokens 16 --reps 1 --kv-bits 16
        ;;
    hostds)
        bench hostds 300 /tmp/mds --gpu-memory 8G --memory 60G --prompt-tokens 512 --prefill-chunk 512 \
            --gen-tokens 64 --reps 2 --warmup 1 --kv-bits 16
        ;;
    diskds)
        bench diskds 300 /tmp/mds --gpu-memory 8G --memory 6G --prompt-tokens 64 --gen-tokens 32 --reps 2 \
            --warmup 1 --kv-bits 16
        ;;
    cpuds)
        sync
        echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
        step cpuds 400 "$B/sluice" bench /tmp/mds --device cpu --memory 6G --prompt-tokens 64 --gen-tokens 16 \
            --reps 1 --warmup 1 --json "$RES/cpuds.json"
        ;;
    disk35 | disk80)
        m=/tmp/m${s#disk}
        bench "$s" 240 "$m" --gpu-memory 4G --memory 8G --prompt-tokens 64 --gen-tokens 32 --reps 2 --warmup 1
        ;;
    spectiny)  # speculative decoding on the GPU: greedy output with a draft equals plain, acceptance, curve
        "$B/sluice" pack models/tiny-next /tmp/tn8 >"$RES/spectiny_pack.txt" 2>&1
        for k in off 1 4 8 auto; do
            f=""
            [ "$k" != off ] && f="--draft /tmp/tn8 --spec-tokens $k"
            # shellcheck disable=SC2086
            timeout 120 "$B/sluice" generate models/tiny-next --device cuda -p "def quicksort(xs):" -n 256 \
                --temperature 0 $f --stats-json "$RES/spectiny_$k.json" >"$RES/spectiny_$k.out" 2>"$RES/spectiny_$k.txt"
            tail -n 3 "$RES/spectiny_$k.txt"
            if [ "$k" != off ]; then
                if cmp -s "$RES/spectiny_off.out" "$RES/spectiny_$k.out"; then r=same; else r=DIFFERENT; fi
                echo "k=$k: $r text as plain" | tee -a "$RES/spectiny_cmp.txt"
            fi
        done
        bench curvetiny 120 models/tiny-next --verify-curve 8 --prompt-tokens 64 --reps 5 --warmup 1
        ;;
    mtp | mtptests | mtpdecode)  # the MTP head on the GPU: its goldens, greedy identity (mtptests), and the
        # default model's decode with it (mtpdecode; after useb, .devcarry/b's build: files b_mtptiny_*)
        if [ "$s" != mtpdecode ]; then
            step mtp_tests 300 "$B/sluice_tests" \
                --gtest_filter='Goldens/Golden.OnCudaMtp*:Speculative.MtpOnCuda*:Goldens/Golden.OnCudaPrefill*mtp*'
        fi
        [ "$s" = mtptests ] && continue
        # Plain and MTP drafting alternated over MTP_ROUNDS rounds (3), 256 greedy tokens each.
        for r in $(seq 1 "${MTP_ROUNDS:-3}"); do
            for k in off 1 2 3 4 auto; do
                f=""
                [ "$k" != off ] && f="--spec mtp --spec-tokens $k"
                # shellcheck disable=SC2086
                timeout 120 "$B/sluice" generate models/tiny-next --device cuda -p "def quicksort(xs):" -n 256 \
                    --temperature 0 $f --stats-json "$RES/${TAG:-}mtptiny_${k}_$r.json" \
                    >"$RES/${TAG:-}mtptiny_${k}_$r.out" 2>"$RES/${TAG:-}mtptiny_${k}_$r.txt"
                tail -n 2 "$RES/${TAG:-}mtptiny_${k}_$r.txt"
                if [ "$k" != off ]; then
                    if cmp -s "$RES/${TAG:-}mtptiny_off_$r.out" "$RES/${TAG:-}mtptiny_${k}_$r.out"; then
                        c=same
                    else
                        c=DIFFERENT
                    fi
                    echo "round $r k=$k: $c text as plain" | tee -a "$RES/${TAG:-}mtptiny_cmp.txt"
                fi
            done
        done
        tar czf "$OUT/results.tgz.$$" -C "$RES" . && mv -f "$OUT/results.tgz.$$" "$OUT/results.tgz"
        ;;
    eptests)
        CUDA_MODULE_LOADING=EAGER step eptests 560 "$B/sluice_gpu_tests" \
            --gtest_filter='CudaCollective.*:CudaExpertParallel*'
        ;;
    ep35 | ep80 | ep397)
        m=/tmp/m${s#ep}
        for k in $(seq 1 "${EP_ROUNDS:-2}"); do
            for dev in cuda "${EP_DEVICES:-cuda:0,cuda:0}"; do
                name=${s}_$(echo "$dev" | tr -c 'a-z0-9\n' _)_r$k
                step "${name}_p512" 300 "$B/sluice" bench "$m" --device "$dev" --prompt-tokens 512 \
                    --prefill-chunk 512 --gen-tokens 128 --reps 2 --warmup 1 --json "$RES/${TAG:-}${name}_p512.json"
                step "${name}_p4096" 300 "$B/sluice" bench "$m" --device "$dev" --prompt-tokens 4096 \
                    --prefill-chunk 4096 --gen-tokens 16 --reps 1 --json "$RES/${TAG:-}${name}_p4096.json"
            done
        done
        ;;
    epvs35)
        LB=$(ls /tmp/llb/bin/llama-bench /tmp/llb/llama-bench 2>/dev/null | head -n 1)
        for k in $(seq 1 "${EP_ROUNDS:-2}"); do
            for dev in "${EP_DEVICES:-cuda:0,cuda:1}" cuda; do
                name=epvs35_sluice_$(echo "$dev" | tr -c 'a-z0-9\n' _)_r$k
                step "${name}_p512" 300 "$B/sluice" bench /tmp/m35.gguf --device "$dev" --prompt-tokens 512 \
                    --prefill-chunk 512 --gen-tokens 128 --reps 1 --json "$RES/${TAG:-}${name}_p512.json"
                step "${name}_p4096" 300 "$B/sluice" bench /tmp/m35.gguf --device "$dev" --prompt-tokens 4096 \
                    --prefill-chunk 4096 --gen-tokens 16 --reps 1 --json "$RES/${TAG:-}${name}_p4096.json"
            done
            for p in 512 4096; do  # llama.cpp's batch = the prompt (its fastest prefill, as gguf35vs runs it)
                step "epvs35_llama_layer_p${p}_r$k" 300 "$LB" -m /tmp/m35.gguf -ngl 99 -sm layer -fa 1 -p $p -n 128 \
                    -r 1 -b $p -ub $p -o md
                step "epvs35_llama_one_p${p}_r$k" 300 env CUDA_VISIBLE_DEVICES=0 "$LB" -m /tmp/m35.gguf -ngl 99 \
                    -sm none -fa 1 -p $p -n 128 -r 1 -b $p -ub $p -o md
            done
        done
        ;;
    synth397)
        python3 - "$SHARED/qwen3.5-397b-a17b.json" /tmp/q397_trunc.json "${L397_LAYERS:-12}" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
t = c.get("text_config", c)
n = int(sys.argv[3])
t["num_hidden_layers"] = n
if "layer_types" in t:
    t["layer_types"] = t["layer_types"][:n]
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
        rm -rf /tmp/m397
        step synth397 500 "$B/sluice" synth /tmp/q397_trunc.json /tmp/m397 --bits 4
        step info397 60 "$B/sluice" info /tmp/m397 --no-measure
        ;;
    clients35 | clients80)  # continuous batching: 1, 4 and 16 concurrent greedy clients, resident
        m=/tmp/m${s#clients}
        for c in ${CLIENTS:-1 4 16}; do
            bench "${s}_c$c" 240 "$m" --clients "$c" --prompt-tokens 128 --gen-tokens 64 --reps 2 --warmup 1
        done
        ;;
    clientshost35 | clientshost80)  # the same with the experts in host RAM (--gpu-memory 4G)
        m=/tmp/m${s#clientshost}
        for c in ${CLIENTS:-1 4 16}; do
            bench "${s}_c$c" 300 "$m" --gpu-memory 4G --memory 60G --clients "$c" --prompt-tokens 128 \
                --gen-tokens 64 --reps 2 --warmup 1
        done
        ;;
    vcurve35 | vcurve80)  # speculative step cost, resident only (after useb: .devcarry/b's build)
        m=/tmp/m${s#vcurve}
        bench "$s" 180 "$m" --verify-curve 8 --prompt-tokens 64 --reps 5 --warmup 1
        ;;
    sanitize_rows)  # memcheck and racecheck of the multi-row decode products' tests
        step memcheck_rows 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$B/sluice_gpu_tests" \
            --gtest_filter='CudaOps.*Rows*:CudaOps.MoeDecodeOverTokens*'
        step racecheck_rows 300 compute-sanitizer --tool racecheck --error-exitcode 3 "$B/sluice_gpu_tests" \
            --gtest_filter='CudaOps.MatvecMultiRows*:CudaOps.MoeDecodeOverTokens*'
        ;;
    curve35 | curve80)  # speculative step cost: resident, experts in host RAM, CPU from disk
        m=/tmp/m${s#curve}
        bench "$s" 180 "$m" --verify-curve 8 --prompt-tokens 64 --reps 5 --warmup 1
        bench "${s}host" 240 "$m" --gpu-memory 4G --verify-curve 8 --prompt-tokens 64 --reps 3 --warmup 1
        ;;
    curvecpu35 | curvecpu80)
        m=/tmp/m${s#curvecpu}
        sync
        echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
        step "$s" 300 "$B/sluice" bench "$m" --memory 3G --verify-curve 8 --prompt-tokens 32 --reps 2 \
            --warmup 1 --json "$RES/$s.json"
        ;;
    prefill35 | prefill80)
        # Prefill A/B in one call: the int8 tensor-core products (--gpu-prefill int8, the default)
        # against 3xTF32 (f32), alternated int8 f32 int8 f32 at 4096 and 512-token prompts, resident;
        # the page cache stays warm (the model is read once).
        m=/tmp/m${s#prefill}
        for k in $(seq 1 "${PREFILL_ROUNDS:-2}"); do
            for mode in int8 f32; do
                for p in 4096 512; do
                    step "${s}_${mode}_p${p}_r$k" 200 "$B/sluice" bench "$m" --device cuda --gpu-prefill $mode \
                        --prompt-tokens $p --prefill-chunk $p --gen-tokens 32 --reps 2 \
                        --json "$RES/${TAG:-}${s}_${mode}_p${p}_r$k.json"
                done
            done
        done
        ;;
    hostprefill35 | hostprefill80)
        # The host tier's prefill (--gpu-memory 4G, experts in host RAM), int8 against f32.
        m=/tmp/m${s#hostprefill}
        for mode in int8 f32; do
            step "${s}_${mode}" 300 "$B/sluice" bench "$m" --device cuda --gpu-memory 4G --memory 60G \
                --gpu-prefill $mode --prompt-tokens 4096 --prefill-chunk 4096 --gen-tokens 32 --reps 2 --warmup 1 \
                --json "$RES/${TAG:-}${s}_${mode}.json"
        done
        ;;
    prefillprof35)
        # Where a 4096-token prefill's GPU time goes, per kernel (nsys when installed, else ncu over
        # one prefill's launches).
        NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -n 1)
        for mode in ${PROF_MODES:-int8 f32}; do
            if [ -n "$NSYS" ]; then
                step "prefillprof35_$mode" 240 "$NSYS" profile --trace=cuda -o "$RES/pp35_$mode" --force-overwrite true \
                    "$B/sluice" bench /tmp/m35 --device cuda --gpu-prefill $mode --prompt-tokens 4096 \
                    --prefill-chunk 4096 --gen-tokens 1 --reps 1
                step "prefillprof35_${mode}_sum" 120 "$NSYS" stats --report cuda_gpu_kern_sum --format csv \
                    -o "$RES/pp35_$mode" "$RES/pp35_$mode.nsys-rep"
                rm -f "$RES"/pp35_"$mode".nsys-rep "$RES"/pp35_"$mode".sqlite
                head -n 25 "$RES"/pp35_"$mode"*kern_sum*.csv
            else
                step "prefillprof35_$mode" 300 ncu --metrics gpu__time_duration.sum --csv --print-summary per-kernel \
                    "$B/sluice" bench /tmp/m35 --device cuda --gpu-prefill $mode --prompt-tokens 4096 \
                    --prefill-chunk 4096 --gen-tokens 1 --reps 1 --warmup 0
            fi
        done
        ;;
    *) echo "unknown step $s" ;;
    esac
done
tar czf "$OUT/results.tgz.$$" -C "$RES" . && mv -f "$OUT/results.tgz.$$" "$OUT/results.tgz"
