/* The supervisor's command lines and hosts (launch_int.h): the train flags of each attempt, the
 * hostfile read and rewritten, a host's reachability. */
#include "launch/launch_int.h"
#include "util/pt.h"
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

void launch_argv_push(launch_argv *a, const char *s) {
    if (a->n + 2 > a->cap) {
        a->cap = a->cap ? 2 * a->cap : 32;
        a->v = pt_realloc(a->v, sizeof *a->v * (size_t)a->cap);
    }
    a->v[a->n++] = pt_strdup(s);
    a->v[a->n] = NULL;
}

void launch_argv_free(launch_argv *a) {
    for (int i = 0; i < a->n; i++) free(a->v[i]);
    free(a->v);
    *a = (launch_argv){ 0 };
}

/* 1 when args[i] is flag ("--flag" or "--flag=..."); *val gets its value (NULL: the next arg). */
static int is_flag(const char *arg, const char *flag, const char **val) {
    size_t n = strlen(flag);
    if (strncmp(arg, flag, n) || (arg[n] && arg[n] != '=')) return 0;
    *val = arg[n] == '=' ? arg + n + 1 : NULL;
    return 1;
}

const char *launch_flag(char *const *args, int n, const char *flag) {
    const char *v, *found = NULL;
    for (int i = 0; i < n; i++)
        if (is_flag(args[i], flag, &v)) found = v ? v : (i + 1 < n ? args[i + 1] : NULL);
    return found;
}

/* The STEP of a well-formed --kill-at value "RANK@STEP[:PHASE]"; LONG_MAX when malformed, so that
 * it is never dropped and train refuses it with its own message. */
static long kill_step(const char *v) {
    char *end;
    if (!v) return LONG_MAX;
    long r = strtol(v, &end, 10);
    if (end == v || *end != '@' || r < 0) return LONG_MAX;
    const char *s = end + 1;
    long step = strtol(s, &end, 10);
    if (end == s || (*end && *end != ':') || step < 1) return LONG_MAX;
    return step;
}

void launch_train_argv(launch_argv *out, const launch_opts *o, const char *resume, long drop_kill_upto,
                       int dp, const char *snapdir) {
    char num[32];
    for (int i = 0; i < o->n_train_args; i++) {
        const char *a = o->train_args[i], *v;
        int takes_next = 0, drop = 0;
        if (is_flag(a, "--resume", &v) || is_flag(a, "--init", &v)) drop = resume != NULL, takes_next = !v;
        else if (is_flag(a, "--snapshot-dir", &v)) drop = 1, takes_next = !v;
        else if (is_flag(a, "--dp", &v)) drop = dp > 0, takes_next = !v;
        else if (is_flag(a, "--kill-at", &v)) {
            takes_next = !v;
            drop = kill_step(v ? v : (i + 1 < o->n_train_args ? o->train_args[i + 1] : NULL)) <= drop_kill_upto;
        }
        if (!drop) {
            launch_argv_push(out, a);
            if (takes_next && i + 1 < o->n_train_args) launch_argv_push(out, o->train_args[i + 1]);
        }
        if (takes_next) i++;
    }
    launch_argv_push(out, "--snapshot-dir");
    launch_argv_push(out, snapdir);
    if (dp > 0) {
        snprintf(num, sizeof num, "%d", dp);
        launch_argv_push(out, "--dp");
        launch_argv_push(out, num);
    }
    if (resume) {
        launch_argv_push(out, "--resume");
        launch_argv_push(out, resume);
    }
}

int launch_hosts_read(const char *path, int spares, launch_host *h, int *n) {
    FILE *f = fopen(path, "r");
    if (!f) return pt_seterr("--hostfile %s: cannot open: %s", path, strerror(errno));
    char line[512];
    int ln = 0;
    *n = 0;
    while (fgets(line, sizeof line, f)) {
        ln++;
        char *c = strchr(line, '#'), name[256];
        if (c) *c = 0;
        if (sscanf(line, "%255s", name) != 1) continue;
        if (*n == LAUNCH_MAX_HOSTS) {
            fclose(f);
            return pt_seterr("--hostfile %s:%d: more than %d hosts", path, ln, LAUNCH_MAX_HOSTS);
        }
        launch_host *x = &h[(*n)++];
        snprintf(x->name, sizeof x->name, "%s", name);
        const char *s = strstr(line, "slots=");
        x->slots = s ? atoi(s + 6) : 1;
        if (x->slots < 1) {
            fclose(f);
            return pt_seterr("--hostfile %s:%d: slots must be >= 1", path, ln);
        }
        x->used = 1;
        x->lost = 0;
    }
    fclose(f);
    if (spares < 0 || spares >= *n)
        return pt_seterr("--spares %d: the hostfile %s has %d host%s; leave at least one in use", spares, path,
                         *n, *n == 1 ? "" : "s");
    for (int i = *n - spares; i < *n; i++) h[i].used = 0;
    return 0;
}

int launch_hosts_write(const char *path, const launch_host *h, int n) {
    FILE *f = fopen(path, "w");
    if (!f) return pt_seterr("%s: cannot write the hostfile: %s", path, strerror(errno));
    for (int i = 0; i < n; i++)
        if (h[i].used && !h[i].lost) fprintf(f, "%s slots=%d\n", h[i].name, h[i].slots);
    return fclose(f) == 0 ? 0 : pt_seterr("%s: cannot write the hostfile", path);
}

int launch_host_of(const launch_host *h, int n, int w) {
    for (int i = 0; i < n; i++) {
        if (!h[i].used || h[i].lost) continue;
        if (w < h[i].slots) return i;
        w -= h[i].slots;
    }
    return -1;
}

int launch_host_alive(const char *name) {
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *ai;
    if (!strcmp(name, "localhost")) return 1;
    if (getaddrinfo(name, "9", &hints, &ai) != 0) return 0;
    int alive = 0;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd >= 0) {
        int rc = connect(fd, ai->ai_addr, ai->ai_addrlen);
        if (rc == 0 || errno == ECONNREFUSED) alive = 1;
        else if (errno == EINPROGRESS) {
            struct pollfd p = { .fd = fd, .events = POLLOUT };
            int err = 0;
            socklen_t len = sizeof err;
            if (poll(&p, 1, 1000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0)
                alive = err == 0 || err == ECONNREFUSED;
        }
        close(fd);
    }
    freeaddrinfo(ai);
    return alive;
}
