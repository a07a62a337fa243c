// A small pool of Sessions shared by the server's requests, with a fair queue.
//
// Up to `size` requests generate at once; the rest wait. Who is served next when a session frees:
// the waiter whose tenant (the client's address) holds the fewest sessions, then the tenant served
// least recently, then the oldest waiter. One tenant's requests are served in arrival order;
// across tenants the sessions go round in turn, so a client that queued a hundred requests does
// not make a later client wait for all hundred, and a burst from many clients cannot starve an
// early request (each newcomer is served once, then the early one's tenant is the least recent).
// When a request is served it gets the free session whose tokens share the longest prefix with
// its prompt — a follow-up turn of a conversation lands where that conversation's KV/DeltaNet
// state lives and only its new tokens are computed; with no shared prefix the least recently used
// session is taken, which keeps recent conversations warm.
//
// Threading: all methods are thread-safe. A Lease is owned by one request thread and returns
// the session on destruction. Reading a free session's tokens() is safe: nobody is using it.
// Rejected alternatives: one session per request — every turn would re-prefill the
// conversation; plain FIFO (what this was) — one client's burst delays every other client by the
// whole burst.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sluice/engine.h"
#include "sluice/session.h"

namespace sluice::server {

class SessionPool {
 public:
    // With `draft` (speculative decoding), each session is paired with a session of the draft
    // model for good: the pair moves together, so the draft's timeline follows its target's.
    SessionPool(const std::shared_ptr<Engine>& engine, int size,
                const std::shared_ptr<Engine>& draft = nullptr);

    class Lease {
     public:
        Lease() = default;
        Lease(SessionPool* pool, int slot) : pool_(pool), slot_(slot) {}
        Lease(Lease&& o) noexcept : pool_(o.pool_), slot_(o.slot_) { o.pool_ = nullptr; }
        Lease& operator=(Lease&&) = delete;
        ~Lease();
        explicit operator bool() const { return pool_ != nullptr; }
        Session& session() const;
        Session* draft() const;  // the paired draft-model session, or null without a draft model
        int slot() const { return slot_; }
        // Makes the leased session keep a `kv_bits` KV cache (0: the engine's): a session of another
        // type is replaced by a fresh one of this type (Engine::new_session; its cached prefix is
        // gone). An error (the memory plan cannot hold that type) leaves the session as it was.
        Status use_kv_bits(int kv_bits);

     private:
        SessionPool* pool_ = nullptr;
        int slot_ = -1;
    };

    // Waits for a free session (fair across tenants, FIFO within one), choosing the one with the
    // longest shared prefix. `still_wanted` is polled every `poll_ms` while waiting; when it
    // returns false the request leaves the queue and an empty Lease is returned (client gone).
    // `kv_bits`: the KV type the request wants (0: the engine's); only sessions of that type count
    // their shared prefix (Lease::use_kv_bits re-makes another).
    Lease acquire(std::span<const int32_t> prompt, const std::function<bool()>& still_wanted,
                  int poll_ms = 1000, std::string_view tenant = {}, int kv_bits = 0);

    // Shutdown: waiting requests leave the queue (acquire returns an empty Lease) and running
    // generations are cancelled. A generation that was leased but had not started when this ran
    // starts anyway (Session::generate clears a pending cancel), so callers repeat it until done.
    void cancel_all();
    bool closing() const;

    int size() const { return static_cast<int>(slots_.size()); }
    // Each pooled session now (llama.cpp's /slots).
    struct SlotInfo {
        bool busy = false;
        int64_t tokens = 0;  // of context it holds (reusable by a request sharing them)
        int kv_bits = 32;
    };
    std::vector<SlotInfo> slot_info() const;
    int64_t queue_depth() const;  // requests waiting
    int64_t active() const;       // sessions in use

 private:
    struct Slot {
        std::unique_ptr<Session> session;
        std::unique_ptr<Session> draft;
        bool busy = false;
        uint64_t last_used = 0;
        std::string tenant;  // whose request holds it
    };
    struct Waiter {
        uint64_t ticket;
        std::string tenant;
    };
    struct Tenant {  // kept while it holds a session or waits for one
        int in_use = 0;
        int waiting = 0;
        uint64_t last_served = 0;  // serve_clock_ when it last got a session (0: not yet)
    };
    void release(int slot);
    uint64_t next_to_serve() const;  // the ticket served when a session frees (mutex_ held)
    void forget_if_idle(const std::string& tenant);

    std::shared_ptr<Engine> engine_;
    int default_kv_bits_ = 32;  // the engine's sessions'
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    std::vector<Slot> slots_;
    std::vector<Waiter> waiters_;  // in arrival order
    std::unordered_map<std::string, Tenant> tenants_;
    uint64_t next_ticket_ = 0;
    uint64_t serve_clock_ = 0;
    uint64_t use_clock_ = 0;
    bool closing_ = false;
};

}  // namespace sluice::server
