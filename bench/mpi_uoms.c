/*
 * mpi_uoms.c - the MPI twins of `fastmp-bench uoms` (UOMS, the UPC Operations
 * Microbenchmarking Suite of the PGAS-collectives seed), measured the same way
 * and printed in the same layout, for bench/compare.sh.
 *
 * Build:  mpicc -O2 -o target/mpi_uoms bench/mpi_uoms.c
 * Run:    mpirun -np 2 --bind-to core target/mpi_uoms BENCH [--min-size B]
 *                [--max-size B] [--iterations N] [--reduce-op OP]
 *                [--reduce-type i64|f64] [--rotate-root] [--json]
 *
 * BENCH and its MPI twin (sizes are bytes per block, as in UOMS):
 *   broadcast      MPI_Bcast of size bytes
 *   scatter        MPI_Scatter, size bytes per rank
 *   gather         MPI_Gather, size bytes per rank
 *   gather_all     MPI_Allgather, size bytes per rank
 *   exchange       MPI_Alltoall, size bytes per pair
 *   permute        MPI_Sendrecv of size bytes to rank+1, from rank-1
 *   reduce         upc_all_reduce's result, one value over every rank's
 *                  size/8 elements: a local fold, then MPI_Reduce of 1 element
 *   prefix_reduce  upc_all_prefix_reduce's result over the ranks' blocks of
 *                  size/8 elements: a local inclusive scan, MPI_Exscan of the
 *                  block total (1 element: MPI_Scan's exclusive form, since
 *                  the ops need not be invertible), then the offset applied
 *   memget/memput  rank 0 MPI_Get / MPI_Put of size bytes from / to rank np-1
 *                  inside one MPI_Win_lock_all epoch, each op + MPI_Win_flush
 *   memcpy         as memget, into rank 0's own window memory
 *   barrier        MPI_Barrier (the one size 0)
 * Method (as fastmp-bench's uoms.rs):
 *   - sizes x2 from --min-size (4) to --max-size (16 MiB); reductions use
 *     size/8 elements of int64 (--reduce-type f64: double) and skip sizes not
 *     a multiple of 8; --reduce-op sum (default), prod, min, max, band, bor,
 *     bxor, land, lor (f64: sum, prod, min, max);
 *   - per size: warm-up, then timed repetitions: 1000 / 100 up to 8 KiB,
 *     then max(20, 1000*8192/size) / a tenth of that (--iterations N: N / N/10);
 *     each iteration is MPI_Barrier, then the call timed alone (MPI_Wtime);
 *   - an iteration's time is the maximum over ranks (one MPI_Reduce MPI_MAX of
 *     the per-iteration times per size); t_min/t_max/t_avg over iterations;
 *   - variability filter: t_min never below the previous size's t_min;
 *   - BW_aggregated = factor * size / t_min (MB = 10^6 B), factor np, np^2 for
 *     exchange and gather_all, 1 for memget/memput/memcpy, none ('-', 0 in
 *     JSON) for reduce, prefix_reduce and barrier;
 *   - root 0, or iteration mod np with --rotate-root.
 * --json: one object per size:
 *   {"bench":"broadcast","device":"mpi","np":2,"size":8,"t_min_ns":310.00,
 *    "t_max_ns":900.00,"t_avg_ns":350.12,"bw_mb_s":51.61,"repetitions":1000,
 *    "sync":"-","algorithm":"-"}
 */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum bench { B_BCAST, B_SCATTER, B_GATHER, B_GATHER_ALL, B_EXCHANGE, B_PERMUTE, B_REDUCE, B_PREFIX,
             B_MEMGET, B_MEMPUT, B_MEMCPY, B_BARRIER, B_COUNT };
static const char *names[B_COUNT] = { "broadcast", "scatter", "gather", "gather_all", "exchange", "permute",
                                      "reduce", "prefix_reduce", "memget", "memput", "memcpy", "barrier" };
static const char *twins[B_COUNT] = { "MPI_Bcast", "MPI_Scatter", "MPI_Gather", "MPI_Allgather", "MPI_Alltoall",
                                      "MPI_Sendrecv", "local fold + MPI_Reduce", "local scan + MPI_Exscan",
                                      "MPI_Get + MPI_Win_flush", "MPI_Put + MPI_Win_flush",
                                      "MPI_Get + MPI_Win_flush", "MPI_Barrier" };

