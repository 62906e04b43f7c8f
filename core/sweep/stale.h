/* Stale runs of a sweep (docs/sweeps.md, "Stale runs"): a run directory whose results come from
 * another experiment than the one the sweep file now resolves the run to (the file was edited: other
 * steps, another lr, ...). Its experiment.toml is the experiment it trained; when that text differs
 * from the run's resolved text and the run holds results (it is done, or has a checkpoint), the run is
 * stale: `biaskit sweep` names it with the first key that differs and refuses to go on, so that
 * sweep.json and the report never describe it with the new values; `--rerun-stale` clears its results
 * and trains it again. */
#ifndef BK_SWEEP_STALE_H
#define BK_SWEEP_STALE_H

#include "sweep/sweep.h"

#include <stddef.h>

/* Enough for "<key>: run has <value>, sweep asks <value>" with long values cut. */
#define BK_SWEEP_STALE_WHY_MAX 512

/* The first difference between two experiment texts (as the sweep writes them: `[section]` and
 * `[[term]]` headers, one `key = value` per line), in the sweep's key order, then the keys only the
 * old text has: "train.steps: run has 250, sweep asks 200"; a key missing on one side is "none (the
 * default)". Array tables are numbered from 0 as --set names them ("term.0.plugin"). When no key
 * differs but the texts do: "the text differs (the same keys and values)". */
void bk_sweep_first_difference(const char *run_text, const char *sweep_text, char *why, size_t size);

/* 1 when `run` is stale (its directory's experiment.toml differs from run->text, and it is done or
 * has a checkpoint); *why (BK_SWEEP_STALE_WHY_MAX) then says the first difference. 0 when it is not;
 * a run whose experiment.toml cannot be read is not stale here (the sweep reports that when it
 * prepares the run). */
int bk_sweep_run_stale(const bk_sweep_run *run, const bk_run_status *st, char *why, size_t size);

/* Clear a stale run's results so it trains from the start: removes its checkpoint, metrics log,
 * evaluations, status and logs (and a leftover lock file), then writes its experiment.toml and a
 * pending status.json. Files the run directory holds besides those are left. */
int bk_sweep_clear_run(const bk_sweep_run *run, bk_error *err);

#endif
