/* Snapshots' peer copy (snapshot_int.h): each written generation of a rank also goes, over a TCP
 * connection of its own (not the job's communicator, so the compute path never waits on it), to
 * a rank on another host, which keeps it in memory that outlives its own process:
 * ROOT/rank-<holder>/peer-<origin>/gen-<step>/, the origin's files and snap.json as they are. A
 * sender thread sends the newest generation written (one still being sent when a newer one is
 * written: the newer one next, those between skipped); a receiver thread per connection checks
 * each file's sum (a file refilled while it was being sent fails it: that copy is dropped) and
 * renames the folder into place when whole. For layouts where no replica on another host holds
 * the same state (--dp 1, --zero 1's moment slices, a stage's replicas on one host).
 *
 * Sums only (snap_peer_sums_to): where the peer is the same stage's rank of another replica, it
 * holds the same bytes already (data parallelism without --zero 1); then only the generation's
 * snap.json and each file's sum go, the receiver compares them with its own generation of the
 * same step (waiting for it at most PEER_TWIN_WAIT_S) and answers one byte: 'E' equal (it keeps
 * the origin's snap.json, with "files_at": its own rank, as peer-<origin>/gen-<step>/: the
 * restore takes the files from its own gen-<step>/ after checking them against those sums), 'D'
 * differ, 'U' its own not there. Anything but 'E' makes the sender send that generation whole;
 * 'D' makes it send every later one whole too (said once on stderr).
 *
 * On the wire, per generation: "PTSP", origin rank (int32), step (int64), files (int32), json
 * bytes (uint32), the json; per file: name bytes (uint16), the name, bytes (uint64), sum64
 * (uint64), the data. Sums only: "PTSS" and the same, each file's sum followed by a byte saying
 * whether its data follows (the rank's own state file's does); the answer one byte.
 * Host byte order: both ends are this program on one kind of machine. */
#include "ckpt/snapshot_int.h"
#include "util/pt.h"
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define PEER_MAX_CONN 16        /* senders one receiver serves */
#define PEER_KEEP 3             /* generations kept per origin */
#define PEER_IO_TIMEOUT_S 10    /* a send or receive that makes no progress this long fails */
#define PEER_NICE 19            /* the sender's and receivers' nice value: the lowest */
#define PEER_RECV_PIECE (2u << 20)  /* bytes received (one wake-up: SO_RCVLOWAT) before they are
                                     * summed, in the L3 cache: 2 MB took about 10% less CPU (sender
                                     * and receiver: dev/snapshot_peer_cpu.sh) than 64 KB pieces'
                                     * 32x the wake-ups */
#define PEER_TWIN_WAIT_S 5      /* sums only: how long a receiver waits for its own generation */

struct snap_peer {
    char dir[1024];             /* root/rank-<me> */
    int rank;
    /* receiving */
    int lfd;                    /* listening socket (-1: none) */
    pthread_t lth;
    int n_conn, conn_fd[PEER_MAX_CONN];
    pthread_t conn_th[PEER_MAX_CONN];
    /* sending */
    uint32_t to_addr;
    int to_port, to_rank, sfd, sending;
    int awaiting;               /* the sender waits for a sums-only answer (on sfd) */
    int sums_only;              /* the peer is a replica: sums only (0 after it answered 'D') */
    int differ_said;
    pthread_t sth;
    /* the newest generation offered, not yet taken by the sender */
    long pend_step;             /* 0: none */
    char *pend_json;
    snap_peer_file pend_f[CKPT_SNAP_PIECES];
    int pend_n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    long own_step;              /* this rank's newest generation written (sums only waits for it) */
    pthread_cond_t own_cv;
    int stop;
    snap_peer_stats st;
};

snap_peer *snap_peer_new(const char *rank_dir, int rank) {
    snap_peer *p = pt_calloc(1, sizeof *p);
    snprintf(p->dir, sizeof p->dir, "%s", rank_dir);
    p->rank = rank;
    p->lfd = p->sfd = -1;
    p->st.peer_rank = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_cond_init(&p->own_cv, NULL);
    return p;
}