enum op { OP_SUM, OP_PROD, OP_MIN, OP_MAX, OP_BAND, OP_BOR, OP_BXOR, OP_LAND, OP_LOR, OP_COUNT };
static const char *op_names[OP_COUNT] = { "sum", "prod", "min", "max", "band", "bor", "bxor", "land", "lor" };
static const char *op_alias[OP_COUNT] = { "add", "mult", "min", "max", "and", "or", "xor", "logand", "logor" };
static const char *op_upc[OP_COUNT] = { "UPC_ADD", "UPC_MULT", "UPC_MIN", "UPC_MAX", "UPC_AND",
                                        "UPC_OR", "UPC_XOR", "UPC_LOGAND", "UPC_LOGOR" };

struct options {
    enum bench bench;
    long min_size, max_size, iterations;
    enum op op;
    int f64, rotate, json;
};

static int g_rank, g_np;

static void fail(const char *fmt, const char *arg)
{
    if (g_rank == 0) {
        fprintf(stderr, "mpi_uoms: ");
        fprintf(stderr, fmt, arg);
        fprintf(stderr, "\n");
    }
    MPI_Finalize();
    exit(2);
}

static long parse_long(const char *opt, const char *s)
{
    char *end;
    long v;
    if (s == NULL)
        fail("%s needs a value", opt);
    v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 0)
        fail("bad number for option (got '%s')", s);
    return v;
}

static void parse_args(int argc, char **argv, struct options *o)
{
    int i, k, found = 0;
    o->bench = B_COUNT;
    o->min_size = 4;
    o->max_size = 16L << 20;
    o->iterations = 0;
    o->op = OP_SUM;
    o->f64 = o->rotate = o->json = 0;
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) {
            o->json = 1;
        } else if (strcmp(a, "--rotate-root") == 0) {
            o->rotate = 1;
        } else if (strcmp(a, "--min-size") == 0) {
            o->min_size = parse_long(a, argv[++i]);
        } else if (strcmp(a, "--max-size") == 0) {
            o->max_size = parse_long(a, argv[++i]);
        } else if (strcmp(a, "--iterations") == 0) {
            o->iterations = parse_long(a, argv[++i]);
            if (o->iterations < 1)
                fail("--iterations must be at least 1%s", "");
        } else if (strcmp(a, "--reduce-type") == 0) {
            const char *t = argv[++i];
            if (t == NULL || (strcmp(t, "i64") != 0 && strcmp(t, "f64") != 0))
                fail("--reduce-type must be i64 or f64 (got '%s')", t ? t : "");
            o->f64 = strcmp(t, "f64") == 0;
        } else if (strcmp(a, "--reduce-op") == 0) {
            const char *t = argv[++i];
            for (k = 0; k < OP_COUNT && t != NULL; k++)
                if (strcmp(t, op_names[k]) == 0 || strcmp(t, op_alias[k]) == 0)
                    break;
            if (t == NULL || k == OP_COUNT)
                fail("unknown --reduce-op '%s' (sum prod min max band bor bxor land lor)", t ? t : "");
            o->op = (enum op)k;
        } else if (a[0] == '-') {
            fail("unknown option '%s'", a);
        } else {
            for (k = 0; k < B_COUNT; k++)
                if (strcmp(a, names[k]) == 0)
                    break;
            if (k == B_COUNT)
                fail("unknown benchmark '%s'", a);
            o->bench = (enum bench)k;
            found = 1;
        }
    }
    if (!found)
        fail("usage: mpi_uoms BENCH [--min-size B] [--max-size B] [--iterations N] [--reduce-op OP] "
             "[--reduce-type i64|f64] [--rotate-root] [--json]%s", "");
    if (o->min_size > o->max_size)
        fail("--min-size is larger than --max-size%s", "");
    if (o->f64 && o->op > OP_MAX)
        fail("--reduce-op %s needs --reduce-type i64", op_names[o->op]);
}

static int is_reduction(enum bench b) { return b == B_REDUCE || b == B_PREFIX; }

static double bw_factor(enum bench b)
{
    switch (b) {
    case B_EXCHANGE:
    case B_GATHER_ALL: return (double)g_np * g_np;
    case B_REDUCE:
    case B_PREFIX:
    case B_BARRIER: return 0.0;
    case B_MEMGET:
    case B_MEMPUT:
    case B_MEMCPY: return 1.0;
    default: return g_np;
    }
}

static void repetitions(const struct options *o, long size, long *timed, long *warm)
{
    if (o->iterations > 0)
        *timed = o->iterations;
    else if (size <= 8192)
        *timed = 1000;
    else
        *timed = 1000L * 8192 / size < 20 ? 20 : 1000L * 8192 / size;
    *warm = o->iterations > 0 ? (*timed / 10 > 0 ? *timed / 10 : 1) : *timed / 10;
}

