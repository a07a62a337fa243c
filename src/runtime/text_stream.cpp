// TextStream (include/sluice/text_stream.h): the incremental detokenizer and stop strings.
#include "sluice/text_stream.h"

#include <algorithm>

namespace sluice {

namespace {

// Length of the longest suffix of `text` that is a proper prefix of one of `stops`: text that
// must be held back because the next token could complete a stop string.
size_t held_back_bytes(const std::string& text, const std::vector<std::string>& stops) {
    size_t hold = 0;
    for (const auto& s : stops) {
        for (size_t k = std::min(text.size(), s.size() - 1); k > hold; --k) {
            if (text.compare(text.size() - k, k, s, 0, k) == 0) {
                hold = k;
                break;
            }
        }
    }
    return hold;
}

}  // namespace

TextStream::TextStream(std::shared_ptr<const Tokenizer> tokenizer, std::vector<std::string> stops)
    : detok_(std::move(tokenizer), false) {
    for (auto& s : stops)
        if (!s.empty()) stops_.push_back(std::move(s));
}

TextStream::Piece TextStream::feed(int32_t token) {
    Piece piece;
    if (stopped_) return piece;
    pending_ += detok_.feed(token);
    // The earliest stop string in the pending text wins.
    size_t first = std::string::npos;
    for (const auto& stop : stops_) {
        const size_t found = pending_.find(stop);
        if (found != std::string::npos && (first == std::string::npos || found < first)) {
            first = found;
            piece.stop = stop;
        }
    }
    if (first != std::string::npos) {
        piece.text = pending_.substr(0, first);
        piece.stopped = stopped_ = true;
        pending_.clear();
        return piece;
    }
    const size_t emit = pending_.size() - held_back_bytes(pending_, stops_);
    piece.text = pending_.substr(0, emit);
    pending_.erase(0, emit);
    return piece;
}

std::string TextStream::flush() {
    if (stopped_) return {};
    std::string tail = pending_ + detok_.flush();
    pending_.clear();
    return tail;
}

}  // namespace sluice
