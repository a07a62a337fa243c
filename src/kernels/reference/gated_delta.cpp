// Reference (oracle) Gated DeltaNet: the token-by-token recurrence (models.md §3.5.6) and the
// chunked form (§3.5.7, C = 64) written as the literal matrix formulas of the spec, so a test
// comparing the two checks the chunk algebra itself. f32 state as in the model; intermediate sums in
// double. Single-threaded; the chunked form allocates its per-chunk matrices per call.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/assert.h"
#include "kernels/kernels.h"

namespace sluice::kernels::reference {

void gated_delta_recurrent(const float* q, const float* k, const float* v, const float* beta, const float* g,
                           int64_t n, int64_t n_k, int64_t n_v, int64_t dk, int64_t dv, const float* state_in,
                           float* state, float* out, ThreadPool* /*pool*/) {
    SLUICE_ASSERT(n_k > 0 && n_v % n_k == 0);
    const int64_t rep = n_v / n_k;
    if (state != state_in) std::copy(state_in, state_in + n_v * dk * dv, state);  // then in place
    std::vector<double> kv(static_cast<size_t>(dv));
    for (int64_t t = 0; t < n; ++t) {
        for (int64_t j = 0; j < n_v; ++j) {
            const int64_t m = j / rep;
            const float* kt = k + (t * n_k + m) * dk;
            const float* qt = q + (t * n_k + m) * dk;
            const float* vt = v + (t * n_v + j) * dv;
            const double alpha = std::exp(static_cast<double>(g[t * n_v + j]));
            const double b = beta[t * n_v + j];
            float* S = state + j * dk * dv;  // [dk, dv]
            for (int64_t i = 0; i < dk * dv; ++i) S[i] = static_cast<float>(S[i] * alpha);
            for (int64_t d = 0; d < dv; ++d) {
                double acc = 0.0;
                for (int64_t i = 0; i < dk; ++i) acc += static_cast<double>(S[i * dv + d]) * kt[i];
                kv[d] = acc;
            }
            for (int64_t i = 0; i < dk; ++i)
                for (int64_t d = 0; d < dv; ++d)
                    S[i * dv + d] = static_cast<float>(S[i * dv + d] + kt[i] * (b * (vt[d] - kv[d])));
            float* ot = out + (t * n_v + j) * dv;
            for (int64_t d = 0; d < dv; ++d) {
                double acc = 0.0;
                for (int64_t i = 0; i < dk; ++i) acc += static_cast<double>(S[i * dv + d]) * qt[i];
                ot[d] = static_cast<float>(acc);
            }
        }
    }
}

void gated_delta_chunked(const float* q, const float* k, const float* v, const float* beta, const float* g,
                         int64_t n, int64_t n_k, int64_t n_v, int64_t dk, int64_t dv, const float* state_in,
                         float* state, float* out, ThreadPool* /*pool*/) {
    SLUICE_ASSERT(n_k > 0 && n_v % n_k == 0);
    constexpr int64_t C = 64;
    const int64_t rep = n_v / n_k;
    std::vector<double> G(C), A(C * C), T(C * C), QKg(C * C), U(C * dv), W(C * dk), Vn(C * dv), S(dk * dv);
    for (int64_t j = 0; j < n_v; ++j) {
        const int64_t m = j / rep;
        float* Sj = state + j * dk * dv;
        for (int64_t i = 0; i < dk * dv; ++i) S[i] = state_in[j * dk * dv + i];
        for (int64_t c0 = 0; c0 < n; c0 += C) {
            // Rows past the end are the spec's zero padding: q = k = v = 0, beta = g = 0.
            auto valid = [&](int64_t t) { return c0 + t < n; };
            auto Q = [&](int64_t t, int64_t i) { return valid(t) ? q[((c0 + t) * n_k + m) * dk + i] : 0.0f; };
            auto K = [&](int64_t t, int64_t i) { return valid(t) ? k[((c0 + t) * n_k + m) * dk + i] : 0.0f; };
            auto V = [&](int64_t t, int64_t d) { return valid(t) ? v[((c0 + t) * n_v + j) * dv + d] : 0.0f; };
            auto B = [&](int64_t t) {
                return valid(t) ? static_cast<double>(beta[(c0 + t) * n_v + j]) : 0.0;
            };
            double cum = 0.0;
            for (int64_t t = 0; t < C; ++t) {
                cum += valid(t) ? g[(c0 + t) * n_v + j] : 0.0f;
                G[t] = cum;
            }
            auto gamma = [&](int64_t t, int64_t s) { return s <= t ? std::exp(G[t] - G[s]) : 0.0; };
            auto kdot = [&](int64_t a, int64_t b) {
                double acc = 0.0;
                for (int64_t i = 0; i < dk; ++i) acc += static_cast<double>(K(a, i)) * K(b, i);
                return acc;
            };
            for (int64_t t = 0; t < C; ++t)
                for (int64_t s = 0; s < C; ++s) A[t * C + s] = s < t ? -B(t) * kdot(t, s) * gamma(t, s) : 0.0;
            // T = (I - A)^-1 by forward substitution.
            for (int64_t t = 0; t < C; ++t) {
                for (int64_t s = 0; s < C; ++s) {
                    double acc = s == t ? 1.0 : 0.0;
                    if (s < t)
                        for (int64_t mm = s; mm < t; ++mm) acc += A[t * C + mm] * T[mm * C + s];
                    T[t * C + s] = acc;
                }
            }
            for (int64_t t = 0; t < C; ++t) {
                for (int64_t d = 0; d < dv; ++d) {
                    double acc = 0.0;
                    for (int64_t s = 0; s <= t; ++s) acc += T[t * C + s] * B(s) * V(s, d);
                    U[t * dv + d] = acc;
                }
                for (int64_t i = 0; i < dk; ++i) {
                    double acc = 0.0;
                    for (int64_t s = 0; s <= t; ++s) acc += T[t * C + s] * B(s) * std::exp(G[s]) * K(s, i);
                    W[t * dk + i] = acc;
                }
            }
            for (int64_t t = 0; t < C; ++t) {
                for (int64_t d = 0; d < dv; ++d) {
                    double ws = 0.0;
                    for (int64_t i = 0; i < dk; ++i) ws += W[t * dk + i] * S[i * dv + d];
                    Vn[t * dv + d] = U[t * dv + d] - ws;
                }
            }
            for (int64_t t = 0; t < C; ++t)
                for (int64_t s = 0; s < C; ++s) {
                    double qk = 0.0;
                    for (int64_t i = 0; i < dk; ++i) qk += static_cast<double>(Q(t, i)) * K(s, i);
                    QKg[t * C + s] = qk * gamma(t, s);  // (Q·Kᵀ) ⊙ Γ
                }
            for (int64_t t = 0; t < C && valid(t); ++t) {
                for (int64_t d = 0; d < dv; ++d) {
                    double qs = 0.0;
                    for (int64_t i = 0; i < dk; ++i) qs += static_cast<double>(Q(t, i)) * S[i * dv + d];
                    double attn = 0.0;
                    for (int64_t s = 0; s <= t; ++s) attn += QKg[t * C + s] * Vn[s * dv + d];
                    out[((c0 + t) * n_v + j) * dv + d] = static_cast<float>(std::exp(G[t]) * qs + attn);
                }
            }
            const double g_last = G[C - 1];
            for (int64_t i = 0; i < dk; ++i) {
                for (int64_t d = 0; d < dv; ++d) {
                    double acc = std::exp(g_last) * S[i * dv + d];
                    for (int64_t s = 0; s < C; ++s) acc += std::exp(g_last - G[s]) * K(s, i) * Vn[s * dv + d];
                    S[i * dv + d] = acc;
                }
            }
        }
        for (int64_t i = 0; i < dk * dv; ++i) Sj[i] = static_cast<float>(S[i]);
    }
}

}  // namespace sluice::kernels::reference
