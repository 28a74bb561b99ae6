/* Which optimizer rule a checkpoint's moments belong to. AdamW writes nothing new (its
 * manifests are byte-for-byte as before); NAdam adds "optim": "nadam" and "nadam_mu_product",
 * its mu product after adam_t steps, which a resume checks against the run's flags. */
#include "ckpt/ckpt_int.h"
#include "io/json.h"
#include "optim/nadam.h"
#include "util/pt.h"
#include <math.h>
#include <string.h>

void ckpt_manifest_set_optim(ckpt_manifest *man, const optim_config *oc) {
    man->optim = oc->kind;
    man->nadam_beta1 = oc->beta1;
    man->nadam_momentum_decay = oc->momentum_decay;
}

void ckpt_optim_to_json(cJSON *root, const ckpt_manifest *man) {
    if (man->optim == OPTIM_ADAMW) return;
    cJSON_AddStringToObject(root, "optim", optim_kind_name(man->optim));
    double mu = isnan(man->nadam_beta1) ? man->nadam_mu_product   /* a manifest read back */
              : nadam_mu_product(man->nadam_beta1, man->nadam_momentum_decay, man->adam_t);
    cJSON_AddNumberToObject(root, "nadam_mu_product", mu);
}

int ckpt_optim_from_json(ckpt_manifest *man, const cJSON *root, const char *mpath) {
    const char *name = NULL;
    int rc = io_json_str(&name, root, "optim", IO_JSON_OPTIONAL, 16,
                         "%s: field \"optim\" is not a string", mpath);
    if (rc < 0) return -1;
    man->optim = OPTIM_ADAMW;
    man->nadam_mu_product = 1.0;
    man->nadam_beta1 = man->nadam_momentum_decay = NAN;   /* written again: the stored product */
    if (rc == 1) return 0;
    if (optim_kind_parse(name, &man->optim) < 0)
        return pt_seterr("%s: field \"optim\" is '%s', expected adamw or nadam or nadamw", mpath, name);
    if (man->optim == OPTIM_ADAMW) return 0;
    return io_json_num(&man->nadam_mu_product, root, "nadam_mu_product", IO_JSON_REQUIRED, 0, 1,
                       "%s: field \"nadam_mu_product\" missing or not a number in [0, 1]", mpath) < 0 ? -1 : 0;
}

int ckpt_check_optim(const ckpt_manifest *man, const optim_config *oc, const char *dir) {
    if (man->optim != oc->kind)
        return pt_seterr("%s: its moments are %s's; resume with --optim %s", dir,
                         optim_kind_name(man->optim), optim_kind_name(man->optim));
    if (oc->kind == OPTIM_ADAMW) return 0;
    double want = nadam_mu_product(oc->beta1, oc->momentum_decay, man->adam_t);
    if (fabs(want - man->nadam_mu_product) > 1e-6 * fmax(want, 1e-30))
        return pt_seterr("%s: NAdam's mu product after %d steps was saved as %.9g, --beta1 %g "
                         "--momentum-decay %g give %.9g; resume with the saved run's values", dir,
                         man->adam_t, man->nadam_mu_product, oc->beta1, oc->momentum_decay, want);
    return 0;
}