/* The first IPv4 address of this host that is not loopback (host order), or loopback. */
static uint32_t host_addr(void) {
    struct ifaddrs *ifa, *i;
    uint32_t a = INADDR_LOOPBACK;
    if (getifaddrs(&ifa) < 0) return a;
    for (i = ifa; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET) {
            uint32_t x = ntohl(((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr);
            if ((x >> 24) != 127) { a = x; break; }
        }
    freeifaddrs(ifa);
    return a;
}

/* CPU seconds this thread has used (what the copy takes from the cores, whatever the load). */
static double thread_cpu_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void set_timeouts(int fd) {
    struct timeval tv = { .tv_sec = PEER_IO_TIMEOUT_S };
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

static int read_all(int fd, void *buf, size_t n) {
    for (size_t got = 0; got < n;) {
        ssize_t k = recv(fd, (char *)buf + got, n - got, 0);
        if (k <= 0) { if (k < 0 && errno == EINTR) continue; return -1; }
        got += (size_t)k;
    }
    return 0;
}

static int write_all(int fd, const void *buf, size_t n) {
    for (size_t put = 0; put < n;) {
        ssize_t k = send(fd, (const char *)buf + put, n - put, MSG_NOSIGNAL);
        if (k <= 0) { if (k < 0 && errno == EINTR) continue; return -1; }
        put += (size_t)k;
    }
    return 0;
}

/* ---- receiving ----------------------------------------------------------------------------- */

static int write_file(const char *path, const unsigned char *b, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int ok = fwrite(b, 1, n, f) == n;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Keeps the newest PEER_KEEP generations of an origin's folder. */
static void peer_prune(const char *odir) {
    long *steps;
    int n = snap_list_gens(odir, &steps);
    for (int i = PEER_KEEP; i < n; i++) {
        char g[1200];
        snprintf(g, sizeof g, "%s/gen-%ld", odir, steps[i]);
        snap_remove_dir(g);
    }
    free(steps);
}

/* n bytes from fd read and dropped (a file that could not be made). 0, or -1. */
static int recv_drop(int fd, uint64_t n) {
    char buf[65536];
    for (uint64_t k; n > 0; n -= k) {
        k = n < sizeof buf ? n : sizeof buf;
        if (read_all(fd, buf, (size_t)k) < 0) return -1;
    }
    return 0;
}

/* A receiving connection: its socket and the files it keeps mapped. The generations it receives
 * go round the same files (recv_folder reuses the oldest kept folder), so a file's mapping is
 * kept from one generation to the next (keyed by its inode and size; the least recently used
 * unmapped when full): the receive then copies into pages already mapped, with no page-table
 * work per generation. A mapping not used for PEER_KEEP generations is dropped (its file was
 * removed, or made anew: its memory is not held past that). */
#define PEER_MAPS (2 * PEER_KEEP * CKPT_SNAP_PIECES)
typedef struct {
    int fd;
    struct { dev_t dev; ino_t ino; unsigned char *map; size_t bytes; long used; } m[PEER_MAPS];
    long gen;                   /* generations received on this connection */
} recv_conn;

/* After a generation: the mappings not used in the last PEER_KEEP dropped (all: drop_all). */
static void conn_unmap_old(recv_conn *c, int drop_all) {
    c->gen++;
    for (int i = 0; i < PEER_MAPS; i++)
        if (c->m[i].map && (drop_all || c->m[i].used + PEER_KEEP < c->gen)) {
            munmap(c->m[i].map, c->m[i].bytes);
            c->m[i].map = NULL;
        }
}

/* The mapping of open file f (n bytes, stat st): the kept one, else a new one (its pages in place
 * at once) in the place of the least recently used. NULL when it cannot be mapped. */
static unsigned char *conn_map(recv_conn *c, int f, const struct stat *st, size_t n) {
    int lru = 0;
    for (int i = 0; i < PEER_MAPS; i++) {
        if (c->m[i].map && c->m[i].dev == st->st_dev && c->m[i].ino == st->st_ino) {
            if (c->m[i].bytes == n) { c->m[i].used = c->gen; return c->m[i].map; }
            munmap(c->m[i].map, c->m[i].bytes);   /* resized: mapped again below */
            c->m[i].map = NULL;
        }
        if (!c->m[i].map || (c->m[lru].map && c->m[i].used < c->m[lru].used)) lru = i;
    }
    void *map = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, f, 0);
    if (map == MAP_FAILED) return NULL;
    if (c->m[lru].map) munmap(c->m[lru].map, c->m[lru].bytes);
    c->m[lru].dev = st->st_dev, c->m[lru].ino = st->st_ino, c->m[lru].map = map, c->m[lru].bytes = n;
    c->m[lru].used = c->gen;
    return map;
}

/* w bytes from fd into b in one call where the kernel can (MSG_WAITALL, and no wake-up before w
 * bytes are there: SO_RCVLOWAT), not one call and one wake-up per packet. 0, or -1. */
static int recv_piece(int fd, unsigned char *b, size_t w, int *lowat) {
    int want = (int)w;
    if (want != *lowat && setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof want) == 0) *lowat = want;
    for (size_t got = 0; got < w;) {
        ssize_t k = recv(fd, b + got, w - got, MSG_WAITALL);
        if (k <= 0) { if (k < 0 && errno == EINTR) continue; return -1; }
        got += (size_t)k;
    }
    return 0;
}

/* n bytes from c's socket straight into file `path` (made, or resized, to n bytes; mapped once:
 * conn_map), *sum theirs, taken piece by piece right behind the receive (the bytes still in the
 * cache). 1, 0 when the file could not be made (the bytes read and dropped), -1 when the
 * connection failed. */
static int recv_file(recv_conn *c, const char *path, uint64_t n, uint64_t *sum) {
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644), lowat = 0, one = 1;
    struct stat st;
    unsigned char *map = NULL;
    if (f >= 0 && fstat(f, &st) == 0 && ((uint64_t)st.st_size == n || ftruncate(f, (off_t)n) == 0) && n)
        map = conn_map(c, f, &st, (size_t)n);
    if (f >= 0) close(f);
    if (!map) return n == 0 && f >= 0 ? (*sum = snap_sum_mem(NULL, 0), 1) : recv_drop(c->fd, n) < 0 ? -1 : 0;
    snap_sum s;
    int rc = 1;
    snap_sum_init(&s);
    for (uint64_t o = 0, w; o < n && rc > 0; o += w) {
        w = n - o < PEER_RECV_PIECE ? n - o : PEER_RECV_PIECE;
        if (recv_piece(c->fd, map + o, (size_t)w, &lowat) < 0) rc = -1;
        else snap_sum_add(&s, map + o, (size_t)w);
    }
    if (lowat > 1) setsockopt(c->fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof one);   /* the headers: as they come */
    *sum = snap_sum_end(&s);
    return rc;
}

/* The folder a generation of origin folder odir is received into, tmp: the oldest of
 * PEER_KEEP generations there renamed (its files' pages reused), else a new one. */
static int recv_folder(const char *odir, const char *tmp) {
    long *steps;
    int n = snap_list_gens(odir, &steps), rc = -1;
    if (n >= PEER_KEEP) {
        char old[1300];
        snprintf(old, sizeof old, "%s/gen-%ld", odir, steps[n - 1]);
        rc = rename(old, tmp);
    }
    free(steps);
    return rc == 0 || mkdir(tmp, 0755) == 0 ? 0 : -1;
}

/* Sums only: whether this rank's own generation `step` has files f[0..n) (names, bytes, sums;
 * those sent whole left out) and no others: 'E' equal, 'D' differ, 'U' not there within PEER_TWIN_WAIT_S
 * (or unreadable). */
static char twin_compare(snap_peer *p, long step, const snap_peer_file *f, int n) {
    char path[1200];
    snprintf(path, sizeof path, "%s/gen-%ld/snap.json", p->dir, step);
    struct timespec until;   /* this rank's own take of the same step: snap_peer_own_written */
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += PEER_TWIN_WAIT_S;
    pthread_mutex_lock(&p->mu);
    while (p->own_step < step && !p->stop && pthread_cond_timedwait(&p->own_cv, &p->mu, &until) == 0) {}
    int stop = p->stop;
    pthread_mutex_unlock(&p->mu);
    if (stop || access(path, F_OK) != 0) return 'U';
    FILE *fp = fopen(path, "rb");
    char *text = fp ? pt_malloc(1u << 20) : NULL;
    size_t len = fp ? fread(text, 1, (1u << 20) - 1, fp) : 0;
    if (fp) fclose(fp);
    if (!text) return 'U';
    text[len] = 0;
    cJSON *j = cJSON_Parse(text), *ch = cJSON_GetObjectItemCaseSensitive(j, "chunks");
    free(text);
    int n_sums = 0;
    for (int i = 0; i < n; i++) n_sums += !f[i].whole;
    char r = cJSON_IsArray(ch) ? (cJSON_GetArraySize(ch) == n_sums ? 'E' : 'D') : 'U';
    for (int i = 0; i < n && r == 'E'; i++) {
        if (f[i].whole) continue;   /* the origin's own state: came whole */
        int id, shard = sscanf(f[i].name, "optim-%d.safetensors", &id) == 1, found = 0;
        if (!shard && sscanf(f[i].name, "chunk-%d.safetensors", &id) != 1) { r = 'D'; break; }
        for (int k = 0; k < cJSON_GetArraySize(ch) && !found; k++) {
            const cJSON *e = cJSON_GetArrayItem(ch, k), *x = cJSON_GetObjectItemCaseSensitive(e, shard ? "shard" : "chunk");
            const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "bytes"), *sm = cJSON_GetObjectItemCaseSensitive(e, "sum64");
            found = cJSON_IsNumber(x) && (int)x->valuedouble == id && cJSON_IsNumber(b) && cJSON_IsString(sm) &&
                    (uint64_t)b->valuedouble == f[i].bytes && strtoull(sm->valuestring, NULL, 16) == f[i].sum;
        }
        if (!found) r = 'D';
    }
    cJSON_Delete(j);
    return r;
}

