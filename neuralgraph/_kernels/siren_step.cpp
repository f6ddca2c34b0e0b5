// Loss and gradient of a batch of SIRENs 2-d1-d2-1 on an H x W grid, one INR per OpenMP task.
//
// The same mathematics as neuralgraph.inr.gradient.loss_and_gradient (closed-form backward,
// layer 1 by angle addition), fused so that each INR's activations never leave the cache: the
// pixels are processed in chunks of PC, and within a chunk every elementwise step (sin and cos
// from one range reduction, the output layer, the residual, the factors of the backward) runs
// on the registers a small matrix product has just produced. Each INR is computed by one thread
// in a fixed order, so its result does not depend on the other INRs of the batch.
//
// Built lazily by neuralgraph/_kernels/__init__.py (g++ -O3 -march=native -fopenmp) and called
// through ctypes; plain C ABI, no torch headers (compiles in seconds).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

// Register blocking per instruction set (each -D overridable, for benchmarks/inr_fit.py
// --kernel-variant): a chunk is NV vectors of LANES pixels, the chunk products are blocked JB
// rows at a time (JB x NV accumulators + NV operands + one broadcast must fit the register
// file), the outer products OJ x OK. AVX-512 (32 x 16 floats): 7 vectors (112 pixels: 784 =
// 7 chunks), 3-row blocks, 4 x 4 outer blocks. AVX2 (16 x 8 floats): a 16-float vector is two
// registers and the AVX-512 blocking spills (docs/inr.md), so 8 lanes, 4 x 2 blocks,
// 2 x 4 outer blocks. Other targets (SSE, NEON: 4 floats): 4 lanes, 4 x 2, 2 x 4.
#if defined(__AVX512F__)
#define NG_DEFAULT_LANES 16
#define NG_DEFAULT_NV 7
#define NG_DEFAULT_JB 3
#define NG_DEFAULT_OJ 4
#elif defined(__AVX__)
#define NG_DEFAULT_LANES 8
#define NG_DEFAULT_NV 4
#define NG_DEFAULT_JB 2
#define NG_DEFAULT_OJ 2
#else
#define NG_DEFAULT_LANES 4
#define NG_DEFAULT_NV 4
#define NG_DEFAULT_JB 2
#define NG_DEFAULT_OJ 2
#endif
#ifndef NG_LANES
#define NG_LANES NG_DEFAULT_LANES
#endif
#ifndef NG_NV
#define NG_NV NG_DEFAULT_NV
#endif
#ifndef NG_JB
#define NG_JB NG_DEFAULT_JB
#endif
#ifndef NG_OJ
#define NG_OJ NG_DEFAULT_OJ
#endif
#ifndef NG_OK
#define NG_OK 4
#endif

