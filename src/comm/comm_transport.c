/* The transport registry (comm.h, "transports"): one row per transport, the built-in threads
 * and mpi first, then those comm_transport_register adds. Everyone picks a transport by name
 * here: the CLI's --transport, the job's endpoints, the end of MPI. Not here: any transport's
 * messages (comm_threads.c, comm_mpi.c). */
#include "comm/comm.h"
#include "util/pt.h"
#include <stdio.h>
#include <string.h>

#define COMM_MAX_TRANSPORTS 8

static const comm_transport threads_row = {
    .name = "threads", .help = "threads of this process (default)", .create = comm_threads_create,
};
static const comm_transport mpi_row = {
    .name = "mpi", .help = "Open MPI processes (run under mpirun)", .init = comm_mpi_init,
    .finalize = comm_mpi_finalize, .available = comm_mpi_available,
};

static const comm_transport *transports[COMM_MAX_TRANSPORTS] = { &threads_row, &mpi_row };
static int n_transports = 2;

int comm_transport_register(const comm_transport *t) {
    if (n_transports == COMM_MAX_TRANSPORTS)
        return pt_seterr("transport '%s': the registry holds %d transports already", t->name,
                         COMM_MAX_TRANSPORTS);
    if (!t->create == !t->init)
        return pt_seterr("transport '%s': give create (endpoints for threads of this process) or "
                         "init (this process's endpoint of a world), not %s", t->name,
                         t->create ? "both" : "neither");
    transports[n_transports++] = t;
    return 0;
}

int comm_transport_count(void) { return n_transports; }

const comm_transport *comm_transport_at(int i) {
    return i >= 0 && i < n_transports ? transports[i] : NULL;
}

/* "threads or mpi", "threads, mpi or x": the names, for errors and help. */
static const char *names_text(char *buf, size_t n) {
    size_t at = 0;
    buf[0] = 0;
    for (int i = 0; i < n_transports && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, "%s%s", i == 0 ? "" : i == n_transports - 1 ? " or " : ", ",
                               transports[i]->name);
    return buf;
}

const comm_transport *comm_transport_find(const char *name) {
    char names[256];
    if (!name) name = "threads";
    for (int i = 0; i < n_transports; i++)
        if (!strcmp(transports[i]->name, name)) return transports[i];
    pt_seterr("--transport must be %s, got '%s'", names_text(names, sizeof names), name);
    return NULL;
}

int comm_transport_start(const comm_transport *t, int *argc, char ***argv, comm **world) {
    *world = NULL;
    if (!t->init) return 0;
    if (t->available && !t->available())
        return pt_seterr("--transport %s: this build has no %s", t->name, strcmp(t->name, "mpi") ? t->name : "MPI");
    return t->init(argc, argv, world);
}

void comm_transport_stop(const comm_transport *t, comm *world) {
    if (!world) return;
    comm_free(world);
    if (t && t->finalize) t->finalize();
}