/* The origin's snap.json (json) written into tmp with "files_at": this rank (the chunk files are
 * in its own folder; tmp holds those sent whole), and tmp renamed to odir/gen-<step>. 0, or -1. */
static int keep_sums(snap_peer *p, const char *odir, long step, const char *tmp, const char *json) {
    char fin[1300], path[1400];
    snprintf(fin, sizeof fin, "%s/gen-%ld", odir, step);
    snprintf(path, sizeof path, "%s/snap.json", tmp);
    FILE *fp = fopen(path, "wb");
    int ok = fp && fprintf(fp, "{\"files_at\":%d,%s", p->rank, json + 1) > 0;
    if ((fp && fclose(fp) != 0) || !ok) return -1;
    snap_remove_dir(fin);
    if (rename(tmp, fin) < 0) return -1;
    peer_prune(odir);
    return 0;
}

/* Sums only (after the header): per file its name, bytes, sum and whether its bytes follow (the
 * origin's own state: received into the kept folder, its sum checked); the rest compared with
 * this rank's own generation, kept when equal (keep_sums), then answered: 'E' (equal and kept),
 * 'D' or 'U'. 1 kept, 0 not, -1 the connection failed. */
static int recv_sums(snap_peer *p, recv_conn *c, const char *odir, long step, int nf, const char *json, uint32_t jl) {
    snap_peer_file f[CKPT_SNAP_PIECES];
    char tmp[1300], path[1400];
    snprintf(tmp, sizeof tmp, "%s/gen-%ld.tmp.%ld", odir, step, (long)getpid());
    snap_remove_dir(tmp);
    int made = mkdir(tmp, 0755) == 0, good = made;
    for (int i = 0; i < nf; i++) {
        uint16_t nl;
        uint8_t whole;
        uint64_t got;
        if (read_all(c->fd, &nl, 2) < 0 || nl == 0 || nl >= sizeof f[i].name || read_all(c->fd, f[i].name, nl) < 0 ||
            read_all(c->fd, &f[i].bytes, 8) < 0 || read_all(c->fd, &f[i].sum, 8) < 0 || read_all(c->fd, &whole, 1) < 0)
            { snap_remove_dir(tmp); return -1; }
        f[i].name[nl] = 0;
        f[i].whole = whole;
        if (!whole) continue;
        snprintf(path, sizeof path, "%s/%s", tmp, f[i].name);
        int r = good && !strchr(f[i].name, '/') ? recv_file(c, path, f[i].bytes, &got) : recv_drop(c->fd, f[i].bytes) < 0 ? -1 : 0;
        if (r < 0) { snap_remove_dir(tmp); return -1; }
        good &= r > 0 && got == f[i].sum;
    }
    char a = good && jl > 1 && json[0] == '{' ? twin_compare(p, step, f, nf) : 'U';
    if (a == 'E' && keep_sums(p, odir, step, tmp, json) < 0) a = 'U';   /* then the whole one */
    if (a != 'E') snap_remove_dir(tmp);
    if (write_all(c->fd, &a, 1) < 0) return -1;
    return a == 'E';
}

