// sluice's public API, part 4: constrained decoding — grammars over bytes, JSON Schema compiled to
// a grammar, and the per-step token mask that keeps a generation inside the grammar.
//
// Pieces:
//   GrammarBuilder  builds a context-free grammar over bytes (rules of alternatives of byte sets and
//                   rule references). add_json_schema() compiles a JSON Schema (the subset listed
//                   in docs/SERVER.md) into a rule; unsupported keywords are errors naming the
//                   keyword and its place, never ignored. build() checks the grammar and drops
//                   alternatives that can never finish, so a built grammar has no dead ends: every
//                   prefix it accepts can be completed.
//   GrammarMatcher  an incremental recogniser: feed bytes, ask complete() / can_continue().
//   TokenTrie       a tokenizer's vocabulary as a byte trie (built once per tokenizer, shared).
//   TokenConstraint per generation: which token ids may come next (walking the trie from the
//                   matcher state, pruning a subtree at the first byte the grammar refuses), and
//                   accept() to advance. End-of-sequence ids are allowed exactly when the text is a
//                   complete sentence of the grammar.
//
// Ownership: Grammar and TokenTrie are immutable and shared (shared_ptr<const>); a matcher or a
// constraint holds a reference. Thread safety: Grammar/TokenTrie may be used by any number of
// threads; GrammarMatcher and TokenConstraint are plain mutable objects for one thread.
// Errors: Expected/Status with "[json_schema] at '#/path': ..." or "[grammar] ..." messages.
// Rejected alternative: a regex/DFA per schema (outlines-style) — recursion ($ref, free-form
// objects) needs a stack, and the DFA of a large schema grows exponentially. Automata are used
// only for the regular pieces (`pattern`, `format`, property names, multipleOf digits), each
// bounded, and written into the grammar as rules.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sluice/export.h"
#include "sluice/status.h"

namespace sluice {

class Tokenizer;
struct Grammar;       // compiled form; defined in src/constrain/grammar_impl.h
struct TokenClasses;  // what a vocabulary's tokens hold; defined in src/constrain/token_classes.h
namespace constrain {
class MemoDfa;  // the mask walk's automaton; defined in src/constrain/token_classes.h
}

class SLUICE_API GrammarBuilder {
 public:
    using RuleId = uint32_t;
    // One element of a sequence: a set of bytes (matches one byte) or a rule reference.
    struct Symbol {
        bool is_rule = false;
        RuleId rule = 0;
        std::array<uint64_t, 4> bytes{};  // bit b set: byte b matches

        static Symbol byte_set(std::string_view chars);
        static Symbol byte_range(uint8_t lo, uint8_t hi);
        static Symbol ref(RuleId id);
        Symbol& add_range(uint8_t lo, uint8_t hi);
        Symbol& remove(uint8_t b);
    };
    using Sequence = std::vector<Symbol>;

    GrammarBuilder();
    ~GrammarBuilder();
    GrammarBuilder(GrammarBuilder&&) noexcept;
    GrammarBuilder& operator=(GrammarBuilder&&) noexcept;

    static Sequence literal(std::string_view text);  // one byte set per byte
    RuleId add_rule();
    void add_alternative(RuleId rule, Sequence sequence);

    // Compiles `schema` into a rule deriving exactly the JSON texts this grammar emits for it (a
    // subset of the texts the schema accepts: see docs/SERVER.md). `where` prefixes error
    // messages (e.g. "response_format.json_schema.schema").
    Expected<RuleId> add_json_schema(const nlohmann::ordered_json& schema, const std::string& where = "");
    // Any JSON value whose top level is an object (response_format json_object).
    RuleId add_json_object();
    // From here on, no JSON string this builder writes (add_json_schema, add_json_object, the JSON
    // values of add_xml_tool_arguments) holds the bytes of `tag`: where a string's text spells it,
    // its last character is written as a \u escape ("</tool_call\u003e"), so the decoded strings
    // are all still there. For a grammar whose reader ends its text at `tag` (a forced tool call and
    // "</tool_call>"). `tag`: printable ASCII starting with '<', no other '<', no '"' or '\\'. Call
    // it before adding any rule (shared helper rules are built once).
    void guard_json_strings(std::string tag);

