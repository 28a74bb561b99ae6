/* The rank state file (ckpt/ckpt_state.h): what is written reads back bitwise with its numbers;
 * a file of another layout, or without a required tensor, is "not usable" with the reason and
 * leaves the items untouched; a damaged one (a tensor of another size, metadata missing, bytes
 * cut) is an error naming the file and the field. The runs that use it: tests/test_async_resume.sh. */
#include "ckpt/ckpt_state.h"
#include "io/safetensors.h"
#include "util/pt.h"
#include "test.h"
#include "test_tmpdir.h"
#include <stdint.h>
#include <string.h>

enum { N1 = 37, N2 = 5 };

static void state_make(ckpt_state *s, float *a, float *b, float *c) {
    memset(s, 0, sizeof *s);
    snprintf(s->sig, sizeof s->sig, "2bw P2 D1 tp1 pipes1 split 0,2,4");
    ckpt_state_add(s, "2bw/older.0", a, N1, 0);
    ckpt_state_add(s, "outer/start", b, N2, 0);
    ckpt_state_add(s, "outer/snap", c, N2, 1);
}

static void test_roundtrip(void) {
    float a[N1], b[N2], c[N2], a2[N1], b2[N2], c2[N2];
    for (int i = 0; i < N1; i++) a[i] = 0.1f * (float)i - 1.0f;
    for (int i = 0; i < N2; i++) b[i] = (float)i * 3.5f, c[i] = -(float)i;
    ckpt_state s, r;
    char why[600] = "";
    state_make(&s, a, b, c);
    s.step = 7; s.n_upd = 28; s.pending = 1;
    int wrc = ckpt_state_write(tmpdir, 3, &s);
    state_make(&r, a2, b2, c2);
    int rc = ckpt_state_read(tmpdir, 3, &r, why, sizeof why);
    CHECK("state: written and read back bitwise with step, update count, pending", wrc == 0 && rc == 1 &&
          !memcmp(a, a2, sizeof a) && !memcmp(b, b2, sizeof b) && !memcmp(c, c2, sizeof c) && r.step == 7 &&
          r.n_upd == 28 && r.pending == 1 && r.it[2].found, "rc %d %d: %s", wrc, rc, pt_err());

    s.it[2].f = NULL;   /* an optional item left out: read says not found */
    s.pending = 0;
    ckpt_state_write(tmpdir, 4, &s);
    memset(c2, 0x7f, sizeof c2);
    state_make(&r, a2, b2, c2);
    rc = ckpt_state_read(tmpdir, 4, &r, why, sizeof why);
    CHECK("state: an optional tensor absent reads as not found, its buffer untouched",
          rc == 1 && !r.it[2].found && ((unsigned char *)c2)[0] == 0x7f, "rc %d", rc);

    state_make(&r, a2, b2, c2);
    rc = ckpt_state_read(tmpdir, 5, &r, why, sizeof why);
    CHECK("state: an absent file is not usable, saying so", rc == 0 && strstr(why, "state-5.safetensors is absent"), "rc %d: %s", rc, why);

    memset(a2, 0, sizeof a2);
    state_make(&r, a2, b2, c2);
    snprintf(r.sig, sizeof r.sig, "2bw P2 D1 tp1 pipes1 split 0,1,4");
    rc = ckpt_state_read(tmpdir, 3, &r, why, sizeof why);
    CHECK("state: another layout is not usable, naming both, nothing read", rc == 0 && strstr(why, "another layout") &&
          strstr(why, "split 0,2,4") && a2[5] == 0.0f, "rc %d: %s", rc, why);

    state_make(&r, a2, b2, c2);
    snprintf(r.it[0].name, sizeof r.it[0].name, "pipemare/velocity.0");
    rc = ckpt_state_read(tmpdir, 3, &r, why, sizeof why);
    CHECK("state: a required tensor absent (another mode) is not usable, naming it",
          rc == 0 && strstr(why, "pipemare/velocity.0"), "rc %d: %s", rc, why);

    state_make(&r, a2, b2, c2);
    r.it[0].n = N1 + 1;
    rc = ckpt_state_read(tmpdir, 3, &r, why, sizeof why);
    CHECK("state: a tensor of another size is an error naming file and tensor", rc < 0 &&
          strstr(pt_err(), "state-3.safetensors") && strstr(pt_err(), "2bw/older.0"), "rc %d: %s", rc, pt_err());
}

