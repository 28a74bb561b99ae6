/* Every kernel's backward against central finite differences of its forward (float forward,
 * double accumulation of the objective J = sum(out * R) with a fixed random R), on small odd
 * shapes; plus the = / += conventions and attention (forward and backward) against naive double
 * references on bigger shapes.
 * Every backward_input writes into a buffer prefilled with garbage (rand_buf(..., 5)), so its
 * match with finite differences also proves it overwrites (=); backward_weight is checked to
 * add (+=) onto a prefilled buffer. */
#include "nn/nn.h"
#include "nn/nn_math.h"
#include "test.h"
#include "util/pt.h"
#include <string.h>

#define FD_STEP 1e-2f     /* float forward: big enough that rounding of J stays ~1e-5 of |dJ| */
#define FD_TOL 1e-3       /* O(h^2) truncation plus float rounding of J divided by 2h */
#define EXACT_TOL 1e-6    /* same float sums in another order (accumulate checks, reference) */

enum { B = 2, T = 5, C = 12, NH = 3, V = 11, N = B * T };

static pt_rng rng;

static float *rand_buf(size_t n, double scale) {
    float *p = pt_falloc(n);
    for (size_t i = 0; i < n; i++) p[i] = (float)(scale * pt_rng_normal(&rng));
    return p;
}

/* n floats of NaN: a buffer whose every unwritten entry that a kernel reads shows in its output. */
static float *nan_buf(size_t n) {
    float *p = pt_falloc(n);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

static double dot(const float *a, const float *b, size_t n) {
    double s = 0;
    for (size_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return s;
}

typedef double (*objective_fn)(void);

/* Max |fd - g| over max |g| for the gradient g of obj() with respect to x (n floats). */
static double fd_relerr(float *x, size_t n, const float *g, objective_fn obj) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        float save = x[i], xp = save + FD_STEP, xm = save - FD_STEP;
        x[i] = xp; double jp = obj();
        x[i] = xm; double jm = obj();
        x[i] = save;
        double fd = (jp - jm) / ((double)xp - (double)xm), d = fabs(fd - g[i]);
        if (d > num) num = d;
        if (fabs(g[i]) > den) den = fabs(g[i]);
    }
    printf("# fd relerr %.3g over %zu values\n", den > 0 ? num / den : num, n);
    return den > 0 ? num / den : num;
}

static double max_absdiff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) if (fabs((double)a[i] - b[i]) > m) m = fabs((double)a[i] - b[i]);
    return m;
}

/* Checks a backward_weight-style result: called on a buffer prefilled with `pre`, it must equal
 * pre + g (g from a zeroed buffer). */
static void check_accumulates(const char *name, const float *pre, const float *after,
                              const float *g, size_t n) {
    double m = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)after[i] - pre[i] - g[i]);
        if (d > m) m = d;
        if (fabs(g[i]) > s) s = fabs(g[i]);
    }
    CHECK(name, m <= EXACT_TOL * (s + 1), "max |after - pre - g| = %g", m);
}

/* ---- embedding ---- */
static struct { int tok[N]; float *wte, *wpe, *out, *R; } em;
static double em_obj(void) {
    embedding_forward(em.out, em.tok, em.wte, em.wpe, B, T, C);
    return dot(em.out, em.R, (size_t)N * C);
}
static void test_embedding(void) {
    for (int i = 0; i < N; i++) em.tok[i] = (int)(pt_rng_next(&rng) % V);
    em.tok[1] = em.tok[0];   /* a repeated token must accumulate */
    em.wte = rand_buf((size_t)V * C, 1); em.wpe = rand_buf((size_t)T * C, 1);
    em.out = pt_falloc((size_t)N * C); em.R = rand_buf((size_t)N * C, 1);
    float *dwte = pt_falloc((size_t)V * C), *dwpe = pt_falloc((size_t)T * C);
    embedding_backward_weight(dwte, dwpe, em.R, em.tok, B, T, C);
    double e1 = fd_relerr(em.wte, (size_t)V * C, dwte, em_obj);
    double e2 = fd_relerr(em.wpe, (size_t)T * C, dwpe, em_obj);
    CHECK("embedding_backward_weight_wte_fd", e1 < FD_TOL, "relerr %g", e1);
    CHECK("embedding_backward_weight_wpe_fd", e2 < FD_TOL, "relerr %g", e2);
    float *pre = rand_buf((size_t)V * C, 1), *acc = pt_falloc((size_t)V * C), *accp = pt_falloc((size_t)T * C);
    memcpy(acc, pre, (size_t)V * C * sizeof *acc);
    embedding_backward_weight(acc, accp, em.R, em.tok, B, T, C);
    check_accumulates("embedding_backward_weight_accumulates", pre, acc, dwte, (size_t)V * C);
    free(em.wte); free(em.wpe); free(em.out); free(em.R); free(dwte); free(dwpe);
    free(pre); free(acc); free(accp);
}

