/*
 * test_traffic.c: the bytes each stage moves (attn_stage.bytes_moved, each folder's traffic.c) and the
 * roofline drawn from them (bench/roofline.sh). The counts are a model, so what can be tested is that
 * each one follows its tiles: numbers worked out by hand for small shapes, and the ratios the stages'
 * READMEs claim (05 causal loads 2080 of 4096 key tiles at N = 4096, 06's 128-row tiles half the
 * road's K and V loads, 08's pairs half of 07's).
 */
#include <math.h>
#include <unistd.h>

#include "test_util.h"

static attn_bytes bytes_of(const char *id, int64_t N, int64_t D, int causal) {
    const attn_stage *s = attn_find_stage(id);
    cr_assert_not_null(s, "no stage %s", id);
    attn_problem p = attn_problem_make(1, 1, N, D, causal);
    return s->bytes_moved(&p, 1);
}

/* K and V rows loaded by the tiles beyond Q: (tile_read - Q) / (N D e), in units of one array */
static double kv_walks(const char *id, int64_t N, int64_t D, int causal) {
    const double arr = (double)N * (double)D * 2.0;
    return (bytes_of(id, N, D, causal).tile_read - arr) / arr;
}

Test(traffic, every_stage_counts_at_least_its_inputs_and_outputs) {
    for (int i = 0; i < attn_num_stages; i++) {
        const attn_stage *s = &attn_stages[i];
        cr_assert_not_null(s->bytes_moved, "stage %s has no bytes_moved", s->id);
        cr_assert_not_null(s->source, "stage %s has no source", s->id);
        cr_assert_eq(access(s->source, R_OK), 0, "stage %s: source %s not found", s->id, s->source);
        const int64_t D = s->supports_dim(64) ? 64 : 32;
        attn_problem p = attn_problem_make(2, 3, 300, D, i % 2);
        const attn_bytes b = s->bytes_moved(&p, 1);
        const double arr = 2.0 * 3 * 300 * (double)D * 2;
        const int bwd = s->pass != ATTN_FORWARD; /* reads Q, K, V, O and dO; writes dQ, dK, dV */
        cr_assert(b.hbm_read >= (bwd ? 5 : 3) * arr, "stage %s reads %g < its inputs", s->id, b.hbm_read);
        cr_assert(b.hbm_written >= (bwd ? 3 : 1) * arr, "stage %s writes %g < its outputs", s->id, b.hbm_written);
        cr_assert(b.tile_read >= b.hbm_read && b.tile_written >= b.hbm_written, "stage %s: tiles below HBM", s->id);
    }
}

Test(traffic, the_tiled_stages_match_counts_worked_by_hand) {
    /* N = 128, D = 64: one array is 128 x 64 x 2 = 16384 bytes, Tr = 2 row tiles of 64 */
    attn_bytes b = bytes_of("03", 128, 64, 0);
    cr_assert_eq(b.hbm_read, 3 * 16384.0);
    cr_assert_eq(b.hbm_written, 16384.0);
    cr_assert_eq(b.tile_read, 16384.0 + 2 * 3 * 16384.0, "Q once, each row tile K twice and V once: %g", b.tile_read);
    b = bytes_of("04", 128, 64, 1); /* causal: every tile still loaded */
    cr_assert_eq(b.tile_read, 16384.0 + 2 * 2 * 16384.0, "%g", b.tile_read);
    b = bytes_of("05", 128, 64, 1); /* row tile 0 loads key tile 0, row tile 1 both */
    cr_assert_eq(b.tile_read, 16384.0 + 2 * (64 + 128) * 128.0, "%g", b.tile_read);
    b = bytes_of("06", 100, 64, 0); /* ragged: one row tile, 100 keys read, never the padding */
    cr_assert_eq(b.tile_read, 3 * 100 * 128.0, "%g", b.tile_read);
    cr_assert_eq(b.hbm_written, 100 * 128.0 + 4 * 100, "O and LSE: %g", b.hbm_written);
    cr_assert_eq(bytes_of("03m", 128, 64, 0).tile_read, bytes_of("03", 128, 64, 0).tile_read, "a model counts its kernel");
}