/* One generation from fd into odir/gen-<step>. 1 kept, 0 dropped (a sum that does not match, a
 * file that could not be made), -1 the connection ended or failed. *sums: it was sums only. */
static int recv_gen(snap_peer *p, recv_conn *c, char *odir, size_t odir_n, int *sums) {
    int fd = c->fd;
    char magic[4];
    int32_t origin, nf;
    int64_t step;
    uint32_t jl;
    if (read_all(fd, magic, 4) < 0 || (memcmp(magic, "PTSP", 4) && memcmp(magic, "PTSS", 4)) ||
        read_all(fd, &origin, 4) < 0 ||
        read_all(fd, &step, 8) < 0 || read_all(fd, &nf, 4) < 0 || read_all(fd, &jl, 4) < 0 ||
        nf < 0 || nf > CKPT_SNAP_PIECES || jl > (1u << 24) || origin < 0) return -1;
    char *json = pt_malloc(jl + 1), tmp[1300], path[1500];
    int rc = read_all(fd, json, jl) < 0 ? -1 : 1;
    json[jl] = 0;
    snprintf(odir, odir_n, "%s/peer-%d", p->dir, (int)origin);
    *sums = !memcmp(magic, "PTSS", 4);
    if (*sums || rc < 0) {
        mkdir(odir, 0755);
        if (rc > 0) rc = recv_sums(p, c, odir, (long)step, nf, json, jl);
        free(json);
        return rc;
    }
    snprintf(tmp, sizeof tmp, "%s/gen-%ld.tmp.%ld", odir, (long)step, (long)getpid());
    mkdir(odir, 0755);
    snap_remove_dir(tmp);
    if (rc > 0 && recv_folder(odir, tmp) < 0) rc = 0;   /* read on, keep nothing */
    for (int i = 0; i < nf && rc >= 0; i++) {
        uint16_t nl;
        uint64_t bytes, sum, got = 0;
        char name[65];
        if (read_all(fd, &nl, 2) < 0 || nl == 0 || nl > 64 || read_all(fd, name, nl) < 0 ||
            read_all(fd, &bytes, 8) < 0 || read_all(fd, &sum, 8) < 0 || bytes > (1ull << 40)) { rc = -1; break; }
        name[nl] = 0;
        snprintf(path, sizeof path, "%s/%s", tmp, name);
        int r = rc > 0 && !strchr(name, '/') ? recv_file(c, path, bytes, &got) : recv_drop(fd, bytes) < 0 ? -1 : 0;
        if (r < 0) rc = -1;
        else if (r == 0 || got != sum) rc = 0;   /* refilled while it was sent */
    }
    snprintf(path, sizeof path, "%s/snap.json", tmp);
    if (rc > 0 && write_file(path, (unsigned char *)json, jl) < 0) rc = 0;
    free(json);
    char fin[1300];
    snprintf(fin, sizeof fin, "%s/gen-%ld", odir, (long)step);
    if (rc > 0) {
        snap_remove_dir(fin);
        if (rename(tmp, fin) < 0) rc = 0;
    }
    if (rc <= 0) snap_remove_dir(tmp);
    else peer_prune(odir);
    return rc;
}