/* ---- layernorm ---- */
static struct { float *inp, *w, *b, *out, *mean, *rstd, *R; } ln;
static double ln_obj(void) {
    layernorm_forward(ln.out, ln.mean, ln.rstd, ln.inp, ln.w, ln.b, N, C);
    return dot(ln.out, ln.R, (size_t)N * C);
}
static void test_layernorm(void) {
    size_t nc = (size_t)N * C;
    ln.inp = rand_buf(nc, 1); ln.w = rand_buf(C, 1); ln.b = rand_buf(C, 1);
    ln.out = pt_falloc(nc); ln.mean = pt_falloc(N); ln.rstd = pt_falloc(N); ln.R = rand_buf(nc, 1);
    ln_obj();
    float *dinp = rand_buf(nc, 5), *dinp2 = pt_falloc(nc), *dw = pt_falloc(C), *db = pt_falloc(C);
    layernorm_backward_input(dinp, ln.R, ln.inp, ln.w, ln.mean, ln.rstd, N, C);   /* garbage in dinp: must be overwritten */
    layernorm_backward_input(dinp2, ln.R, ln.inp, ln.w, ln.mean, ln.rstd, N, C);
    CHECK("layernorm_backward_input_overwrites", max_absdiff(dinp, dinp2, nc) == 0, "differs");
    layernorm_backward_weight(dw, db, ln.R, ln.inp, ln.mean, ln.rstd, N, C);
    double e1 = fd_relerr(ln.inp, nc, dinp, ln_obj);
    double e2 = fd_relerr(ln.w, C, dw, ln_obj), e3 = fd_relerr(ln.b, C, db, ln_obj);
    CHECK("layernorm_backward_input_fd", e1 < FD_TOL, "relerr %g", e1);
    CHECK("layernorm_backward_weight_w_fd", e2 < FD_TOL, "relerr %g", e2);
    CHECK("layernorm_backward_weight_b_fd", e3 < FD_TOL, "relerr %g", e3);
    ln_obj();
    float *pre = rand_buf(C, 1), *acc = pt_falloc(C), *accb = pt_falloc(C);
    memcpy(acc, pre, C * sizeof *acc);
    layernorm_backward_weight(acc, accb, ln.R, ln.inp, ln.mean, ln.rstd, N, C);
    check_accumulates("layernorm_backward_weight_accumulates", pre, acc, dw, C);
    free(ln.inp); free(ln.w); free(ln.b); free(ln.out); free(ln.mean); free(ln.rstd); free(ln.R);
    free(dinp); free(dinp2); free(dw); free(db); free(pre); free(acc); free(accb);
}

