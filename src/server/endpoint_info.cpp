// GET /v1/models, GET /health and GET /metrics: what is served and how it is doing.
// /health is JSON for people and the web page (memory plan, expert-cache counters, slots);
// /metrics is the Prometheus text format (version 0.0.4) for scrapers.
#include <cctype>

#include "server/endpoints.h"
#include "server/http_front.h"
#include "server/transport.h"
#include "sluice/version.h"

namespace sluice::server {

using json = nlohmann::json;

bool model_matches(const ServerContext& ctx, std::string_view model) {
    if (model.empty() || model == ctx.options.model_id) return true;
    // Ollama's clients name a model with a tag: "name:latest".
    constexpr std::string_view kLatest = ":latest";
    return model.size() > kLatest.size() && model.substr(model.size() - kLatest.size()) == kLatest &&
           model.substr(0, model.size() - kLatest.size()) == ctx.options.model_id;
}

std::optional<ApiError> check_model(const ServerContext& ctx, const std::string& model) {
    if (!ctx.options.strict_model_name || model_matches(ctx, model)) return std::nullopt;
    return ApiError{
        404, "The model '" + model + "' does not exist; this server serves '" + ctx.options.model_id + "'",
        "invalid_request_error", "model", "model_not_found"};
}

namespace {
json model_object(const ServerContext& ctx) {
    const ModelInfo& info = ctx.engine->info();
    return {{"id", ctx.options.model_id},
            {"object", "model"},
            {"created", ctx.created_unix_s},
            {"owned_by", "sluice"},
            {"meta",
             {{"family", info.family},
              {"quantization", info.quantization},
              {"context_length", ctx.engine->options().context_tokens},
              {"vocab_size", info.vocab_size},
              {"n_experts", info.n_experts},
              {"experts_per_token", info.experts_per_token}}}};
}

// "%2F" and friends in a path segment (a Hugging Face id "org/name" may arrive encoded).
std::string percent_decode(std::string_view s) {
    std::string out;
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
            std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
            out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
            i += 2;
        } else {
            out += s[i];
        }
    }
    return out;
}
}  // namespace

void handle_models(ServerContext& ctx, const HttpRequest&, HttpResponse& res) {
    send_json(res, {{"object", "list"}, {"data", json::array({model_object(ctx)})}});
}

void handle_model(ServerContext& ctx, const HttpRequest& req, HttpResponse& res) {
    constexpr std::string_view kPrefix = "/v1/models/";
    const std::string id = percent_decode(std::string_view(req.path).substr(kPrefix.size()));
    if (!model_matches(ctx, id))
        return send_error(res, ApiError{404,
                                        "The model '" + id + "' does not exist; this server serves '" +
                                            ctx.options.model_id + "'",
                                        "invalid_request_error", "model", "model_not_found"});
    send_json(res, model_object(ctx));
}

void handle_props(ServerContext& ctx, const HttpRequest&, HttpResponse& res) {
    const SamplingParams s = ctx.engine->default_sampling();
    send_json(res, {{"default_generation_settings",
                     {{"n_ctx", ctx.engine->options().context_tokens},
                      {"params",
                       {{"temperature", s.temperature},
                        {"top_k", s.top_k},
                        {"top_p", s.top_p},
                        {"min_p", s.min_p},
                        {"repeat_penalty", s.repetition_penalty},
                        {"presence_penalty", s.presence_penalty},
                        {"frequency_penalty", s.frequency_penalty}}}}},
                    {"total_slots", ctx.pool->size()},
                    {"model_alias", ctx.options.model_id},
                    {"model_path", ctx.engine->options().model_dir},
                    {"chat_template", ctx.chat_template ? ctx.chat_template->source() : std::string()},
                    {"modalities", {{"vision", false}, {"audio", false}}},
                    {"build_info", version_line()}});
}

