/* sparkplay NVFP4, Atlas scheme: one fused pass over BF16 rows (see atlas.py for the rules).
 *
 * Bit for bit what sparkplay.nvfp4.atlas.quantise computes: float32 arithmetic in
 * the same order, unfused (build with -ffp-contract=off and without -ffast-math),
 * the E4M3 scale encoded in double as atlas.e4m3_encode does, E2M1 by thresholds
 * with ties to the smaller magnitude. Reads BF16 bit patterns directly, so a
 * tensor is never widened to float32 in memory. Rows are split over a team of
 * threads kept for the process (nvfp4_team): part i of a matrix goes to thread i
 * in both passes, so the rows a core read for the global maximum are still in
 * its cache when it encodes them (two passes are needed: every code depends on
 * the maximum of the whole matrix).
 *
 * Build: cc -O3 -ffp-contract=off -fPIC -shared kernel.c -o kernel.so -lm -lpthread
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

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

/* -- the team: threads made once per process, each always given the same part ---------------- */

#define TEAM_MAX 512

static pthread_mutex_t team_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t job_lock = PTHREAD_MUTEX_INITIALIZER; /* one job at a time */
static pthread_cond_t team_go = PTHREAD_COND_INITIALIZER;
static pthread_cond_t team_done = PTHREAD_COND_INITIALIZER;
static int team_size = 0;
static pid_t team_pid = 0; /* a forked child has none of its parent's threads */
static unsigned long generation = 0;
static unsigned long born[TEAM_MAX]; /* the generation a member was made in: it waits for the next */
static int pending = 0;
static struct {
    int kind; /* 0: absmax of each part, 1: encode each part */
    const uint16_t *x;
    int64_t n, k;
    int parts;
    float scale2;
    uint8_t *packed, *scales;
    uint16_t tops[TEAM_MAX];
    int bad[TEAM_MAX];
} job;

static void run_part(int i) {
    int64_t row0 = job.n * i / job.parts, row1 = job.n * (i + 1) / job.parts;
    if (job.kind == 0)
        job.bad[i] = nvfp4_absmax_rows(job.x, job.k, row0, row1, &job.tops[i]);
    else
        nvfp4_atlas_rows(job.x, job.k, row0, row1, job.scale2, job.packed, job.scales);
}

static void *team_member(void *arg) {
    int i = (int)(intptr_t)arg;
    pthread_mutex_lock(&team_lock);
    unsigned long seen = born[i];
    for (;;) {
        while (generation == seen) pthread_cond_wait(&team_go, &team_lock);
        seen = generation;
        int mine = i < job.parts;
        pthread_mutex_unlock(&team_lock);
        if (mine) run_part(i);
        pthread_mutex_lock(&team_lock);
        if (--pending == 0) pthread_cond_broadcast(&team_done);
    }
    return NULL;
}

/* Run `kind` over `parts` row ranges of an [n, k] matrix on the team (grown to `parts` threads).
 * kind 0 writes the largest |x| as BF16 bits to *absmax_bits and returns 1 on a NaN or inf;
 * kind 1 encodes with `scale2`. Returns -1 when threads cannot be made (the caller falls back). */
int nvfp4_team(int kind, const uint16_t *x, int64_t n, int64_t k, int parts, float scale2, uint8_t *packed,
               uint8_t *scales, uint16_t *absmax_bits) {
    if (parts < 1 || parts > TEAM_MAX) return -1;
    /* unlocked: callers serialise their calls (kernel.py's _TEAM lock) */
    if (team_pid != getpid()) {
        /* first use, or a forked child: none of the team exists here, and the locks and conditions may
         * hold the parent's waiters (a broadcast would wait for them), so they start afresh */
        pthread_mutex_t fresh_lock = PTHREAD_MUTEX_INITIALIZER;
        pthread_cond_t fresh_cond = PTHREAD_COND_INITIALIZER;
        memcpy(&team_lock, &fresh_lock, sizeof fresh_lock);
        memcpy(&job_lock, &fresh_lock, sizeof fresh_lock);
        memcpy(&team_go, &fresh_cond, sizeof fresh_cond);
        memcpy(&team_done, &fresh_cond, sizeof fresh_cond);
        team_size = 0;
        team_pid = getpid();
    }
    pthread_mutex_lock(&job_lock);
    pthread_mutex_lock(&team_lock);
    while (team_size < parts) {
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        born[team_size] = generation;
        int failed = pthread_create(&thread, &attr, team_member, (void *)(intptr_t)team_size);
        pthread_attr_destroy(&attr);
        if (failed) break;
        team_size++;
    }
    if (team_size < parts) parts = team_size;
    if (parts < 1) {
        pthread_mutex_unlock(&team_lock);
        pthread_mutex_unlock(&job_lock);
        return -1;
    }
    job.kind = kind; job.x = x; job.n = n; job.k = k; job.parts = parts; job.scale2 = scale2;
    job.packed = packed; job.scales = scales;
    pending = team_size;
    generation++;
    pthread_cond_broadcast(&team_go);
    while (pending) pthread_cond_wait(&team_done, &team_lock);
    pthread_mutex_unlock(&team_lock);
    int bad = 0;
    if (kind == 0) {
        uint16_t best = 0;
        for (int i = 0; i < parts; i++) {
            bad |= job.bad[i];
            best = job.tops[i] > best ? job.tops[i] : best;
        }
        *absmax_bits = best;
    }
    pthread_mutex_unlock(&job_lock);
    return bad;
}