/* ---- matmul ---- */
enum { IN = 7, OUT = 9 };
static struct { float *inp, *w, *b, *out, *R; } mm;
static double mm_obj(void) {
    matmul_forward(mm.out, mm.inp, mm.w, mm.b, N, IN, OUT);
    return dot(mm.out, mm.R, (size_t)N * OUT);
}
static void test_matmul(void) {
    mm.inp = rand_buf((size_t)N * IN, 1); mm.w = rand_buf((size_t)IN * OUT, 1); mm.b = rand_buf(OUT, 1);
    mm.out = pt_falloc((size_t)N * OUT); mm.R = rand_buf((size_t)N * OUT, 1);
    float *dinp = rand_buf((size_t)N * IN, 5), *dw = pt_falloc((size_t)IN * OUT), *db = pt_falloc(OUT);
    matmul_backward_input(dinp, mm.R, mm.w, N, IN, OUT);
    matmul_backward_weight(dw, db, mm.R, mm.inp, N, IN, OUT);
    double e1 = fd_relerr(mm.inp, (size_t)N * IN, dinp, mm_obj);
    double e2 = fd_relerr(mm.w, (size_t)IN * OUT, dw, mm_obj), e3 = fd_relerr(mm.b, OUT, db, mm_obj);
    CHECK("matmul_backward_input_fd", e1 < FD_TOL, "relerr %g", e1);
    CHECK("matmul_backward_weight_w_fd", e2 < FD_TOL, "relerr %g", e2);
    CHECK("matmul_backward_weight_b_fd", e3 < FD_TOL, "relerr %g", e3);
    float *pre = rand_buf((size_t)IN * OUT, 1), *acc = pt_falloc((size_t)IN * OUT);
    float *preb = rand_buf(OUT, 1), *accb = pt_falloc(OUT);
    memcpy(acc, pre, (size_t)IN * OUT * sizeof *acc);
    memcpy(accb, preb, OUT * sizeof *accb);
    matmul_backward_weight(acc, accb, mm.R, mm.inp, N, IN, OUT);
    check_accumulates("matmul_backward_weight_w_accumulates", pre, acc, dw, (size_t)IN * OUT);
    check_accumulates("matmul_backward_weight_b_accumulates", preb, accb, db, OUT);
    free(mm.inp); free(mm.w); free(mm.b); free(mm.out); free(mm.R); free(dinp); free(dw); free(db);
    free(pre); free(acc); free(preb); free(accb);
}

/* ---- gelu ---- */
static struct { float *inp, *out, *R; } ge;
static double ge_obj(void) { gelu_forward(ge.out, ge.inp, N * C); return dot(ge.out, ge.R, (size_t)N * C); }
static void test_gelu(void) {
    ge.inp = rand_buf((size_t)N * C, 2); ge.out = pt_falloc((size_t)N * C); ge.R = rand_buf((size_t)N * C, 1);
    float *dinp = rand_buf((size_t)N * C, 5);
    gelu_backward_input(dinp, ge.R, ge.inp, N * C);
    double e = fd_relerr(ge.inp, (size_t)N * C, dinp, ge_obj);
    CHECK("gelu_backward_input_fd", e < FD_TOL, "relerr %g", e);
    float x = 1.5f, y;   /* HF gelu_new(1.5) = 1.3995715 (torch, float64) */
    gelu_forward(&y, &x, 1);
    CHECK("gelu_forward_matches_gelu_new", fabs(y - 1.3995715) < 1e-6, "gelu(1.5) = %.8f", y);
    free(ge.inp); free(ge.out); free(ge.R); free(dinp);
}

/* ---- attention ---- */
static struct { int b, t, c, nh; float *qkv, *out, *att, *R; } at;
static double at_obj(void) {
    attention_forward(at.out, at.att, at.qkv, at.b, at.t, at.c, at.nh);
    return dot(at.out, at.R, (size_t)at.b * at.t * at.c);
}

/* Naive causal attention in double; max |ref - out| over max |ref|. */
static double attention_ref_relerr(const float *qkv, const float *out, int b_, int t_, int c_, int nh) {
    int hs = c_ / nh;
    double num = 0, den = 0, *w = pt_calloc((size_t)t_, sizeof *w);
    for (int b = 0; b < b_; b++)
        for (int h = 0; h < nh; h++)
            for (int t = 0; t < t_; t++) {
                const float *q = qkv + ((size_t)b * t_ + t) * 3 * c_ + h * hs;
                double mx = -1e300, s = 0;
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + ((size_t)b * t_ + j) * 3 * c_ + c_ + h * hs;
                    w[j] = 0;
                    for (int i = 0; i < hs; i++) w[j] += (double)q[i] * k[i];
                    w[j] /= sqrt((double)hs);
                    if (w[j] > mx) mx = w[j];
                }
                for (int j = 0; j <= t; j++) { w[j] = exp(w[j] - mx); s += w[j]; }
                for (int i = 0; i < hs; i++) {
                    double o = 0;
                    for (int j = 0; j <= t; j++)
                        o += w[j] / s * qkv[((size_t)b * t_ + j) * 3 * c_ + 2 * c_ + h * hs + i];
                    double d = fabs(o - out[((size_t)b * t_ + t) * c_ + h * hs + i]);
                    if (d > num) num = d;
                    if (fabs(o) > den) den = fabs(o);
                }
            }
    free(w);
    return num / den;
}

