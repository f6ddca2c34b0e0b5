// The elementwise steps around the matrix products of the zoo trainer's CNN (neuralgraph/data/
// zoo_trainer.py, ConvStack), fused so that a tile's feature maps are read and written once:
//
//   forward:  out = act(z) * keep (relu here; tanh and gelu applied before the call), the keep
//             mask from the network's stream of 16-bit integers (kept where the integer is below
//             the threshold; the stream is computed here, as zoo_trainer.RandomBits.draw computes
//             it with torch), and the 3x3 stride-2 patches of out: the next layer's input rows
//             (taps, then channels);
//   backward: the gradient at the patches added back at their pixels (gathered per pixel, each
//             pixel lies in up to four patches, in a fixed order) times the activation's
//             derivative and the mask.
//
// Feature maps are channels last, [T, H, H, C]; patches [T, h, h, 3, 3, C]. One call is one tile
// of one network, on the calling thread. Built lazily by neuralgraph/data/zoo_trainer.py through
// neuralgraph._kernels.build (g++ -O3 -march=native) and called through ctypes; plain C ABI, no
// torch headers (compiles in seconds).
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

// Whole AVX-512 vectors where the target has them (GCC 12 tunes unknown newer Intel CPUs for
// 256-bit vectors); no effect on targets without AVX-512.
#pragma GCC target("prefer-vector-width=512")

#define NG_INLINE inline __attribute__((always_inline))

