/* sparkplay NVFP4, Atlas scheme: one fused pass over BF16 rows (see atlas.py for the rules).
 *
 * Bit for bit what sparkplay.nvfp4.atlas.quantise computes: float32 arithmetic in
 * the same order, unfused (build with -ffp-contract=off and without -ffast-math),
 * the E4M3 scale encoded in double as atlas.e4m3_encode does, E2M1 by thresholds
 * with ties to the smaller magnitude. Reads BF16 bit patterns directly, so a
 * tensor is never widened to float32 in memory. The caller splits rows across
 * threads (ctypes releases the GIL for the call).
 *
 * Build: cc -O3 -ffp-contract=off -fPIC -shared kernel.c -o kernel.so -lm
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#define BLOCK 16

static float bf16(uint16_t bits) {
    uint32_t wide = (uint32_t)bits << 16;
    float value;
    memcpy(&value, &wide, sizeof value);
    return value;
}

/* 0: all finite, writing the largest |x| as BF16 bits to *absmax_bits; 1: a NaN or inf. */
int nvfp4_absmax_bf16(const uint16_t *x, int64_t count, uint16_t *absmax_bits) {
    uint16_t best = 0;
    int bad = 0;
    for (int64_t i = 0; i < count; i++) {
        uint16_t magnitude = x[i] & 0x7FFF;
        bad |= magnitude >= 0x7F80; /* exponent all ones: inf or NaN */
        best = magnitude > best ? magnitude : best;
    }
    *absmax_bits = best;
    return bad;
}

static uint32_t bits_of(float value) {
    uint32_t bits;
    memcpy(&bits, &value, sizeof bits);
    return bits;
}

static float float_of(uint32_t bits) {
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

/* atlas.e4m3_encode for one non-negative float32. The normal range works on the bits:
 * floor(mantissa * 8 + 0.5) of the 23-bit fraction f is (f + 2^19) >> 20, exactly. A NaN
 * (0 * inf, when scale2 underflowed) fails every comparison in the reference and encodes 0. */
static uint8_t e4m3_encode(float s) {
    if (!(s >= 0x1p-9f)) return 0; /* below the smallest subnormal, or NaN */
    if (s < 0x1p-6f) return (uint8_t)floor((double)s / 0x1p-9 + 0.5); /* subnormal units; 8 is code 0x08 */
    if (s >= 448.0f) return 0x7E;
    uint32_t bits = bits_of(s);
    int e = (int)(bits >> 23) - 127;
    int m = (int)(((bits & 0x7FFFFF) + (1u << 19)) >> 20);
    if (m == 8) { e += 1; m = 0; }
    int code = ((e + 7) << 3) | m;
    return (uint8_t)(code > 0x7E ? 0x7E : code);
}

/* Exact: (1 + m/8) * 2^(e-7) is a float32 with exponent e-7 and fraction m << 20; subnormals m * 2^-9. */
static float e4m3_decode(uint8_t code) {
    uint32_t exp = (code >> 3) & 0xF, mant = code & 0x7;
    if (exp == 0) return (float)mant * 0x1p-9f;
    return float_of(((exp - 7 + 127) << 23) | (mant << 20));
}

/* Rows [row0, row1) of an [n, k] BF16 matrix: packed [n, k/2] (even element low nibble) and
 * E4M3 scales [n, k/16]; scale2 is the matrix's global scale (already computed).
 *
 * Each row goes in four passes over a few KiB that stay in L1, each a plain loop the compiler
 * vectorises (AVX-512, AVX2 or NEON): block maxima; the per-block scale and factor (scalar,
 * one in 16); every element's code, its block's factor spread per element so the loop is a
 * straight elementwise one; the nibbles packed. The float32 operations are the reference's,
 * in its order (one multiply, the magnitude against each threshold). */
void nvfp4_atlas_rows(const uint16_t *x, int64_t k, int64_t row0, int64_t row1, float scale2,
                      uint8_t *packed, uint8_t *scales) {
    const float inv_scale2 = 1.0f / scale2;
    const int64_t blocks = k / BLOCK;
    uint16_t tops[blocks];
    float factor[k];
    uint8_t codes[k];
    for (int64_t r = row0; r < row1; r++) {
        const uint16_t *row = x + r * k;
        uint8_t *sc = scales + r * blocks;
        for (int64_t b = 0; b < blocks; b++) {
            uint16_t top = 0;
            for (int i = 0; i < BLOCK; i++) {
                uint16_t magnitude = row[b * BLOCK + i] & 0x7FFF;
                top = magnitude > top ? magnitude : top;
            }
            tops[b] = top;
        }
        for (int64_t b = 0; b < blocks; b++) {
            uint8_t code = e4m3_encode((bf16(tops[b]) * inv_scale2) / 6.0f);
            sc[b] = code;
            float decoded = e4m3_decode(code);
            float f = decoded == 0.0f ? 0.0f : 1.0f / (decoded * scale2);
            for (int i = 0; i < BLOCK; i++) factor[b * BLOCK + i] = f;
        }
        for (int64_t i = 0; i < k; i++) {
            uint32_t wide = (uint32_t)row[i] << 16;
            float v;
            memcpy(&v, &wide, sizeof v);
            float a = fabsf(v * factor[i]);
            codes[i] = (uint8_t)((a > 0.25f) + (a > 0.75f) + (a > 1.25f) + (a > 1.75f) + (a > 2.5f) +
                                 (a > 3.5f) + (a > 5.0f)) | (uint8_t)((wide > 0x80000000u) << 3); /* v < 0: -0.0 is not */
        }
        uint8_t *out = packed + r * (k / 2);
        for (int64_t j = 0; j < k / 2; j++) out[j] = codes[2 * j] | (uint8_t)(codes[2 * j + 1] << 4);
    }
}

/* 0: all finite, writing the largest |x| of rows [row0, row1) as BF16 bits; 1: a NaN or inf there. */
int nvfp4_absmax_rows(const uint16_t *x, int64_t k, int64_t row0, int64_t row1, uint16_t *absmax_bits) {
    return nvfp4_absmax_bf16(x + row0 * k, (row1 - row0) * k, absmax_bits);
}
