// sluice's public API: TextStream — generated tokens in, the text a user may see out.
//
// It joins the incremental detokenizer (never a partial UTF-8 character) with stop strings matched
// on the text across token boundaries: text that could be the start of a stop string is held back
// until the next token settles it, and a completed stop string ends the stream without being
// emitted. Session::generate streams through one; a driver of its own (speculative decoding, a
// batch scheduler) feeds it the tokens it accepts.
//
// Ownership: keeps the tokenizer alive. Thread safety: one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sluice/export.h"
#include "sluice/tokenizer.h"

namespace sluice {

class SLUICE_API TextStream {
 public:
    // Empty stop strings are ignored.
    TextStream(std::shared_ptr<const Tokenizer> tokenizer, std::vector<std::string> stops);

    struct Piece {
        std::string text;  // newly emittable text (may be empty while a character or a stop prefix is held)
        bool stopped = false;
        std::string stop;  // the stop string that completed (when stopped); text is what came before it
    };
    // The text `token` completes. After a stop, further tokens give nothing.
    Piece feed(int32_t token);
    // End of the stream without a stop: everything still held back (a stop-string prefix, an
    // incomplete character as U+FFFD).
    std::string flush();
    bool stopped() const { return stopped_; }

 private:
    IncrementalDetokenizer detok_;
    std::vector<std::string> stops_;
    std::string pending_;  // decoded, not yet emitted (a possible stop-string prefix)
    bool stopped_ = false;
};

}  // namespace sluice
