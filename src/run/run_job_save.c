/* Gathering a job's model to the root (whole, or under tensor parallelism chunk by chunk made
 * whole by its TP group) and saving a checkpoint from where the state lives, with no gather;
 * the ranks' memory. Not here: running iterations (run_job.c). */
#include "run/run_job_int.h"
#include "util/pt.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* The local index of world rank w's executor, or -1 (another process). */
static int job_local(const run_job *j, int w) {
    if (!j->mpi) return w;
    return j->comms[0]->rank == w ? 0 : -1;
}

/* Chunk c's holder in replica 0, pipe 0 sends its parameters and gradients to the root; root
 * (out != NULL) puts them at the chunk's span of out. */
static int job_gather_chunk(run_job *j, int c, gpt_model *out) {
    comm *w = j->comms[0];
    int holder = j->pl->s->stage_rank[c], me = j->mpi ? w->rank : 0, r = job_local(j, holder);
    int first = j->pl->lo.chunk_first[c], end = j->pl->lo.chunk_first[c + 1];
    size_t off = 0, n = 0, soff = 0, sn = 0;
    if (out) gpt_layers_param_span(out, first, end, &off, &n);
    const gpt_model *m = r >= 0 ? run_exec_stage_model(j->ex[r], c) : NULL;
    if (m) gpt_layers_param_span(m, first, end, &soff, &sn);
    const float *src[2] = { m ? m->params + soff : NULL, m ? m->grads + soff : NULL };
    float *dst[2] = { out ? out->params + off : NULL, out ? out->grads + off : NULL };
    for (int k = 0; k < 2; k++) {
        comm_req *rq;
        if (out && m) memcpy(dst[k], src[k], n * sizeof(float));
        else if (out) {
            if (comm_irecv(w, holder, COMM_TAG_GATHER + 2 + k, dst[k], n * sizeof(float), &rq) < 0 ||
                comm_wait(w, rq, j->pl->o.timeout) < 0) return -1;
        } else if (m && me == holder) {
            if (comm_isend(w, 0, COMM_TAG_GATHER + 2 + k, src[k], sn * sizeof(float), &rq) < 0 ||
                comm_wait(w, rq, j->pl->o.timeout) < 0) return -1;
        }
    }
    return 0;
}

/* Tensor parallelism: chunk c whole (params and grads, whole: a model of its layers) from its
 * TP rank 0 to the root: copied when it is the root, else sent. */
static int job_put_chunk(run_job *j, int r, const gpt_model *whole) {
    comm *w = j->comms[r];
    const float *src[2] = { whole->params, whole->grads };
    size_t off = 0, n = whole->n_held;
    for (int k = 0; k < 2; k++) {
        comm_req *rq;
        if (run_job_world_rank(j, r) == 0) {
            gpt_layers_param_span(j->gather_out, whole->first_layer, whole->end_layer, &off, &n);
            memcpy((k ? j->gather_out->grads : j->gather_out->params) + off, src[k], n * sizeof(float));
        } else if (comm_isend(w, 0, COMM_TAG_GATHER + 2 + k, src[k], n * sizeof(float), &rq) < 0 ||
                   comm_wait(w, rq, j->pl->o.timeout) < 0)
            return -1;
    }
    return 0;
}

/* The root's receive of chunk c (layers [first, end)) from world rank `from`. */
static int job_take_chunk(run_job *j, int r, int from, int first, int end) {
    comm *w = j->comms[r];
    size_t off, n;
    gpt_layers_param_span(j->gather_out, first, end, &off, &n);
    for (int k = 0; k < 2; k++) {
        comm_req *rq;
        if (comm_irecv(w, from, COMM_TAG_GATHER + 2 + k, (k ? j->gather_out->grads : j->gather_out->params) + off,
                       n * sizeof(float), &rq) < 0 || comm_wait(w, rq, j->pl->o.timeout) < 0)
            return -1;
    }
    return 0;
}

/* Tensor parallelism, rank r: for each chunk, its holder's TP group (replica 0, pipe 0) makes it
 * whole on TP rank 0 (run_exec_gather_stage), which gives it to the root; the root takes the
 * chunks others made. One chunk at a time: TP rank 0 holds one whole chunk besides its own. */
static int job_gather_rank(run_job *j, int r) {
    const run_plan *pl = j->pl;
    int d, p, t, w = run_job_world_rank(j, r), rc = 0;
    run_exec_coords(j->ex[r], &d, &p, &t);
    for (int c = 0; c < pl->s->stages_per_pipe && rc == 0; c++) {
        int first = pl->lo.chunk_first[c], end = pl->lo.chunk_first[c + 1], holder = pl->s->stage_rank[c];
        const gpt_model *m = d == 0 ? run_exec_stage_model(j->ex[r], c) : NULL;
        if (!m) {
            if (w == 0) rc = job_take_chunk(j, r, run_layout_world_rank(&pl->lo, 0, holder, 0), first, end);
            continue;
        }
        gpt_model whole;
        memset(&whole, 0, sizeof whole);
        if (t == 0 && gpt_init_layers(&whole, &m->cfg, first, end) < 0) return -1;
        rc = run_exec_gather_stage(j->ex[r], c, 1, t == 0 ? &whole : NULL);
        if (rc == 0 && t == 0) rc = job_put_chunk(j, r, &whole);
        gpt_free(&whole);
    }
    return rc;
}