/* The local parts of the reductions, one loop per (type, op) so that the compiler sees a plain
 * fold (the operation's switch is outside the loop, as fastmp's generic Op is inlined). EXPR
 * combines the running value a with the next value b. */
#define KERNELS(T, NAME, EXPR)                                                                           \
    static T fold_##NAME(const T *s, long n)                                                             \
    {                                                                                                    \
        T a = s[0];                                                                                      \
        long i;                                                                                          \
        for (i = 1; i < n; i++) {                                                                        \
            T b = s[i];                                                                                  \
            a = (EXPR);                                                                                  \
        }                                                                                                \
        return a;                                                                                        \
    }                                                                                                    \
    static void scan_##NAME(const T *s, T *d, long n)                                                    \
    {                                                                                                    \
        long i;                                                                                          \
        d[0] = s[0];                                                                                     \
        for (i = 1; i < n; i++) {                                                                        \
            T a = d[i - 1], b = s[i];                                                                    \
            d[i] = (EXPR);                                                                               \
        }                                                                                                \
    }                                                                                                    \
    static void offset_##NAME(T *d, long n, T b)                                                         \
    {                                                                                                    \
        long i;                                                                                          \
        for (i = 0; i < n; i++) {                                                                        \
            T a = d[i];                                                                                  \
            d[i] = (EXPR);                                                                               \
        }                                                                                                \
    }

KERNELS(int64_t, i_sum, a + b)
KERNELS(int64_t, i_prod, a * b)
KERNELS(int64_t, i_min, b < a ? b : a)
KERNELS(int64_t, i_max, b > a ? b : a)
KERNELS(int64_t, i_band, a & b)
KERNELS(int64_t, i_bor, a | b)
KERNELS(int64_t, i_bxor, a ^ b)
KERNELS(int64_t, i_land, (a != 0) && (b != 0))
KERNELS(int64_t, i_lor, (a != 0) || (b != 0))
KERNELS(double, f_sum, a + b)
KERNELS(double, f_prod, a * b)
KERNELS(double, f_min, b < a ? b : a)
KERNELS(double, f_max, b > a ? b : a)

struct kernels_i64 {
    int64_t (*fold)(const int64_t *, long);
    void (*scan)(const int64_t *, int64_t *, long);
    void (*offset)(int64_t *, long, int64_t);
};
struct kernels_f64 {
    double (*fold)(const double *, long);
    void (*scan)(const double *, double *, long);
    void (*offset)(double *, long, double);
};
#define K(NAME) { fold_##NAME, scan_##NAME, offset_##NAME }
static const struct kernels_i64 ki64[OP_COUNT] = { K(i_sum), K(i_prod), K(i_min), K(i_max), K(i_band),
                                                   K(i_bor), K(i_bxor), K(i_land), K(i_lor) };
static const struct kernels_f64 kf64[OP_MAX + 1] = { K(f_sum), K(f_prod), K(f_min), K(f_max) };

static MPI_Op mpi_op(enum op op)
{
    static const MPI_Op ops[OP_COUNT] = { MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX, MPI_BAND,
                                          MPI_BOR, MPI_BXOR, MPI_LAND, MPI_LOR };
    return ops[op];
}

/* upc_all_reduce: fold the block, then one element across the ranks. */
static void reduce_call(const struct options *o, void *src, long n, void *dst, int root)
{
    if (o->f64) {
        double acc = n > 0 ? kf64[o->op].fold(src, n) : 0.0;
        MPI_Reduce(&acc, dst, 1, MPI_DOUBLE, mpi_op(o->op), root, MPI_COMM_WORLD);
    } else {
        int64_t acc = n > 0 ? ki64[o->op].fold(src, n) : 0;
        MPI_Reduce(&acc, dst, 1, MPI_INT64_T, mpi_op(o->op), root, MPI_COMM_WORLD);
    }
}

/* upc_all_prefix_reduce: local scan, exclusive scan of the block totals, offset. */
static void prefix_call(const struct options *o, void *src, long n, void *dst)
{
    if (n == 0)
        return;
    if (o->f64) {
        double *d = dst, before = 0.0, total;
        kf64[o->op].scan(src, d, n);
        total = d[n - 1];
        MPI_Exscan(&total, &before, 1, MPI_DOUBLE, mpi_op(o->op), MPI_COMM_WORLD);
        if (g_rank > 0)
            kf64[o->op].offset(d, n, before);
    } else {
        int64_t *d = dst, before = 0, total;
        ki64[o->op].scan(src, d, n);
        total = d[n - 1];
        MPI_Exscan(&total, &before, 1, MPI_INT64_T, mpi_op(o->op), MPI_COMM_WORLD);
        if (g_rank > 0)
            ki64[o->op].offset(d, n, before);
    }
}

