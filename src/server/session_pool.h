// A small pool of Sessions shared by the server's requests, with a fair (FIFO) queue.
//
// Up to `size` requests generate at once; the rest wait in arrival order (a ticket queue: the
// oldest waiter is always served first, so a burst cannot starve an early request). When a
// request is served it gets the free session whose tokens share the longest prefix with its
// prompt — a follow-up turn of a conversation lands where that conversation's KV/DeltaNet state
// lives and only its new tokens are computed; with no shared prefix the least recently used
// session is taken, which keeps recent conversations warm.
//
// Threading: all methods are thread-safe. A Lease is owned by one request thread and returns
// the session on destruction. Reading a free session's tokens() is safe: nobody is using it.
// Rejected alternative: one session per request — every turn would re-prefill the conversation.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "sluice/engine.h"
#include "sluice/session.h"

namespace sluice::server {

class SessionPool {
 public:
    SessionPool(const std::shared_ptr<Engine>& engine, int size);

    class Lease {
     public:
        Lease() = default;
        Lease(SessionPool* pool, int slot) : pool_(pool), slot_(slot) {}
        Lease(Lease&& o) noexcept : pool_(o.pool_), slot_(o.slot_) { o.pool_ = nullptr; }
        Lease& operator=(Lease&&) = delete;
        ~Lease();
        explicit operator bool() const { return pool_ != nullptr; }
        Session& session() const;
        int slot() const { return slot_; }

     private:
        SessionPool* pool_ = nullptr;
        int slot_ = -1;
    };

    // Waits (FIFO) for a free session, choosing the one with the longest shared prefix.
    // `still_wanted` is polled every `poll_ms` while waiting; when it returns false the request
    // leaves the queue and an empty Lease is returned (client gone).
    Lease acquire(std::span<const int32_t> prompt, const std::function<bool()>& still_wanted,
                  int poll_ms = 1000);

    // Shutdown: waiting requests leave the queue (acquire returns an empty Lease) and running
    // generations are cancelled. A generation that was leased but had not started when this ran
    // starts anyway (Session::generate clears a pending cancel), so callers repeat it until done.
    void cancel_all();
    bool closing() const;

    int size() const { return static_cast<int>(slots_.size()); }
    int64_t queue_depth() const;  // requests waiting
    int64_t active() const;       // sessions in use

 private:
    struct Slot {
        std::unique_ptr<Session> session;
        bool busy = false;
        uint64_t last_used = 0;
    };
    void release(int slot);

    mutable std::mutex mutex_;
    std::condition_variable cv_;
    std::vector<Slot> slots_;
    uint64_t next_ticket_ = 0;         // handed to the next arriving request
    uint64_t serving_ = 0;             // the oldest ticket still waiting (or the next to arrive)
    std::vector<uint64_t> abandoned_;  // tickets that left the queue before being served
    uint64_t use_clock_ = 0;
    int64_t waiting_ = 0;
    bool closing_ = false;
};

}  // namespace sluice::server