/* Below the compute threads and below the writer (snapshot.c): nice 19, so the copy runs mostly
 * where the cores have nothing else to do (the bubbles of the rank's own pipeline, a wait for a
 * peer) and takes little from the steps when they compete. Nothing on the compute path waits
 * for it: on a busy machine it falls behind (a newer generation replaces one not yet sent).
 * Not SCHED_IDLE: on a machine loaded by other work that would starve it outright. (A nice
 * value per thread is Linux's; elsewhere this does nothing.) */
static void lower_priority(void) {
    if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), PEER_NICE) < 0) { /* keep going */ }
}

static void *conn_main(void *arg) {
    lower_priority();
    int *fdp = arg;
    snap_peer *p = *(snap_peer **)(fdp + 2);
    int rc, sums = 0;
    recv_conn *c = pt_calloc(1, sizeof *c);
    c->fd = fdp[0];
    char odir[1100];
    double c0 = thread_cpu_s();
    while ((rc = recv_gen(p, c, odir, sizeof odir, &sums)) >= 0) {
        conn_unmap_old(c, 0);
        double c1 = thread_cpu_s();
        pthread_mutex_lock(&p->mu);
        if (rc > 0) p->st.received++;
        else if (!sums) p->st.dropped++;   /* sums only, not equal: the whole one comes next */
        p->st.received_sums += rc > 0 && sums;
        p->st.recv_cpu_s += c1 - c0;
        c0 = c1;
        pthread_mutex_unlock(&p->mu);
    }
    conn_unmap_old(c, 1);
    free(c);
    free(fdp);
    return NULL;
}