    // A tool's arguments in the XML tool-call form of Qwen3.5 / Qwen3-Coder chat templates, for a
    // tool whose parameters are `schema` (an object schema): "<parameter=KEY>\nVALUE\n</parameter>\n"
    // per member, in declaration order (required members always, optional ones when the model
    // chooses, no others). VALUE is a string's own text, unquoted and unescaped, for a member whose
    // schema xml_value_is_text(), never holding "</parameter>" or "</tool_call>"; else the member's
    // JSON. What this form cannot carry (patternProperties, a key with '>' or a line break, a required
    // name not among the properties…) is kUnsupported; a broken schema is an error as from
    // add_json_schema.
    Expected<RuleId> add_xml_tool_arguments(const nlohmann::ordered_json& schema,
                                            const std::string& where = "");
    // How a tool-call form that writes each argument as tagged text spells one (add_tagged_tool_arguments):
    //   key_open NAME key_to_value VALUE value_close
    // VALUE a string's own text for a member whose schema xml_value_is_text(), never holding a match
    // of `text_ends` (a regex of what ends the text for the form's reader), else the member's JSON.
    // A NAME holding any of `name_excludes`, or surrounded by spaces, is a schema the form cannot
    // carry (kUnsupported).
    struct ArgumentMarkup {
        std::string key_open, key_to_value, value_close, text_ends, name_excludes;
        // Qwen3.5 / Qwen3-Coder: "<parameter=KEY>\nVALUE\n</parameter>\n" (add_xml_tool_arguments).
        static ArgumentMarkup qwen_xml();
        // GLM-4.5 and later: "<arg_key>KEY</arg_key>" key_to_value "<arg_value>VALUE</arg_value>"
        // after_value, the separators as the model's template prints them ("\n" in GLM-4.5 / 4.6,
        // none in GLM-4.7 / 5). Its reader ends every value, JSON ones too, at the first
        // "</arg_value>": the caller guards JSON strings against it (guard_json_strings("</")).
        static ArgumentMarkup glm(std::string_view key_to_value, std::string_view after_value);
    };
    // A tool's arguments in a tagged form: one block per member of the parameters `schema`, in
    // declaration order (required members always, optional ones when the model chooses, no others),
    // as add_xml_tool_arguments, which is this with ArgumentMarkup::qwen_xml().
    Expected<RuleId> add_tagged_tool_arguments(const nlohmann::ordered_json& schema,
                                               const ArgumentMarkup& markup, const std::string& where = "");
    // Whether the XML form writes a value of `schema` as its text: `type` "string", or no `type`
    // and an enum/const of strings only. A reader of the form types a value by the same rule.
    static bool xml_value_is_text(const nlohmann::ordered_json& schema);

    // Checks and freezes the grammar with `root` as its start rule: alternatives that can never
    // derive a finite string are removed; an unproductive root or left recursion is an error.
    Expected<std::shared_ptr<const Grammar>> build(RuleId root) const;

 private:
    friend class JsonSchemaCompiler;
    std::vector<std::vector<Sequence>> rules_;
    std::unordered_map<std::string, RuleId> shared_rules_;  // helpers (whitespace, string chars, ...)
    std::string json_string_guard_;                         // guard_json_strings (empty: none)
};

// Incremental recogniser of a grammar's sentences (the set of parse stacks alive so far).
class SLUICE_API GrammarMatcher {
 public:
    explicit GrammarMatcher(std::shared_ptr<const Grammar> grammar);
    // Feeds bytes; false (and the state unchanged) when they cannot continue a sentence.
    bool feed(std::string_view bytes);
    bool complete() const { return accepting_; }
    bool can_continue() const { return !stacks_.empty(); }
    // A canonical description of the state (equal states, equal keys).
    std::string state_key() const;

 private:
    friend class TokenConstraint;
    std::shared_ptr<const Grammar> grammar_;
    std::vector<std::vector<uint32_t>> stacks_;  // sorted, unique; each bottom..top grammar positions
    bool accepting_ = false;
};

// A vocabulary as a byte trie: node 0 is the root; a node's children are contiguous edges.
class SLUICE_API TokenTrie {
 public:
    // `bytes_by_id[id]`: the bytes token `id` contributes; empty excludes the id.
    static std::shared_ptr<const TokenTrie> build(std::span<const std::string> bytes_by_id);
    // Every token of `tokenizer` except special tokens (added tokens flagged special) and ids
    // without bytes; the special tokens among `keep_special` are kept (a chat format's markup a
    // grammar writes: harmony's <|channel|> and <|message|> in a forced call's header).
    static std::shared_ptr<const TokenTrie> from_tokenizer(const Tokenizer& tokenizer,
                                                           std::span<const int32_t> keep_special = {});

