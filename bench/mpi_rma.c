/*
 * mpi_rma.c - OSU Micro-Benchmarks (v7.4) style one-sided benchmarks, the MPI
 * baseline of fastmp-bench's one-sided suite (crates/fastmp-bench/src/rma.rs
 * follows the same method; bench/compare.sh runs both).
 *
 * Build:  mpicc -O2 -o target/mpi_rma bench/mpi_rma.c
 * Run:    mpirun -np 2 --bind-to core target/mpi_rma BENCH [--win allocate|create]
 *                [--sync flush|flush_local|lock|lock_all|fence|pscw]
 *                [--min-size B] [--max-size B] [--iterations N] [--json]
 *         BENCH: put_latency|get_latency|put_bw|get_bw|put_bibw|acc_latency|
 *                fop_latency|cas_latency (exactly 2 ranks)
 *
 * Method (OSU 7.4's osu_put_latency, osu_get_bw, ...):
 *   - a new window per size (MPI_Win_allocate, or MPI_Win_create over
 *     posix_memalign'ed zeroed memory), displacement unit 1, freed after it;
 *   - latency, passive synchronisation: rank 0 alone times iters operations to
 *     rank 1: flush / flush_local after each inside one MPI_LOCK_SHARED lock
 *     held across the loop, or lock..unlock / lock_all..unlock_all around
 *     each; latency = t / iters;
 *   - latency, active: a ping-pong (fence: three fences per iteration, rank 0
 *     operating after the first, rank 1 after the second; pscw: rank 0
 *     start/op/complete then post/wait, rank 1 the mirror); t / iters / 2;
 *   - bandwidth: windows of 64 operations of size bytes at displacements
 *     j * size, one synchronisation per window (fence: both ranks fence
 *     around rank 0's window; pscw: rank 0 start/ops/complete, rank 1
 *     post/wait); put_bibw: both ranks put (fence or pscw only, as OSU);
 *     MB/s = size / 1e6 * 64 * iters / t (x2 for bibw);
 *   - acc_latency: MPI_Accumulate of size / 4 MPI_INT with MPI_SUM (sizes are
 *     multiples of 4); fop_latency: MPI_Fetch_and_op of one MPI_UINT64_T with
 *     MPI_SUM; cas_latency: MPI_Compare_and_swap of one MPI_UINT64_T (size 8);
 *   - iterations: latency 10000 / 100 warm-up up to 8 KiB, 1000 / 10 above;
 *     bandwidth 100 / 10 and 20 / 2 (--iterations N: N / max(1, N/10));
 *     MPI_Barrier before and after each size.
 * Defaults: --win allocate, --sync flush (put_bibw: pscw); sizes 1..4 MiB for
 * put/get latency, 1..1 MiB for the bandwidths, 4..1 MiB for acc_latency.
 *
 * --json prints one object per size:
 *   {"bench":"put_latency","device":"mpi","np":2,"size":8,"avg_us":0.054,
 *    "win":"allocate","sync":"flush"}
 *   {"bench":"put_bw","device":"mpi","np":2,"size":8,"mb_s":123.45,...}
 */
#define _POSIX_C_SOURCE 200809L /* posix_memalign under -std=c99 */
#include <mpi.h>

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OSU_VERSION "7.4"
#define WINDOW_SIZE 64
#define LARGE_MESSAGE_SIZE 8192
#define ALIGNMENT 64
#define FIELD_WIDTH 20
#define FLOAT_PRECISION 2

enum bench { PUT_LAT, GET_LAT, PUT_BW, GET_BW, PUT_BIBW, ACC_LAT, FOP_LAT, CAS_LAT, B_COUNT };
static const char *bench_names[B_COUNT] = {"put_latency", "get_latency", "put_bw", "get_bw",
                                           "put_bibw", "acc_latency", "fop_latency", "cas_latency"};
