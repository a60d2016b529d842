/*
 * tests/mutants/shadow/tiles_cpu.h: kit/tiles_cpu.h for the forward models as tests/mutants/run.sh
 * compiles them (this folder ahead of kit/ on the include path), with one change: cpu_tiles_run runs
 * only the row tiles that hold a row the check will read (mutant_wants_rows, in mutant_check.c), and
 * leaves the others' O and LSE as the poison. At N = 16385 a model then computes the 3 x 256 rows that
 * --rows ends checks instead of all of them: 06m took 1.2 s instead of 47 s on this machine's two busy
 * cores. Each row tile it computes is computed as in the library (the same function, the same
 * scratch), so a row's numbers are the same bit for bit; the rows it skips are never checked. The
 * "(this folder ahead of kit/)" is -iquote: quoted includes look there before any -I folder.
 */
#ifndef ATTN_MUTANT_SHADOW_TILES_CPU_H
#define ATTN_MUTANT_SHADOW_TILES_CPU_H

#define cpu_tiles_run cpu_tiles_run_every_block
#define cpu_tiles_run_kv cpu_tiles_run_kv_every_block
#include "../../../kit/tiles_cpu.h"
#undef cpu_tiles_run
#undef cpu_tiles_run_kv

/* 1 when rows first .. end-1 hold a row the check reads (mutant_check.c). */
int mutant_wants_rows(int64_t first, int64_t end);

/* The model's row-tile function for the run in progress (one model, one run at a time per process). */
static cpu_row_tile_fn mutant_row_tile_fn;

static inline void mutant_row_tile(const cpu_tile_params *prm, int qt, cpu_tile_scratch *w) {
    if (mutant_wants_rows((int64_t)qt * prm->Br, (int64_t)(qt + 1) * prm->Br)) mutant_row_tile_fn(prm, qt, w);
}

static inline attn_status cpu_tiles_run(const char *stage, const attn_problem *p, const attn_args *a, int Br,
                                        int Bc, cpu_row_tile_fn row_tile) {
    mutant_row_tile_fn = row_tile;
    return cpu_tiles_run_every_block(stage, p, a, Br, Bc, mutant_row_tile);
}

/* The same for 06m, which launches through cpu_tiles_run_kv (K and V of their own shape). */
static inline attn_status cpu_tiles_run_kv(const char *stage, const attn_problem *p, const attn_args *a,
                                           int Br, int Bc, cpu_row_tile_fn row_tile) {
    mutant_row_tile_fn = row_tile;
    return cpu_tiles_run_kv_every_block(stage, p, a, Br, Bc, mutant_row_tile);
}

#endif