void handle_slots(ServerContext& ctx, const HttpRequest&, HttpResponse& res) {
    json slots = json::array();
    const auto info = ctx.pool->slot_info();
    for (size_t i = 0; i < info.size(); ++i)
        slots.push_back({{"id", i},
                         {"n_ctx", ctx.engine->options().context_tokens},
                         {"is_processing", info[i].busy},
                         {"n_past", info[i].tokens},
                         {"kv_bits", info[i].kv_bits}});
    send_json(res, slots);
}

namespace {

// The expert cache's size under memory pressure (EngineOptions::adapt_to_memory_pressure).
json memory_pressure_json(const MemoryPressureStatus& p) {
    return {{"adaptive", p.adaptive},
            {"source", p.source},
            {"ceiling_bytes", p.ceiling_bytes},
            {"floor_bytes", p.floor_bytes},
            {"budget_bytes", p.budget_bytes},
            {"cache_bytes", p.cache_bytes},
            {"bytes_returned", p.bytes_returned},
            {"pressure_events", p.pressure_events},
            {"grows", p.grows},
            {"available_bytes", p.available_bytes}};
}

// The prefix cache shared by the pooled sessions (EngineOptions::prefix_cache_bytes).
json prefix_cache_json(const PrefixCacheStats& p) {
    return {{"enabled", p.budget_bytes > 0},
            {"budget_bytes", p.budget_bytes},
            {"bytes", p.bytes},
            {"blocks", p.blocks},
            {"block_tokens", p.block_tokens},
            {"lookups", p.lookups},
            {"hits", p.hits},
            {"misses", p.misses},
            {"hit_rate", p.hit_rate()},
            {"hit_tokens", p.hit_tokens},
            {"inserted_blocks", p.inserted_blocks},
            {"evictions", p.evictions},
            {"skipped_blocks", p.skipped_blocks}};
}

}  // namespace

void handle_health(ServerContext& ctx, const HttpRequest&, HttpResponse& res) {
    const MemoryPlan& plan = ctx.engine->memory_plan();
    const ExpertCacheStats cache = ctx.engine->expert_cache_stats();
    const ModelInfo& info = ctx.engine->info();
    json stats;
    {
        std::lock_guard lock(ctx.metrics.mutex);
        stats = {{"last_prefill_tok_s", ctx.metrics.last_prefill_tok_s},
                 {"last_decode_tok_s", ctx.metrics.last_decode_tok_s}};
    }
    stats["requests_total"] = ctx.metrics.requests_total.load();
    stats["generated_tokens_total"] = ctx.metrics.generated_tokens_total.load();
    if (ctx.draft) {
        const uint64_t drafted = ctx.metrics.draft_tokens_total.load();
        stats["speculative"] = {
            {"draft_tokens_total", drafted},
            {"accepted_tokens_total", ctx.metrics.accepted_tokens_total.load()},
            {"acceptance_rate", drafted ? static_cast<double>(ctx.metrics.accepted_tokens_total.load()) /
                                              static_cast<double>(drafted)
                                        : 0.0}};
    }
    send_json(
        res,
        {{"status", "ok"},
         {"model", ctx.options.model_id},
         {"family", info.family},
         {"quantization", info.quantization},
         {"context_length", ctx.engine->options().context_tokens},
         {"memory_plan",
          {{"streaming", plan.streaming},
           {"budget_bytes", plan.budget_bytes},
           {"dense_bytes", plan.dense_bytes},
           {"state_bytes", plan.state_bytes},
           {"kv_type", plan.kv_type},
           {"kv_window", plan.kv_window},
           {"kv_bytes_per_token", plan.kv_bytes_per_token},
           {"scratch_bytes", plan.scratch_bytes},
           {"cache_bytes", plan.cache_bytes},
           {"cache_slots", plan.cache_slots},
           {"slot_bytes", plan.slot_bytes},
           {"prefix_cache_bytes", plan.prefix_cache_bytes},
           {"description", plan.describe()}}},
         {"expert_cache",
          {{"hits", cache.hits},
           {"misses", cache.misses},
           {"hit_rate", cache.hit_rate()},
           {"bytes_read", cache.bytes_read},
           {"reads", cache.reads},
           {"read_gb_s", cache.read_gb_s()},
           {"evictions", cache.evictions}}},
         {"memory_pressure", memory_pressure_json(ctx.engine->memory_pressure())},
         {"prefix_cache", prefix_cache_json(ctx.engine->prefix_cache_stats())},
         {"slots",
          {{"total", ctx.pool->size()}, {"active", ctx.pool->active()}, {"queued", ctx.pool->queue_depth()}}},
         {"stats", stats}});
}