static void *listen_main(void *arg) {
    snap_peer *p = arg;
    for (;;) {
        int fd = accept(p->lfd, NULL, NULL);
        if (fd < 0) { if (errno == EINTR || errno == ECONNABORTED) continue; break; }   /* closed: stop */
        pthread_mutex_lock(&p->mu);
        if (p->stop || p->n_conn == PEER_MAX_CONN) { pthread_mutex_unlock(&p->mu); close(fd); continue; }
        /* the thread's argument: fd, then the peer pointer (freed by the thread) */
        int *a = pt_malloc(2 * sizeof(int) + sizeof(snap_peer *));
        a[0] = fd;
        *(snap_peer **)(a + 2) = p;
        p->conn_fd[p->n_conn] = fd;
        pthread_create(&p->conn_th[p->n_conn++], NULL, conn_main, a);
        pthread_mutex_unlock(&p->mu);
    }
    return NULL;
}

/* The half-received generations an earlier process left in the peer folders of p's rank. */
static void peer_clean(const snap_peer *p) {
    DIR *d = opendir(p->dir);
    struct dirent *e;
    char pd[1400];
    while (d && (e = readdir(d)))
        if (!strncmp(e->d_name, "peer-", 5)) {
            snprintf(pd, sizeof pd, "%s/%s", p->dir, e->d_name);
            snap_clean_tmp(pd);
        }
    if (d) closedir(d);
}