/* Forward against the reference, backward against finite differences, at one shape. */
static void test_attention_shape(const char *tag, int b, int t, int c, int nh) {
    char name[96];
    size_t n3 = (size_t)b * t * 3 * c, n = (size_t)b * t * c;
    at.b = b; at.t = t; at.c = c; at.nh = nh;
    at.qkv = rand_buf(n3, 1); at.out = pt_falloc(n); at.att = pt_falloc((size_t)b * nh * t * t);
    at.R = rand_buf(n, 1);
    at_obj();
    double er = attention_ref_relerr(at.qkv, at.out, b, t, c, nh);
    snprintf(name, sizeof name, "attention_forward_matches_reference_%s", tag);
    CHECK(name, er < EXACT_TOL * 10, "relerr %g", er);
    float *dqkv = rand_buf(n3, 5), *scratch = pt_falloc(ATTENTION_SCRATCH_FLOATS(t));
    attention_backward_input(dqkv, scratch, at.R, at.qkv, at.att, b, t, c, nh);
    double e = fd_relerr(at.qkv, n3, dqkv, at_obj);
    snprintf(name, sizeof name, "attention_backward_input_fd_%s", tag);
    CHECK(name, e < FD_TOL, "relerr %g", e);
    free(at.qkv); free(at.out); free(at.att); free(at.R); free(dqkv); free(scratch);
}

/* dqkv (B,T,3C) = the gradient of qkv given dout, by the textbook formulas in double. */
static double *attention_ref_backward(const float *qkv, const float *dout, int b_, int t_, int c_, int nh) {
    int hs = c_ / nh, c3 = 3 * c_;
    double *dqkv = pt_calloc((size_t)b_ * t_ * c3, sizeof *dqkv), *p = pt_calloc((size_t)t_, sizeof *p);
    double *dp = pt_calloc((size_t)t_, sizeof *dp), scale = 1 / sqrt((double)hs);
    for (int b = 0; b < b_; b++)
        for (int h = 0; h < nh; h++)
            for (int t = 0; t < t_; t++) {
                size_t qt = ((size_t)b * t_ + t) * c3 + h * hs;
                const float *q = qkv + qt, *d = dout + ((size_t)b * t_ + t) * c_ + h * hs;
                double mx = -1e300, sum = 0, pdp = 0;
                for (int j = 0; j <= t; j++) {
                    const float *k = qkv + ((size_t)b * t_ + j) * c3 + c_ + h * hs;
                    p[j] = 0;
                    for (int i = 0; i < hs; i++) p[j] += (double)q[i] * k[i] * scale;
                    if (p[j] > mx) mx = p[j];
                }
                for (int j = 0; j <= t; j++) { p[j] = exp(p[j] - mx); sum += p[j]; }
                for (int j = 0; j <= t; j++) {
                    const float *v = qkv + ((size_t)b * t_ + j) * c3 + 2 * c_ + h * hs;
                    p[j] /= sum;
                    dp[j] = 0;
                    for (int i = 0; i < hs; i++) dp[j] += (double)d[i] * v[i];
                    pdp += p[j] * dp[j];
                }
                for (int j = 0; j <= t; j++) {
                    size_t kj = ((size_t)b * t_ + j) * c3 + c_ + h * hs;
                    double ds = p[j] * (dp[j] - pdp) * scale;
                    for (int i = 0; i < hs; i++) {
                        dqkv[qt + i] += ds * qkv[kj + i];
                        dqkv[kj + i] += ds * q[i];
                        dqkv[kj + c_ + i] += p[j] * d[i];
                    }
                }
            }
    free(p); free(dp);
    return dqkv;
}

/* Forward and backward against the double references at a shape too big for finite
 * differences: T past the kernel's blocks and not a multiple of its tiles, head sizes not a
 * multiple of a vector (and past its packing depth), several (batch, head) pairs. */
