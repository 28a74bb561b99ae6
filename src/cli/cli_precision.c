/* --precision fp32|bf16 of train, grad and eval: the process's default number format of the
 * matmuls (gpt_set_default_precision), set before any model exists. */
#include "cli/cli.h"
#include "model/gpt.h"
#include "util/pt.h"
#include <stdio.h>

cli_opt cli_precision_opt(const char **name) {
    return (cli_opt){ "--precision", OPT_STR, name,
                      "fp32 (default) | bf16: matmul inputs rounded to bf16, fp32 sums; weights, "
                      "gradients, AdamW, layer norms, softmax and the loss in fp32" };
}

int cli_precision_apply(const char *name, FILE *say) {
    nn_precision p = NN_FP32;
    if (name && nn_precision_parse(name, &p) < 0)
        return pt_seterr("--precision '%s': expected fp32 or bf16", name);
    gpt_set_default_precision(p);
    if (p == NN_BF16 && say)
        fprintf(say, "precision: bf16 matmuls (inputs rounded to bf16, fp32 sums), kernel: %s\n",
                nn_bf16_kernel());
    return 0;
}