namespace {

enum Activation { RELU = 0, TANH = 1, IDENTITY = 2 };

// 16 channels (the zoos' width) as one vector value: explicit vector code for the hot loops.
template <typename F> struct Lanes {
    typedef F V __attribute__((vector_size(16 * sizeof(F))));
    typedef typename std::conditional<sizeof(F) == 4, int32_t, int64_t>::type I;
    typedef I M __attribute__((vector_size(16 * sizeof(F))));
    static NG_INLINE V load(const F* p) { V v; std::memcpy(&v, p, sizeof v); return v; }
    static NG_INLINE void store(F* p, V v) { std::memcpy(p, &v, sizeof v); }
    static NG_INLINE M bytes(const uint8_t* p) {  // 16 bytes as a mask (-1 where non-zero)
        typedef uint8_t B __attribute__((vector_size(16)));
        B b; std::memcpy(&b, p, sizeof b);
        return __builtin_convertvector(b, M) != 0;
    }
    static NG_INLINE M below(const uint64_t* words, int threshold) {  // -1 where the c-th 16-bit quarter < threshold
        typedef int16_t S __attribute__((vector_size(32)));
        S b; std::memcpy(&b, words, sizeof b);  // little-endian quarters, as torch's view(int16)
        return __builtin_convertvector(b, M) < (I)threshold;
    }
};

// The random stream (zoo_trainer.RandomBits): word w of a network is splitmix64's finalizer of
// key + w * GOLDEN (modulo 2**64); its four 16-bit quarters are four integers, little-endian.
constexpr uint64_t GOLDEN = 0x9E3779B97F4A7C15ULL;

NG_INLINE uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

typedef uint64_t U4 __attribute__((vector_size(32)));

NG_INLINE U4 mix64(U4 z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// The forward of one tile. C: the channel count (CC == 16: vector code; else CC == 0, scalar).
// masked: draw the words image_words * t + offset_words + ... from word0 of the stream of key.
template <typename F, int CC>
void mask_patches(int T, int H, int h, int C_, F* __restrict__ out, int relu, int masked, uint64_t key,
                  uint64_t word0, long image_words, long offset_words, int threshold, uint8_t* __restrict__ mask,
                  F* __restrict__ cols) {
    typedef Lanes<F> L;
    typedef typename L::V V;
    const int C = CC ? CC : C_;
    const long pixels = (long)H * H, plane = pixels * C;
    const V zero = V{} * F(0);
    for (int t = 0; t < T; ++t) {
        F* __restrict__ o = out + t * plane;
        uint8_t* m = mask ? mask + t * plane : nullptr;
        const uint64_t first = word0 + (uint64_t)(t * image_words + offset_words);
        if (CC == 16) {
            const U4 lane = {0, 1, 2, 3};
            for (long q = 0; q < pixels; ++q) {
                V v = L::load(o + 16 * q);
                if (relu) v = v > zero ? v : zero;
                if (masked) {  // 16 channels: 4 words
                    const U4 words = mix64((first + 4 * (uint64_t)q + lane) * GOLDEN + key);
                    uint64_t w[4];
                    std::memcpy(w, &words, sizeof w);
                    auto keep = L::below(w, threshold);
                    v = keep ? v : zero;
                    if (m) {
                        for (int c = 0; c < 16; ++c) m[16 * q + c] = keep[c] != 0;
                    }
                }
                L::store(o + 16 * q, v);
            }
        } else {
            for (long k = 0; k < plane; ++k) {
                F v = relu && !(o[k] > F(0)) ? F(0) : o[k];
                if (masked) {
                    const uint64_t word = mix64((first + (uint64_t)(k >> 2)) * GOLDEN + key);
                    const bool keep = (int16_t)(uint16_t)(word >> (16 * (k & 3))) < threshold;
                    v = keep ? v : F(0);
                    if (m) m[k] = keep;
                }
                o[k] = v;
            }
        }
        if (!cols) continue;
        F* __restrict__ p = cols + (long)t * h * h * 9 * C;
        for (int i = 0; i < h; ++i) {
            for (int j = 0; j < h; ++j) {
                for (int ki = 0; ki < 3; ++ki) {  // a patch row: 3 pixels x C channels, consecutive
                    std::memcpy(p, o + ((long)(2 * i + ki) * H + 2 * j) * C, sizeof(F) * 3 * C);
                    p += 3 * C;
                }
            }
        }
    }
}

// The backward of one tile: per pixel, the sum of its (up to four) patch entries, in a fixed order.
template <typename F, int CC>
void patches_back(int T, int H, int h, int C_, const F* __restrict__ dcols, const F* __restrict__ out,
                  const uint8_t* __restrict__ mask, int activation, F* __restrict__ dz) {
    typedef Lanes<F> L;
    typedef typename L::V V;
    const int C = CC ? CC : C_;
    const long plane = (long)H * H * C;
    const long patch = 9L * C;
    std::vector<F> zeros(C, F(0));  // the source of a pixel's missing contributions
    const V zero = V{} * F(0), one = zero + F(1);
    for (int t = 0; t < T; ++t) {
        const F* d = dcols + (long)t * h * h * patch;
        const F* __restrict__ o = out + t * plane;
        const uint8_t* __restrict__ m = mask ? mask + t * plane : nullptr;
        F* __restrict__ g = dz + t * plane;
        for (int y = 0; y < H; ++y) {
            // the patch rows i and taps ki with 2 i + ki = y: (y / 2, y % 2), and (y / 2 - 1, 2) for even y
            const int i0 = y >> 1, k0 = y & 1, i1 = (y >> 1) - 1;
            const bool r0 = i0 < h, r1 = !(y & 1) && y >= 2 && i1 < h;
            for (int x = 0; x < H; ++x) {
                const int j0 = x >> 1, q0 = x & 1, j1 = (x >> 1) - 1;
                const bool c0 = j0 < h, c1 = !(x & 1) && x >= 2 && j1 < h;
                const F* z = zeros.data();
                const F* s00 = r0 && c0 ? d + ((long)i0 * h + j0) * patch + (k0 * 3 + q0) * C : z;
                const F* s01 = r0 && c1 ? d + ((long)i0 * h + j1) * patch + (k0 * 3 + 2) * C : z;
                const F* s10 = r1 && c0 ? d + ((long)i1 * h + j0) * patch + (2 * 3 + q0) * C : z;
                const F* s11 = r1 && c1 ? d + ((long)i1 * h + j1) * patch + (2 * 3 + 2) * C : z;
                const long k = ((long)y * H + x) * C;
                if (CC == 16) {
                    V v = ((L::load(s00) + L::load(s01)) + L::load(s10)) + L::load(s11);
                    const V oc = L::load(o + k);
                    if (activation == RELU) v = oc > zero ? v : zero;  // out > 0 exactly where z > 0 and kept
                    else if (activation == TANH) v = v * (one - oc * oc);
                    if (m && activation != RELU) v = L::bytes(m + k) ? v : zero;
                    L::store(g + k, v);
                    continue;
                }
                for (int c = 0; c < C; ++c) {
                    F v = ((s00[c] + s01[c]) + s10[c]) + s11[c];
                    if (activation == RELU) v = o[k + c] > F(0) ? v : F(0);
                    else if (activation == TANH) v = v * (F(1) - o[k + c] * o[k + c]);
                    if (m && activation != RELU && !m[k + c]) v = F(0);
                    g[k + c] = v;
                }
            }
        }
    }
}

// The first layer's backward: the gradient at its output's patches added back at their pixels
// (as patches_back), times the activation's derivative and the mask, and at once its weight
// gradient: dW[r] += x[pixel, r] * g[pixel] over the pixels, x[pixel] the pixel's 3x3 stride-2
// patch of the image (S x S, one channel) and a 1 for the bias. dW [10, C] is added to.
template <typename F, int CC>
void first_layer_back(int T, int S, int H, int h, int C_, const F* __restrict__ dcols, const F* __restrict__ out,
                      const uint8_t* __restrict__ mask, int activation, const F* __restrict__ images,
                      F* __restrict__ dW) {
    const int R = 10;
    typedef Lanes<F> L;
    typedef typename L::V V;
    const int C = CC ? CC : C_;
    const long plane = (long)H * H * C;
    const long patch = 9L * C;
    std::vector<F> zeros(C, F(0));
    std::vector<F> g(C);
    constexpr int RMAX = 16;
    V acc[RMAX];
    const V zero = V{} * F(0), one = zero + F(1);
    if (CC == 16) {
        for (int r = 0; r < R; ++r) acc[r] = zero;
    }
    for (int t = 0; t < T; ++t) {
        const F* d = dcols + (long)t * h * h * patch;
        const F* __restrict__ o = out + t * plane;
        const uint8_t* __restrict__ m = mask ? mask + t * plane : nullptr;
        const F* __restrict__ image = images + (long)t * S * S;
        for (int y = 0; y < H; ++y) {
            const int i0 = y >> 1, k0 = y & 1, i1 = (y >> 1) - 1;
            const bool r0 = i0 < h, r1 = !(y & 1) && y >= 2 && i1 < h;
            for (int xx = 0; xx < H; ++xx) {
                const int j0 = xx >> 1, q0 = xx & 1, j1 = (xx >> 1) - 1;
                const bool c0 = j0 < h, c1 = !(xx & 1) && xx >= 2 && j1 < h;
                const F* z = zeros.data();
                const F* s00 = r0 && c0 ? d + ((long)i0 * h + j0) * patch + (k0 * 3 + q0) * C : z;
                const F* s01 = r0 && c1 ? d + ((long)i0 * h + j1) * patch + (k0 * 3 + 2) * C : z;
                const F* s10 = r1 && c0 ? d + ((long)i1 * h + j0) * patch + (2 * 3 + q0) * C : z;
                const F* s11 = r1 && c1 ? d + ((long)i1 * h + j1) * patch + (2 * 3 + 2) * C : z;
                const long pixel = (long)y * H + xx, k = pixel * C;
                F xp[10];
                for (int ki = 0; ki < 3; ++ki) {
                    for (int kj = 0; kj < 3; ++kj) xp[3 * ki + kj] = image[(long)(2 * y + ki) * S + 2 * xx + kj];
                }
                xp[9] = F(1);
                if (CC == 16) {
                    V v = ((L::load(s00) + L::load(s01)) + L::load(s10)) + L::load(s11);
                    const V oc = L::load(o + k);
                    if (activation == RELU) v = oc > zero ? v : zero;
                    else if (activation == TANH) v = v * (one - oc * oc);
                    if (m && activation != RELU) v = L::bytes(m + k) ? v : zero;
                    for (int r = 0; r < R; ++r) acc[r] += xp[r] * v;
                    continue;
                }
                for (int c = 0; c < C; ++c) {
                    F v = ((s00[c] + s01[c]) + s10[c]) + s11[c];
                    if (activation == RELU) v = o[k + c] > F(0) ? v : F(0);
                    else if (activation == TANH) v = v * (F(1) - o[k + c] * o[k + c]);
                    if (m && activation != RELU && !m[k + c]) v = F(0);
                    g[c] = v;
                }
                for (int r = 0; r < R; ++r) {
                    for (int c = 0; c < C; ++c) dW[(long)r * C + c] += xp[r] * g[c];
                }
            }
        }
    }
    if (CC == 16) {
        for (int r = 0; r < R; ++r) L::store(dW + (long)r * C, L::load(dW + (long)r * C) + acc[r]);
    }
}

template <typename F>
void mask_patches_any(int T, int H, int h, int C, F* out, int relu, int masked, uint64_t key, uint64_t word0,
                      long image_words, long offset_words, int threshold, uint8_t* mask, F* cols) {
    if (C == 16)
        mask_patches<F, 16>(T, H, h, C, out, relu, masked, key, word0, image_words, offset_words, threshold, mask,
                            cols);
    else
        mask_patches<F, 0>(T, H, h, C, out, relu, masked, key, word0, image_words, offset_words, threshold, mask,
                           cols);
}

template <typename F>
void patches_back_any(int T, int H, int h, int C, const F* dcols, const F* out, const uint8_t* mask, int activation,
                      F* dz) {
    if (C == 16) patches_back<F, 16>(T, H, h, C, dcols, out, mask, activation, dz);
    else patches_back<F, 0>(T, H, h, C, dcols, out, mask, activation, dz);
}

template <typename F>
void first_layer_back_any(int T, int S, int H, int h, int C, const F* dcols, const F* out, const uint8_t* mask,
                          int activation, const F* images, F* dW) {
    if (C == 16) first_layer_back<F, 16>(T, S, H, h, C, dcols, out, mask, activation, images, dW);
    else first_layer_back<F, 0>(T, S, H, h, C, dcols, out, mask, activation, images, dW);
}

// The first layer's forward: z[pixel] = W[9] + sum over taps of x[pixel, tap] * W[tap] (the
// pixel's 3x3 stride-2 patch of the image, S x S, one channel; W [10, C]: taps, then the bias).
template <typename F, int CC>
void first_layer(int T, int S, int H, int C_, const F* __restrict__ images, const F* __restrict__ W,
                 F* __restrict__ z) {
    typedef Lanes<F> L;
    typedef typename L::V V;
    const int C = CC ? CC : C_;
    V w[10];
    if (CC == 16) {
        for (int r = 0; r < 10; ++r) w[r] = L::load(W + r * 16);
    }
    for (int t = 0; t < T; ++t) {
        const F* __restrict__ image = images + (long)t * S * S;
        F* __restrict__ zt = z + (long)t * H * H * C;
        for (int y = 0; y < H; ++y) {
            for (int x = 0; x < H; ++x) {
                const F* p = image + (long)(2 * y) * S + 2 * x;
                F* __restrict__ zp = zt + ((long)y * H + x) * C;
                if (CC == 16) {
                    V v = w[9];
                    for (int ki = 0; ki < 3; ++ki) {
                        for (int kj = 0; kj < 3; ++kj) v += p[(long)ki * S + kj] * w[3 * ki + kj];
                    }
                    L::store(zp, v);
                    continue;
                }
                for (int c = 0; c < C; ++c) {
                    F v = W[9 * C + c];
                    for (int ki = 0; ki < 3; ++ki) {
                        for (int kj = 0; kj < 3; ++kj) v += p[(long)ki * S + kj] * W[(3 * ki + kj) * C + c];
                    }
                    zp[c] = v;
                }
            }
        }
    }
}

// The first layer's weight gradient from the gradient g [T, H, H, C] at its pre-activation.
template <typename F>
void first_layer_grad(int T, int S, int H, int C, const F* __restrict__ g, const F* __restrict__ images,
                      F* __restrict__ dW) {
    for (int t = 0; t < T; ++t) {
        const F* __restrict__ image = images + (long)t * S * S;
        const F* __restrict__ gt = g + (long)t * H * H * C;
        for (int y = 0; y < H; ++y) {
            for (int x = 0; x < H; ++x) {
                const F* __restrict__ gp = gt + ((long)y * H + x) * C;
                for (int r = 0; r < 10; ++r) {
                    const F v = r < 9 ? image[(long)(2 * y + r / 3) * S + 2 * x + r % 3] : F(1);
                    for (int c = 0; c < C; ++c) dW[(long)r * C + c] += v * gp[c];
                }
            }
        }
    }
}

template <typename F>
void first_layer_any(int T, int S, int H, int C, const F* images, const F* W, F* z) {
    if (C == 16) first_layer<F, 16>(T, S, H, C, images, W, z);
    else first_layer<F, 0>(T, S, H, C, images, W, z);
}

}  // namespace

extern "C" {

void zoo_mask_patches_f32(int T, int H, int h, int C, float* out, int relu, int masked, uint64_t key, uint64_t word0,
                          long image_words, long offset_words, int threshold, uint8_t* mask, float* cols) {
    mask_patches_any<float>(T, H, h, C, out, relu, masked, key, word0, image_words, offset_words, threshold, mask,
                            cols);
}

void zoo_mask_patches_f64(int T, int H, int h, int C, double* out, int relu, int masked, uint64_t key, uint64_t word0,
                          long image_words, long offset_words, int threshold, uint8_t* mask, double* cols) {
    mask_patches_any<double>(T, H, h, C, out, relu, masked, key, word0, image_words, offset_words, threshold, mask,
                             cols);
}

void zoo_patches_back_f32(int T, int H, int h, int C, const float* dcols, const float* out, const uint8_t* mask,
                          int activation, float* dz) {
    patches_back_any<float>(T, H, h, C, dcols, out, mask, activation, dz);
}

void zoo_patches_back_f64(int T, int H, int h, int C, const double* dcols, const double* out, const uint8_t* mask,
                          int activation, double* dz) {
    patches_back_any<double>(T, H, h, C, dcols, out, mask, activation, dz);
}

void zoo_first_layer_back_f32(int T, int S, int H, int h, int C, const float* dcols, const float* out,
                              const uint8_t* mask, int activation, const float* images, float* dW) {
    first_layer_back_any<float>(T, S, H, h, C, dcols, out, mask, activation, images, dW);
}

void zoo_first_layer_back_f64(int T, int S, int H, int h, int C, const double* dcols, const double* out,
                              const uint8_t* mask, int activation, const double* images, double* dW) {
    first_layer_back_any<double>(T, S, H, h, C, dcols, out, mask, activation, images, dW);
}

void zoo_first_layer_grad_f32(int T, int S, int H, int C, const float* g, const float* images, float* dW) {
    first_layer_grad<float>(T, S, H, C, g, images, dW);
}

void zoo_first_layer_grad_f64(int T, int S, int H, int C, const double* g, const double* images, double* dW) {
    first_layer_grad<double>(T, S, H, C, g, images, dW);
}

void zoo_first_layer_f32(int T, int S, int H, int C, const float* images, const float* W, float* z) {
    first_layer_any<float>(T, S, H, C, images, W, z);
}

void zoo_first_layer_f64(int T, int S, int H, int C, const double* images, const double* W, double* z) {
    first_layer_any<double>(T, S, H, C, images, W, z);
}

}  // extern "C"