int snap_peer_listen(snap_peer *p, uint32_t *addr, int *port) {
    peer_clean(p);
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
    socklen_t len = sizeof sa;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, PEER_MAX_CONN) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        if (fd >= 0) close(fd);
        return pt_seterr("snapshot peer copy of rank %d: cannot listen on a TCP port: %s", p->rank, strerror(errno));
    }
    p->lfd = fd;
    *addr = host_addr();
    *port = ntohs(sa.sin_port);
    pthread_create(&p->lth, NULL, listen_main, p);
    return 0;
}

/* ---- sending ------------------------------------------------------------------------------- */

static int send_connect(snap_peer *p) {
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)p->to_port),
                              .sin_addr.s_addr = htonl(p->to_addr) };
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0) return -1;
    set_timeouts(fd);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) { close(fd); return -1; }
    p->sfd = fd;
    return 0;
}

/* One generation to the peer: whole, or (sums) its sums only and the peer's answer in *answer. */
static int send_gen(snap_peer *p, long step, const char *json, const snap_peer_file *f, int n, int sums,
                    char *answer) {
    int32_t origin = p->rank, nf = n;
    int64_t st = step;
    uint32_t jl = (uint32_t)strlen(json);
    if (p->sfd < 0 && send_connect(p) < 0) return -1;
    int fd = p->sfd;
    int rc = write_all(fd, sums ? "PTSS" : "PTSP", 4) | write_all(fd, &origin, 4) | write_all(fd, &st, 8) |
             write_all(fd, &nf, 4) | write_all(fd, &jl, 4) | write_all(fd, json, jl);
    for (int i = 0; i < n && rc == 0; i++) {
        uint16_t nl = (uint16_t)strlen(f[i].name);
        uint64_t bytes = f[i].bytes, sum = f[i].sum;
        rc = write_all(fd, &nl, 2) | write_all(fd, f[i].name, nl) | write_all(fd, &bytes, 8) |
             write_all(fd, &sum, 8);
        uint8_t whole = !sums || f[i].whole;   /* sums only: the rank's own state still whole */
        if (rc == 0 && sums) rc = write_all(fd, &whole, 1);
        if (rc == 0 && whole) rc = write_all(fd, f[i].map, f[i].bytes);
    }
    if (rc == 0 && sums) {   /* the answer, within PEER_IO_TIMEOUT_S; snap_peer_free cuts it short */
        pthread_mutex_lock(&p->mu);
        p->awaiting = !p->stop;
        pthread_mutex_unlock(&p->mu);
        rc = p->awaiting ? read_all(fd, answer, 1) : -1;
        pthread_mutex_lock(&p->mu);
        p->awaiting = 0;
        pthread_mutex_unlock(&p->mu);
    }
    if (rc < 0) { close(p->sfd); p->sfd = -1; }   /* the next generation connects again */
    return rc;
}

/* A generation to the peer: sums only while the peer is a replica that answers 'E', else whole
 * (after 'D' every later one too, said once). *how: 0 whole, 1 sums only, 2 whole after an
 * answer other than 'E'. 0, or -1 when it failed. */
static int send_one(snap_peer *p, long step, const char *json, const snap_peer_file *f, int n, int *how) {
    char a = 0;
    *how = 0;
    if (!p->sums_only) return send_gen(p, step, json, f, n, 0, NULL);
    if (send_gen(p, step, json, f, n, 1, &a) < 0) return -1;
    *how = a == 'E' ? 1 : 2;
    if (a == 'E') return 0;
    if (a == 'D') {
        p->sums_only = 0;
        if (!p->differ_said++)
            fprintf(stderr, "pipetrain: snapshot peer copy of rank %d: the replica at rank %d holds other bytes at step "
                    "%ld than this rank (not bitwise replicas: --zero 1, --dp-sync, ...): sending whole generations "
                    "to it from now on\n", p->rank, p->to_rank, step);
    }
    return send_gen(p, step, json, f, n, 0, NULL);
}

