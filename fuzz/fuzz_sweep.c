/* Fuzz target: the sweep file (core/sweep/sweep.c) through bk_sweep_load_ex: the TOML, its tables
 * ([sweep], [eval], [grid], [[variant]], [[corpus]], an inline [base]), the expansion into runs, each
 * run resolved and validated by the experiment layer, written as experiment text and read back.
 * The input is the sweep file. It lies in a directory of its own (made once, removed at exit) beside
 * base.toml, a small valid experiment, so `base = "base.toml"` resolves as in a real sweep. No plugin
 * code runs and no child is started (no_plugin_check); at most 64 runs. Oracle: every failure has a
 * message; a sweep that loads has runs with names, directories and texts, names unique, one training
 * length, evaluation lengths in (0, 2^24]. */
#define _GNU_SOURCE /* mkdtemp */
#include "fuzz.h"

#include "sweep/sweep.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[64], sweep_path[96], base_path[96];

static void remove_dir(void)
{
    unlink(sweep_path);
    unlink(base_path);
    rmdir(dir);
}

static void write_file(const char *path, const uint8_t *data, size_t size)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        perror("fuzz_sweep: open");
        abort();
    }
    for (size_t done = 0; done < size;) {
        ssize_t w = write(fd, data + done, size - done);
        if (w <= 0) {
            perror("fuzz_sweep: write");
            abort();
        }
        done += (size_t)w;
    }
    close(fd);
}

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/biaskit-fuzz-sweep-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("fuzz_sweep: mkdtemp");
        abort();
    }
    snprintf(sweep_path, sizeof sweep_path, "%s/sweep.toml", dir);
    snprintf(base_path, sizeof base_path, "%s/base.toml", dir);
    static const char base[] = "[model]\nlayers = 1\nheads = 2\ndim = 16\n[train]\nlength = 16\nbatch = 2\nsteps = 2\n"
                               "[data]\npaths = [\"corpus\"]\n[run]\nout_dir = \"runs/base\"\n[[term]]\nplugin = \"alibi\"\n";
    write_file(base_path, (const uint8_t *)base, sizeof base - 1);
    atexit(remove_dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0])
        setup();
    write_file(sweep_path, data, size);
    static const char *const only[] = {"*-s1*"};
    bk_sweep_load_options o = {only, 1, 1, 1, 64};
    bk_sweep sw;
    bk_error err;
    if (bk_sweep_load_ex(sweep_path, &o, &sw, &err) != BK_OK) {
        if (err.message[0] == '\0')
            abort();
        return 0;
    }
    if (sw.n_runs < 1 || sw.n_runs > 64 || !sw.path || !sw.dir || !sw.out_dir || sw.n_lengths < 1 ||
        sw.n_lengths > BK_SWEEP_MAX_LENGTHS)
        abort();
    for (int i = 0; i < sw.n_lengths; i++)
        if (sw.lengths[i] <= 0 || sw.lengths[i] > (1 << 24))
            abort();
    for (int i = 0; i < sw.n_runs; i++) {
        const bk_sweep_run *r = &sw.runs[i];
        if (!r->name || !*r->name || !r->dir || !r->text || !r->variant || !r->corpus || r->n_sets < r->n_common_sets ||
            r->train_length != sw.train_length || r->invalid)
            abort();
        for (int k = 0; k < i; k++)
            if (strcmp(sw.runs[k].name, r->name) == 0)
                abort();
        (void)bk_sweep_run_selected(r, only, 1);
    }
    bk_sweep_free(&sw);
    return 0;
}
