/* util/half.h: fp32 <-> bf16 / fp16 against two references: a table of every 16-bit value
 * decoded with ldexp and a nearest-value search (ties to even) that shares no code with the
 * conversions, and, where the CPU has F16C, the hardware's vcvtps2ph / vcvtph2ps. Every one of
 * the 2^16 values of each format both ways, the midpoints between neighbours and one bit either
 * side of them, edge cases (signed zeros, subnormals, the overflow threshold, NaN payloads), and
 * random floats over the whole range. */
#include "test.h"
#include "util/half.h"
#include <immintrin.h>
#include <stdint.h>

#define N_RANDOM 4000000   /* random fp32 bit patterns per format (about a second) */

/* Every finite positive value of a format in increasing order: codes 0..max_code. */
typedef struct { double v[0x8000]; int max_code; } table;

static double ref_f16_decode(int c) {
    int e = (c >> 10) & 0x1f, m = c & 0x3ff;
    double v = e ? ldexp(1024 + m, e - 25) : ldexp(m, -24);
    return (c & 0x8000) ? -v : v;
}

static double ref_bf16_decode(int c) {
    int e = (c >> 7) & 0xff, m = c & 0x7f;
    double v = e ? ldexp(128 + m, e - 134) : ldexp(m, -133);
    return (c & 0x8000) ? -v : v;
}

static void table_fill(table *t, int bf16) {
    t->max_code = bf16 ? 0x7f7f : 0x7bff;
    for (int c = 0; c <= t->max_code; c++) t->v[c] = bf16 ? ref_bf16_decode(c) : ref_f16_decode(c);
}

/* The code nearest to finite x (ties to the even code), inf past the halfway point above the
 * largest value; NaN handled by the caller. */
static uint16_t ref_encode(const table *t, float x) {
    double a = fabs((double)x);
    uint16_t sign = signbit(x) ? 0x8000 : 0;
    int top = t->max_code;
    double over = t->v[top] + (t->v[top] - t->v[top - 1]) / 2;
    if (a >= over) return sign | (uint16_t)(top + 1);   /* inf: the code after the largest */
    int lo = 0, hi = top;                                /* largest code with v <= a */
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (t->v[mid] <= a) lo = mid; else hi = mid - 1;
    }
    int c = lo;
    if (c < top) {
        double dl = a - t->v[c], dh = t->v[c + 1] - a;
        if (dh < dl || (dh == dl && (c & 1))) c++;
    } else if (a > t->v[top]) c = top;   /* below the overflow point */
    return sign | (uint16_t)c;
}

static uint16_t enc(int bf16, float x) { return bf16 ? pt_f32_to_bf16(x) : pt_f32_to_f16(x); }
static float dec(int bf16, uint16_t h) { return bf16 ? pt_bf16_to_f32(h) : pt_f16_to_f32(h); }

static uint32_t rng_state = 0x12345678u;
static uint32_t rng_next(void) {   /* xorshift32 */
    rng_state ^= rng_state << 13; rng_state ^= rng_state >> 17; rng_state ^= rng_state << 5;
    return rng_state;
}

/* Encoding one float: NaN -> a NaN code of the same sign, else the reference's code. */
static int encode_ok(const table *t, int bf16, float x, uint16_t *want, uint16_t *got) {
    *got = enc(bf16, x);
    if (isnan(x)) {
        int e_all = bf16 ? ((*got & 0x7f80) == 0x7f80 && (*got & 0x7f)) : ((*got & 0x7c00) == 0x7c00 && (*got & 0x3ff));
        *want = *got;
        return e_all && ((*got & 0x8000) != 0) == (signbit(x) != 0);
    }
    *want = ref_encode(t, x);
    return *want == *got;
}