struct bufs {
    char *src, *dst, *win_mem;
    MPI_Win win;
};

static void call(const struct options *o, struct bufs *b, long size, int root)
{
    int n = (int)size, peer = g_np - 1;
    switch (o->bench) {
    case B_BCAST: MPI_Bcast(b->dst, n, MPI_CHAR, root, MPI_COMM_WORLD); break;
    case B_SCATTER: MPI_Scatter(b->src, n, MPI_CHAR, b->dst, n, MPI_CHAR, root, MPI_COMM_WORLD); break;
    case B_GATHER: MPI_Gather(b->src, n, MPI_CHAR, b->dst, n, MPI_CHAR, root, MPI_COMM_WORLD); break;
    case B_GATHER_ALL: MPI_Allgather(b->src, n, MPI_CHAR, b->dst, n, MPI_CHAR, MPI_COMM_WORLD); break;
    case B_EXCHANGE: MPI_Alltoall(b->src, n, MPI_CHAR, b->dst, n, MPI_CHAR, MPI_COMM_WORLD); break;
    case B_PERMUTE:
        MPI_Sendrecv(b->src, n, MPI_CHAR, (g_rank + 1) % g_np, 7, b->dst, n, MPI_CHAR, (g_rank + g_np - 1) % g_np,
                     7, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        break;
    case B_REDUCE: reduce_call(o, b->src, size / 8, b->dst, root); break;
    case B_PREFIX: prefix_call(o, b->src, size / 8, b->dst); break;
    case B_MEMGET:
    case B_MEMCPY:
        if (g_rank == 0) {
            MPI_Get(o->bench == B_MEMGET ? b->dst : b->win_mem, n, MPI_CHAR, peer, 0, n, MPI_CHAR, b->win);
            MPI_Win_flush(peer, b->win);
        }
        break;
    case B_MEMPUT:
        if (g_rank == 0) {
            MPI_Put(b->src, n, MPI_CHAR, peer, 0, n, MPI_CHAR, b->win);
            MPI_Win_flush(peer, b->win);
        }
        break;
    case B_BARRIER: MPI_Barrier(MPI_COMM_WORLD); break;
    default: break;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void print_header(const struct options *o)
{
    char date[64];
    time_t now = time(NULL);
    long s;
    strftime(date, sizeof date, "%Y-%m-%d %H:%M:%S UTC", gmtime(&now));
    printf("# MPI twin of the %s (UOMS methodology)\n", "UPC Operations Microbenchmark Suite V1.1");
    printf("# %-26s: %s\n", "Date", date);
    printf("# %-26s: %s\n", "Device", "mpi");
    printf("# %-26s: %s\n", "Warmup iteration", "Enabled");
    printf("# Problem sizes:\n");
    if (o->bench == B_BARRIER)
        printf("# 0\n");
    else
        for (s = o->min_size; s <= o->max_size; s = s ? s * 2 : 1)
            if (!is_reduction(o->bench) || s % 8 == 0)
                printf("# %ld\n", s);
    printf("# %-26s: %s\n", "Synchronization mode", "- (MPI collectives have none)");
    printf("# %-26s: %s on %s\n", "Reduce Op", op_upc[o->op], o->f64 ? "f64 (UPC_D)" : "i64 (UPC_L)");
    printf("# %-26s: %s\n", "Root", o->rotate ? "rotating (iteration mod THREADS)" : "0");
    printf("# %-26s: %s\n", "MPI call", twins[o->bench]);
    printf("# Time: per iteration the maximum over threads; t_min/t_max/t_avg over iterations;\n");
    printf("#   t_min never below the previous size's (UOMS's variability filter)\n");
    printf("# BW_aggregated: factor x #bytes / t_min (MB = 10^6 B); factor THREADS, THREADS^2 for\n");
    printf("#   exchange and gather_all, 1 for memget/memput/memcpy, none for reductions and barrier\n");
    printf("# List of Benchmarks to run:\n# %s\n\n", names[o->bench]);
    printf("# Benchmarking %s\n# #processes = %d\n", names[o->bench], g_np);
    printf("%12s %12s %14s %14s %14s %22s\n", "#bytes", "#repetitions", "t_min[nsec]", "t_max[nsec]",
           "t_avg[nsec]", "BW_aggregated[MB/sec]");
}

static char *alloc_bytes(long n)
{
    void *p = NULL;
    if (posix_memalign(&p, 64, n > 0 ? (size_t)n : 64) != 0)
        fail("cannot allocate %s", "buffers");
    memset(p, 1, n > 0 ? (size_t)n : 64);
    return p;
}

int main(int argc, char **argv)
{
    struct options o;
    struct bufs b;
    long size, max, timed, warm, i, all_len;
    double *times, *maxes, floor_ns = 0.0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_np);
    parse_args(argc, argv, &o);
    max = o.bench == B_BARRIER ? 0 : o.max_size;
    all_len = max * g_np;
    b.src = alloc_bytes(o.bench == B_SCATTER || o.bench == B_EXCHANGE ? all_len : max);
    b.dst = alloc_bytes(o.bench == B_GATHER || o.bench == B_GATHER_ALL || o.bench == B_EXCHANGE ? all_len : max);
    if (is_reduction(o.bench)) {
        /* zeros: like the fastmp side's fresh shared arrays */
        memset(b.src, 0, (size_t)(max > 0 ? max : 64));
    }
    b.win = MPI_WIN_NULL;
    b.win_mem = NULL;
    if (o.bench == B_MEMGET || o.bench == B_MEMPUT || o.bench == B_MEMCPY) {
        MPI_Win_allocate(max > 0 ? max : 1, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &b.win_mem, &b.win);
        MPI_Win_lock_all(MPI_MODE_NOCHECK, b.win);
    }
    repetitions(&o, 0, &timed, &warm);
    i = timed;
    repetitions(&o, o.min_size, &timed, &warm);
    times = malloc(sizeof(double) * (size_t)(timed > i ? timed : i));
    maxes = malloc(sizeof(double) * (size_t)(timed > i ? timed : i));
    if (g_rank == 0 && !o.json)
        print_header(&o);
    for (size = o.bench == B_BARRIER ? 0 : o.min_size; size <= max; size = size ? size * 2 : 1) {
        double t_min, t_max, t_avg = 0.0, bw, factor = bw_factor(o.bench);
        if (is_reduction(o.bench) && size % 8 != 0)
            continue;
        repetitions(&o, size, &timed, &warm);
        for (i = 0; i < warm + timed; i++) {
            int root = o.rotate ? (int)(i % g_np) : 0;
            double t0;
            MPI_Barrier(MPI_COMM_WORLD);
            t0 = MPI_Wtime();
            call(&o, &b, size, root);
            if (i >= warm)
                times[i - warm] = (MPI_Wtime() - t0) * 1e9;
        }
        MPI_Reduce(times, maxes, (int)timed, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (g_rank == 0) {
            for (i = 0; i < timed; i++)
                t_avg += maxes[i];
            t_avg /= (double)timed;
            qsort(maxes, (size_t)timed, sizeof(double), cmp_double);
            t_min = maxes[0] > floor_ns ? maxes[0] : floor_ns;
            floor_ns = t_min;
            t_max = maxes[timed - 1];
            bw = factor > 0.0 && t_min > 0.0 ? factor * (double)size * 1e3 / t_min : 0.0;
            if (o.json) {
                printf("{\"bench\":\"%s\",\"device\":\"mpi\",\"np\":%d,\"size\":%ld,\"t_min_ns\":%.2f,"
                       "\"t_max_ns\":%.2f,\"t_avg_ns\":%.2f,\"bw_mb_s\":%.2f,\"repetitions\":%ld,"
                       "\"sync\":\"-\",\"algorithm\":\"%s\"}\n",
                       names[o.bench], g_np, size, t_min, t_max, t_avg, bw, timed, twins[o.bench]);
            } else if (factor > 0.0) {
                printf("%12ld %12ld %14.0f %14.0f %14.2f %22.2f\n", size, timed, t_min, t_max, t_avg, bw);
            } else {
                printf("%12ld %12ld %14.0f %14.0f %14.2f %22s\n", size, timed, t_min, t_max, t_avg, "-");
            }
            fflush(stdout);
        }
        if (size == 0 && max == 0)
            break;
    }
    if (b.win != MPI_WIN_NULL) {
        MPI_Win_unlock_all(b.win);
        MPI_Win_free(&b.win);
    }
    free(times);
    free(maxes);
    free(b.src);
    free(b.dst);
    MPI_Finalize();
    return 0;
}