static void test_attention_reference(const char *tag, int b, int t, int c, int nh) {
    char name[96];
    size_t n3 = (size_t)b * t * 3 * c, n = (size_t)b * t * c;
    /* att and scratch NaN: attention must not read past the diagonal what it did not write */
    float *qkv = rand_buf(n3, 1), *out = pt_falloc(n), *att = nan_buf((size_t)b * nh * t * t);
    float *dout = rand_buf(n, 1), *dqkv = rand_buf(n3, 5), *scratch = nan_buf(ATTENTION_SCRATCH_FLOATS(t));
    attention_forward(out, att, qkv, b, t, c, nh);
    double er = attention_ref_relerr(qkv, out, b, t, c, nh);
    snprintf(name, sizeof name, "attention_forward_matches_reference_%s", tag);
    CHECK(name, er < EXACT_TOL * 10, "relerr %g", er);
    attention_backward_input(dqkv, scratch, dout, qkv, att, b, t, c, nh);
    double *ref = attention_ref_backward(qkv, dout, b, t, c, nh), num = 0, den = 0;
    for (size_t i = 0; i < n3; i++) {
        if (fabs(ref[i] - dqkv[i]) > num) num = fabs(ref[i] - dqkv[i]);
        if (fabs(ref[i]) > den) den = fabs(ref[i]);
    }
    snprintf(name, sizeof name, "attention_backward_input_matches_reference_%s", tag);
    CHECK(name, num / den < EXACT_TOL * 10, "relerr %g", num / den);
    free(qkv); free(out); free(att); free(dout); free(dqkv); free(scratch); free(ref);
}

static void test_attention(void) {
    test_attention_shape("B2_T5_C12_NH3", B, T, C, NH);
    test_attention_shape("B1_T70_C6_NH2", 1, 70, 6, 2);   /* T past one block of keys */
    test_attention_reference("B1_T1_C8_NH2", 1, 1, 8, 2);
    test_attention_reference("B2_T33_C66_NH2", 2, 33, 66, 2);      /* hs 33: odd, T < 64 */
    test_attention_reference("B2_T70_C30_NH3", 2, 70, 30, 3);      /* hs 10, T past 64 */
    test_attention_reference("B1_T130_C144_NH2", 1, 130, 144, 2);  /* hs 72: past a pack's depth */
    test_attention_reference("B2_T256_C256_NH4", 2, 256, 256, 4);  /* the reference shape's heads */
}

/* ---- tied LM head ---- */
static struct { float *inp, *wte, *logits, *R; } lm;
static double lm_obj(void) {
    lmhead_forward(lm.logits, lm.inp, lm.wte, N, C, V);
    return dot(lm.logits, lm.R, (size_t)N * V);
}
static void test_lmhead(void) {
    lm.inp = rand_buf((size_t)N * C, 1); lm.wte = rand_buf((size_t)V * C, 1);
    lm.logits = pt_falloc((size_t)N * V); lm.R = rand_buf((size_t)N * V, 1);
    float *dinp = rand_buf((size_t)N * C, 5), *dwte = pt_falloc((size_t)V * C);
    lmhead_backward_input(dinp, lm.R, lm.wte, N, C, V);
    lmhead_backward_weight(dwte, lm.R, lm.inp, N, C, V);
    double e1 = fd_relerr(lm.inp, (size_t)N * C, dinp, lm_obj);
    double e2 = fd_relerr(lm.wte, (size_t)V * C, dwte, lm_obj);
    CHECK("lmhead_backward_input_fd", e1 < FD_TOL, "relerr %g", e1);
    CHECK("lmhead_backward_weight_fd", e2 < FD_TOL, "relerr %g", e2);
    float *pre = rand_buf((size_t)V * C, 1), *acc = pt_falloc((size_t)V * C);
    memcpy(acc, pre, (size_t)V * C * sizeof *acc);
    lmhead_backward_weight(acc, lm.R, lm.inp, N, C, V);
    check_accumulates("lmhead_backward_weight_accumulates", pre, acc, dwte, (size_t)V * C);
    free(lm.inp); free(lm.wte); free(lm.logits); free(lm.R); free(dinp); free(dwte); free(pre); free(acc);
}

