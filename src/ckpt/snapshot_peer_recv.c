/* The receiving side of the snapshots' peer copy (snapshot_peer.c has the wire format and the
 * sender): a listener, a thread per connection that keeps the origins' generations under
 * ROOT/rank-<holder>/peer-<origin>/gen-<step>/ (whole, each file's sum checked as it comes), or for
 * a replica's sums only compares them with this rank's own generation and answers. Not here: the
 * restore that reads those folders (snapshot_restore.c). */
#include "ckpt/snapshot_peer_int.h"
#include "util/pt.h"
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

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
        if (peer_read_all(fd, buf, (size_t)k) < 0) return -1;
    }
    return 0;
}

/* A receiving connection: its socket and the files it keeps mapped. The generations it receives
 * go round the same files (recv_folder reuses the oldest kept folder), so a file's mapping is
 * kept from one generation to the next (keyed by its inode and size; the least recently used
 * unmapped when full): the receive then copies into pages already mapped, with no page-table
 * work per generation. A mapping not used for PEER_KEEP generations is dropped (its file was
 * removed, or made anew: its memory is not held past that). */
#define PEER_MAPS (2 * PEER_KEEP * SNAP_PEER_FILES)
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
    const char *rest = json + 1 + strspn(json + 1, " \t\r\n");   /* after "{": "}" for an empty object */
    int ok = fp && fprintf(fp, "{\"files_at\":%d%s%s", p->rank, *rest == '}' ? "" : ",", rest) > 0;
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
    snap_peer_file f[SNAP_PEER_FILES];
    char tmp[1300], path[1400];
    snprintf(tmp, sizeof tmp, "%s/gen-%ld.tmp.%ld", odir, step, (long)getpid());
    snap_remove_dir(tmp);
    int made = mkdir(tmp, 0755) == 0, good = made;
    for (int i = 0; i < nf; i++) {
        uint16_t nl;
        uint8_t whole;
        uint64_t got;
        if (peer_read_all(c->fd, &nl, 2) < 0 || nl == 0 || nl >= sizeof f[i].name || peer_read_all(c->fd, f[i].name, nl) < 0 ||
            peer_read_all(c->fd, &f[i].bytes, 8) < 0 || peer_read_all(c->fd, &f[i].sum, 8) < 0 || peer_read_all(c->fd, &whole, 1) < 0)
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
    if (peer_write_all(c->fd, &a, 1) < 0) return -1;
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
    if (peer_read_all(fd, magic, 4) < 0 || (memcmp(magic, "PTSP", 4) && memcmp(magic, "PTSS", 4)) ||
        peer_read_all(fd, &origin, 4) < 0 ||
        peer_read_all(fd, &step, 8) < 0 || peer_read_all(fd, &nf, 4) < 0 || peer_read_all(fd, &jl, 4) < 0 ||
        nf < 0 || nf > SNAP_PEER_FILES || jl > (1u << 24) || origin < 0) return -1;
    char *json = pt_malloc(jl + 1), tmp[1300], path[1500];
    int rc = peer_read_all(fd, json, jl) < 0 ? -1 : 1;
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
        if (peer_read_all(fd, &nl, 2) < 0 || nl == 0 || nl > 64 || peer_read_all(fd, name, nl) < 0 ||
            peer_read_all(fd, &bytes, 8) < 0 || peer_read_all(fd, &sum, 8) < 0 || bytes > (1ull << 40)) { rc = -1; break; }
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


static void *conn_main(void *arg) {
    peer_lower_priority();
    int *fdp = arg;
    snap_peer *p = *(snap_peer **)(fdp + 2);
    int rc, sums = 0;
    recv_conn *c = pt_calloc(1, sizeof *c);
    c->fd = fdp[0];
    char odir[1100];
    double c0 = peer_thread_cpu_s();
    while ((rc = recv_gen(p, c, odir, sizeof odir, &sums)) >= 0) {
        conn_unmap_old(c, 0);
        double c1 = peer_thread_cpu_s();
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