static void *send_main(void *arg) {
    snap_peer *p = arg;
    lower_priority();
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->pend_step && !p->stop) pthread_cond_wait(&p->cv, &p->mu);
        if (p->stop) break;
        long step = p->pend_step;
        char *json = p->pend_json;
        snap_peer_file f[CKPT_SNAP_PIECES];
        int n = p->pend_n;
        memcpy(f, p->pend_f, sizeof f);
        p->pend_step = 0;
        p->pend_json = NULL;
        p->sending = 1;
        pthread_mutex_unlock(&p->mu);
        double t0 = pt_now(), c0 = thread_cpu_s();
        int how, rc = send_one(p, step, json, f, n, &how);
        free(json);
        double c1 = thread_cpu_s();
        pthread_mutex_lock(&p->mu);
        p->sending = 0;
        p->st.send_s += pt_now() - t0;
        p->st.send_cpu_s += c1 - c0;
        if (rc == 0) p->st.sent++; else p->st.failed++;
        p->st.sums_only += rc == 0 && how == 1;
        p->st.whole_after += how == 2;
        for (int i = 0; rc == 0 && i < n; i++) p->st.payload_bytes += how != 1 || f[i].whole ? (double)f[i].bytes : 0;
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int snap_peer_send_to(snap_peer *p, uint32_t addr, int port, int peer_rank) {
    p->to_addr = addr;
    p->to_port = port;
    p->to_rank = peer_rank;
    p->st.peer_rank = peer_rank;
    pthread_create(&p->sth, NULL, send_main, p);
    return 0;
}

int snap_peer_sums_to(snap_peer *p, uint32_t addr, int port, int peer_rank) {
    p->sums_only = 1;
    return snap_peer_send_to(p, addr, port, peer_rank);
}

void snap_peer_offer(snap_peer *p, long step, const char *json, const snap_peer_file *f, int n) {
    if (!p || !p->to_port) return;
    pthread_mutex_lock(&p->mu);
    if (p->pend_step) p->st.skipped++;   /* the sender is still at an older one: this replaces the waiting one */
    free(p->pend_json);
    p->pend_json = pt_malloc(strlen(json) + 1);
    strcpy(p->pend_json, json);
    memcpy(p->pend_f, f, sizeof *f * (size_t)n);
    p->pend_n = n;
    p->pend_step = step;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void snap_peer_own_written(snap_peer *p, long step) {
    pthread_mutex_lock(&p->mu);
    if (step > p->own_step) p->own_step = step;
    pthread_cond_broadcast(&p->own_cv);
    pthread_mutex_unlock(&p->mu);
}

void snap_peer_get_stats(snap_peer *p, snap_peer_stats *out) {
    pthread_mutex_lock(&p->mu);
    *out = p->st;
    pthread_mutex_unlock(&p->mu);
}

void snap_peer_free(snap_peer *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    if (p->awaiting) shutdown(p->sfd, SHUT_RDWR);   /* a peer gone with its host never answers */
    pthread_cond_broadcast(&p->cv);
    pthread_cond_broadcast(&p->own_cv);
    pthread_mutex_unlock(&p->mu);
    if (p->to_port) pthread_join(p->sth, NULL);
    if (p->sfd >= 0) close(p->sfd);
    if (p->lfd >= 0) {
        shutdown(p->lfd, SHUT_RDWR);   /* wakes accept */
        pthread_join(p->lth, NULL);
        close(p->lfd);
        for (int i = 0; i < p->n_conn; i++) {   /* wakes a receive; the sender's end may live on */
            shutdown(p->conn_fd[i], SHUT_RDWR);
            pthread_join(p->conn_th[i], NULL);
            close(p->conn_fd[i]);
        }
    }
    free(p->pend_json);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    pthread_cond_destroy(&p->own_cv);
    free(p);
}