constexpr int LANES = NG_LANES;
typedef float vf __attribute__((vector_size(LANES * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(LANES * sizeof(int32_t))));
constexpr int NV = NG_NV;           // vectors per chunk
constexpr int JB = NG_JB;           // rows per register block of the chunk products
constexpr int OJ = NG_OJ, OK = NG_OK;  // register block of the outer products
constexpr int PC = NV * LANES;      // pixels per chunk

inline vf splat(float x) { return vf{} + x; }
inline float hsum(vf x) {  // a pairwise tree: log2(LANES) dependent adds
    float t[LANES];
    std::memcpy(t, &x, sizeof t);
    for (int width = LANES / 2; width > 0; width /= 2)
        for (int i = 0; i < width; ++i) t[i] += t[i + width];
    return t[0];
}

// sin and cos of x from one reduction: x = q pi/2 + r (Cody-Waite, |x| < 2^20), Cephes minimax
// polynomials on |r| <= pi/4 (about 1 ulp), then the quadrant q mod 4 swaps and signs them.
inline void sincos_v(vf x, vf& s, vf& c) {
    const vf shifter = splat(12582912.f);  // 1.5 * 2^23: adding it rounds to an integer
    vf t = x * splat(0.636619772367581343f) + shifter;
    vf q = t - shifter;
    vi qi = (vi)t - (vi)shifter;
    vf r = x - q * splat(1.5703125f);
    r = r - q * splat(4.837512969970703125e-4f);
    r = r - q * splat(7.549789948768648e-8f);
    vf r2 = r * r;
    vf ps = ((splat(-1.9515295891e-4f) * r2 + splat(8.3321608736e-3f)) * r2 + splat(-1.6666654611e-1f)) * r2 * r + r;
    vf pc = ((splat(2.443315711809948e-5f) * r2 + splat(-1.388731625493765e-3f)) * r2 + splat(4.166664568298827e-2f))
                 * r2 * r2 - splat(0.5f) * r2 + splat(1.f);
    vi swap = (qi & 1) != 0;
    vf sv = swap ? pc : ps;
    vf cv = swap ? ps : pc;
    vi sin_sign = (qi & 2) << 30;
    vi cos_sign = ((qi + 1) & 2) << 30;
    s = (vf)((vi)sv ^ sin_sign);
    c = (vf)((vi)cv ^ cos_sign);
}

inline vf load(const float* p) { vf x; std::memcpy(&x, p, sizeof x); return x; }
inline void store(float* p, vf x) { std::memcpy(p, &x, sizeof x); }

// acc[j][v] = bias[j] + sum_k a[j * lda + k * ldk] b[k][v] for JB rows j, the chunk's NV vectors
template <int JB>
inline void rows_times_chunk(const float* a, int lda, int ldk, int kdim, const float* b, const float* bias,
                             vf (&acc)[JB][NV]) {
    for (int jb = 0; jb < JB; ++jb)
        for (int v = 0; v < NV; ++v) acc[jb][v] = splat(bias ? bias[jb] : 0.f);
    for (int k = 0; k < kdim; ++k) {
        vf bv[NV];
        for (int v = 0; v < NV; ++v) bv[v] = load(b + k * PC + v * LANES);
        for (int jb = 0; jb < JB; ++jb) {
            vf w = splat(a[jb * lda + k * ldk]);
            for (int v = 0; v < NV; ++v) acc[jb][v] += w * bv[v];
        }
    }
}

// acc[j][k] += sum_v x[j][v] y[k][v], lane-wise (reduced over lanes at the end of the INR)
template <int JB, int KB>
inline void outer_chunk(const float* x, const float* y, vf* acc, int ld) {
    vf a[JB][KB];
    for (int jb = 0; jb < JB; ++jb)
        for (int kb = 0; kb < KB; ++kb) a[jb][kb] = acc[jb * ld + kb];
    for (int v = 0; v < NV; ++v) {
        vf xv[JB], yv[KB];
        for (int jb = 0; jb < JB; ++jb) xv[jb] = load(x + jb * PC + v * LANES);
        for (int kb = 0; kb < KB; ++kb) yv[kb] = load(y + kb * PC + v * LANES);
        for (int jb = 0; jb < JB; ++jb)
            for (int kb = 0; kb < KB; ++kb) a[jb][kb] += xv[jb] * yv[kb];
    }
    for (int jb = 0; jb < JB; ++jb)
        for (int kb = 0; kb < KB; ++kb) acc[jb * ld + kb] = a[jb][kb];
}

struct Problem {
    int height, width, d1, d2, pixels, padded, row_input;
    float w0, offset;
    const float *rows, *cols;
    std::vector<float> in0, in1, mask;  // per padded pixel: the two inputs, 1 for a real pixel
};

struct Scratch {
    std::vector<float> sr, cr, sc, cc;                // layer 1's sin/cos of the row and column parts
    std::vector<float> h1, c1, h2, c2, gz, out, g;    // one chunk of activations, [d][PC]
    std::vector<float> w2, b2, w3s;                   // w0 W2, w0 b2, w0 w3 (the factors the angles need)
    std::vector<vf> gw1, gw2, gw3;                   // lane-wise gradient accumulators
    Scratch(const Problem& pr) {
        int h = pr.height + LANES, w = pr.width + LANES;
        sr.resize(pr.d1 * h); cr.resize(pr.d1 * h); sc.resize(pr.d1 * w); cc.resize(pr.d1 * w);
        h1.resize(pr.d1 * PC + LANES); c1.resize(pr.d1 * PC + LANES); h2.resize(pr.d2 * PC); c2.resize(pr.d2 * PC);
        gz.resize(pr.d2 * PC); out.resize(PC); g.resize(PC);
        w2.resize(pr.d2 * pr.d1); b2.resize(pr.d2); w3s.resize(pr.d2);
        gw1.resize(pr.d1 * 3); gw2.resize(pr.d2 * (pr.d1 + 1)); gw3.resize(pr.d2 + 1);
    }
};

// sin/cos of w0 (u x + b) for the n values x of an axis, into s and c (padded to whole vectors)
void axis_sincos(const float* axis, int n, float u, float b, float w0, float* s, float* c) {
    for (int i = 0; i < n; i += LANES) {
        vf x{};
        for (int l = 0; l < LANES && i + l < n; ++l) x[l] = axis[i + l];
        vf sv, cv;
        sincos_v(splat(w0) * (splat(u) * x + splat(b)), sv, cv);
        store(s + i, sv);
        store(c + i, cv);
    }
}

void one_inr(const Problem& pr, Scratch& sp, const float* flat, const float* target, float* mse, float* grad) {
    const int d1 = pr.d1, d2 = pr.d2, H = pr.height, W = pr.width, P = pr.pixels;
    const float w0 = pr.w0;
    const float* b1 = flat;                  // [d1][3]: weight of input 0, input 1, bias
    const float* b2 = flat + 3 * d1;         // [d2][d1 + 1]
    const float* b3 = b2 + d2 * (d1 + 1);    // [d2 + 1]
    const int hs = H + LANES, ws = W + LANES;
    for (int k = 0; k < d1; ++k) {
        float u_row = b1[3 * k + pr.row_input], u_col = b1[3 * k + 1 - pr.row_input];
        axis_sincos(pr.rows, H, u_row, b1[3 * k + 2], w0, &sp.sr[k * hs], &sp.cr[k * hs]);
        axis_sincos(pr.cols, W, u_col, 0.f, w0, &sp.sc[k * ws], &sp.cc[k * ws]);
    }
    for (int j = 0; j < d2; ++j) {
        for (int k = 0; k < d1; ++k) sp.w2[j * d1 + k] = w0 * b2[j * (d1 + 1) + k];
        sp.b2[j] = w0 * b2[j * (d1 + 1) + d1];
        sp.w3s[j] = w0 * b3[j];
    }
    std::fill(sp.gw1.begin(), sp.gw1.end(), vf{});
    std::fill(sp.gw2.begin(), sp.gw2.end(), vf{});
    std::fill(sp.gw3.begin(), sp.gw3.end(), vf{});
    vf sq{};
    const vf two_over_p = splat(2.f / P);
    for (int p0 = 0; p0 < pr.padded; p0 += PC) {
        // layer 1 by angle addition, one image row segment at a time; padded pixels are zero
        for (int k = 0; k < d1; ++k) {
            float* h = &sp.h1[k * PC];
            float* c = &sp.c1[k * PC];
            for (int i = 0; i < PC;) {
                int p = p0 + i;
                if (p >= P) { h[i] = 0.f; c[i] = 0.f; ++i; continue; }
                int r = p / W, col = p % W, len = std::min(W - col, PC - i);
                vf s_r = splat(sp.sr[k * hs + r]), c_r = splat(sp.cr[k * hs + r]);
                const float* s_c = &sp.sc[k * ws + col];
                const float* c_c = &sp.cc[k * ws + col];
                // whole vectors: what a store writes past the segment, the next segment (or the
                // next row k, or the buffers' padding) overwrites
                for (int m = 0; m < len; m += LANES) {
                    vf sv = load(s_c + m), cv = load(c_c + m);
                    store(h + i + m, s_r * cv + c_r * sv);
                    store(c + i + m, c_r * cv - s_r * sv);
                }
                i += len;
            }
        }
        // layer 2 (bmm with w0 W2), its sin and cos, and the output layer, fused
        vf out[NV] = {};
        auto finish = [&](int jj, vf* acc) {
            for (int v = 0; v < NV; ++v) {
                vf s, c;
                sincos_v(acc[v], s, c);
                store(&sp.h2[jj * PC + v * LANES], s);
                store(&sp.c2[jj * PC + v * LANES], c);
                out[v] += splat(b3[jj]) * s;
            }
        };
        int j = 0;
        for (; j + JB <= d2; j += JB) {
            vf acc[JB][NV];
            rows_times_chunk<JB>(&sp.w2[j * d1], d1, 1, d1, sp.h1.data(), &sp.b2[j], acc);
            for (int jb = 0; jb < JB; ++jb) finish(j + jb, acc[jb]);
        }
        for (; j < d2; ++j) {
            vf acc[1][NV];
            rows_times_chunk<1>(&sp.w2[j * d1], d1, 1, d1, sp.h1.data(), &sp.b2[j], acc);
            finish(j, acc[0]);
        }
        // residual, loss, dL/d(output) = 2 (f - y) / P
        for (int v = 0; v < NV; ++v) {
            vf y{};
            int p = p0 + v * LANES;
            for (int l = 0; l < LANES && p + l < P; ++l) y[l] = target[p + l];
            vf m = load(&pr.mask[p]);
            vf res = (out[v] + splat(b3[d2] + pr.offset) - y) * m;
            sq += res * res;
            vf g = res * two_over_p;
            store(&sp.g[v * LANES], g);
            sp.gw3[d2] += g;
        }
        // output layer's gradient; dL/dz2 = w0 w3 cos(w0 z2) g
        for (int j = 0; j < d2; ++j) {
            vf acc = sp.gw3[j];
            for (int v = 0; v < NV; ++v) {
                vf g = load(&sp.g[v * LANES]);
                acc += g * load(&sp.h2[j * PC + v * LANES]);
                store(&sp.gz[j * PC + v * LANES], load(&sp.c2[j * PC + v * LANES]) * g * splat(sp.w3s[j]));
            }
            sp.gw3[j] = acc;
        }
        // layer 2's block gradient [d2][d1 + 1] += dL/dz2 [d2][PC] x [h1; 1]^T
        const int ld = d1 + 1;
        for (j = 0; j + OJ <= d2; j += OJ) {
            int k = 0;
            for (; k + OK <= d1; k += OK) outer_chunk<OJ, OK>(&sp.gz[j * PC], &sp.h1[k * PC], &sp.gw2[j * ld + k], ld);
            for (; k < d1; ++k) outer_chunk<OJ, 1>(&sp.gz[j * PC], &sp.h1[k * PC], &sp.gw2[j * ld + k], ld);
        }
        for (; j < d2; ++j)
            for (int k = 0; k < d1; ++k) outer_chunk<1, 1>(&sp.gz[j * PC], &sp.h1[k * PC], &sp.gw2[j * ld + k], ld);
        for (int jj = 0; jj < d2; ++jj)
            for (int v = 0; v < NV; ++v) sp.gw2[jj * ld + d1] += load(&sp.gz[jj * PC + v * LANES]);
        // dL/dh1 = W2^T dL/dz2; dL/dz1 = w0 cos(w0 z1) dL/dh1; layer 1's block gradient
        auto layer1 = [&](int k, vf* acc) {
            for (int v = 0; v < NV; ++v) {
                int p = p0 + v * LANES;
                vf gz1 = splat(w0) * load(&sp.c1[k * PC + v * LANES]) * acc[v];
                sp.gw1[3 * k] += gz1 * load(&pr.in0[p]);
                sp.gw1[3 * k + 1] += gz1 * load(&pr.in1[p]);
                sp.gw1[3 * k + 2] += gz1;
            }
        };
        int k = 0;
        for (; k + JB <= d1; k += JB) {
            vf acc[JB][NV];
            rows_times_chunk<JB>(b2 + k, 1, d1 + 1, d2, sp.gz.data(), nullptr, acc);
            for (int kb = 0; kb < JB; ++kb) layer1(k + kb, acc[kb]);
        }
        for (; k < d1; ++k) {
            vf acc[1][NV];
            rows_times_chunk<1>(b2 + k, 1, d1 + 1, d2, sp.gz.data(), nullptr, acc);
            layer1(k, acc[0]);
        }
    }
    *mse = hsum(sq) / P;
    for (int i = 0; i < 3 * d1; ++i) grad[i] = hsum(sp.gw1[i]);
    for (int i = 0; i < d2 * (d1 + 1); ++i) grad[3 * d1 + i] = hsum(sp.gw2[i]);
    for (int i = 0; i <= d2; ++i) grad[3 * d1 + d2 * (d1 + 1) + i] = hsum(sp.gw3[i]);
}

}  // namespace

