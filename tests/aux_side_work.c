/* A side program that counts its own work (the harvesting tests and bench_harvest --programs):
 * a CPU-bound loop of fixed units of integer arithmetic that publishes, after every unit, how
 * many units it has done and the CPU seconds its process has received (its own
 * CLOCK_PROCESS_CPUTIME_ID), in a small file mapped into memory: no system call per unit but
 * the clock's, and the file holds the last published numbers when the program is stopped or
 * killed. Two records alternate and an index says which is complete, so a kill in the middle of
 * an update leaves the previous one readable.
 * Usage:
 *   aux_side_work FILE           count into FILE (created) until killed
 *   aux_side_work --read FILE    print "units U cpu_s C" of FILE's last complete record
 *   aux_side_work --calibrate S  run S seconds alone, print "units_per_s R" (per CPU second)
 * Work done in the bubbles, in seconds of the program alone at full speed: U / R. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

enum { UNIT_ITERS = 20000 };     /* a unit: about 10-20 us on a current core */

typedef struct {
    uint64_t units, cpu_ns;
} record;

typedef struct {
    volatile uint64_t at;        /* the complete record: rec[at % 2] */
    record rec[2];
} counter;

static uint64_t cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One unit of work: a chain of dependent multiply-adds the compiler cannot remove. */
static uint64_t unit(uint64_t x) {
    for (int i = 0; i < UNIT_ITERS; i++) x = x * 6364136223846793005u + 1442695040888963407u;
    return x;
}

static counter *map_file(const char *path, int create) {
    int fd = open(path, create ? O_RDWR | O_CREAT : O_RDONLY, 0644);   /* never shorter than a
                                                                         * counter: readers map it */
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) { perror(path); exit(1); }
    if (create && ftruncate(fd, sizeof(counter)) < 0) { perror(path); exit(1); }
    if (!create && st.st_size < (off_t)sizeof(counter)) { fprintf(stderr, "%s: not a counter\n", path); exit(1); }
    void *p = mmap(NULL, sizeof(counter), create ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) { perror(path); exit(1); }
    return p;
}

static volatile uint64_t sink;

static _Noreturn void count_into(const char *path) {
    counter *c = map_file(path, 1);
    uint64_t x = 1;
    memset(c->rec, 0, sizeof c->rec);
    for (uint64_t n = 1;; n++) {
        x = unit(x);
        sink = x;
        record *r = &c->rec[(c->at + 1) % 2];
        r->units = n;
        r->cpu_ns = cpu_ns();
        __atomic_store_n(&c->at, c->at + 1, __ATOMIC_RELEASE);
    }
}

static int read_file(const char *path) {
    counter *c = map_file(path, 0);
    record r = c->rec[c->at % 2];
    printf("units %llu cpu_s %.6f\n", (unsigned long long)r.units, r.cpu_ns / 1e9);
    return 0;
}

static int calibrate(double secs) {
    uint64_t t0 = cpu_ns(), n = 0, x = 1;
    while (cpu_ns() - t0 < (uint64_t)(secs * 1e9)) { x = unit(x); n++; }
    sink = x;
    printf("units_per_s %.1f\n", n / ((cpu_ns() - t0) / 1e9));
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && argv[1][0] != '-') count_into(argv[1]);
    if (argc == 3 && !strcmp(argv[1], "--read")) return read_file(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "--calibrate")) return calibrate(atof(argv[2]));
    fprintf(stderr, "usage: aux_side_work FILE | --read FILE | --calibrate SECONDS\n");
    return 2;
}