static const char *titles[B_COUNT] = {
    "MPI_Put Latency Test", "MPI_Get Latency Test", "MPI_Put Bandwidth Test",
    "MPI_Get Bandwidth Test", "MPI_Put Bi-directional Bandwidth Test",
    "MPI_Accumulate Latency Test (MPI_INT, MPI_SUM)",
    "MPI_Fetch_and_op Latency Test (MPI_UINT64_T, MPI_SUM)",
    "MPI_Compare_and_swap Latency Test (MPI_UINT64_T)"};

enum sync { FLUSH, FLUSH_LOCAL, LOCK, LOCK_ALL, FENCE, PSCW, S_COUNT };
static const char *sync_names[S_COUNT] = {"flush", "flush_local", "lock", "lock_all", "fence", "pscw"};
static const char *sync_descriptions[S_COUNT] = {
    "lock(shared) once, then op + MPI_Win_flush", "lock(shared) once, then op + MPI_Win_flush_local",
    "MPI_Win_lock(shared) + op + MPI_Win_unlock", "MPI_Win_lock_all + op + MPI_Win_unlock_all",
    "MPI_Win_fence", "MPI_Win_post/start/complete/wait"};

enum win_kind { WIN_ALLOCATE, WIN_CREATE, W_COUNT };
static const char *win_names[W_COUNT] = {"allocate", "create"};

#define IS_BW(b) ((b) == PUT_BW || (b) == GET_BW || (b) == PUT_BIBW)
#define IS_ATOMIC(b) ((b) == FOP_LAT || (b) == CAS_LAT)
#define IS_ACTIVE(s) ((s) == FENCE || (s) == PSCW)

struct options {
    enum bench bench;
    enum win_kind win;
    enum sync sync;
    long min_size, max_size;
    long iterations; /* 0: OSU's */
    int json;
};

static int g_rank = 0;

/* What one operation touches: the window, the size, the origin and result buffers. */
static struct {
    enum bench bench;
    MPI_Win win;
    int size;
    char *sbuf, *rbuf;
    uint64_t one, zero, result;
} g;

static void usage(FILE *f)
{
    fprintf(f, "usage: mpi_rma BENCH [--win allocate|create] "
               "[--sync flush|flush_local|lock|lock_all|fence|pscw]\n"
               "               [--min-size B] [--max-size B] [--iterations N] [--json]\n"
               "  BENCH: put_latency get_latency put_bw get_bw put_bibw acc_latency fop_latency "
               "cas_latency\n");
}

