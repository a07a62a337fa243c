// StepBatcher: continuous batching of the forwards that concurrent sessions ask for (issue 21).
//
// Every session thread that needs a forward (a prefill chunk, a decode token, a speculative
// verification) hands its step to the batcher and waits. Whichever waiting thread finds no forward
// running becomes the leader: it waits a moment for the other generations in progress (streams) to
// hand in their next steps — each is busy sampling its last token — then takes the queued steps in
// arrival order, up to a token budget, and runs them as one Backend::forward_batch under the
// engine's compute lock; the steps that arrive meanwhile form the next batch. The moment is bounded
// (half the last forward's time, at most 2 ms or 5% of it, whichever is more), so a stream that is slow
// to come back (its client's socket is full) delays the others by that at most. The 5% is for forwards
// of seconds (a model streamed from disk): 8 streams of the 80B at --memory 6G split into two alternating
// halves under a 2 ms bound — the streams a forward had just served came back a few ms after the next
// forward had started without them (3.8–4.3 steps per forward, bench/results/serving). So N streams decoding
// at once become one forward of N rows a step — each weight read once for all of them, each routed expert
// read once for every stream that routed to it (what streaming from disk gains most from) — and a long
// prompt's chunks share forwards with the running streams instead of stalling them. Nothing about a
// generation's loop changes: it still asks for its forward and gets its logits.
//
// Exactness: a batched forward gives each step the logits of a forward of its own (bit for bit on
// the CPU: runtime/backend.h), so a stream's text does not depend on who else is being served.
// A batch that fails (an expert read error, a step the backend refuses) is run again step by step, so
// each step gets its own outcome and one bad step cannot fail the others.
//
// Threading: run() is called from any number of threads, one call per sequence at a time.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>

#include "runtime/backend.h"

namespace sluice::runtime {

class StepBatcher {
 public:
    // `compute`: the engine's compute lock, held around every forward. `max_tokens`: the most
    // tokens one batched forward takes (a step larger than that runs alone).
    StepBatcher(Backend* backend, std::mutex* compute, int64_t max_tokens);

    struct Outcome {
        Status status;
        // The backend's logits summary when the step ran alone as a one-token decode (its CUDA
        // graph computes one), read before any other forward could replace it.
        std::optional<LogitsSummary> summary;
        int64_t batch_steps = 0;  // steps in the forward that ran this one
    };
    Outcome run(const BatchStep& step);

    // A generation in progress (Session::generate): while one is open the batcher expects its next
    // step soon and gathers it into the coming forward.
    class Stream {
     public:
        explicit Stream(StepBatcher* b) : b_(b) {
            if (b_ != nullptr) b_->enter();
        }
        ~Stream() {
            if (b_ != nullptr) b_->leave();
        }
        Stream(const Stream&) = delete;
        Stream& operator=(const Stream&) = delete;

     private:
        StepBatcher* b_;
    };

    // Forwards run and steps served, for /metrics: steps / forwards is the mean batch size.
    struct Counters {
        int64_t forwards = 0, steps = 0, tokens = 0;
    };
    Counters counters() const;

 private:
    struct Waiter {
        const BatchStep* step;
        Outcome outcome;
        bool done = false;
    };
    // Runs `batch` (the leader, without mu_); fills each waiter's outcome.
    void forward(std::deque<Waiter*>& batch);
    void enter();
    void leave();

    Backend* backend_;
    std::mutex* compute_;
    int64_t max_tokens_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Waiter*> queue_;
    bool leading_ = false;
    int64_t streams_ = 0;           // open Streams
    double last_forward_ms_ = 0.0;  // sets how long a leader waits for the streams' steps
    Counters counters_;
};

}  // namespace sluice::runtime