extern "C" {

// s[i], c[i] = sin(x[i]), cos(x[i]) by the kernel's own vector sincos (for tests/test_inr.py)
void siren_sincos(long n, const float* x, float* s, float* c) {
    for (long i = 0; i < n; i += LANES) {
        vf xv{}, sv, cv;
        for (int l = 0; l < LANES && i + l < n; ++l) xv[l] = x[i + l];
        sincos_v(xv, sv, cv);
        for (int l = 0; l < LANES && i + l < n; ++l) { s[i + l] = sv[l]; c[i + l] = cv[l]; }
    }
}

// Per-INR mean squared error mse[n] and gradient grad[n][num_parameters] of the packed
// parameters flat[n][num_parameters] (neuralgraph.inr.pack) against targets[n][H * W];
// rows[H], cols[W]: the grid axes; row_input: which input is the row coordinate.
void siren_loss_and_gradient(int n, int height, int width, int d1, int d2, const float* flat, const float* targets,
                            const float* rows, const float* cols, int row_input, float w0, float offset,
                            float* mse, float* grad, int threads) {
    Problem pr;
    pr.height = height; pr.width = width; pr.d1 = d1; pr.d2 = d2; pr.row_input = row_input;
    pr.pixels = height * width;
    pr.padded = (pr.pixels + PC - 1) / PC * PC;
    pr.w0 = w0; pr.offset = offset; pr.rows = rows; pr.cols = cols;
    pr.in0.assign(pr.padded, 0.f); pr.in1.assign(pr.padded, 0.f); pr.mask.assign(pr.padded, 0.f);
    for (int p = 0; p < pr.pixels; ++p) {
        float r = rows[p / width], c = cols[p % width];
        pr.in0[p] = row_input == 0 ? r : c;
        pr.in1[p] = row_input == 0 ? c : r;
        pr.mask[p] = 1.f;
    }
    const long params = 3L * d1 + (long)d2 * (d1 + 1) + d2 + 1;
#pragma omp parallel num_threads(threads)
    {
        Scratch sp(pr);
#pragma omp for schedule(dynamic, 1)
        for (int i = 0; i < n; ++i)
            one_inr(pr, sp, flat + i * params, targets + (long)i * pr.pixels, mse + i, grad + i * params);
    }
}
}
