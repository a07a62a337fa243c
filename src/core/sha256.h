// SHA-256 (FIPS 180-4), incremental, with a state that can be saved and restored.
//
// `sluice pull` checks every LFS file against the SHA-256 the Hub lists for it. A resumed pull
// must continue the hash where the killed one stopped, so the running state (the eight words,
// the byte count and the unprocessed tail of the last block) serialises to a short string that
// goes into the progress record.
//
// The compression runs in OpenSSL's libcrypto (SHA-NI or AVX2 assembly, chosen at run time):
// 1.80 GB/s on the 2-core CI machine (SHA-NI) where the hand-written C it replaced ran 0.30 GB/s,
// 6.0x (bench/hash_bench.cpp, bench/results/hash.md). Its low-level SHA256_CTX is used rather
// than EVP because its fields are public and mean exactly the standard's state (h0..h7, the bit
// count, the block buffer), so a state this class saved restores into any OpenSSL version; an EVP
// context is opaque. libsodium's state is public too, but its SHA-256 is portable C without
// SHA-NI.
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
    uint64_t bytes_hashed() const;

    // "h0,...,h7:total:tailhex" — restore() accepts exactly what save() wrote.
    std::string save() const;
    bool restore(const std::string& state);

 private:
    // An OpenSSL SHA256_CTX, kept as bytes so this header does not include OpenSSL's.
    alignas(8) std::array<unsigned char, 112> ctx_{};
};

}  // namespace sluice
