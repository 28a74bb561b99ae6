/* A side program for the harvesting tests (tests/test_harvest.c, test_harvest_cli.sh): writes its
 * pid to FILE, then touches MB megabytes a megabyte at a time (resident memory grows), then spins
 * forever. Usage: aux_hog FILE MB. Killed by whoever started it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: aux_hog PIDFILE MB\n"); return 2; }
    FILE *f = fopen(argv[1], "w");
    if (!f) { perror(argv[1]); return 1; }
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
    long mb = atol(argv[2]);
    for (long i = 0; i < mb; i++) {
        char *p = malloc(1 << 20);
        if (!p) return 1;
        memset(p, (int)i, 1 << 20);
    }
    volatile unsigned long x = 0;
    for (;;) x++;
}
