// SHA-256 (FIPS 180-4), incremental, with a state that can be saved and restored.
//
// `sluice pull` checks every LFS file against the SHA-256 the Hub lists for it. A resumed pull
// must continue the hash where the killed one stopped, so the running state (the eight words,
// the byte count and the unprocessed tail of the last block) serialises to a short string that
// goes into the progress record. A library hash (OpenSSL) was rejected because its context is
// an opaque struct whose bytes are not a stable format across versions.
//
// Threading: one object per stream; no shared state.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

namespace sluice {

class Sha256 {
 public:
    Sha256();
    void update(std::span<const uint8_t> bytes);
    void update(const void* data, size_t size) { update({static_cast<const uint8_t*>(data), size}); }
    // The lowercase hex digest of everything so far (the object is left unchanged).
    std::string hex_digest() const;
    uint64_t bytes_hashed() const { return total_bytes_; }

    // "h0,...,h7:total:tailhex" — restore() accepts exactly what save() wrote.
    std::string save() const;
    bool restore(const std::string& state);

 private:
    void block(const uint8_t* p);
    std::array<uint32_t, 8> h_;
    std::array<uint8_t, 64> tail_{};
    uint64_t total_bytes_ = 0;
};

}  // namespace sluice
