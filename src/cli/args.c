/* Shared flag parsing for every verb: typed flags, errors naming the flag, --help. */
#include "cli/cli.h"
#include "util/pt.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void print_help(const char *verb, const char *usage, const cli_opt *opts, int n) {
    printf("usage: pipetrain %s %s\n", verb, usage ? usage : "[flags]");
    for (int i = 0; i < n; i++)
        if (opts[i].name) printf("  %-22s %s\n", opts[i].name, opts[i].help ? opts[i].help : "");
}

static int set_value(const cli_opt *o, const char *verb, const char *v) {
    char *end = NULL;
    errno = 0;
    switch (o->type) {
    case OPT_INT: case OPT_LONG: {
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end || (o->type == OPT_INT && (x < -2147483647LL || x > 2147483647LL)))
            goto bad_number;
        if (o->type == OPT_INT) *(int *)o->dst = (int)x; else *(long *)o->dst = (long)x;
        return 0;
    }
    case OPT_DOUBLE: {
        double x = strtod(v, &end);
        if (errno || end == v || *end) goto bad_number;
        *(double *)o->dst = x;
        return 0;
    }
    case OPT_STR: *(const char **)o->dst = v; return 0;
    case OPT_FLAG: *(bool *)o->dst = true; return 0;
    }
    return 0;
bad_number:
    fprintf(stderr, "pipetrain %s: %s expects a %s, got '%s'\n", verb, o->name,
            o->type == OPT_DOUBLE ? "number" : "whole number", v);
    return -1;
}

int cli_parse(int argc, char **argv, const char *verb, const char *usage, const cli_opt *opts, int n) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { print_help(verb, usage, opts, n); return 1; }
        const char *eq = strchr(a, '=');
        size_t len = eq ? (size_t)(eq - a) : strlen(a);
        const cli_opt *o = NULL;
        for (int k = 0; k < n; k++)
            if (opts[k].name && strlen(opts[k].name) == len && !strncmp(opts[k].name, a, len)) { o = &opts[k]; break; }
        if (!o) {
            fprintf(stderr, "pipetrain %s: unknown flag '%s' (try --help)\n", verb, a);
            return -1;
        }
        const char *v = eq ? eq + 1 : NULL;
        if (o->type == OPT_FLAG) {
            if (v) { fprintf(stderr, "pipetrain %s: %s takes no value\n", verb, o->name); return -1; }
            v = "1";
        } else if (!v) {
            if (i + 1 >= argc) { fprintf(stderr, "pipetrain %s: %s needs a value\n", verb, o->name); return -1; }
            v = argv[++i];
        }
        if (set_value(o, verb, v)) return -1;
    }
    return 0;
}

int cli_fail(const char *verb) {
    fprintf(stderr, "pipetrain %s: %s\n", verb, pt_err());
    return 1;
}
