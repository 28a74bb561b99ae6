/* Which checkpoint a path names: a checkpoint folder itself, or the newest complete one of a
 * save folder. */
#include "ckpt/ckpt_int.h"
#include "util/pt.h"
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int ckpt_resolve(const char *path, char *out, size_t n) {
    char mpath[CKPT_PATH_MAX], best[256] = "";
    long best_step = -1;
    snprintf(mpath, sizeof mpath, "%s/manifest.json", path);
    if (access(mpath, F_OK) == 0) {
        snprintf(out, n, "%s", path);
        return 0;
    }
    DIR *d = opendir(path);
    if (!d) return pt_seterr("%s: cannot open: %s (give a checkpoint folder or the --save folder "
                             "that holds them)", path, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d))) {
        long step = ckpt_folder_step(path, e->d_name);
        if (step > best_step) {
            best_step = step;
            snprintf(best, sizeof best, "%s", e->d_name);
        }
    }
    closedir(d);
    if (best_step < 0)
        return pt_seterr("%s: not a checkpoint folder (no manifest.json), and it holds no complete "
                         "checkpoint folder ckpt-<step>", path);
    if ((size_t)snprintf(out, n, "%s/%s", path, best) >= n) return pt_seterr("%s: path too long", path);
    return 0;
}