namespace {
// The prefix cache's counters (prefix_cache_json above, in Prometheus' names).
template <typename Metric>
void prefix_cache_metrics(const PrefixCacheStats& p, const Metric& metric) {
    metric("sluice_prefix_cache_lookups_total", "counter",
           "Prompts that looked for a prefix computed by another session or request",
           static_cast<double>(p.lookups));
    metric("sluice_prefix_cache_hits_total", "counter", "Lookups that restored a cached prefix",
           static_cast<double>(p.hits));
    metric("sluice_prefix_cache_misses_total", "counter", "Lookups that found no longer cached prefix",
           static_cast<double>(p.misses));
    metric("sluice_prefix_cache_hit_tokens_total", "counter",
           "Prompt tokens restored from the prefix cache instead of computed",
           static_cast<double>(p.hit_tokens));
    metric("sluice_prefix_cache_bytes", "gauge", "Memory the prefix cache holds",
           static_cast<double>(p.bytes));
    metric("sluice_prefix_cache_budget_bytes", "gauge", "The prefix cache's budget (--prefix-cache; 0: off)",
           static_cast<double>(p.budget_bytes));
    metric("sluice_prefix_cache_blocks", "gauge", "Blocks of tokens the prefix cache holds",
           static_cast<double>(p.blocks));
    metric("sluice_prefix_cache_evictions_total", "counter", "Prefix-cache blocks dropped for room",
           static_cast<double>(p.evictions));
    metric("sluice_prefix_cache_skipped_blocks_total", "counter",
           "Prompt blocks not stored: the prompt was longer than the prefix cache holds",
           static_cast<double>(p.skipped_blocks));
}
}  // namespace