static void check_format(int bf16) {
    static table t;
    table_fill(&t, bf16);
    const char *nm = bf16 ? "bf16" : "fp16";
    char name[96];
    long bad = 0;
    uint16_t want = 0, got = 0;
    float where = 0;
    /* decode: every code, exact against the table; inf and NaN codes */
    for (int c = 0; c < 0x10000; c++) {
        float f = dec(bf16, (uint16_t)c);
        int code = c & 0x7fff;
        int ok = code <= t.max_code ? (double)f == ((c & 0x8000) ? -t.v[code] : t.v[code])
                 : code == t.max_code + 1 ? isinf(f) && (signbit(f) != 0) == ((c & 0x8000) != 0) : isnan(f);
        if (!ok && bad++ == 0) want = (uint16_t)c;
    }
    snprintf(name, sizeof name, "half: %s decode, all 65536 codes exact (inf, NaN kept)", nm);
    CHECK(name, bad == 0, "%ld wrong, first code 0x%04x", bad, want);
    /* round trip: every non-NaN code encodes back to itself */
    bad = 0;
    for (int c = 0; c < 0x10000; c++) {
        float f = dec(bf16, (uint16_t)c);
        if (!isnan(f) && enc(bf16, f) != c && bad++ == 0) want = (uint16_t)c;
    }
    snprintf(name, sizeof name, "half: %s encode(decode(c)) == c for every non-NaN code", nm);
    CHECK(name, bad == 0, "%ld wrong, first code 0x%04x", bad, want);
    /* midpoints between neighbours, and one fp32 bit either side: ties to even, rounding */
    bad = 0;
    for (int c = 0; c < t.max_code; c++)
        for (int s = 0; s < 2; s++) {
            float mid = (float)((t.v[c] + t.v[c + 1]) / 2);   /* exact in fp32 for both formats */
            if (s) mid = -mid;
            float xs[3] = { mid, nextafterf(mid, -INFINITY), nextafterf(mid, INFINITY) };
            for (int k = 0; k < 3; k++)
                if (!encode_ok(&t, bf16, xs[k], &want, &got) && bad++ == 0) where = xs[k];
        }
    snprintf(name, sizeof name, "half: %s midpoints and their neighbours round to nearest even", nm);
    CHECK(name, bad == 0, "%ld wrong, first at %.9g: want 0x%04x got 0x%04x", bad, where, want, got);
    /* edge cases */
    float edges[] = { 0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e-8f, 5.96e-8f, 2.98e-8f,
                      0x1p-25f, 0x1.000002p-25f, 0x1p-24f, 0x1p-14f, 0x1.ffcp-15f, 3.4028235e38f, 3.39e38f,
                      1e-45f, 1.17549435e-38f, 1.1754942e-38f, INFINITY, -INFINITY, 1.0f, -1.0f, 1.00390625f,
                      1.005859375f, 3.14159265f };
    bad = 0;
    for (size_t i = 0; i < sizeof edges / sizeof *edges; i++)
        if (!encode_ok(&t, bf16, edges[i], &want, &got) && bad++ == 0) where = edges[i];
    float nans[2] = { pt_bits_f32(0x7fc00001u), pt_bits_f32(0xff800001u) };   /* quiet +, signalling - */
    for (int i = 0; i < 2; i++)
        if (!encode_ok(&t, bf16, nans[i], &want, &got) && bad++ == 0) where = nans[i];
    snprintf(name, sizeof name, "half: %s edge cases (zeros, subnormals, overflow point, inf, NaN)", nm);
    CHECK(name, bad == 0, "%ld wrong, first at %.9g: want 0x%04x got 0x%04x", bad, where, want, got);
    /* random fp32 bit patterns over the whole range, and random values near the format's range */
    bad = 0;
    for (long i = 0; i < N_RANDOM; i++) {
        uint32_t u = rng_next();
        if (i & 1) u = (u & 0x807fffffu) | ((100u + (u >> 23) % 60u) << 23);   /* 2^-27 .. 2^32 */
        float x = pt_bits_f32(u);
        if (!encode_ok(&t, bf16, x, &want, &got) && bad++ == 0) where = x;
    }
    snprintf(name, sizeof name, "half: %s, %d random floats round to the nearest code", nm, N_RANDOM);
    CHECK(name, bad == 0, "%ld wrong, first at %.9g: want 0x%04x got 0x%04x", bad, where, want, got);
}

