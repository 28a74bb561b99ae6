/* Feasibility of going on in place after a rank dies, under Debian's Open MPI 4.1 (no ULFM):
 * run by dev/recycle_p2p.sh with `mpirun --enable-recovery -np 4`, which kills one rank with
 * kill -9 from outside once every rank has passed round KILL_ROUND. Plain MPI, no project code.
 *
 * Each round every rank exchanges a message with every rank it believes alive (isend + irecv,
 * then MPI_Test polled against a deadline, so nothing can hang). After the kill the survivors
 * learn who died from the file argv[1] (the supervisor's decision; its absence: no death yet) and
 * check, printing one line each:
 *   recv-from-dead  an irecv posted from the dead rank: error, or still pending after 5 s
 *   p2p-survivors   20 more rounds of all-pairs exchanges among the survivors on MPI_COMM_WORLD
 *   create-group    MPI_Comm_create_group over the survivors (collective over them only)
 *   allreduce       MPI_Allreduce over that communicator
 *   finalize        whether MPI_Finalize returns (else the survivors leave with _exit)
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define N_MAX 16
static int rank, size;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* Polls req until done, an error, or `limit` seconds: 0 done, 1 error (code in *err), 2 timeout. */
static int poll_req(MPI_Request *req, double limit, int *err) {
    double t0 = now();
    for (;;) {
        int done = 0;
        MPI_Status st;
        int rc = MPI_Test(req, &done, &st);
        if (rc != MPI_SUCCESS) { *err = rc; return 1; }
        if (done) return 0;
        if (now() - t0 > limit) return 2;
        usleep(200);
    }
}

static int read_dead(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int d = -1;
    if (fscanf(f, "%d", &d) != 1) d = -1;
    fclose(f);
    return d;
}

/* One round of all-pairs exchanges among ranks not equal to dead; 0 when all completed. */
static int exchange(int round, int dead, double limit, char *why, size_t whyn) {
    MPI_Request r[2 * N_MAX];
    int out = rank * 1000 + round, in[N_MAX], n = 0;
    for (int p = 0; p < size; p++) {
        if (p == rank || p == dead) continue;
        MPI_Irecv(&in[p], 1, MPI_INT, p, round % 30000, MPI_COMM_WORLD, &r[n++]);
        MPI_Isend(&out, 1, MPI_INT, p, round % 30000, MPI_COMM_WORLD, &r[n++]);
    }
    for (int i = 0; i < n; i++) {
        int err = 0, rc = poll_req(&r[i], limit, &err);
        if (rc) { snprintf(why, whyn, "request %d: %s (code %d)", i, rc == 1 ? "error" : "timeout", err); return -1; }
    }
    for (int p = 0; p < size; p++)
        if (p != rank && p != dead && in[p] != p * 1000 + round) {
            snprintf(why, whyn, "from %d got %d, want %d", p, in[p], p * 1000 + round);
            return -1;
        }
    return 0;
}

static void say(const char *what, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#include <stdarg.h>
static void say(const char *what, const char *fmt, ...) {
    char b[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    printf("rank %d %s: %s\n", rank, what, b);
    fflush(stdout);
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: recycle_p2p DEAD_FILE PROGRESS_DIR\n"); return 2; }
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    char prog[512], why[300] = "";
    snprintf(prog, sizeof prog, "%s/rank-%d", argv[2], rank);
    int dead = -1, round = 0;
    /* Rounds with everyone until the supervisor's file names a dead rank. */
    for (; dead < 0 && round < 100000; round++) {
        FILE *f = fopen(prog, "w");
        if (f) { fprintf(f, "%d %d\n", round, (int)getpid()); fclose(f); }
        if (exchange(round, -1, 3.0, why, sizeof why)) {
            say("before-death", "round %d failed: %s", round, why);
            dead = -2;
            break;
        }
        usleep(20000);
        dead = read_dead(argv[1]);
    }
    if (dead == -2) {   /* a failure seen before the file: wait for the file (bounded) */
        for (int i = 0; i < 500 && (dead = read_dead(argv[1])) < 0; i++) usleep(20000);
    }
    say("dead", "rank %d (round %d)", dead, round);
    if (dead < 0) { MPI_Finalize(); return 1; }
    /* The ranks' rounds may differ by one: agree on a fresh tag space past every round. */
    int base = 20000;
    /* recv-from-dead */
    int sink;
    MPI_Request rq;
    double t0 = now();
    int rc = MPI_Irecv(&sink, 1, MPI_INT, dead, 29999, MPI_COMM_WORLD, &rq), err = 0;
    if (rc != MPI_SUCCESS) say("recv-from-dead", "irecv itself returned error %d", rc);
    else {
        int pr = poll_req(&rq, 5.0, &err);
        say("recv-from-dead", "%s after %.2f s (code %d)", pr == 0 ? "completed?!" : pr == 1 ? "ERROR returned" : "still pending", now() - t0, err);
    }
    /* p2p among survivors */
    int ok = 1;
    t0 = now();
    for (int i = 0; i < 20 && ok; i++)
        if (exchange(base + i, dead, 10.0, why, sizeof why)) { say("p2p-survivors", "round %d failed: %s", i, why); ok = 0; }
    if (ok) say("p2p-survivors", "20 rounds ok, %.3f ms per round", (now() - t0) / 20 * 1e3);
    /* a communicator over the survivors without a collective over the dead rank */
    MPI_Group wg, sg;
    MPI_Comm sc = MPI_COMM_NULL;
    int ex[1] = {dead};
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Group_excl(wg, 1, ex, &sg);
    t0 = now();
    rc = MPI_Comm_create_group(MPI_COMM_WORLD, sg, 7, &sc);
    say("create-group", "rc %d after %.3f s", rc, now() - t0);
    if (rc == MPI_SUCCESS && sc != MPI_COMM_NULL) {
        MPI_Comm_set_errhandler(sc, MPI_ERRORS_RETURN);
        double v = rank + 1, s = 0;
        t0 = now();
        rc = MPI_Allreduce(&v, &s, 1, MPI_DOUBLE, MPI_SUM, sc);
        say("allreduce", "rc %d sum %g after %.3f s", rc, s, now() - t0);
        float big[100000], bs[100000];
        for (int i = 0; i < 100000; i++) big[i] = (float)rank;
        t0 = now();
        for (int i = 0; i < 10; i++) rc |= MPI_Allreduce(big, bs, 100000, MPI_FLOAT, MPI_SUM, sc);
        say("allreduce-big", "rc %d [0]=%g, %.3f ms each", rc, bs[0], (now() - t0) / 10 * 1e3);
        rc = MPI_Barrier(sc);
        say("barrier", "rc %d", rc);
    }
    /* finalize, bounded by an alarm */
    alarm(10);
    signal(SIGALRM, SIG_DFL);
    say("finalize", "calling");
    MPI_Finalize();
    say("finalize", "returned");
    return 0;
}
