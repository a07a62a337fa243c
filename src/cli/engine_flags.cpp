#include "cli/engine_flags.h"

#include "cli/args.h"
#include "cli/command.h"

namespace sluice::cli {

void EngineFlags::add_to(CLI::App* cmd) {
    cmd->add_option("--memory", memory,
                    "Memory budget of the whole process, e.g. 3G (default: derived from what is available)");
    cmd->add_option(
        "--memory-floor", memory_floor,
        "The least the expert cache keeps when other programs need the memory, e.g. 1G (default: one "
        "layer's routed experts); --memory is then the most it grows back to");
    cmd->add_flag("--fixed-memory", fixed_memory,
                  "Keep the expert cache at its planned size under memory pressure (default: it shrinks, "
                  "handing pages back, and grows back when the pressure is gone)");
    cmd->add_option("-t,--threads", threads, "Compute threads (0 = all cores)")->capture_default_str();
    cmd->add_option("--io-threads", io_threads, "Expert reads in flight (queue depth)")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    cmd->add_flag("--no-prefetch", no_prefetch, "Disable next-layer expert prefetch");
    cmd->add_flag("--no-preload", no_preload,
                  "When every expert fits --memory, do not read them all in at start (they are then read "
                  "at their first use)");
    // A flag function, not add_flag on the optional: CLI11 (2.3) writes false into an optional<bool>
    // flag that was not given, which silently turned the first-read checks off for every command.
    cmd->add_flag_function(
        "--verify-reads,!--no-verify-reads", [this](std::int64_t count) { verify_reads = count > 0; },
        "Check every streamed expert record read against its xxh3 in layout.json, not only each "
        "record's first read (the default; a corrupt record is an error naming the file, layer and "
        "expert). --no-verify-reads checks none");
    cmd->add_option(
           "--stream-dense", stream_dense,
           "Read the dense core (attention, routers, shared experts) layer by layer from the model's "
           "files instead of holding it: auto (when it does not fit --memory beside two layers' "
           "experts), on or off")
        ->capture_default_str()
        ->check(CLI::IsMember({"auto", "on", "off"}));
    cmd->add_option("--cache-policy", cache_policy, "Expert cache policy: lfu or lru")
        ->capture_default_str()
        ->check(CLI::IsMember({"lfu", "lru"}));
    cmd->add_option("--kv-bits", kv_bits,
                    "Attention KV cache element: 32 (f32, exact), 16 (f16), 8 (q8), 4 (q4) or 3 (q3, rotated "
                    "codebook); attention runs on the compressed cache")
        ->capture_default_str();
    cmd->add_option("--kv-window", kv_window,
                    "With --kv-bits 8, 4 or 3: the most recent N positions are also kept in f16 and read so "
                    "(0: none)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--cpu-activations", cpu_activations,
                    "How quantized weights (MLX 4/8-bit, GGUF's block formats) take their activations on the "
                    "CPU: int8 (quantised per 32, integer dot products, as llama.cpp) or f32 (exact: the "
                    "reference's arithmetic)")
        ->capture_default_str()
        ->check(CLI::IsMember({"int8", "f32"}));
    cmd->add_option("--gpu-prefill", gpu_prefill,
                    "Prompt batches on CUDA: int8 (tensor cores: 4/8-bit weights times activations quantised "
                    "per 32 as --cpu-activations int8, attention in f16) or f32 (3xTF32 products, f32 "
                    "attention: the reference's accuracy)")
        ->capture_default_str()
        ->check(CLI::IsMember({"int8", "f32"}));
    cmd->add_option("--prefix-cache", prefix_cache,
                    "Memory for the prefix cache shared by every conversation, e.g. 512M (0: off; default: a "
                    "sixteenth of --memory, at most 1G): a prompt that starts like an earlier one restores "
                    "that prefix's state instead of computing it");
    cmd->add_option(
           "--device,--devices", device,
           "Where the model runs: cpu, cuda or cuda:N; several GPUs (cuda:0,cuda:1) share the routed "
           "experts (expert parallelism over NCCL), each holding the dense core")
        ->capture_default_str();
    cmd->add_option(
        "--gpu-memory", gpu_memory,
        "GPU memory budget with --device cuda (per GPU), e.g. 20G (default: 90% of what is free); routed "
        "experts that do not fit are cached in GPU memory and streamed from the host");
    cmd->add_option("--gpu-expert-cache", gpu_expert_cache,
                    "Cap the GPU expert cache, e.g. 2G (tiers the experts even when they would fit)");
}

void EngineFlags::apply(EngineOptions& options) const {
    if (!memory.empty()) options.memory_bytes = check(parse_size(memory));
    if (!memory_floor.empty()) options.memory_floor_bytes = check(parse_size(memory_floor));
    options.adapt_to_memory_pressure = !fixed_memory;
    options.threads = threads;
    options.io_threads = io_threads;
    options.prefetch = !no_prefetch;
    options.preload_experts = !no_preload;
    if (verify_reads) {
        options.verify_reads = *verify_reads;
        options.verify_first_reads = *verify_reads;
    }
    options.cache_policy = check(parse_cache_policy(cache_policy));  // IsMember above: always one of them
    using DenseStreaming = EngineOptions::DenseStreaming;
    options.dense_streaming = stream_dense == "on"    ? DenseStreaming::kOn
                              : stream_dense == "off" ? DenseStreaming::kOff
                                                      : DenseStreaming::kAuto;
    options.cuda_diagnostics = cuda_diagnostics_from_env();
    options.device = device;
    options.kv_bits = kv_bits;
    options.kv_window = kv_window;
    options.cpu_int8_activations = cpu_activations == "int8";
    options.gpu_int8_prefill = gpu_prefill == "int8";
    if (!prefix_cache.empty()) options.prefix_cache_bytes = check(parse_size(prefix_cache));
    if (!gpu_memory.empty()) options.gpu_memory_bytes = check(parse_size(gpu_memory));
    if (!gpu_expert_cache.empty()) options.gpu_expert_cache_bytes = check(parse_size(gpu_expert_cache));
}

CLI::Option* add_ctx_size(CLI::App* cmd, int64_t* ctx, const std::string& what) {
    return cmd
        ->add_option("-c,--ctx-size", *ctx,
                     what + " (0: the model's context up to 8192, or the most --memory holds)")
        ->capture_default_str()
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 24));
}

}  // namespace sluice::cli
