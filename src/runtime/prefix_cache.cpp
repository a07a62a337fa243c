// The prefix cache (prefix_cache.h): a tree of token blocks with the state copies of each, LRU
// eviction of its leaves within a byte budget.
#include "runtime/prefix_cache.h"

#include <xxhash.h>

#include <algorithm>
#include <array>

namespace sluice::runtime {

// A block boundary must also be a boundary of the CPU DeltaNet's chunks (64 tokens from a step's
// first token, kernels/cpu/isa_table.h) in every block-aligned forward; PrefixCache tests hold a
// restored prompt's logits bit for bit to a cold prefill's.
static_assert(PrefixCache::kBlockTokens > model::kRecurrentStepTokens,
              "a block-aligned forward must take the chunked DeltaNet form");

struct PrefixCache::Node {
    uint64_t key = 0;        // chain hash through this block
    Node* parent = nullptr;  // the block before (null for the first)
    int64_t depth = 0;       // this block is positions [depth, depth + 1) × kBlockTokens
    uint64_t layout = 0;
    std::array<int32_t, kBlockTokens> tokens{};
    std::string rows;     // per-position rows of the block (SequenceState::append_positions)
    std::string running;  // the running state at the block's end (SequenceState::append_running)
    bool has_running = false;
    int children = 0;
    int pins = 0;
    std::list<Node*>::iterator lru;
};

namespace {
// What a block costs besides its state copies: the node, its map entry and list links.
constexpr uint64_t kNodeOverheadBytes = sizeof(PrefixCache::Node) + 64;
}  // namespace

PrefixCache::PrefixCache(uint64_t budget_bytes) : budget_bytes_(budget_bytes) {
    stats_.budget_bytes = budget_bytes;
    stats_.block_tokens = kBlockTokens;
}

PrefixCache::~PrefixCache() = default;

uint64_t PrefixCache::layout_key(const model::StateLayout& layout) {
    const uint64_t parts[5] = {static_cast<uint64_t>(layout.kv), static_cast<uint64_t>(layout.kv_window),
                               layout.per_position_bytes(1), layout.recurrent_bytes(), layout.window_bytes()};
    return XXH3_64bits(parts, sizeof parts);
}

uint64_t PrefixCache::chain_key(uint64_t parent_key, std::span<const int32_t> block) {
    return XXH3_64bits_withSeed(block.data(), block.size_bytes(), parent_key);
}

uint64_t PrefixCache::node_bytes(const Node& n) const {
    return n.rows.size() + n.running.size() + kNodeOverheadBytes;
}

// ---- Match ---------------------------------------------------------------------------------------

PrefixCache::Match::Match(Match&& o) noexcept : cache_(o.cache_), chain_(std::move(o.chain_)) {
    o.cache_ = nullptr;
    o.chain_.clear();
}

PrefixCache::Match& PrefixCache::Match::operator=(Match&& o) noexcept {
    if (this != &o) {
        if (cache_ != nullptr) cache_->unpin(chain_);
        cache_ = o.cache_;
        chain_ = std::move(o.chain_);
        o.cache_ = nullptr;
        o.chain_.clear();
    }
    return *this;
}

PrefixCache::Match::~Match() {
    if (cache_ != nullptr) cache_->unpin(chain_);
}

int64_t PrefixCache::Match::tokens() const {
    return static_cast<int64_t>(chain_.size()) * kBlockTokens;
}

std::vector<std::string_view> PrefixCache::Match::position_blocks() const {
    std::vector<std::string_view> out;
    out.reserve(chain_.size());
    for (const Node* n : chain_) out.emplace_back(n->rows);
    return out;
}

std::string_view PrefixCache::Match::running() const {
    return chain_.empty() ? std::string_view() : std::string_view(chain_.back()->running);
}

// ---- lookup / store ------------------------------------------------------------------------------

std::optional<PrefixCache::Match> PrefixCache::lookup(const Query& q, int64_t* matched_tokens) {
    const auto L = static_cast<int64_t>(q.prompt.size());
    std::lock_guard<std::mutex> lock(mu_);
    stats_.lookups++;
    // Walk the prompt's blocks while the tree has them, verifying tokens and parent at every step.
    std::vector<Node*> chain;
    uint64_t key = q.layout;
    Node* parent = nullptr;
    for (int64_t b = 0; (b + 1) * kBlockTokens <= L; ++b) {
        const auto block = q.prompt.subspan(static_cast<size_t>(b * kBlockTokens), kBlockTokens);
        key = chain_key(key, block);
        const auto it = nodes_.find(key);
        if (it == nodes_.end()) break;
        Node* n = it->second.get();
        if (n->parent != parent || n->layout != q.layout ||
            !std::equal(block.begin(), block.end(), n->tokens.begin()))
            break;  // a hash collision: the tree has another prefix under this key
        chain.push_back(n);
        parent = n;
    }
    if (matched_tokens != nullptr) *matched_tokens = static_cast<int64_t>(chain.size()) * kBlockTokens;
    // The deepest restore point the rules allow.
    size_t use = 0;
    for (size_t i = chain.size(); i > 0; --i) {
        const int64_t n = static_cast<int64_t>(i) * kBlockTokens;
        if (n <= q.held_tokens) break;
        if (n >= L) continue;  // the last token is computed for its logits
        if (q.needs_running && !chain[i - 1]->has_running) continue;
        const bool on_grid = q.chunk_tokens > 0 && n % q.chunk_tokens == 0;
        const auto stop = std::upper_bound(q.stops.begin(), q.stops.end(), n);
        const int64_t next = stop != q.stops.end() ? *stop : L;
        if (!on_grid && next - n <= model::kRecurrentStepTokens) continue;
        use = i;
        break;
    }
    touch(chain);
    if (use == 0) {
        stats_.misses++;
        return std::nullopt;
    }
    chain.resize(use);
    for (Node* n : chain) n->pins++;
    stats_.hits++;
    stats_.hit_tokens += static_cast<uint64_t>(use) * kBlockTokens;
    Match m;
    m.cache_ = this;
    m.chain_ = std::move(chain);
    return m;
}

Status PrefixCache::store(std::span<const int32_t> tokens, uint64_t layout, const StateReader& reader) {
    const auto n_blocks = static_cast<int64_t>(tokens.size()) / kBlockTokens;
    if (n_blocks == 0 || budget_bytes_ == 0) return Status::ok();
    auto block_of = [&](int64_t b) {
        return tokens.subspan(static_cast<size_t>(b * kBlockTokens), kBlockTokens);
    };
    // 1. Which blocks are missing, and does the last one want its running state? The blocks present
    // are pinned while the state is read, so the new ones find their parents.
    std::vector<Node*> present;
    std::vector<uint64_t> keys(static_cast<size_t>(n_blocks));
    bool want_running = false;
    int64_t last = n_blocks;  // the blocks stored are [present.size(), last)
    {
        std::lock_guard<std::mutex> lock(mu_);
        uint64_t key = layout;
        Node* parent = nullptr;
        for (int64_t b = 0; b < n_blocks; ++b) {
            key = chain_key(key, block_of(b));
            keys[static_cast<size_t>(b)] = key;
            if (static_cast<int64_t>(present.size()) < b) continue;  // past a missing block
            const auto it = nodes_.find(key);
            if (it == nodes_.end()) continue;
            Node* n = it->second.get();
            const auto block = block_of(b);
            if (n->parent != parent || n->layout != layout ||
                !std::equal(block.begin(), block.end(), n->tokens.begin()))
                return Status::ok();  // a hash collision: this prefix is not stored
            present.push_back(n);
            parent = n;
        }
        const auto held = static_cast<int64_t>(present.size());
        want_running = reader.running_bytes > 0 && (held < n_blocks || !present.back()->has_running);
        if (held == n_blocks && !want_running) {
            touch(present);
            return Status::ok();
        }
        // What the budget can keep of this chain with every other block evicted. Reading more would
        // copy blocks the store's own eviction drops again (at every later forward of a long prompt).
        uint64_t chain_bytes = 0;
        for (const Node* n : present) chain_bytes += node_bytes(*n);
        const uint64_t per_block = reader.block_bytes + kNodeOverheadBytes;
        const uint64_t whole = chain_bytes + static_cast<uint64_t>(n_blocks - held) * per_block +
                               (want_running ? reader.running_bytes : 0);
        if (whole > budget_bytes_) {
            const uint64_t room = budget_bytes_ > chain_bytes ? budget_bytes_ - chain_bytes : 0;
            last = reader.running_bytes > 0
                       ? held  // no restore point without the running state
                       : held + std::min<int64_t>(n_blocks - held, static_cast<int64_t>(room / per_block));
            want_running = false;
            stats_.skipped_blocks += static_cast<uint64_t>(n_blocks - last);
            if (last == held) {
                touch(present);
                return Status::ok();
            }
        }
        for (Node* n : present) n->pins++;
    }
    // 2. Read what is missing (the caller's locks, not ours).
    const auto first = static_cast<int64_t>(present.size());
    std::vector<std::string> rows;
    std::string running;
    Status read = last > first ? reader.read_blocks(first, last - first, rows) : Status::ok();
    if (read.is_ok() && static_cast<int64_t>(rows.size()) != last - first)
        read = error(ErrorCode::kInternal, "[prefix cache] the state reader returned " +
                                               std::to_string(rows.size()) + " blocks for " +
                                               std::to_string(last - first));
    if (read.is_ok() && want_running) read = reader.read_running(running);
    // 3. Insert them under the blocks present.
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Node*> chain = present;
    for (Node* n : present) n->pins--;
    if (!read.is_ok()) return read;
    Node* parent = present.empty() ? nullptr : present.back();
    for (int64_t b = first; b < last; ++b) {
        const uint64_t key = keys[static_cast<size_t>(b)];
        const auto block = block_of(b);
        if (const auto it = nodes_.find(key); it != nodes_.end()) {  // another session stored it meanwhile
            Node* n = it->second.get();
            if (n->parent != parent || n->layout != layout ||
                !std::equal(block.begin(), block.end(), n->tokens.begin()))
                break;
            chain.push_back(n);
            parent = n;
            continue;
        }
        auto node = std::make_unique<Node>();
        node->key = key;
        node->parent = parent;
        node->depth = b;
        node->layout = layout;
        std::copy(block.begin(), block.end(), node->tokens.begin());
        node->rows = std::move(rows[static_cast<size_t>(b - first)]);
        if (parent != nullptr) parent->children++;
        lru_.push_back(node.get());
        node->lru = std::prev(lru_.end());
        bytes_ += node_bytes(*node);
        stats_.inserted_blocks++;
        parent = node.get();
        chain.push_back(node.get());
        nodes_.emplace(key, std::move(node));
    }
    if (want_running && static_cast<int64_t>(chain.size()) == n_blocks && !chain.back()->has_running) {
        Node* tail = chain.back();
        bytes_ += running.size();
        tail->running = std::move(running);
        tail->has_running = true;
    }
    touch(chain);
    evict_locked();
    return Status::ok();
}

// ---- bookkeeping ---------------------------------------------------------------------------------

void PrefixCache::unpin(const std::vector<Node*>& chain) {
    std::lock_guard<std::mutex> lock(mu_);
    for (Node* n : chain) n->pins--;
    evict_locked();  // a store that went over budget while these were pinned
}

void PrefixCache::touch(const std::vector<Node*>& chain) {
    // Deepest first, so ancestors end up more recent than their descendants: eviction takes leaves.
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) lru_.splice(lru_.end(), lru_, (*it)->lru);
}

