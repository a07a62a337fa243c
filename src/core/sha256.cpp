// SHA-256 over OpenSSL's SHA256_CTX (see sha256.h).
//
// The low-level SHA256_* functions are deprecated in OpenSSL 3 in favour of EVP, whose state cannot
// be saved; they remain supported through 3.x, and this file is the only user.
#define OPENSSL_SUPPRESS_DEPRECATED
#include "core/sha256.h"

#include <openssl/sha.h>

#include <cstdio>
#include <cstring>

namespace sluice {

namespace {

static_assert(sizeof(SHA256_CTX) <= 112 && alignof(SHA256_CTX) <= 8, "SHA256_CTX does not fit Sha256::ctx_");

SHA256_CTX* as_ctx(std::array<unsigned char, 112>& bytes) {
    return reinterpret_cast<SHA256_CTX*>(bytes.data());
}
const SHA256_CTX* as_ctx(const std::array<unsigned char, 112>& bytes) {
    return reinterpret_cast<const SHA256_CTX*>(bytes.data());
}

int hex_value(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

}  // namespace

Sha256::Sha256() {
    SHA256_Init(as_ctx(ctx_));
}

void Sha256::update(std::span<const uint8_t> bytes) {
    if (!bytes.empty()) SHA256_Update(as_ctx(ctx_), bytes.data(), bytes.size());
}

uint64_t Sha256::bytes_hashed() const {
    const SHA256_CTX* c = as_ctx(ctx_);
    return ((static_cast<uint64_t>(c->Nh) << 32) | c->Nl) / 8;
}

std::string Sha256::hex_digest() const {
    SHA256_CTX copy = *as_ctx(ctx_);
    unsigned char digest[SHA256_DIGEST_LENGTH];
    SHA256_Final(digest, &copy);
    char out[2 * SHA256_DIGEST_LENGTH + 1];
    for (int i = 0; i < SHA256_DIGEST_LENGTH; ++i) std::snprintf(out + 2 * i, 3, "%02x", digest[i]);
    return std::string(out, 2 * SHA256_DIGEST_LENGTH);
}

std::string Sha256::save() const {
    const SHA256_CTX* c = as_ctx(ctx_);
    std::string s;
    char buf[24];
    for (size_t i = 0; i < 8; ++i) {
        std::snprintf(buf, sizeof buf, "%08x", static_cast<uint32_t>(c->h[i]));
        s += buf;
        s += i < 7 ? "," : ":";
    }
    const uint64_t total = bytes_hashed();
    s += std::to_string(total) + ":";
    const auto* tail = reinterpret_cast<const unsigned char*>(c->data);  // the block buffer, as bytes
    for (size_t i = 0; i < total % 64; ++i) {
        std::snprintf(buf, sizeof buf, "%02x", tail[i]);
        s += buf;
    }
    return s;
}

bool Sha256::restore(const std::string& state) {
    // 8 × 8 hex digits with separators, then the count, then the tail.
    if (state.size() < 72 || state[71] != ':') return false;
    uint32_t h[8] = {};
    for (size_t i = 0; i < 8; ++i) {
        for (size_t k = 0; k < 8; ++k) {
            const int v = hex_value(state[9 * i + k]);
            if (v < 0) return false;
            h[i] = h[i] << 4 | static_cast<uint32_t>(v);
        }
        if (i < 7 && state[9 * i + 8] != ',') return false;
    }
    const size_t colon = state.find(':', 72);
    if (colon == std::string::npos || colon == 72 || colon - 72 > 19) return false;
    uint64_t total = 0;
    for (size_t i = 72; i < colon; ++i) {
        if (state[i] < '0' || state[i] > '9') return false;
        total = total * 10 + static_cast<uint64_t>(state[i] - '0');
    }
    if (total > (UINT64_MAX >> 3)) return false;  // the bit count must fit 64 bits
    const std::string tail = state.substr(colon + 1);
    if (tail.size() != 2 * (total % 64)) return false;
    unsigned char t[64] = {};
    for (size_t i = 0; i < tail.size() / 2; ++i) {
        const int hi = hex_value(tail[2 * i]), lo = hex_value(tail[2 * i + 1]);
        if (hi < 0 || lo < 0) return false;
        t[i] = static_cast<unsigned char>(hi << 4 | lo);
    }
    SHA256_CTX c;
    SHA256_Init(&c);
    for (size_t i = 0; i < 8; ++i) c.h[i] = h[i];
    const uint64_t bits = total * 8;
    c.Nl = static_cast<SHA_LONG>(bits & 0xffffffffu);
    c.Nh = static_cast<SHA_LONG>(bits >> 32);
    std::memcpy(c.data, t, sizeof t);
    c.num = static_cast<unsigned int>(total % 64);
    std::memcpy(ctx_.data(), &c, sizeof c);
    return true;
}

}  // namespace sluice