    int32_t vocab_size() const { return vocab_size_; }
    size_t node_count() const { return nodes_.size(); }
    // The bytes of `id` (empty: excluded or out of range).
    std::string_view bytes(int32_t id) const {
        if (id < 0 || id >= vocab_size_) return {};
        const auto i = static_cast<size_t>(id);
        return std::string_view(blob_).substr(offsets_[i], offsets_[i + 1] - offsets_[i]);
    }

    struct Node {
        uint32_t edge_begin, edge_end;    // into edges_
        uint32_t token_begin, token_end;  // into token_ids_: tokens whose bytes end here
    };
    struct Edge {
        uint8_t byte;
        uint32_t child;
    };
    std::vector<Node> nodes_;
    std::vector<Edge> edges_;
    std::vector<int32_t> token_ids_;
    std::string blob_;               // every token's bytes, by id
    std::vector<uint32_t> offsets_;  // [vocab_size + 1] into blob_
    int32_t vocab_size_ = 0;
    // Built with the trie: per edge, a summary of the tokens below it, and token bitsets by content
    // (the token-class shortcut of TokenConstraint's mask walk; ~8 MB for Qwen3's vocabulary).
    std::shared_ptr<const TokenClasses> classes_;
};

// Grammar-constrained decoding for one generation. Plug into GenerateOptions: logits_filter →
// filter(), on_accept → accept().
class SLUICE_API TokenConstraint {
 public:
    TokenConstraint(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenTrie> trie,
                    std::vector<int32_t> eos_ids);
    ~TokenConstraint();
    TokenConstraint(TokenConstraint&&) noexcept;
    TokenConstraint& operator=(TokenConstraint&&) noexcept;

    // Bit id set: token id may come next. Cached per matcher state.
    const std::vector<uint64_t>& allowed();
    // Sets every disallowed entry of `logits` (one per token id) to -inf.
    void filter(std::span<float> logits);
    // The same for the state after `generated`, the generation's tokens so far: those past the ones
    // accept()ed are speculative (a drafter's proposals, GenerateOptions::filter_handles_speculation)
    // and are walked on a copy of the state, which stays where accept() left it.
    void filter(std::span<float> logits, std::span<const int32_t> generated);
    // Advances by a sampled token; false (state unchanged) if the grammar does not allow it.
    bool accept(int32_t token);
    bool complete() const { return matcher_.complete(); }
    bool can_continue() const { return matcher_.can_continue(); }

    struct Stats {
        int64_t masks = 0;  // allowed() calls
        int64_t mask_cache_hits = 0;
        int64_t trie_nodes_visited = 0;
        int64_t class_masks = 0;       // computed masks that took the token-class shortcut
        int64_t class_subtrees = 0;    // classes found below the trie's root (subtrees decided whole)
        int64_t automaton_resets = 0;  // the mask walk's automaton dropped when full
        double mask_ms = 0;            // time spent computing masks (cache misses)
    };
    const Stats& stats() const { return stats_; }
    // The mask of the current state computed afresh, bypassing the cache (benchmarks, tests);
    // compute_mask_reference() is the same by the plain trie walk, without memoized transitions or
    // token classes (the test oracle).
    void compute_mask(std::vector<uint64_t>* bits);
    void compute_mask_reference(std::vector<uint64_t>* bits);

 private:
    bool compute_mask_memo(std::vector<uint64_t>* bits);
    // The tokens of a class (TokenClasses::class_bits), kept for the last few classes.
    std::shared_ptr<const std::vector<uint64_t>> class_bits(const std::array<uint64_t, 2>& allowed);
    std::shared_ptr<const TokenTrie> trie_;
    std::vector<int32_t> eos_ids_;
    GrammarMatcher matcher_;
    std::unordered_map<std::string, std::vector<uint64_t>> cache_;  // state_key → mask
    std::vector<std::pair<std::array<uint64_t, 2>, std::shared_ptr<const std::vector<uint64_t>>>> class_bits_;
    // The grammar's states met by the mask walks so far, with their byte transitions (kept from
    // mask to mask; dropped and restarted when full).
    std::unique_ptr<constrain::MemoDfa> dfa_;
    const std::vector<uint64_t>* current_ = nullptr;  // mask of the current state
    size_t accepted_ = 0;                             // tokens accept()ed (end-of-sequence ids not counted)
    Stats stats_;
};

}  // namespace sluice