Test(traffic, the_ratios_the_readmes_claim) {
    /* 05 causal at N = 4096: 2080 of 4096 key tiles, against 04's all */
    cr_assert_float_eq(kv_walks("05", 4096, 64, 1) / kv_walks("04", 4096, 64, 1), 2080.0 / 4096, 1e-12);
    cr_assert_float_eq(kv_walks("05", 4096, 64, 0), kv_walks("04", 4096, 64, 0), 1e-12, "non-causal: 04's count");
    cr_assert_float_eq(kv_walks("03", 4096, 64, 0) / kv_walks("04", 4096, 64, 0), 1.5, 1e-12, "two passes: K twice");
    cr_assert_float_eq(kv_walks("06", 4096, 64, 0) / kv_walks("06c", 4096, 64, 0), 0.5, 1e-12, "128-row tiles");
    cr_assert_float_eq(kv_walks("08", 4096, 128, 0) / kv_walks("07", 4096, 128, 0), 0.5, 1e-12, "08's pairs");
    cr_assert_float_eq(kv_walks("08", 4096, 64, 0), kv_walks("07", 4096, 64, 0), 1e-12, "no pairs at D = 64");
    cr_assert_float_eq(kv_walks("09", 4608, 64, 0) / kv_walks("07", 4608, 64, 0), 24.0 / 36, 1e-12, "192 rows");
    cr_assert_float_eq(kv_walks("09", 4096, 128, 1), kv_walks("07", 4096, 128, 1), 1e-12, "no causal pairs in 09");
}

Test(traffic, the_naive_stages_grow_as_n_squared) {
    const attn_bytes a = bytes_of("02", 1024, 64, 0), b = bytes_of("02", 2048, 64, 0);
    cr_assert(b.hbm_read / a.hbm_read > 3.8 && b.hbm_written / a.hbm_written > 3.9, "%g %g", a.hbm_read, b.hbm_read);
    /* S written (4 N^2) and P (2 N^2), and O (N D e: 0.125 N^2 at D = 64, N = 1024) */
    cr_assert(a.hbm_written >= 6.125 * 1024 * 1024 && a.hbm_written < 6.13 * 1024 * 1024, "%g", a.hbm_written);
    const attn_bytes c = bytes_of("11", 1024, 64, 0);
    cr_assert(c.hbm_read >= 16.0 * 1024 * 1024 && c.hbm_written >= 8.0 * 1024 * 1024, "P and dS: %g %g",
              c.hbm_read, c.hbm_written);
    cr_assert(bytes_of("12", 4096, 64, 0).hbm_read < c.hbm_read, "stage 12 has no N x N matrix");
}

Test(traffic, backward_tiles_walk_the_query_rows_per_key_tile) {
    /* 12 at N = 128, D = 64, non-causal: 2 key tiles each walk the 128 rows */
    const attn_bytes b = bytes_of("12", 128, 64, 0);
    const double arr = 16384.0, acc = 4.0 * 64 * 128, visits = 2 * 128.0;
    cr_assert_eq(b.tile_read, 4 * arr + visits * (2 * 128 + 8 + 256) + acc, "%g", b.tile_read);
    cr_assert_eq(b.tile_written, 4 * 128 + acc + visits * 256 + 3 * arr, "%g", b.tile_written);
    /* causal: key tile 1 starts at query tile 1 */
    cr_assert_eq(bytes_of("12", 128, 64, 1).tile_read, 4 * arr + (128 + 64) * (2 * 128 + 8 + 256) + acc);
    /* 13's 128-key blocks walk the rows half as often as 12's 64-key ones */
    const double w12 = bytes_of("12", 4096, 64, 0).tile_read, w13 = bytes_of("13", 4096, 64, 0).tile_read;
    cr_assert(w13 < 0.55 * w12, "13 %g, 12 %g", w13, w12);
}

Test(traffic, context_parallel_adds_the_ring_to_its_local_stage) {
    const attn_stage *s10 = attn_find_stage("10"), *s09 = attn_find_stage("09");
    attn_problem p = attn_problem_make(2, 4, 4096, 64, 0);
    const attn_bytes one = s10->bytes_moved(&p, 1), local = s09->bytes_moved(&p, 1);
    cr_assert_eq(one.hbm_read, local.hbm_read, "one GPU: the local stage alone");
    const attn_bytes four = s10->bytes_moved(&p, 4);
    const double kv = 2.0 * 2 * 4 * 4096 * 64 * 2; /* K and V of the whole problem */
    cr_assert(four.hbm_read > one.hbm_read + 3 * kv, "4 GPUs: each shard sent 3 times: %g vs %g", four.hbm_read,
              one.hbm_read);
}

/* ---- bench/roofline.sh on a hand-made CSV ---------------------------------------------------------- */

static char out[16384];

/* dir/b.csv: attn-bench's columns; a 02 and a 06 row of this GPU, one of another GPU, a peer without
 * bytes and an OOM row. dir/c.csv: the ceilings. */