int run_job_gather(run_job *j, gpt_model *out) {
    gpt_model *dst = run_job_is_root(j) ? out : NULL;
    if (j->pl->lo.tp > 1) {
        j->gather_out = dst;
        int rc = run_job_run_all(j, job_gather_rank);
        j->gather_out = NULL;
        return rc;
    }
    for (int c = 0; c < j->pl->s->stages_per_pipe; c++)
        if (job_gather_chunk(j, c, dst) < 0) return -1;
    return 0;
}

void run_job_mem(const run_job *j, int w, run_mem *out) { *out = j->mem[w]; }

int run_job_lend_waits(run_job *j, double **out) {
    double *v = pt_calloc((size_t)j->R, sizeof *v);
    for (int r = 0; r < j->n_local; r++) v[run_job_world_rank(j, r)] = run_exec_lend_wait(j->ex[r]);
    free(*out);
    *out = v;
    return j->mpi ? comm_allreduce_f64(j->comms[0], v, (size_t)j->R) : 0;
}

int run_job_peak_rss(run_job *j, double **out) {
    struct rusage ru;
    int n = j->mpi ? j->R : 1;
    double *v = pt_calloc((size_t)n, sizeof *v);
    getrusage(RUSAGE_SELF, &ru);
    v[j->mpi ? j->comms[0]->rank : 0] = (double)ru.ru_maxrss * 1024.0;   /* Linux: kilobytes */
    free(*out);
    *out = v;
    return j->mpi ? comm_allreduce_f64(j->comms[0], v, (size_t)n) : 0;
}

/* ---- checkpoints -------------------------------------------------------------------------- *
 * Nothing is gathered: each chunk's holder in replica 0, pipe 0 writes its chunk file (with
 * --zero 0 its moments too), and with --zero 1 every rank writes its moment shards. Under tensor
 * parallelism the files still hold whole tensors, filled in place: the holder's TP rank 0
 * creates each chunk file (header, size), and after a barrier every rank pwrites its own
 * elements there (ckpt_placer): the holder's TP ranks their shards of the parameters (and with
 * --zero 0 of the moments), with --zero 1 every rank its slices of the moments. No rank holds
 * more than its own state. */

/* MPI: sum of v over ranks (v[0..n)), the way to share one rank's number or count failures. */
static int job_sum(run_job *j, double *v, int n) {
    return j->mpi ? comm_allreduce_f64(j->comms[0], v, (size_t)n) : 0;
}

/* Tensor parallelism, rank r, before anyone writes: the files of the chunks it holds in
 * replica 0, pipe 0 at TP rank 0, with their headers and final sizes. */
static int job_save_create(run_job *j, int r) {
    const run_plan *pl = j->pl;
    int d, p, t;
    run_exec_coords(j->ex[r], &d, &p, &t);
    for (int c = 0; c < pl->s->stages_per_pipe && d == 0 && t == 0; c++) {
        const gpt_model *m = run_exec_stage_model(j->ex[r], c);
        if (m && ckpt_chunk_create(j->save_tmp, c, pl->lo.chunk_first[c], pl->lo.chunk_first[c + 1], m, 1) < 0)
            return -1;
    }
    return 0;
}

/* Puts moment slices sl[0..n) (freed here) of TP rank t; n < 0: the error of getting them. */
static int job_place_slices(ckpt_placer *pc, ckpt_slice *sl, int n, int t, int tp) {
    int rc = n < 0 ? -1 : 0;
    for (int i = 0; i < n && rc == 0; i++) rc = ckpt_placer_put_slice(pc, &sl[i], t, tp);
    if (n >= 0) free(sl);
    return rc;
}

/* Tensor parallelism, rank r, once every file exists: its own elements into them. PT_CKPT_DEBUG
 * set: prints what it wrote and the largest buffer the placing allocated. */
static int job_save_place(run_job *j, int r) {
    const run_plan *pl = j->pl;
    int d, p, t, tp = pl->lo.tp, rc = 0;
    const gpt_model *any = NULL;
    ckpt_placer *pc;
    ckpt_slice *sl = NULL;
    ckpt_place_stats ps;
    run_exec_coords(j->ex[r], &d, &p, &t);
    for (int g = 0; g < pl->s->n_stages && !any; g++) any = run_exec_stage_model(j->ex[r], g);
    if (!any || ckpt_placer_open(&pc, j->save_tmp, j->save_man, any, 1) < 0) return any ? -1 : 0;
    for (int c = 0; c < pl->s->stages_per_pipe && rc == 0 && d == 0; c++) {   /* holders */
        const gpt_model *m = run_exec_stage_model(j->ex[r], c);
        for (int i = 0; m && i < gpt_param_count(m) && rc == 0; i++) {
            const gpt_param_info *pi = gpt_param_info_at(m, i);
            if (gpt_holds_layer(m, pi->layer))
                rc = ckpt_placer_put(pc, 0, i, t, tp, 0, pi->count, m->params + pi->offset);
        }
        if (m && rc == 0 && !pl->o.zero) rc = job_place_slices(pc, sl, run_exec_moment_slices(j->ex[r], c, &sl), t, tp);
    }
    if (rc == 0 && pl->o.zero) rc = job_place_slices(pc, sl, run_exec_moment_slices(j->ex[r], -1, &sl), t, tp);
    if (ckpt_placer_close(pc, &ps) < 0) rc = -1;
    if (rc == 0 && getenv("PT_CKPT_DEBUG"))
        fprintf(stderr, "ckpt: rank %d wrote %zu bytes in %zu writes into %d files; largest save "
                "buffer %zu bytes\n", run_job_world_rank(j, r), ps.bytes, ps.writes, ps.files, ps.max_alloc);
    return rc;
}

