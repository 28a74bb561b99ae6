/* The PyTorch fixtures' common reading (tests/fixtures/<case>/, tools/make_fixtures.py and
 * tools/make_bf16_fixture.py): a case's B and T, and its weights by Hugging Face name. Shared by
 * test_gpt_torch.c and test_bf16_torch.c; a small loader of the tests' own (the product one,
 * gpt_io.c, refuses the fixtures' other tensors). */
#ifndef PT_TEST_TORCH_FIXTURE_H
#define PT_TEST_TORCH_FIXTURE_H
#include "io/io.h"
#include "io/safetensors.h"
#include "model/gpt.h"
#include "util/pt.h"
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>

/* Reads B and T from case.json. */
static int read_case(const char *dir, int *B, int *T) {
    char path[512];
    snprintf(path, sizeof path, "%s/case.json", dir);
    char *txt = pt_read_file(path, NULL);
    if (!txt) return -1;
    cJSON *j = cJSON_Parse(txt);
    const cJSON *b = cJSON_GetObjectItem(j, "B"), *t = cJSON_GetObjectItem(j, "T");
    int rc = cJSON_IsNumber(b) && cJSON_IsNumber(t) ? 0 : pt_seterr("%s: no integer B and T", path);
    if (!rc) { *B = b->valueint; *T = t->valueint; }
    cJSON_Delete(j);
    free(txt);
    return rc;
}

/* Loads every parameter by its HF name, with or without "transformer."; other tensors ignored. */
static int load_weights(gpt_model *m, const char *path) {
    st_file *f;
    if (st_open(&f, path) < 0) return -1;
    int rc = 0;
    for (int i = 0; i < gpt_param_count(m) && rc == 0; i++) {
        const gpt_param_info *pi = gpt_param_info_at(m, i);
        char name[64];
        int64_t shape[2] = {pi->shape[0], pi->shape[1]};
        snprintf(name, sizeof name, "transformer.%s", pi->name);
        const char *use = st_find(f, name) ? name : pi->name;
        rc = st_read_f32(f, use, m->params + pi->offset, pi->ndim, shape);
    }
    st_close(f);
    return rc;
}

#endif