void handle_metrics(ServerContext& ctx, const HttpRequest&, HttpResponse& res) {
    std::string out;
    auto metric = [&](const char* name, const char* type, const char* help, double value) {
        out +=
            std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " ";
        char buf[64];
        std::snprintf(buf, sizeof buf, "%.17g", value);
        out += buf;
        out += "\n";
    };
    const Metrics& m = ctx.metrics;
    const ExpertCacheStats cache = ctx.engine->expert_cache_stats();
    metric("sluice_requests_total", "counter", "HTTP requests received",
           static_cast<double>(m.requests_total.load()));
    metric("sluice_request_errors_total", "counter", "HTTP requests answered with a 4xx/5xx status",
           static_cast<double>(m.request_errors_total.load()));
    metric("sluice_generations_total", "counter", "Completed generations",
           static_cast<double>(m.generations_total.load()));
    metric("sluice_generation_errors_total", "counter",
           "Generations the engine failed (answered 500, or an error event in a stream)",
           static_cast<double>(m.generation_errors_total.load()));
    metric("sluice_prompt_tokens_total", "counter", "Prompt tokens of completed generations",
           static_cast<double>(m.prompt_tokens_total.load()));
    metric("sluice_prefilled_tokens_total", "counter",
           "Prompt tokens computed (not reused from a session or the prefix cache)",
           static_cast<double>(m.prefilled_tokens_total.load()));
    metric("sluice_generated_tokens_total", "counter", "Generated tokens",
           static_cast<double>(m.generated_tokens_total.load()));
    metric("sluice_speculative_draft_tokens_total", "counter",
           "Speculative proposals made by the draft model", static_cast<double>(m.draft_tokens_total.load()));
    metric("sluice_speculative_accepted_tokens_total", "counter", "Speculative proposals the target kept",
           static_cast<double>(m.accepted_tokens_total.load()));
    {
        std::lock_guard lock(ctx.metrics.mutex);
        metric("sluice_prefill_seconds_total", "counter", "Time spent prefilling", m.prefill_seconds_total);
        metric("sluice_decode_seconds_total", "counter", "Time spent decoding", m.decode_seconds_total);
        metric("sluice_prefill_tokens_per_second", "gauge", "Prefill speed of the last generation",
               m.last_prefill_tok_s);
        metric("sluice_decode_tokens_per_second", "gauge", "Decode speed of the last generation",
               m.last_decode_tok_s);
    }
    metric("sluice_queue_depth", "gauge", "Requests waiting for a session",
           static_cast<double>(ctx.pool->queue_depth()));
    metric("sluice_active_requests", "gauge", "Sessions generating now",
           static_cast<double>(ctx.pool->active()));
    metric("sluice_sessions", "gauge", "Sessions in the pool (--parallel)",
           static_cast<double>(ctx.pool->size()));
    if (const FrontStats* f = ctx.front_stats) {
        metric("sluice_connections_open", "gauge", "HTTP connections open",
               static_cast<double>(f->connections_open.load()));
        metric("sluice_connections_total", "counter", "HTTP connections accepted",
               static_cast<double>(f->connections_total.load()));
        metric("sluice_connections_refused_total", "counter",
               "HTTP connections refused over --max-connections or --max-connections-per-client",
               static_cast<double>(f->connections_refused_total.load()));
        metric("sluice_http_timeouts_total", "counter",
               "Connections closed for a header, body or write deadline",
               static_cast<double>(f->timeouts_total.load()));
    }
    metric("sluice_expert_cache_hits_total", "counter", "Expert-cache hits", static_cast<double>(cache.hits));
    metric("sluice_expert_cache_misses_total", "counter", "Expert-cache misses",
           static_cast<double>(cache.misses));
    metric("sluice_expert_cache_hit_rate", "gauge", "Expert-cache hit rate since load", cache.hit_rate());
    metric("sluice_expert_bytes_read_total", "counter", "Expert bytes read from disk",
           static_cast<double>(cache.bytes_read));
    metric("sluice_expert_reads_total", "counter", "Expert records read from disk",
           static_cast<double>(cache.reads));
    metric("sluice_expert_cache_evictions_total", "counter", "Expert-cache evictions",
           static_cast<double>(cache.evictions));
    const MemoryPressureStatus pressure = ctx.engine->memory_pressure();
    metric("sluice_expert_cache_budget_bytes", "gauge",
           "The expert cache's size target now (moves with memory pressure between floor and ceiling)",
           static_cast<double>(pressure.budget_bytes));
    metric("sluice_expert_cache_bytes", "gauge", "Expert-cache slot memory usable now",
           static_cast<double>(pressure.cache_bytes));
    metric("sluice_expert_cache_ceiling_bytes", "gauge", "The planned expert cache (--memory's share)",
           static_cast<double>(pressure.ceiling_bytes));
    metric("sluice_expert_cache_floor_bytes", "gauge", "The least the expert cache keeps (--memory-floor)",
           static_cast<double>(pressure.floor_bytes));
    metric("sluice_memory_returned_bytes_total", "counter", "Expert-cache memory handed back to the OS",
           static_cast<double>(pressure.bytes_returned));
    metric("sluice_memory_pressure_events_total", "counter", "Memory pressure signals seen",
           static_cast<double>(pressure.pressure_events));
    prefix_cache_metrics(ctx.engine->prefix_cache_stats(), metric);
    res.set_content(out, "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace sluice::server
