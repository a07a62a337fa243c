// `sluice tokenize` and `sluice detokenize`: the tokenizer from the command line, and the batch
// interface the oracle test (tests/oracle/tokenizer.test.mjs) drives -- one process handles a
// whole corpus through --jsonl instead of one spawn per document.
//
// MODEL is a folder with tokenizer.json or a .gguf file (its tokenizer.ggml.* metadata).
//
//   sluice tokenize MODEL_DIR (--text TEXT | --file FILE | --jsonl FILE) [--no-special]
//     prints the ids as a JSON array (--jsonl: one JSON string per input line, one array per
//     output line)
//   sluice detokenize MODEL_DIR (ID... | --jsonl FILE) [--skip-special] [--stream]
//     prints the text (--jsonl: one JSON array of ids per input line, one JSON string per output
//     line); --stream decodes through IncrementalDetokenizer one id at a time
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/command.h"
#include "cli/model_arg.h"
#include "sluice/tokenizer.h"

namespace sluice::cli {
namespace {

struct TokenizeOptions {
    std::string model_dir;
    std::string text;
    std::string file;
    std::string jsonl;
    bool no_special = false;
    int sources = 0;  // how many of --text/--file/--jsonl were given (an empty --text counts)
};

struct DetokenizeOptions {
    std::string model_dir;
    std::vector<int32_t> ids;
    std::string jsonl;
    bool skip_special = false;
    bool stream = false;
};

std::string read_file_or_throw(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw CliError("cannot read '" + path + "'");
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

std::string ids_json(const std::vector<int32_t>& ids) {
    std::string out = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) out += ',';
        out += std::to_string(ids[i]);
    }
    return out + "]";
}

// Calls fn(json value, line number) for each non-empty line of a JSONL file.
template <typename Fn>
void for_each_jsonl(const std::string& path, Fn fn) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw CliError("cannot read '" + path + "'");
    std::string line;
    size_t line_no = 0;
    while (std::getline(in, line)) {
        ++line_no;
        if (line.empty()) continue;
        nlohmann::json v;
        try {
            v = nlohmann::json::parse(line);
        } catch (const nlohmann::json::exception& e) {
            throw CliError(path + ":" + std::to_string(line_no) + ": invalid JSON: " + e.what());
        }
        fn(v, line_no);
    }
}

void run_tokenize(const TokenizeOptions& o) {
    if (o.sources != 1) throw CliError("tokenize: give exactly one of --text, --file, --jsonl");
    auto tokenizer = check(Tokenizer::load(o.model_dir));
    if (!o.jsonl.empty()) {
        std::string out;
        for_each_jsonl(o.jsonl, [&](const nlohmann::json& v, size_t line_no) {
            if (!v.is_string())
                throw CliError(o.jsonl + ":" + std::to_string(line_no) + ": expected a JSON string");
            out += ids_json(tokenizer->encode(v.get_ref<const std::string&>(), !o.no_special));
            out += '\n';
        });
        std::fwrite(out.data(), 1, out.size(), stdout);
        return;
    }
    const std::string text = o.file.empty() ? o.text : read_file_or_throw(o.file);  // --text, maybe ""
    std::printf("%s\n", ids_json(tokenizer->encode(text, !o.no_special)).c_str());
}

std::string detokenize_ids(const std::shared_ptr<const Tokenizer>& tokenizer, const std::vector<int32_t>& ids,
                           bool skip_special, bool stream) {
    for (int32_t id : ids)
        if (id < 0 || id >= tokenizer->vocab_size())
            throw CliError("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                           std::to_string(tokenizer->vocab_size()) + ")");
    if (!stream) return tokenizer->decode(ids, skip_special);
    IncrementalDetokenizer detok(tokenizer, skip_special);
    std::string out;
    for (int32_t id : ids) out += detok.feed(id);
    return out + detok.flush();
}

void run_detokenize(const DetokenizeOptions& o) {
    auto tokenizer = check(Tokenizer::load(o.model_dir));
    if (!o.jsonl.empty()) {
        if (!o.ids.empty()) throw CliError("detokenize: give ids or --jsonl, not both");
        std::string out;
        for_each_jsonl(o.jsonl, [&](const nlohmann::json& v, size_t line_no) {
            std::vector<int32_t> ids;
            try {
                ids = v.get<std::vector<int32_t>>();
            } catch (const nlohmann::json::exception&) {
                throw CliError(o.jsonl + ":" + std::to_string(line_no) + ": expected a JSON array of ids");
            }
            out += nlohmann::json(detokenize_ids(tokenizer, ids, o.skip_special, o.stream)).dump();
            out += '\n';
        });
        std::fwrite(out.data(), 1, out.size(), stdout);
        return;
    }
    const std::string text = detokenize_ids(tokenizer, o.ids, o.skip_special, o.stream);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fputc('\n', stdout);
}

}  // namespace
}  // namespace sluice::cli

SLUICE_COMMAND(tokenize, 20, [](CLI::App& app) {
    auto opts = std::make_shared<sluice::cli::TokenizeOptions>();
    auto* cmd = app.add_subcommand("tokenize", "Encode text to token ids (printed as a JSON array)");
    sluice::cli::add_model_arg(cmd, &opts->model_dir,
                               "Folder with tokenizer.json (and tokenizer_config.json), or a .gguf file");
    auto* text = cmd->add_option("--text", opts->text, "Text to encode (default: none)");
    auto* file = cmd->add_option("--file", opts->file, "Encode the contents of this file (default: none)");
    auto* jsonl =
        cmd->add_option("--jsonl", opts->jsonl,
                        "Batch: one JSON string per line in, one JSON id array per line out (default: none)");
    cmd->add_flag("--no-special", opts->no_special,
                  "Treat special tokens (<|im_start|> ...) in the text as plain text (default: off)");
    cmd->callback([opts, text, file, jsonl] {
        opts->sources = static_cast<int>(text->count() + file->count() + jsonl->count());
        sluice::cli::run_tokenize(*opts);
    });
});

SLUICE_COMMAND(detokenize, 21, [](CLI::App& app) {
    auto opts = std::make_shared<sluice::cli::DetokenizeOptions>();
    auto* cmd = app.add_subcommand("detokenize", "Decode token ids to text");
    sluice::cli::add_model_arg(cmd, &opts->model_dir,
                               "Folder with tokenizer.json (and tokenizer_config.json), or a .gguf file");
    cmd->add_option("ids", opts->ids, "Token ids (default: none)");
    cmd->add_option("--jsonl", opts->jsonl,
                    "Batch: one JSON id array per line in, one JSON string per line out (default: none)");
    cmd->add_flag("--skip-special", opts->skip_special,
                  "Leave special tokens out of the text (default: off)");
    cmd->add_flag("--stream", opts->stream,
                  "Decode through the incremental detokenizer, one id at a time (default: off)");
    cmd->callback([opts] { sluice::cli::run_detokenize(*opts); });
});