/* ---- softmax cross-entropy ---- */
static struct { int tg[N]; float *logits, *probs; } ce;
static double ce_obj(void) { return crossentropy_forward(ce.probs, ce.logits, ce.tg, N, V); }
static void test_crossentropy(void) {
    for (int i = 0; i < N; i++) ce.tg[i] = (int)(pt_rng_next(&rng) % V);
    ce.logits = rand_buf((size_t)N * V, 2); ce.probs = pt_falloc((size_t)N * V);
    double loss = ce_obj(), ref = 0;
    for (int n = 0; n < N; n++) {   /* log-sum-exp in double */
        double s = 0;
        for (int v = 0; v < V; v++) s += exp(ce.logits[n * V + v]);
        ref += log(s) - ce.logits[n * V + ce.tg[n]];
    }
    ref /= N;
    CHECK("crossentropy_forward_matches_double", fabs(loss - ref) < EXACT_TOL * 10 * fabs(ref),
          "loss %.8f vs %.8f", loss, ref);
    float *dl = rand_buf((size_t)N * V, 5);
    crossentropy_backward_input(dl, ce.probs, ce.tg, 1.0f, N, V);
    double e = fd_relerr(ce.logits, (size_t)N * V, dl, ce_obj);
    CHECK("crossentropy_backward_input_fd", e < FD_TOL, "relerr %g", e);
    ce_obj();   /* the finite differences left probs of a perturbed input */
    float *dl3 = pt_falloc((size_t)N * V);   /* dloss scales the gradient */
    crossentropy_backward_input(dl3, ce.probs, ce.tg, 3.0f, N, V);
    double m = 0;
    for (size_t i = 0; i < (size_t)N * V; i++) if (fabs(dl3[i] - 3.0 * dl[i]) > m) m = fabs(dl3[i] - 3.0 * dl[i]);
    CHECK("crossentropy_backward_input_dloss_scales", m < EXACT_TOL, "max diff %g", m);
    memcpy(dl3, ce.logits, (size_t)N * V * sizeof *dl3);   /* in place: probs = logits buffer */
    float l2 = crossentropy_forward(dl3, dl3, ce.tg, N, V);
    CHECK("crossentropy_forward_in_place", l2 == (float)loss && max_absdiff(dl3, ce.probs, (size_t)N * V) == 0,
          "loss %g vs %g", l2, loss);
    free(ce.logits); free(ce.probs); free(dl); free(dl3);
}

/* The vectorisable exp and sigmoid used by softmax and GELU, against libm in double. */
static void test_fast_math(void) {
    double emax = 0, tmax = 0;
    for (float x = -80.0f; x <= 80.0f; x += 0.0137f) {
        double e = fabs(nn_expf(x) - exp((double)x)) / exp((double)x);
        if (e > emax) emax = e;
    }
    for (float x = -24.0f; x <= 24.0f; x += 0.00123f) {
        double e = fabs(nn_sigmoidf(x) - 1.0 / (1.0 + exp(-(double)x)));
        if (e > tmax) tmax = e;
    }
    CHECK("nn_expf_relative_error", emax < 1e-6, "max relerr %g", emax);
    CHECK("nn_sigmoidf_absolute_error", tmax < 1e-6, "max abserr %g", tmax);
    CHECK("nn_expf_clamps", nn_expf(-1000.0f) > 0 && nn_expf(1000.0f) < INFINITY && nn_sigmoidf(100.0f) == 1.0f &&
          nn_sigmoidf(-100.0f) >= 0 && nn_sigmoidf(-100.0f) < 1e-37, "limits wrong");
}

static void test_residual(void) {
    float a[3] = {1, 2, 3}, b[3] = {0.5f, -2, 4}, o[3];
    residual_forward(o, a, b, 3);
    CHECK("residual_forward", o[0] == 1.5f && o[1] == 0 && o[2] == 7, "got %g %g %g", o[0], o[1], o[2]);
}

/* The fused forms equal the separate kernels up to float summation order: the linear layer with
 * the residual added (out may be the residual itself), the layer norm's backward with the
 * residual's gradient added (dinp may be that gradient itself). */
static double rel_diff(const float *a, const float *b, size_t n) {
    double m = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        if (fabs((double)a[i] - b[i]) > m) m = fabs((double)a[i] - b[i]);
        if (fabs(b[i]) > s) s = fabs(b[i]);
    }
    return m / (s + 1e-30);
}