/* F16C: the hardware's conversions agree bit for bit (NaNs included) on every code and on
 * random floats. */
__attribute__((target("f16c"))) static void check_f16c(void) {
    long bad = 0;
    for (int c = 0; c < 0x10000; c++)
        if (pt_f32_bits(pt_f16_to_f32((uint16_t)c)) != pt_f32_bits(_cvtsh_ss((unsigned short)c))) bad++;
    CHECK("half: fp16 decode equals F16C's vcvtph2ps on all 65536 codes", bad == 0, "%ld differ", bad);
    bad = 0;
    for (long i = 0; i < N_RANDOM; i++) {
        float x = pt_bits_f32(rng_next());
        if (pt_f32_to_f16(x) != _cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT)) bad++;
    }
    for (int c = 0; c < 0x10000; c++) {   /* the codes' values and the fp32 neighbours of each */
        float x = pt_f16_to_f32((uint16_t)c), xs[3] = { x, nextafterf(x, -INFINITY), nextafterf(x, INFINITY) };
        for (int k = 0; k < 3; k++)
            if (pt_f32_to_f16(xs[k]) != _cvtss_sh(xs[k], _MM_FROUND_TO_NEAREST_INT)) bad++;
    }
    CHECK("half: fp16 encode equals F16C's vcvtps2ph (random floats, every code and its neighbours)", bad == 0,
          "%ld differ", bad);
}

static void check_arrays(void) {
    float x[7] = { 1.0f, -2.5f, 3.14159265f, 1e-6f, 70000.0f, -0.0f, 0.1f }, y[7];
    uint16_t h[7];
    int bad = 0;
    for (int w = PT_WIRE_BF16; w <= PT_WIRE_F16; w++) {
        pt_wire_pack((pt_wire)w, h, x, 7);
        pt_wire_unpack((pt_wire)w, y, h, 7);
        for (int i = 0; i < 7; i++) bad += pt_f32_bits(y[i]) != pt_f32_bits(dec(w == PT_WIRE_BF16, enc(w == PT_WIRE_BF16, x[i])));
    }
    CHECK("half: pt_wire_pack/unpack equal the scalar conversions", bad == 0, "%d differ", bad);
    CHECK("half: wire bytes 4, 2, 2", pt_wire_bytes(PT_WIRE_F32) == 4 && pt_wire_bytes(PT_WIRE_BF16) == 2 &&
          pt_wire_bytes(PT_WIRE_F16) == 2, "wrong sizes");
    pt_wire w = PT_WIRE_F32, b = PT_WIRE_F32, f = PT_WIRE_F32;
    CHECK("half: the wire names fp32, bf16, fp16 parse back; others are refused",
          !strcmp(pt_wire_name(PT_WIRE_F32), "fp32") && !strcmp(pt_wire_name(PT_WIRE_BF16), "bf16") &&
          !strcmp(pt_wire_name(PT_WIRE_F16), "fp16") && pt_wire_parse("fp32", &w) == 0 && w == PT_WIRE_F32 &&
          pt_wire_parse("bf16", &b) == 0 && b == PT_WIRE_BF16 && pt_wire_parse("fp16", &f) == 0 &&
          f == PT_WIRE_F16 && pt_wire_parse("fp8", &w) < 0 && pt_wire_parse("", &w) < 0, "names");
}

int main(void) {
    check_format(0);
    check_format(1);
    __builtin_cpu_init();
    if (__builtin_cpu_supports("f16c")) check_f16c();
    else printf("# half: no F16C on this CPU: the hardware comparison is skipped\n");
    check_arrays();
    TEST_DONE();
}