/* A file with the metadata cut (written by hand: no "pending"), and one cut short. */
static void test_damaged(void) {
    float a[N1] = { 0 }, b[N2] = { 0 }, c[N2] = { 0 };
    ckpt_state r;
    char why[600];
    st_writer *w = st_writer_new();
    int64_t shape[1] = { N1 };
    st_writer_meta(w, "format", "pipetrain-rank-state");
    st_writer_meta(w, "rank", "6");
    st_writer_meta(w, "sig", "2bw P2 D1 tp1 pipes1 split 0,2,4");
    st_writer_add(w, "2bw/older.0", ST_F32, 1, shape, a);
    st_write(w, tpath("state-6.safetensors"));
    st_writer_free(w);
    state_make(&r, a, b, c);
    r.n = 1;   /* the file's one tensor */
    int rc = ckpt_state_read(tmpdir, 6, &r, why, sizeof why);
    CHECK("state: the numbers missing is an error naming file and field", rc < 0 &&
          strstr(pt_err(), "state-6.safetensors") && strstr(pt_err(), "state/nums"), "rc %d: %s", rc, pt_err());

    unsigned char head[64] = { 0 };
    FILE *f = fopen(tpath("state-3.safetensors"), "rb");
    if (f) { size_t got = fread(head, 1, sizeof head, f); (void)got; fclose(f); }
    write_bytes(tpath("state-3.safetensors"), head, sizeof head);
    state_make(&r, a, b, c);
    rc = ckpt_state_read(tmpdir, 3, &r, why, sizeof why);
    CHECK("state: a file cut short is an error naming it", rc < 0 && strstr(pt_err(), "state-3.safetensors"),
          "rc %d: %s", rc, pt_err());
}

/* The in-place form (snapshots): made once, refilled; what it holds reads back as a written file
 * does, an item without data as zeros. */
static void test_in_place(void) {
    float a[N1], b[N2], c[N2], a2[N1], b2[N2], c2[N2];
    for (int i = 0; i < N1; i++) a[i] = (float)i;
    for (int i = 0; i < N2; i++) b[i] = 2.0f * (float)i, c[i] = 1.0f;
    ckpt_state s, r;
    ckpt_state_file f;
    char why[600] = "";
    state_make(&s, a, b, NULL);
    s.step = 3; s.n_upd = 12;
    int mrc = ckpt_state_map(&f, tpath("state-2.safetensors"), 2, &s);
    ckpt_state_fill(&f, &s);
    a[0] = 99.0f; s.step = 4; s.pending = 1; s.it[2].f = c;   /* the next generation, in place */
    ckpt_state_fill(&f, &s);
    state_make(&r, a2, b2, c2);
    int rc = ckpt_state_read(tmpdir, 2, &r, why, sizeof why);
    CHECK("state in place: refilled, reads back the last generation bitwise", mrc == 0 && rc == 1 &&
          f.key == ckpt_state_key(2, &s) && !memcmp(a, a2, sizeof a) && !memcmp(b, b2, sizeof b) &&
          !memcmp(c, c2, sizeof c) && r.step == 4 && r.n_upd == 12 && r.pending == 1, "rc %d %d: %s", mrc, rc, pt_err());
    state_make(&r, a2, b2, c2);
    CHECK("state in place: the key differs for another rank or layout", ckpt_state_key(3, &s) != f.key &&
          (r.it[0].n = N1 - 1, ckpt_state_key(2, &r) != f.key), "same key");
    ckpt_state_unmap(&f);
}

int main(void) {
    tmpdir_make("pt-rankstate-");
    test_roundtrip();
    test_damaged();
    test_in_place();
    tmpdir_remove();
    TEST_DONE();
}