/* Every rank parses the same arguments: rank 0 reports, all abort. */
static void fatal(const char *fmt, const char *arg)
{
    if (g_rank == 0) {
        fprintf(stderr, "mpi_rma: ");
        fprintf(stderr, fmt, arg);
        fprintf(stderr, "\n");
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static long parse_long(const char *opt, const char *s)
{
    char *end = NULL;
    long v;
    if (s == NULL) {
        fatal("%s needs a value", opt);
    }
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < 0 || v > INT_MAX) {
        fatal("invalid number '%s' (want an integer 0..2147483647)", s);
    }
    return v;
}

static int lookup(const char *opt, const char *s, const char **names, int count)
{
    int i;
    if (s == NULL) {
        fatal("%s needs a value", opt);
    }
    for (i = 0; i < count; i++) {
        if (strcmp(s, names[i]) == 0) {
            return i;
        }
    }
    fatal("unknown value '%s' (see --help)", s);
    return 0;
}

static void parse_args(int argc, char **argv, struct options *o)
{
    int i, have_bench = 0, have_sync = 0, have_min = 0, have_max = 0;

    memset(o, 0, sizeof *o);
    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--json") == 0) {
            o->json = 1;
        } else if (strcmp(a, "--win") == 0) {
            o->win = (enum win_kind)lookup(a, next, win_names, W_COUNT);
            i++;
        } else if (strcmp(a, "--sync") == 0) {
            o->sync = (enum sync)lookup(a, next, sync_names, S_COUNT);
            have_sync = 1;
            i++;
        } else if (strcmp(a, "--min-size") == 0) {
            o->min_size = parse_long(a, next);
            have_min = 1;
            i++;
        } else if (strcmp(a, "--max-size") == 0) {
            o->max_size = parse_long(a, next);
            have_max = 1;
            i++;
        } else if (strcmp(a, "--iterations") == 0) {
            o->iterations = parse_long(a, next);
            if (o->iterations < 1) {
                fatal("%s must be at least 1", a);
            }
            i++;
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            if (g_rank == 0) {
                usage(stdout);
            }
            MPI_Finalize();
            exit(0);
        } else if (a[0] != '-' && !have_bench) {
            o->bench = (enum bench)lookup("BENCH", a, bench_names, B_COUNT);
            have_bench = 1;
        } else {
            fatal("unexpected argument '%s' (see --help)", a);
        }
    }
    if (!have_bench) {
        fatal("%s", "missing benchmark name (see --help)");
    }
    if (!have_sync) {
        o->sync = o->bench == PUT_BIBW ? PSCW : FLUSH;
    }
    if (o->bench == PUT_BIBW && !IS_ACTIVE(o->sync)) {
        fatal("put_bibw needs active-target synchronisation (--sync fence|pscw, as OSU), got "
              "--sync %s",
              sync_names[o->sync]);
    }
    if (IS_ATOMIC(o->bench)) {
        if (have_min || have_max) {
            fatal("%s has the one size 8: --min-size/--max-size do not apply", bench_names[o->bench]);
        }
        o->min_size = o->max_size = 8;
    } else {
        if (!have_min) {
            o->min_size = o->bench == ACC_LAT ? 4 : 1;
        }
        if (!have_max) {
            o->max_size = IS_BW(o->bench) || o->bench == ACC_LAT ? 1L << 20 : 1L << 22;
        }
    }
    if (o->bench == ACC_LAT && (o->min_size == 0 || o->min_size % 4 != 0)) {
        fatal("%s", "acc_latency sizes must be positive multiples of 4 (whole MPI_INT)");
    }
    if (IS_BW(o->bench) && o->max_size > INT_MAX / WINDOW_SIZE) {
        fatal("%s", "--max-size is above 33554431 bytes (a window of 64 messages must stay below 2 GiB)");
    }
    if (o->min_size > o->max_size) {
        fatal("%s", "--min-size is larger than --max-size");
    }
}

static char *alloc_buffer(long size, int fill)
{
    void *p = NULL;
    size_t n = (size_t)(size > 0 ? size : 1);
    int rc = posix_memalign(&p, ALIGNMENT, n);
    if (rc != 0 || p == NULL) {
        fatal("posix_memalign failed: %s", strerror(rc));
    }
    memset(p, fill, n); /* touched before anything is timed */
    return (char *)p;
}

static char *window_create(const struct options *o, long bytes)
{
    char *base = NULL;
    if (o->win == WIN_ALLOCATE) {
        MPI_Win_allocate((MPI_Aint)bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &g.win);
        memset(base, 0, (size_t)bytes);
        return NULL;
    }
    base = alloc_buffer(bytes, 0);
    MPI_Win_create(base, (MPI_Aint)bytes, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &g.win);
    return base;
}

/* The j-th operation of a window (0 for the latency tests) to `target`. */
static void op(int j, int target)
{
    MPI_Aint disp = (MPI_Aint)j * g.size;
    switch (g.bench) {
    case PUT_LAT:
    case PUT_BW:
    case PUT_BIBW:
        MPI_Put(g.sbuf + disp, g.size, MPI_CHAR, target, disp, g.size, MPI_CHAR, g.win);
        break;
    case GET_LAT:
    case GET_BW:
        MPI_Get(g.rbuf + disp, g.size, MPI_CHAR, target, disp, g.size, MPI_CHAR, g.win);
        break;
    case ACC_LAT:
        MPI_Accumulate(g.sbuf, g.size / 4, MPI_INT, target, 0, g.size / 4, MPI_INT, MPI_SUM, g.win);
        break;
    case FOP_LAT:
        MPI_Fetch_and_op(&g.one, &g.result, MPI_UINT64_T, target, 0, MPI_SUM, g.win);
        break;
    case CAS_LAT:
        MPI_Compare_and_swap(&g.one, &g.zero, &g.result, MPI_UINT64_T, target, 0, g.win);
        break;
    default:
        break;
    }
}