static void test_fused_residual(void) {
    enum { IN2 = 7, OUT2 = 12 };
    size_t no = (size_t)N * OUT2;
    float *inp = rand_buf((size_t)N * IN2, 1), *w = rand_buf((size_t)IN2 * OUT2, 1), *b = rand_buf(OUT2, 1);
    float *res = rand_buf(no, 1), *ref = pt_falloc(no), *out = rand_buf(no, 5), *alias = pt_falloc(no);
    matmul_forward(ref, inp, w, b, N, IN2, OUT2);
    residual_forward(ref, ref, res, (int)no);
    matmul_residual_forward(out, inp, w, b, res, N, IN2, OUT2);
    memcpy(alias, res, no * sizeof *alias);
    matmul_residual_forward(alias, inp, w, b, alias, N, IN2, OUT2);
    CHECK("matmul_residual_forward", rel_diff(out, ref, no) < EXACT_TOL, "relerr %g", rel_diff(out, ref, no));
    CHECK("matmul_residual_forward_in_place", rel_diff(alias, ref, no) < EXACT_TOL, "relerr %g",
          rel_diff(alias, ref, no));
    matmul_forward(ref, inp, w, NULL, N, IN2, OUT2);
    residual_forward(ref, ref, res, (int)no);
    matmul_residual_forward(out, inp, w, NULL, res, N, IN2, OUT2);
    CHECK("matmul_residual_forward_no_bias", rel_diff(out, ref, no) < EXACT_TOL, "relerr %g", rel_diff(out, ref, no));

    size_t nc = (size_t)N * C;
    float *x = rand_buf(nc, 1), *lw = rand_buf(C, 1), *lb = rand_buf(C, 1), *y = pt_falloc(nc);
    float *mean = pt_falloc(N), *rstd = pt_falloc(N), *dout = rand_buf(nc, 1), *dres = rand_buf(nc, 1);
    float *dref = pt_falloc(nc), *dx = rand_buf(nc, 5), *dalias = pt_falloc(nc);
    layernorm_forward(y, mean, rstd, x, lw, lb, N, C);
    layernorm_backward_input(dref, dout, x, lw, mean, rstd, N, C);
    residual_forward(dref, dref, dres, (int)nc);
    layernorm_residual_backward_input(dx, dout, dres, x, lw, mean, rstd, N, C);
    memcpy(dalias, dres, nc * sizeof *dalias);
    layernorm_residual_backward_input(dalias, dout, dalias, x, lw, mean, rstd, N, C);
    CHECK("layernorm_residual_backward_input", rel_diff(dx, dref, nc) < EXACT_TOL, "relerr %g", rel_diff(dx, dref, nc));
    CHECK("layernorm_residual_backward_input_in_place", rel_diff(dalias, dref, nc) < EXACT_TOL, "relerr %g",
          rel_diff(dalias, dref, nc));
    free(inp); free(w); free(b); free(res); free(ref); free(out); free(alias);
    free(x); free(lw); free(lb); free(y); free(mean); free(rstd); free(dout); free(dres); free(dref);
    free(dx); free(dalias);
}

/* A NaN anywhere reaches the loss (a diverged run must show it), with no branch in the loops:
 * exp and GELU of NaN, the max of a row holding a NaN, cross-entropy of such a row. */
static void test_nan_flows(void) {
    float nan = NAN, g, row[5] = {1, -3, NAN, 2, 0}, neg[4] = {-5, -0.0f, -7, -1};
    gelu_forward(&g, &nan, 1);
    CHECK("nan_exp_gelu", isnan(nn_expf(NAN)) && isnan(nn_sigmoidf(NAN)) && isnan(g), "exp %g gelu %g",
          nn_expf(NAN), g);
    CHECK("max_of_negatives", nn_max(neg, 4) == 0.0f && nn_max(neg + 2, 2) == -1.0f, "got %g %g",
          nn_max(neg, 4), nn_max(neg + 2, 2));
    float probs[5];
    int target = 1;
    float loss = crossentropy_forward(probs, row, &target, 1, 5);
    CHECK("nan_crossentropy", isnan(loss) && isnan(probs[0]), "loss %g", loss);
}

int main(void) {
    pt_rng_seed(&rng, 1234);
    test_embedding();
    test_layernorm();
    test_matmul();
    test_gelu();
    test_attention();
    test_lmhead();
    test_crossentropy();
    test_residual();
    test_fused_residual();
    test_fast_math();
    test_nan_flows();
    TEST_DONE();
}
