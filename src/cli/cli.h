/* The command line: `pipetrain <verb> [flags]`. Each verb is a thin file over the library
 * (cli_<verb>.c) exposing `int cli_<verb>(int argc, char **argv)` that returns the process exit
 * status (0 ok, 1 user error, 2 usage). Flag parsing is shared: cli_parse(). */
#ifndef PT_CLI_H
#define PT_CLI_H
#include <stdbool.h>

typedef enum { OPT_INT, OPT_LONG, OPT_DOUBLE, OPT_STR, OPT_FLAG } cli_opt_type;
typedef struct {
    const char *name;      /* "--stages" */
    cli_opt_type type;
    void *dst;             /* int*, long*, double*, const char**, bool* */
    const char *help;      /* one line for --help */
} cli_opt;

/* Parses argv[1..] (argv[0] is the verb) into opts. "--x=v" and "--x v" both work. Unknown flag,
 * missing value or a malformed number: prints an error naming the flag and returns -1. "--help":
 * prints the flags and returns 1. Otherwise 0. Flags not given keep their defaults. */
int cli_parse(int argc, char **argv, const char *verb, const char *usage, const cli_opt *opts, int n_opts);
/* Prints "pipetrain <verb>: <pt_err()>" to stderr and returns 1 (for `return cli_fail(...)`). */
int cli_fail(const char *verb);

/* The --precision flag (its value into *name), and its effect: the process's default number
 * format (gpt_set_default_precision); a line on `say` (NULL: none) naming the bf16 kernel.
 * -1 with an error for a name other than fp32 or bf16 (NULL keeps fp32). */
#include <stdio.h>
cli_opt cli_precision_opt(const char **name);
int cli_precision_apply(const char *name, FILE *say);

int cli_train(int argc, char **argv);
int cli_grad(int argc, char **argv);
int cli_sample(int argc, char **argv);
int cli_eval(int argc, char **argv);
int cli_schedule(int argc, char **argv);
int cli_simulate(int argc, char **argv);
int cli_profile(int argc, char **argv);
int cli_plan(int argc, char **argv);
int cli_report(int argc, char **argv);
int cli_tokenize(int argc, char **argv);
int cli_launch(int argc, char **argv);

#endif