static void ops(int count, int target)
{
    int j;
    for (j = 0; j < count; j++) {
        op(j, target);
    }
}

/* `count` operations to rank 1 completed by one passive-target synchronisation. */
static void passive_round(enum sync sync, int count)
{
    switch (sync) {
    case FLUSH:
        ops(count, 1);
        MPI_Win_flush(1, g.win);
        break;
    case FLUSH_LOCAL:
        ops(count, 1);
        MPI_Win_flush_local(1, g.win);
        break;
    case LOCK:
        MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, g.win);
        ops(count, 1);
        MPI_Win_unlock(1, g.win);
        break;
    case LOCK_ALL:
        MPI_Win_lock_all(0, g.win);
        ops(count, 1);
        MPI_Win_unlock_all(g.win);
        break;
    default:
        break;
    }
}

/* Rank 0's timed loop of passive rounds (flush modes: one lock around it, untimed). */
static double passive_loop(enum sync sync, int count, long iters, long skip)
{
    double t_start = 0.0, t;
    long i;
    int held = sync == FLUSH || sync == FLUSH_LOCAL;
    if (held) {
        MPI_Win_lock(MPI_LOCK_SHARED, 1, 0, g.win);
    }
    for (i = 0; i < iters + skip; i++) {
        if (i == skip) {
            t_start = MPI_Wtime();
        }
        passive_round(sync, count);
    }
    t = MPI_Wtime() - t_start;
    if (held) {
        MPI_Win_unlock(1, g.win);
    }
    return t;
}

/* Latency (us) at rank 0; 0 elsewhere. */
static double latency(const struct options *o, long iters, long skip, MPI_Group peer)
{
    int me = g_rank, other = 1 - g_rank;
    double t_start = 0.0, us = 0.0;
    long i;

    if (!IS_ACTIVE(o->sync)) {
        return me == 0 ? passive_loop(o->sync, 1, iters, skip) * 1e6 / (double)iters : 0.0;
    }
    for (i = 0; i < iters + skip; i++) {
        if (i == skip) {
            t_start = MPI_Wtime();
        }
        if (o->sync == FENCE) {
            MPI_Win_fence(0, g.win);
            if (me == 0) {
                op(0, other);
            }
            MPI_Win_fence(0, g.win);
            if (me == 1) {
                op(0, other);
            }
            MPI_Win_fence(0, g.win);
        } else if (me == 0) {
            MPI_Win_start(peer, 0, g.win);
            op(0, other);
            MPI_Win_complete(g.win);
            MPI_Win_post(peer, 0, g.win);
            MPI_Win_wait(g.win);
        } else {
            MPI_Win_post(peer, 0, g.win);
            MPI_Win_wait(g.win);
            MPI_Win_start(peer, 0, g.win);
            op(0, other);
            MPI_Win_complete(g.win);
        }
    }
    us = (MPI_Wtime() - t_start) * 1e6 / (double)iters / 2.0;
    if (o->sync == FENCE) {
        MPI_Win_fence(MPI_MODE_NOSUCCEED, g.win);
    }
    return us;
}

/* Bandwidth (MB/s) at rank 0; 0 elsewhere. */
static double bandwidth(const struct options *o, long iters, long skip, MPI_Group peer)
{
    int me = g_rank, other = 1 - g_rank;
    int both = o->bench == PUT_BIBW, sends = me == 0 || both;
    double t_start = 0.0, t = 0.0;
    long i;

    if (!IS_ACTIVE(o->sync)) {
        t = me == 0 ? passive_loop(o->sync, WINDOW_SIZE, iters, skip) : 0.0;
    } else {
        for (i = 0; i < iters + skip; i++) {
            if (i == skip) {
                t_start = MPI_Wtime();
            }
            if (o->sync == FENCE) {
                MPI_Win_fence(0, g.win);
                if (sends) {
                    ops(WINDOW_SIZE, other);
                }
                MPI_Win_fence(0, g.win);
                continue;
            }
            if (!sends || both) {
                MPI_Win_post(peer, 0, g.win);
            }
            if (sends) {
                MPI_Win_start(peer, 0, g.win);
                ops(WINDOW_SIZE, other);
                MPI_Win_complete(g.win);
            }
            if (!sends || both) {
                MPI_Win_wait(g.win);
            }
        }
        t = MPI_Wtime() - t_start;
        if (o->sync == FENCE) {
            MPI_Win_fence(MPI_MODE_NOSUCCEED, g.win);
        }
    }
    return me == 0 ? g.size / 1e6 * WINDOW_SIZE * (double)iters * (both ? 2 : 1) / t : 0.0;
}