static void write_roofline_inputs(const char *dir) {
    char path[600];
    snprintf(path, sizeof path, "%s/c.csv", dir);
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f);
    fputs("gpu,date,what,value,unit,how\nTest GPU,d,copy_bandwidth,4e12,B/s,x\n"
          "Test GPU,d,matmul_fp16,8e14,FLOP/s,x\nTest GPU,d,matmul_fp32,6e13,FLOP/s,x\n", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/b.csv", dir);
    cr_assert_not_null(f = fopen(path, "w"));
    fputs("gpu,date,commit,stage,name,B,H,N,D,causal,dtype,status,ms,tflops,extra_bytes,workspace_bytes,"
          "max_abs_err,check,repeats,l2,note,pass,hbm_read,hbm_written,tile_read,tile_written\n", f);
    fputs("Test GPU,d,c,02,naive_gpu,4,32,4096,64,0,fp16,ok,700,0.785,0,0,1e-4,pass,3,warm,,fwd,8.8e9,6.5e9,8.8e9,6.5e9\n", f);
    fputs("Test GPU,d,c,06,fa2_full,4,32,4096,64,1,fp16,ok,0.9,306,0,0,1e-4,pass,3,warm,,fwd,2e8,6.9e7,2.4e9,6.9e7\n", f);
    fputs("Other GPU,d,c,06,fa2_full,4,32,1024,64,0,fp16,ok,0.1,300,0,0,1e-4,pass,3,warm,,fwd,5e7,1.7e7,5e8,1.7e7\n", f);
    fputs("Test GPU,d,c,sdpa_flash,sdpa_flash,4,32,2048,64,0,fp16,ok,1.7,300,0,0,1e-4,pass,3,warm,,,,,,\n", f);
    fputs("Test GPU,d,c,03,tiled,4,32,8192,64,0,fp16,OOM,,,,,,,,-,x,fwd,2e8,6.9e7,4.5e9,6.9e7\n", f);
    fclose(f);
}

Test(roofline, the_table_puts_each_stage_at_its_flops_per_hbm_byte) {
    char dir[] = "/tmp/attn-roofline.XXXXXX", cmd[700];
    cr_assert_not_null(mkdtemp(dir));
    write_roofline_inputs(dir);
    snprintf(cmd, sizeof cmd, "sh bench/roofline.sh table %s/b.csv %s/c.csv", dir, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    /* 02: 0.785 TFLOP/s x 700 ms = 5.495e11 FLOPs over 1.53e10 bytes: 35.9 FLOP/B, 21.9 GB/s, 0.5% of 4 TB/s */
    cr_assert(strstr(out, "4096  02         35.91      0.785      21.86       0.5%"), "%s", out);
    /* 06 causal: 306 x 0.9 ms over 2.69e8 bytes: 1024 FLOP/B, 38.2% of 800 TFLOP/s */
    cr_assert(strstr(out, "causal        4096  06          1024        306"), "%s", out);
    cr_assert(strstr(out, "38.2%"), "%s", out);
    cr_assert(strstr(out, "ridge at 200 FLOP/B"), "800e12 / 4e12: %s", out);
    cr_assert(strstr(out, "1 rows timed on another GPU than Test GPU left out"), "%s", out);
    cr_assert(!strstr(out, "sdpa_flash") && !strstr(out, "8192"), "a peer without bytes, an OOM row: %s", out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0);
}

Test(roofline, the_plot_is_a_png_and_old_csvs_are_refused) {
    char dir[] = "/tmp/attn-roofline.XXXXXX", cmd[900];
    cr_assert_not_null(mkdtemp(dir));
    write_roofline_inputs(dir);
    snprintf(cmd, sizeof cmd, "sh bench/roofline.sh plot %s/b.csv %s/c.csv %s/png", dir, dir, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0, "%s", out);
    if (strstr(out, "gnuplot not found")) cr_log_warn("gnuplot not found: the PNG was not drawn");
    else {
        snprintf(cmd, sizeof cmd, "head -c 4 %s/png/roofline.png | od -c | head -1", dir);
        run_cmd(cmd, out, sizeof out);
        cr_assert(strstr(out, "P   N   G"), "not a PNG: %s", out);
    }
    /* a CSV from before the bytes columns: refused, naming the column */
    snprintf(cmd, sizeof cmd, "cut -d, -f1-22 %s/b.csv > %s/old.csv && sh bench/roofline.sh table %s/old.csv %s/c.csv",
             dir, dir, dir, dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "no hbm_read column"), "%s", out);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    cr_assert_eq(run_cmd(cmd, out, sizeof out), 0);
}