/* Tensor parallelism: the files created, a barrier, every rank's elements placed. */
static int job_save_tp(run_job *j, const char *tmp, const ckpt_manifest *man) {
    char err[512];
    j->save_tmp = tmp;
    j->save_man = man;
    double fail = run_job_run_all(j, job_save_create) < 0;
    snprintf(err, sizeof err, "%s", fail > 0 ? pt_err() : "");
    int rc = job_sum(j, &fail, 1);   /* the barrier: no rank writes into a file not made yet */
    if (rc == 0 && fail > 0) rc = pt_seterr("%s", err[0] ? err : "checkpoint: another rank could not create its chunk file");
    if (rc == 0) rc = run_job_run_all(j, job_save_place);
    j->save_tmp = NULL;
    j->save_man = NULL;
    return rc;
}

/* Every rank's own state (run_exec_rank_state: asynchronous versions, corrections, --dp-sync),
 * when the job keeps any. */
static int job_write_states(run_job *j, const char *tmp, long step) {
    for (int r = 0; r < j->n_local; r++)
        if (run_exec_write_rank_state(j->ex[r], tmp, step) < 0) return -1;
    return 0;
}

/* Every chunk file (and with --zero 1 at tp 1, every rank's moment shards) into tmp. 0, or -1. */
static int job_write_files(run_job *j, const char *tmp, const ckpt_manifest *man) {
    const run_plan *pl = j->pl;
    if (job_write_states(j, tmp, man->step) < 0) return -1;
    if (pl->lo.tp > 1) return job_save_tp(j, tmp, man);
    for (int c = 0; c < pl->s->stages_per_pipe; c++) {   /* holders in replica 0, pipe 0 */
        int r = job_local(j, pl->s->stage_rank[c]);
        if (r >= 0 && run_exec_write_chunk(j->ex[r], tmp, c) < 0) return -1;
    }
    for (int r = 0; r < j->n_local && pl->o.zero; r++)   /* every rank its moments */
        if (run_exec_write_shards(j->ex[r], tmp) < 0) return -1;
    return 0;
}

int run_job_save(run_job *j, const char *dir, const ckpt_manifest *man0) {
    const run_plan *pl = j->pl;
    ckpt_manifest man = *man0;
    char tmp[1200];
    int root = run_job_is_root(j);
    if (ckpt_manifest_set_layout(&man, pl->o.P, pl->o.D, pl->s->stages_per_pipe, pl->s->n_pipes,
                                 pl->s->name, pl->lo.chunk_first) < 0 ||
        (pl->o.zero && pl->lo.tp == 1 && ckpt_manifest_set_shards(&man, j->R) < 0)) return -1;
    man.tp = pl->lo.tp;
    ckpt_state *rs = NULL;             /* every rank keeps its own state, or none does */
    int keeps = run_exec_rank_state(j->ex[0], man.step, &rs);
    free(rs);
    if (keeps < 0 || ckpt_manifest_set_states(&man, keeps ? j->R : 0) < 0) return -1;
    double v[2] = { 0, 0 };            /* root's pid, failures */
    if (root) {
        if (ckpt_begin(dir, tmp, sizeof tmp) < 0) v[1] = 1;
        v[0] = (double)getpid();
    }
    if (job_sum(j, v, 2) < 0) return -1;
    if (v[1] > 0) return root ? -1 : pt_seterr("checkpoint %s: rank 0 could not start it", dir);
    if (!root && ckpt_tmpdir_name(dir, (long)v[0], tmp, sizeof tmp) < 0) return -1;
    double fail = job_write_files(j, tmp, &man) < 0;
    char err[512];
    snprintf(err, sizeof err, "%s", pt_err());
    if (job_sum(j, &fail, 1) < 0) return -1;
    if (fail > 0) {
        if (root) ckpt_abandon(tmp);
        return pt_seterr("%s", err[0] ? err : "checkpoint: another rank failed to write its chunk");
    }
    double ok = root ? (ckpt_commit(dir, tmp, &man) < 0) : 0;
    snprintf(err, sizeof err, "%s", pt_err());
    if (job_sum(j, &ok, 1) < 0) return -1;
    if (ok > 0) return pt_seterr("%s", root ? err : "checkpoint: rank 0 could not commit it");
    return 0;
}