static void report(const struct options *o, long size, double value)
{
    const char *key = IS_BW(o->bench) ? "mb_s" : "avg_us";
    if (g_rank != 0) {
        return;
    }
    if (o->json) {
        printf("{\"bench\":\"%s\",\"device\":\"mpi\",\"np\":2,\"size\":%ld,\"%s\":%.*f,"
               "\"win\":\"%s\",\"sync\":\"%s\"}\n",
               bench_names[o->bench], size, key, IS_BW(o->bench) ? 2 : 3, value,
               win_names[o->win], sync_names[o->sync]);
    } else {
        printf("%-10ld%*.*f\n", size, FIELD_WIDTH, FLOAT_PRECISION, value);
    }
    fflush(stdout);
}

int main(int argc, char **argv)
{
    struct options o;
    int np;
    long size;
    MPI_Group world_group, peer;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    parse_args(argc, argv, &o);
    if (np != 2) {
        fatal("%s needs exactly 2 ranks", bench_names[o.bench]);
    }
    MPI_Comm_group(MPI_COMM_WORLD, &world_group);
    {
        int other = 1 - g_rank;
        MPI_Group_incl(world_group, 1, &other, &peer);
    }

    g.bench = o.bench;
    g.one = 1;
    g.zero = 0;
    {
        long span = IS_BW(o.bench) ? o.max_size * WINDOW_SIZE : o.max_size;
        g.sbuf = alloc_buffer(span, 'a');
        g.rbuf = alloc_buffer(span, 'b');
    }
    if (g_rank == 0 && !o.json) {
        printf("# OSU MPI %s v" OSU_VERSION "\n", titles[o.bench]);
        printf("# Window creation: MPI_Win_%s\n", win_names[o.win]);
        printf("# Synchronization: %s\n", sync_descriptions[o.sync]);
        printf("%-10s%*s\n", "# Size", FIELD_WIDTH, IS_BW(o.bench) ? "Bandwidth (MB/s)" : "Latency (us)");
        fflush(stdout);
    }

    for (size = o.min_size; size <= o.max_size; size = size ? size * 2 : 1) {
        int large = size > LARGE_MESSAGE_SIZE;
        long iters, skip;
        char *base;
        double value;

        if (o.iterations > 0) {
            iters = o.iterations;
            skip = o.iterations / 10 > 0 ? o.iterations / 10 : 1;
        } else if (IS_BW(o.bench)) {
            iters = large ? 20 : 100;
            skip = large ? 2 : 10;
        } else {
            iters = large ? 1000 : 10000;
            skip = large ? 10 : 100;
        }
        g.size = (int)size;
        base = window_create(&o, IS_BW(o.bench) ? size * WINDOW_SIZE : size);
        MPI_Barrier(MPI_COMM_WORLD);
        value = IS_BW(o.bench) ? bandwidth(&o, iters, skip, peer) : latency(&o, iters, skip, peer);
        MPI_Barrier(MPI_COMM_WORLD);
        report(&o, size, value);
        MPI_Win_free(&g.win);
        free(base);
        if (size > INT_MAX / 2) {
            break;
        }
    }

    MPI_Group_free(&peer);
    MPI_Group_free(&world_group);
    free(g.sbuf);
    free(g.rbuf);
    MPI_Finalize();
    return 0;
}