void PrefixCache::remove_locked(Node* node) {
    if (node->parent != nullptr) node->parent->children--;
    bytes_ -= node_bytes(*node);
    lru_.erase(node->lru);
    nodes_.erase(node->key);
}

void PrefixCache::evict_locked() {
    for (auto it = lru_.begin(); bytes_ > budget_bytes_ && it != lru_.end();) {
        Node* n = *it;
        ++it;
        if (n->children > 0 || n->pins > 0) continue;
        // A parent left without children comes later in the list (touched after its descendants).
        remove_locked(n);
        stats_.evictions++;
    }
}

PrefixCacheStats PrefixCache::stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    PrefixCacheStats s = stats_;
    s.bytes = bytes_;
    s.blocks = static_cast<int64_t>(nodes_.size());
    return s;
}

void PrefixCache::clear() {
    std::lock_guard<std::mutex> lock(mu_);
    // Pinned blocks (a restore copying them) stay until their Match lets go. Leaves first: a parent
    // freed comes later in the list (ancestors are touched after their descendants).
    for (auto it = lru_.begin(); it != lru_.end();) {
        Node* n = *it;
        ++it;
        if (n->children == 0 && n->pins == 0) remove_locked(n);
    }
    const uint64_t budget = stats_.budget_bytes;
    stats_ = PrefixCacheStats{};
    stats_.budget_bytes = budget;
    stats_.block_tokens = kBlockTokens;
}

}  // namespace sluice::runtime
