/*
 * mpi_bench.c - OSU Micro-Benchmarks (v7.4) style point-to-point and
 * collective benchmarks, used as the MPI baseline for fastmp (see
 * bench/compare.sh and crates/fastmp-bench, which follow the same methods).
 *
 * Build:  mpicc -O2 -o target/mpi_bench bench/mpi_bench.c
 * Run:    mpirun -np 2 --bind-to core target/mpi_bench BENCH
 *                [--min-size B] [--max-size B] [--iterations N] [--json]
 *         BENCH: latency|bw|bibw|mbw_mr|strided, or a collective: barrier|bcast|
 *         scatter|scatterv|gather|gatherv|allgather|allgatherv|alltoall|
 *         alltoallv|reduce|allreduce|reduce_scatter|scan, or a nonblocking
 *         one: ibarrier|ibcast|iscatter|igather|iallgather|ialltoall|ireduce|
 *         iallreduce
 *
 * Methodology follows OSU 7.4 (osu_latency, osu_bw, osu_bibw, osu_mbw_mr):
 *   - sizes: min, then doubling up to max (0 -> 1 -> 2 -> 4 ...);
 *   - latency: blocking MPI_Send/MPI_Recv ping-pong, 10000 iters / 100 skip
 *     for size <= 8192, 1000 / 10 above; latency = t * 1e6 / (2 * iters);
 *   - strided (not OSU): the latency ping-pong on size / 8 doubles of column 0
 *     of a row-major R x R double matrix, R = max size / 8 (default 4096),
 *     sent and received as one MPI_Type_vector(size / 8, 1, R, MPI_DOUBLE);
 *   - bw: window of 64 MPI_Isend + MPI_Waitall, then a 4-byte ack; the
 *     receiver posts 64 MPI_Irecv + MPI_Waitall and sends the ack;
 *     100 iters / 10 skip for size <= 8192, 20 / 2 above;
 *     MB/s = size / 1e6 * 64 * iters / t;
 *   - bibw: both ranks post 64 MPI_Irecv then 64 MPI_Isend, MPI_Waitall;
 *     MB/s = size / 1e6 * 64 * 2 * iters / t;
 *   - mbw_mr: np/2 pairs (rank i < np/2 sends to i + np/2), window 64 like
 *     bw; barrier at the end of the warm-up; the senders' times are summed
 *     with MPI_Reduce and averaged (as OSU's calc_bw does), aggregate
 *     MB/s = pairs * size / 1e6 * 64 * iters / avg_t; msg/s = MB/s*1e6/size.
 *   - buffers are 64-byte aligned (posix_memalign) and touched before timing;
 *     MPI_Barrier before each size; rank 0 reports.
 *
 * Collectives follow the OSU 7.4 collective tests (osu_bcast, osu_allreduce...):
 *   - sizes: 1 B (4 B for reductions) doubling up to 1 MiB by default;
 *     reductions skip sizes that are not a whole number of floats; barrier
 *     has the single size 0;
 *   - per size: 1000 timed iterations after 100 warm-ups (100 / 10 above
 *     8192 B; --iterations N gives N / max(1, N/10) at every size); each call
 *     is timed alone with MPI_Wtime and followed by MPI_Barrier (osu_barrier
 *     times its whole loop of barriers instead);
 *   - every rank averages its own times; avg, min and max of those averages
 *     over the ranks (MPI_Reduce) are reported;
 *   - root 0; reductions use MPI_FLOAT / MPI_SUM on size/4 floats;
 *     reduce_scatter splits size/4 floats over the ranks, the remainder to
 *     the first ranks (as osu_reduce_scatter); the v variants use equal counts
 *     of `size` bytes per rank;
 *   - aggregated bandwidth (MB/s, MB = 10^6 B) = factor * size / avg latency,
 *     factor np^2 for allgather(v) and alltoall(v), np otherwise, none for
 *     barrier (the metric of the PGAS-collectives seed; see fastmp-bench).
 *
 * Nonblocking collectives follow OSU 7.4's osu_ibcast, osu_iallreduce, ...
 * (fastmp-bench's nbc.rs does the same); sizes, iterations and buffers as the
 * blocking ones (ibarrier: one size, OSU's 100 / 10 iterations). Per size:
 *   - the blocking twin, measured as above (JSON key blocking_us);
 *   - pure communication: MPI_I<coll> + MPI_Wait, each followed by
 *     MPI_Barrier (none for ibarrier), mean over the timed iterations;
 *   - overlap loop: MPI_I<coll>, busy compute for this rank's pure
 *     communication time (a wall-clock loop of floating-point steps that
 *     calls no MPI function: OSU's dummy_compute without probes), MPI_Wait,
 *     MPI_Barrier; Overall = mean of start..wait, Compute = mean compute part;
 *   - Overall, Compute and Pure Comm. are averaged over the ranks (MPI_Reduce
 *     sum / np) and Overlap(%) = max(0, 100 - (Overall - Compute) / Pure
 *     Comm. * 100).
 *
 * --json prints one object per size instead of the OSU table:
 *   {"bench":"latency","device":"mpi","np":2,"size":8,"avg_us":0.153}
 *   {"bench":"bw","device":"mpi","np":2,"size":8,"mb_s":123.45}
 *   {"bench":"mbw_mr","device":"mpi","np":2,"size":8,"mb_s":123.45,"msg_s":15430625.00}
 *   {"bench":"bcast","device":"mpi","np":4,"size":8,"avg_us":1.234,"min_us":1.1,
 *    "max_us":1.3,"mb_s":25.93}
 *   {"bench":"ibcast","device":"mpi","np":2,"size":8,"overall_us":2.5,
 *    "compute_us":1.2,"pure_comm_us":1.25,"overlap_pct":0.00,"blocking_us":1.1}
 *   (ibarrier's objects have no "size")
 */
#define _POSIX_C_SOURCE 200809L /* posix_memalign under -std=c99 */
#include <mpi.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define OSU_VERSION "7.4"
#define WINDOW_SIZE 64
#define LARGE_MESSAGE_SIZE 8192
#define LAT_ITERS 10000
#define LAT_SKIP 100
#define LAT_ITERS_LARGE 1000
#define LAT_SKIP_LARGE 10
#define BW_ITERS 100
#define BW_SKIP 10
#define BW_ITERS_LARGE 20
#define BW_SKIP_LARGE 2
#define DEFAULT_MAX_SIZE (4L * 1024 * 1024)
#define DEFAULT_MAX_SIZE_COLL (1L * 1024 * 1024)
#define DEFAULT_MAX_SIZE_STRIDED (4096L * 8) /* one column of a 4096 x 4096 double matrix */
#define COLL_ITERS 1000
#define COLL_SKIP 100
#define COLL_ITERS_LARGE 100
#define COLL_SKIP_LARGE 10
#define ROOT 0
#define ALIGNMENT 64
#define FIELD_WIDTH 20
#define FLOAT_PRECISION 2
#define TAG_DATA 100
#define TAG_ACK 101
#define TAG_BIBW 10
/* Floating-point steps between two clock reads of the compute loop. */
#define COMPUTE_STEPS 8

enum bench {
    B_LATENCY, B_BW, B_BIBW, B_MBW_MR, B_STRIDED,
    /* collectives, in fastmp's order; reductions last */
    B_BARRIER, B_BCAST, B_SCATTER, B_SCATTERV, B_GATHER, B_GATHERV, B_ALLGATHER,
    B_ALLGATHERV, B_ALLTOALL, B_ALLTOALLV, B_REDUCE, B_ALLREDUCE, B_REDUCE_SCATTER,
    B_SCAN,
    /* nonblocking collectives, in fastmp-bench's order */
    B_IBARRIER, B_IBCAST, B_ISCATTER, B_IGATHER, B_IALLGATHER, B_IALLTOALL, B_IREDUCE,
    B_IALLREDUCE, B_COUNT
};

static const char *bench_names[B_COUNT] = {
    "latency", "bw", "bibw", "mbw_mr", "strided", "barrier", "bcast", "scatter", "scatterv",
    "gather", "gatherv", "allgather", "allgatherv", "alltoall", "alltoallv",
    "reduce", "allreduce", "reduce_scatter", "scan", "ibarrier", "ibcast", "iscatter",
    "igather", "iallgather", "ialltoall", "ireduce", "iallreduce"};

/* OSU's test titles of the collectives, indexed by bench - B_BARRIER. */
static const char *coll_titles[B_IBARRIER - B_BARRIER] = {
    "Barrier Latency Test", "Broadcast Latency Test", "Scatter Latency Test",
    "Scatterv Latency Test", "Gather Latency Test", "Gatherv Latency Test",
    "Allgather Latency Test", "Allgatherv Latency Test",
    "All-to-All Personalized Exchange Latency Test",
    "All-to-Allv Personalized Exchange Latency Test", "Reduce Latency Test",
    "Allreduce Latency Test", "Reduce_scatter Latency Test", "Scan Latency Test"};

/* The blocking collective of a nonblocking benchmark (b itself otherwise). */
static const enum bench nbc_twins[B_COUNT - B_IBARRIER] = {
    B_BARRIER, B_BCAST, B_SCATTER, B_GATHER, B_ALLGATHER, B_ALLTOALL, B_REDUCE, B_ALLREDUCE};

static enum bench blocking_twin(enum bench b)
{
    return b >= B_IBARRIER ? nbc_twins[b - B_IBARRIER] : b;
}

#define IS_COLL(b) ((b) >= B_BARRIER)
#define IS_NBC(b) ((b) >= B_IBARRIER)
#define IS_REDUCTION(b) (IS_COLL(b) && blocking_twin(b) >= B_REDUCE)

struct options {
    enum bench bench;
    long min_size;
    long max_size;
    long iterations; /* 0: the OSU defaults */
    int json;
};

static int g_rank = 0;
/* --iterations for the point-to-point benchmarks (0: the OSU defaults), as fastmp-bench's. */
static long g_pt2pt_iterations = 0;

/* Timed iterations and warm-ups: --iterations N (`requested` > 0) gives N / max(1, N/10);
 * otherwise the benchmark's own (OSU's) `iters` / `skip`. */
static void iteration_counts(long requested, long iters, long skip, long *timed, long *warmup)
{
    if (requested > 0) {
        *timed = requested;
        *warmup = requested / 10 > 0 ? requested / 10 : 1;
    } else {
        *timed = iters;
        *warmup = skip;
    }
}

/* iteration_counts for a point-to-point benchmark (its loops count in int). */
static void pt2pt_counts(int iters, int skip, int *timed, int *warmup)
{
    long t, w;
    iteration_counts(g_pt2pt_iterations, iters, skip, &t, &w);
    *timed = (int)t;
    *warmup = (int)w;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mpi_bench BENCH [--min-size B] [--max-size B] [--iterations N] [--json]\n"
            "  latency        ping-pong latency, exactly 2 ranks (default sizes 0..4194304)\n"
            "  bw             unidirectional bandwidth, window 64, exactly 2 ranks (sizes 1..4194304)\n"
            "  bibw           bidirectional bandwidth, window 64, exactly 2 ranks\n"
            "  mbw_mr         multi-pair bandwidth / message rate, even number of ranks\n"
            "  strided        latency of a matrix column sent as MPI_Type_vector, exactly 2 ranks\n"
            "                 (sizes 8..32768: size / 8 doubles at stride max-size / 8)\n"
            "  barrier|bcast|scatter|scatterv|gather|gatherv|allgather|allgatherv|\n"
            "  alltoall|alltoallv|reduce|allreduce|reduce_scatter|scan\n"
            "                 collective latency (avg/min/max over ranks), any number of ranks\n"
            "                 (default sizes 1..1048576; 4..1048576 for the reductions)\n"
            "  ibarrier|ibcast|iscatter|igather|iallgather|ialltoall|ireduce|iallreduce\n"
            "                 nonblocking collective: overall, compute, pure communication\n"
            "                 and overlap (OSU method), any number of ranks\n"
            "  --min-size B   smallest message size in bytes\n"
            "  --max-size B   largest message size in bytes (default 4194304 point-to-point)\n"
            "  --iterations N timed iterations per size (default OSU's: collectives 1000 / 100,\n"
            "                 ibarrier 100; latency 10000 / 1000; bandwidth 100 / 20 windows)\n"
            "  --json         one JSON object per size instead of the OSU table\n");
}

/* Report a fatal error once (rank 0) and abort the whole job. Every rank
 * parses the same arguments, so for argument errors the other ranks just
 * wait in a barrier until rank 0's MPI_Abort tears the job down. */
static void fatal_usage(int all_ranks_agree, int show_usage, const char *fmt, const char *arg)
{
    if (g_rank == 0 || !all_ranks_agree) {
        fprintf(stderr, "mpi_bench: ");
        fprintf(stderr, fmt, arg);
        fprintf(stderr, "\n");
        if (show_usage) {
            usage(stderr);
        }
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Abort(MPI_COMM_WORLD, 1); /* not reached in practice */
    exit(1);
}

static void fatal(int all_ranks_agree, const char *fmt, const char *arg)
{
    fatal_usage(all_ranks_agree, 0, fmt, arg);
}

static long parse_size(const char *opt, const char *s)
{
    char *end = NULL;
    long v;

    if (s == NULL) {
        fatal(1, "%s needs a value (bytes)", opt);
    }
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < 0 || v > INT_MAX) {
        fatal(1, "invalid size '%s' (want an integer 0..2147483647)", s);
    }
    return v;
}

static long parse_iterations(const char *s)
{
    long v = parse_size("--iterations", s);
    if (v < 1) {
        fatal(1, "%s", "--iterations must be at least 1");
    }
    return v;
}

static void parse_args(int argc, char **argv, struct options *o)
{
    int i, have_min = 0, have_max = 0, have_bench = 0;

    o->min_size = 0;
    o->max_size = DEFAULT_MAX_SIZE;
    o->iterations = 0;
    o->json = 0;
    o->bench = B_LATENCY;

    for (i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) {
            o->json = 1;
        } else if (strcmp(a, "--min-size") == 0) {
            o->min_size = parse_size(a, i + 1 < argc ? argv[++i] : NULL);
            have_min = 1;
        } else if (strncmp(a, "--min-size=", 11) == 0) {
            o->min_size = parse_size("--min-size", a + 11);
            have_min = 1;
        } else if (strcmp(a, "--max-size") == 0) {
            o->max_size = parse_size(a, i + 1 < argc ? argv[++i] : NULL);
            have_max = 1;
        } else if (strncmp(a, "--max-size=", 11) == 0) {
            o->max_size = parse_size("--max-size", a + 11);
            have_max = 1;
        } else if (strcmp(a, "--iterations") == 0) {
            o->iterations = parse_iterations(i + 1 < argc ? argv[++i] : NULL);
        } else if (strncmp(a, "--iterations=", 13) == 0) {
            o->iterations = parse_iterations(a + 13);
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            if (g_rank == 0) {
                usage(stdout);
            }
            MPI_Finalize();
            exit(0);
        } else if (a[0] != '-' && !have_bench) {
            int b, found = 0;
            for (b = 0; b < B_COUNT; b++) {
                if (strcmp(a, bench_names[b]) == 0) {
                    o->bench = (enum bench)b;
                    found = 1;
                }
            }
            if (!found) {
                fatal_usage(1, 1, "unknown benchmark '%s'", a);
            }
            have_bench = 1;
        } else {
            fatal_usage(1, 1, "unexpected argument '%s'", a);
        }
    }
    if (!have_bench) {
        fatal_usage(1, 1, "%s", "missing benchmark name");
    }
    if (o->bench == B_STRIDED) {
        o->min_size = have_min ? o->min_size : (long)sizeof(double);
        o->max_size = have_max ? o->max_size : DEFAULT_MAX_SIZE_STRIDED;
        if (o->min_size < (long)sizeof(double) || o->min_size % (long)sizeof(double) != 0 ||
            o->max_size % (long)sizeof(double) != 0) {
            fatal(1, "%s", "strided sizes must be positive multiples of 8 (whole doubles)");
        }
    } else if (!have_min && o->bench != B_LATENCY) {
        /* OSU bandwidth and collective tests start at 1 byte, reductions at one float */
        o->min_size = IS_REDUCTION(o->bench) ? (long)sizeof(float) : 1;
    }
    if (!have_max && IS_COLL(o->bench)) {
        o->max_size = DEFAULT_MAX_SIZE_COLL;
    }
    if (o->min_size > o->max_size) {
        fatal(1, "%s", "--min-size is larger than --max-size");
    }
}

static char *alloc_buffer(long size)
{
    void *p = NULL;
    size_t n = (size_t)(size > 0 ? size : 1);
    int rc = posix_memalign(&p, ALIGNMENT, n);
    if (rc != 0 || p == NULL) {
        fatal(0, "posix_memalign failed: %s", strerror(rc));
    }
    return (char *)p;
}

/* Power of np in the aggregated-bandwidth factor; 0: no bandwidth (barrier). */
static int bandwidth_power(enum bench b)
{
    switch (b) {
    case B_BARRIER:
        return 0;
    case B_ALLGATHER:
    case B_ALLGATHERV:
    case B_ALLTOALL:
    case B_ALLTOALLV:
        return 2;
    default:
        return 1;
    }
}

static void print_coll_header(const struct options *o, int np)
{
    int power = bandwidth_power(o->bench);

    printf("# OSU MPI %s v" OSU_VERSION " (np %d)\n", coll_titles[o->bench - B_BARRIER], np);
    printf("# Datatype: %s; root %d\n", IS_REDUCTION(o->bench) ? "MPI_FLOAT, op MPI_SUM" : "MPI_CHAR",
           ROOT);
    if (power > 0) {
        printf("# Bandwidth: aggregated, %s x size / avg latency (MB = 10^6 B)\n",
               power == 2 ? "np^2" : "np");
    }
    printf("%-10s%*s%*s%*s", "# Size", FIELD_WIDTH, "Avg Latency(us)", FIELD_WIDTH,
           "Min Latency(us)", FIELD_WIDTH, "Max Latency(us)");
    if (power > 0) {
        printf("%*s", FIELD_WIDTH, "Bandwidth (MB/s)");
    }
    printf("\n");
    fflush(stdout);
}

/* The nonblocking table: OSU's four columns; ibarrier has no size column. */
static void print_nbc_header(const struct options *o, int np)
{
    enum bench twin = blocking_twin(o->bench);
    char columns[4 * FIELD_WIDTH + 1];

    printf("# OSU MPI Non-blocking %s v" OSU_VERSION " (np %d)\n", coll_titles[twin - B_BARRIER],
           np);
    printf("# Datatype: %s; root %d\n", IS_REDUCTION(o->bench) ? "MPI_FLOAT, op MPI_SUM" : "MPI_CHAR",
           ROOT);
    printf("# Overall = start + compute + wait; Compute = busy loop as long as Pure Comm., no "
           "probes\n");
    printf("# Overlap = max(0, 100 - (Overall - Compute) / Pure Comm. x 100); JSON adds "
           "blocking_us\n");
    snprintf(columns, sizeof columns, "%*s%*s%*s%*s", FIELD_WIDTH, "Overall(us)", FIELD_WIDTH,
             "Compute(us)", FIELD_WIDTH, "Pure Comm.(us)", FIELD_WIDTH, "Overlap(%)");
    if (twin == B_BARRIER) {
        columns[0] = '#'; /* no size column: the padded first name starts the comment */
        printf("%s\n", columns);
    } else {
        printf("%-10s%s\n", "# Size", columns);
    }
    fflush(stdout);
}

static void print_header(const struct options *o, int np)
{
    if (g_rank != 0 || o->json) {
        return;
    }
    if (IS_NBC(o->bench)) {
        print_nbc_header(o, np);
        return;
    }
    if (IS_COLL(o->bench)) {
        print_coll_header(o, np);
        return;
    }
    switch (o->bench) {
    case B_LATENCY:
        printf("# OSU MPI Latency Test v" OSU_VERSION "\n");
        printf("%-10s%*s\n", "# Size", FIELD_WIDTH, "Latency (us)");
        break;
    case B_BW:
        printf("# OSU MPI Bandwidth Test v" OSU_VERSION "\n");
        printf("%-10s%*s\n", "# Size", FIELD_WIDTH, "Bandwidth (MB/s)");
        break;
    case B_BIBW:
        printf("# OSU MPI Bi-Directional Bandwidth Test v" OSU_VERSION "\n");
        printf("%-10s%*s\n", "# Size", FIELD_WIDTH, "Bandwidth (MB/s)");
        break;
    case B_STRIDED:
        printf("# Strided Latency Test (column of a row-major double matrix, MPI_Type_vector)\n");
        printf("%-10s%*s\n", "# Size", FIELD_WIDTH, "Latency (us)");
        break;
    case B_MBW_MR:
        printf("# OSU MPI Multiple Bandwidth / Message Rate Test v" OSU_VERSION "\n");
        printf("# [ pairs: %d ] [ window size: %d ]\n", np / 2, WINDOW_SIZE);
        printf("%-10s%*s%*s\n", "# Size", FIELD_WIDTH, "MB/s", FIELD_WIDTH, "Messages/s");
        break;
    default:
        break;
    }
    fflush(stdout);
}

static void report(const struct options *o, int np, long size, double value, double rate)
{
    if (g_rank != 0) {
        return;
    }
    if (o->json) {
        if (o->bench == B_LATENCY || o->bench == B_STRIDED) {
            printf("{\"bench\":\"%s\",\"device\":\"mpi\",\"np\":%d,\"size\":%ld,\"avg_us\":%.3f}\n",
                   bench_names[o->bench], np, size, value);
        } else if (o->bench == B_MBW_MR) {
            printf("{\"bench\":\"%s\",\"device\":\"mpi\",\"np\":%d,\"size\":%ld,\"mb_s\":%.2f,"
                   "\"msg_s\":%.2f}\n",
                   bench_names[o->bench], np, size, value, rate);
        } else {
            printf("{\"bench\":\"%s\",\"device\":\"mpi\",\"np\":%d,\"size\":%ld,\"mb_s\":%.2f}\n",
                   bench_names[o->bench], np, size, value);
        }
    } else if (o->bench == B_MBW_MR) {
        printf("%-10ld%*.*f%*.*f\n", size, FIELD_WIDTH, FLOAT_PRECISION, value, FIELD_WIDTH,
               FLOAT_PRECISION, rate);
    } else {
        printf("%-10ld%*.*f\n", size, FIELD_WIDTH, FLOAT_PRECISION, value);
    }
    fflush(stdout);
}

struct coll_stats {
    double avg, min, max; /* us, over the ranks' own averages */
};

static void report_coll(const struct options *o, int np, long size, const struct coll_stats *st)
{
    int power = bandwidth_power(o->bench);
    double factor = power == 2 ? (double)np * np : (double)np;
    double mb_s = st->avg > 0.0 ? factor * size / st->avg : 0.0;

    if (g_rank != 0) {
        return;
    }
    if (o->json) {
        printf("{\"bench\":\"%s\",\"device\":\"mpi\",\"np\":%d,\"size\":%ld,\"avg_us\":%.3f,"
               "\"min_us\":%.3f,\"max_us\":%.3f",
               bench_names[o->bench], np, size, st->avg, st->min, st->max);
        if (power > 0) {
            printf(",\"mb_s\":%.2f", mb_s);
        }
        printf("}\n");
    } else {
        printf("%-10ld%*.*f%*.*f%*.*f", size, FIELD_WIDTH, FLOAT_PRECISION, st->avg, FIELD_WIDTH,
               FLOAT_PRECISION, st->min, FIELD_WIDTH, FLOAT_PRECISION, st->max);
        if (power > 0) {
            printf("%*.*f", FIELD_WIDTH, FLOAT_PRECISION, mb_s);
        }
        printf("\n");
    }
    fflush(stdout);
}

/* ---- osu_latency ------------------------------------------------------ */
static double run_latency(char *s_buf, char *r_buf, int size)
{
    int iters, skip;
    pt2pt_counts(size > LARGE_MESSAGE_SIZE ? LAT_ITERS_LARGE : LAT_ITERS,
                 size > LARGE_MESSAGE_SIZE ? LAT_SKIP_LARGE : LAT_SKIP, &iters, &skip);
    double t_start = 0.0, t_end;
    int i;

    MPI_Barrier(MPI_COMM_WORLD);
    for (i = 0; i < iters + skip; i++) {
        if (i == skip) {
            t_start = MPI_Wtime();
        }
        if (g_rank == 0) {
            MPI_Send(s_buf, size, MPI_CHAR, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(r_buf, size, MPI_CHAR, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(r_buf, size, MPI_CHAR, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(s_buf, size, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
        }
    }
    t_end = MPI_Wtime();
    return (t_end - t_start) * 1e6 / (2.0 * iters);
}

/* ---- strided: latency of a matrix column -------------------------------- */
/* The ping-pong of run_latency on the first size / 8 doubles of column 0 of
 * the rows x rows row-major `matrix`, both sides using one MPI_Type_vector. */
static double run_strided(double *matrix, long rows, int size)
{
    int iters, skip;
    pt2pt_counts(size > LARGE_MESSAGE_SIZE ? LAT_ITERS_LARGE : LAT_ITERS,
                 size > LARGE_MESSAGE_SIZE ? LAT_SKIP_LARGE : LAT_SKIP, &iters, &skip);
    double t_start = 0.0, t_end;
    MPI_Datatype column;
    int i;

    MPI_Type_vector(size / (int)sizeof(double), 1, (int)rows, MPI_DOUBLE, &column);
    MPI_Type_commit(&column);
    MPI_Barrier(MPI_COMM_WORLD);
    for (i = 0; i < iters + skip; i++) {
        if (i == skip) {
            t_start = MPI_Wtime();
        }
        if (g_rank == 0) {
            MPI_Send(matrix, 1, column, 1, 1, MPI_COMM_WORLD);
            MPI_Recv(matrix, 1, column, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(matrix, 1, column, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(matrix, 1, column, 0, 1, MPI_COMM_WORLD);
        }
    }
    t_end = MPI_Wtime();
    MPI_Type_free(&column);
    return (t_end - t_start) * 1e6 / (2.0 * iters);
}

/* ---- osu_bw / osu_mbw_mr inner loop ----------------------------------- */
/* Sender/receiver loop of osu_bw (and of osu_mbw_mr's calc_bw). Returns the
 * elapsed time of the timed iterations on this rank (0 for idle ranks). */
static double bw_loop(char *s_buf, char *r_buf, int size, int peer, int is_sender,
                      int barrier_at_skip, MPI_Request *req, int iters, int skip)
{
    double t_start = 0.0, t_end;
    int i, j;

    for (i = 0; i < iters + skip; i++) {
        if (i == skip) {
            if (barrier_at_skip) {
                MPI_Barrier(MPI_COMM_WORLD);
            }
            t_start = MPI_Wtime();
        }
        if (peer < 0) {
            continue; /* idle rank (odd np is rejected; kept for safety) */
        }
        if (is_sender) {
            for (j = 0; j < WINDOW_SIZE; j++) {
                MPI_Isend(s_buf, size, MPI_CHAR, peer, TAG_DATA, MPI_COMM_WORLD, &req[j]);
            }
            MPI_Waitall(WINDOW_SIZE, req, MPI_STATUSES_IGNORE);
            MPI_Recv(r_buf, 4, MPI_CHAR, peer, TAG_ACK, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            for (j = 0; j < WINDOW_SIZE; j++) {
                MPI_Irecv(r_buf, size, MPI_CHAR, peer, TAG_DATA, MPI_COMM_WORLD, &req[j]);
            }
            MPI_Waitall(WINDOW_SIZE, req, MPI_STATUSES_IGNORE);
            MPI_Send(s_buf, 4, MPI_CHAR, peer, TAG_ACK, MPI_COMM_WORLD);
        }
    }
    t_end = MPI_Wtime();
    return t_end - t_start;
}

static double run_bw(char *s_buf, char *r_buf, int size, MPI_Request *req)
{
    int large = size > LARGE_MESSAGE_SIZE;
    int iters, skip;
    pt2pt_counts(large ? BW_ITERS_LARGE : BW_ITERS, large ? BW_SKIP_LARGE : BW_SKIP, &iters, &skip);
    double t;

    MPI_Barrier(MPI_COMM_WORLD);
    t = bw_loop(s_buf, r_buf, size, g_rank == 0 ? 1 : 0, g_rank == 0, 0, req, iters, skip);
    return size / 1e6 * iters * WINDOW_SIZE / t;
}

/* ---- osu_bibw --------------------------------------------------------- */
static double run_bibw(char *s_buf, char *r_buf, int size, MPI_Request *req)
{
    int large = size > LARGE_MESSAGE_SIZE;
    int iters, skip;
    pt2pt_counts(large ? BW_ITERS_LARGE : BW_ITERS, large ? BW_SKIP_LARGE : BW_SKIP, &iters, &skip);
    int peer = g_rank == 0 ? 1 : 0;
    int recv_tag = g_rank == 0 ? TAG_BIBW : TAG_DATA;
    int send_tag = g_rank == 0 ? TAG_DATA : TAG_BIBW;
    double t_start = 0.0, t_end;
    int i, j;

    MPI_Barrier(MPI_COMM_WORLD);
    for (i = 0; i < iters + skip; i++) {
        if (i == skip) {
            t_start = MPI_Wtime();
        }
        for (j = 0; j < WINDOW_SIZE; j++) {
            MPI_Irecv(r_buf, size, MPI_CHAR, peer, recv_tag, MPI_COMM_WORLD, &req[j]);
        }
        for (j = 0; j < WINDOW_SIZE; j++) {
            MPI_Isend(s_buf, size, MPI_CHAR, peer, send_tag, MPI_COMM_WORLD,
                      &req[WINDOW_SIZE + j]);
        }
        MPI_Waitall(2 * WINDOW_SIZE, req, MPI_STATUSES_IGNORE);
    }
    t_end = MPI_Wtime();
    return size / 1e6 * iters * WINDOW_SIZE * 2 / (t_end - t_start);
}

/* ---- osu_mbw_mr ------------------------------------------------------- */
static double run_mbw_mr(char *s_buf, char *r_buf, int size, MPI_Request *req, int np)
{
    int pairs = np / 2;
    int large = size > LARGE_MESSAGE_SIZE;
    int iters, skip;
    pt2pt_counts(large ? BW_ITERS_LARGE : BW_ITERS, large ? BW_SKIP_LARGE : BW_SKIP, &iters, &skip);
    int is_sender = g_rank < pairs;
    int peer;
    double t, sum_time = 0.0;

    if (g_rank < pairs) {
        peer = g_rank + pairs;
    } else if (g_rank < 2 * pairs) {
        peer = g_rank - pairs;
    } else {
        peer = -1;
    }

    MPI_Barrier(MPI_COMM_WORLD);
    t = bw_loop(s_buf, r_buf, size, peer, is_sender, 1, req, iters, skip);
    /* As OSU: only the senders' times count; average them over the pairs. */
    if (!is_sender) {
        t = 0.0;
    }
    MPI_Reduce(&t, &sum_time, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (g_rank != 0) {
        return 0.0;
    }
    sum_time /= pairs;
    return size / 1e6 * pairs * iters * WINDOW_SIZE / sum_time;
}

/* ---- collectives (osu_bcast, osu_allreduce, ...) ------------------------ */
/* Counts and displacements for `size` bytes: `size` bytes per rank for the v
 * variants; for reduce_scatter size/4 floats split over the ranks with the
 * remainder going to the first ones (as osu_reduce_scatter). */
static void set_counts(enum bench b, int np, long size, int *counts, int *displs)
{
    int reduction = IS_REDUCTION(b);
    long elems = reduction ? size / (long)sizeof(float) : size;
    long base = reduction ? elems / np : elems;
    long extra = reduction ? elems % np : 0;
    long offset = 0;
    int i;

    for (i = 0; i < np; i++) {
        counts[i] = (int)(base + (i < extra ? 1 : 0));
        displs[i] = (int)offset;
        offset += counts[i];
    }
}

/* One call of the collective at `size` bytes. */
static void coll_call(enum bench b, int size, int np, char *s, char *r, const int *counts,
                      const int *displs)
{
    MPI_Comm w = MPI_COMM_WORLD;
    int n = size / (int)sizeof(float);

    switch (b) {
    case B_BARRIER:
        MPI_Barrier(w);
        break;
    case B_BCAST:
        MPI_Bcast(r, size, MPI_CHAR, ROOT, w);
        break;
    case B_SCATTER:
        MPI_Scatter(s, size, MPI_CHAR, r, size, MPI_CHAR, ROOT, w);
        break;
    case B_SCATTERV:
        MPI_Scatterv(s, counts, displs, MPI_CHAR, r, size, MPI_CHAR, ROOT, w);
        break;
    case B_GATHER:
        MPI_Gather(s, size, MPI_CHAR, r, size, MPI_CHAR, ROOT, w);
        break;
    case B_GATHERV:
        MPI_Gatherv(s, size, MPI_CHAR, r, counts, displs, MPI_CHAR, ROOT, w);
        break;
    case B_ALLGATHER:
        MPI_Allgather(s, size, MPI_CHAR, r, size, MPI_CHAR, w);
        break;
    case B_ALLGATHERV:
        MPI_Allgatherv(s, size, MPI_CHAR, r, counts, displs, MPI_CHAR, w);
        break;
    case B_ALLTOALL:
        MPI_Alltoall(s, size, MPI_CHAR, r, size, MPI_CHAR, w);
        break;
    case B_ALLTOALLV:
        MPI_Alltoallv(s, counts, displs, MPI_CHAR, r, counts, displs, MPI_CHAR, w);
        break;
    case B_REDUCE:
        MPI_Reduce(s, r, n, MPI_FLOAT, MPI_SUM, ROOT, w);
        break;
    case B_ALLREDUCE:
        MPI_Allreduce(s, r, n, MPI_FLOAT, MPI_SUM, w);
        break;
    case B_REDUCE_SCATTER:
        MPI_Reduce_scatter(s, r, counts, MPI_FLOAT, MPI_SUM, w);
        break;
    case B_SCAN:
        MPI_Scan(s, r, n, MPI_FLOAT, MPI_SUM, w);
        break;
    default:
        break;
    }
    (void)np;
}

/* iteration_counts for a collective: OSU's counts for small or `large` messages. */
static void coll_iterations(const struct options *o, int large, long *iters, long *skip)
{
    iteration_counts(o->iterations, large ? COLL_ITERS_LARGE : COLL_ITERS, large ? COLL_SKIP_LARGE : COLL_SKIP,
                     iters, skip);
}

/* Blocking collective `b` at `size`: avg/min/max over the ranks' mean latencies. */
static void run_coll(enum bench b, long iters, long skip, int np, int size, char *s, char *r,
                     int *counts, int *displs, struct coll_stats *st)
{
    double timer = 0.0, t_start = 0.0, t_stop, latency, sum = 0.0;
    long i;

    set_counts(b, np, size, counts, displs);
    MPI_Barrier(MPI_COMM_WORLD);
    if (b == B_BARRIER) {
        /* osu_barrier: the whole loop of back-to-back barriers is timed */
        for (i = 0; i < iters + skip; i++) {
            if (i == skip) {
                t_start = MPI_Wtime();
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
        timer = MPI_Wtime() - t_start;
    } else {
        for (i = 0; i < iters + skip; i++) {
            t_start = MPI_Wtime();
            coll_call(b, size, np, s, r, counts, displs);
            t_stop = MPI_Wtime();
            if (i >= skip) {
                timer += t_stop - t_start;
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    latency = timer * 1e6 / (double)iters;
    MPI_Reduce(&latency, &st->min, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
    MPI_Reduce(&latency, &st->max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&latency, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    st->avg = sum / np;
}

/* ---- nonblocking collectives (osu_ibcast, osu_iallreduce, ...) ---------- */
static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Busy-computes until `target` seconds of wall-clock time have passed and
 * returns the seconds spent; calls no MPI function, so MPI makes no progress
 * on this rank meanwhile (OSU's dummy_compute without MPI_Test probes). */
static double compute_for(double target)
{
    double start = now_seconds();
    volatile double x = 1.0; /* one memory round trip per step, as fastmp-bench's black_box */
    int k;

    while (now_seconds() - start < target) {
        for (k = 0; k < COMPUTE_STEPS; k++) {
            x = x * 1.0000001 + 1e-9;
        }
    }
    return now_seconds() - start;
}

/* Starts nonblocking collective `b` at `size` bytes. */
static void nbc_start(enum bench b, int size, char *s, char *r, MPI_Request *req)
{
    MPI_Comm w = MPI_COMM_WORLD;
    int n = size / (int)sizeof(float);

    switch (b) {
    case B_IBARRIER:
        MPI_Ibarrier(w, req);
        break;
    case B_IBCAST:
        MPI_Ibcast(r, size, MPI_CHAR, ROOT, w, req);
        break;
    case B_ISCATTER:
        MPI_Iscatter(s, size, MPI_CHAR, r, size, MPI_CHAR, ROOT, w, req);
        break;
    case B_IGATHER:
        MPI_Igather(s, size, MPI_CHAR, r, size, MPI_CHAR, ROOT, w, req);
        break;
    case B_IALLGATHER:
        MPI_Iallgather(s, size, MPI_CHAR, r, size, MPI_CHAR, w, req);
        break;
    case B_IALLTOALL:
        MPI_Ialltoall(s, size, MPI_CHAR, r, size, MPI_CHAR, w, req);
        break;
    case B_IREDUCE:
        MPI_Ireduce(s, r, n, MPI_FLOAT, MPI_SUM, ROOT, w, req);
        break;
    case B_IALLREDUCE:
        MPI_Iallreduce(s, r, n, MPI_FLOAT, MPI_SUM, w, req);
        break;
    default:
        *req = MPI_REQUEST_NULL;
        break;
    }
}

struct nbc_stats {
    double overall, compute, pure_comm, overlap; /* us and %, averaged over the ranks */
    double blocking;                             /* us, the blocking twin's avg latency */
};

static void run_nbc(const struct options *o, int np, int size, char *s, char *r, int *counts,
                    int *displs, struct nbc_stats *st)
{
    enum bench twin = blocking_twin(o->bench);
    long iters, skip, i;
    double t_start, t_compute, pure = 0.0, overall = 0.0, compute = 0.0;
    double mine[3], sums[3] = {0.0, 0.0, 0.0};
    struct coll_stats blocking;
    MPI_Request req;

    /* osu_ibarrier runs the large-message counts; so does its blocking twin here */
    coll_iterations(o, size > LARGE_MESSAGE_SIZE || twin == B_BARRIER, &iters, &skip);
    run_coll(twin, iters, skip, np, size, s, r, counts, displs, &blocking);
    st->blocking = blocking.avg;

    /* pure communication (osu_ibarrier has no barrier between its calls here) */
    MPI_Barrier(MPI_COMM_WORLD);
    for (i = 0; i < iters + skip; i++) {
        t_start = MPI_Wtime();
        nbc_start(o->bench, size, s, r, &req);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        if (i >= skip) {
            pure += MPI_Wtime() - t_start;
        }
        if (twin != B_BARRIER) {
            MPI_Barrier(MPI_COMM_WORLD);
        }
    }
    pure /= (double)iters;
    /* the same with compute as long as this rank's pure communication */
    MPI_Barrier(MPI_COMM_WORLD);
    for (i = 0; i < iters + skip; i++) {
        t_start = MPI_Wtime();
        nbc_start(o->bench, size, s, r, &req);
        t_compute = compute_for(pure);
        MPI_Wait(&req, MPI_STATUS_IGNORE);
        if (i >= skip) {
            overall += MPI_Wtime() - t_start;
            compute += t_compute;
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    mine[0] = overall * 1e6 / (double)iters;
    mine[1] = compute * 1e6 / (double)iters;
    mine[2] = pure * 1e6;
    MPI_Reduce(mine, sums, 3, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    st->overall = sums[0] / np;
    st->compute = sums[1] / np;
    st->pure_comm = sums[2] / np;
    st->overlap = 0.0;
    if (st->pure_comm > 0.0) {
        st->overlap = 100.0 - (st->overall - st->compute) / st->pure_comm * 100.0;
        if (st->overlap < 0.0) {
            st->overlap = 0.0;
        }
    }
}

static void report_nbc(const struct options *o, int np, long size, const struct nbc_stats *st)
{
    int sized = blocking_twin(o->bench) != B_BARRIER;

    if (g_rank != 0) {
        return;
    }
    if (o->json) {
        printf("{\"bench\":\"%s\",\"device\":\"mpi\",\"np\":%d", bench_names[o->bench], np);
        if (sized) {
            printf(",\"size\":%ld", size);
        }
        printf(",\"overall_us\":%.3f,\"compute_us\":%.3f,\"pure_comm_us\":%.3f,"
               "\"overlap_pct\":%.2f,\"blocking_us\":%.3f}\n",
               st->overall, st->compute, st->pure_comm, st->overlap, st->blocking);
    } else {
        if (sized) {
            printf("%-10ld", size);
        }
        printf("%*.*f%*.*f%*.*f%*.*f\n", FIELD_WIDTH, FLOAT_PRECISION, st->overall, FIELD_WIDTH,
               FLOAT_PRECISION, st->compute, FIELD_WIDTH, FLOAT_PRECISION, st->pure_comm,
               FIELD_WIDTH, FLOAT_PRECISION, st->overlap);
    }
    fflush(stdout);
}

/* The whole collective benchmark: buffers of np * max bytes, then each size. */
static int run_collective_bench(const struct options *o, int np)
{
    long len = (o->max_size + (long)sizeof(float)) * np; /* room for whole floats */
    char *s_buf, *r_buf;
    int *counts, *displs;
    long size;
    int one_size = blocking_twin(o->bench) == B_BARRIER;
    struct coll_stats st;
    struct nbc_stats nst;

    if (len > INT_MAX) {
        fatal(1, "%s", "np * --max-size exceeds an MPI count (2147483647)");
    }
    s_buf = alloc_buffer(len);
    r_buf = alloc_buffer(len);
    counts = (int *)malloc(sizeof(int) * (size_t)np);
    displs = (int *)malloc(sizeof(int) * (size_t)np);
    if (counts == NULL || displs == NULL) {
        fatal(0, "%s", "out of memory");
    }
    /* Touch the buffers before anything is timed; OSU fills floats with 1.0. */
    if (IS_REDUCTION(o->bench)) {
        long i;
        for (i = 0; i < len / (long)sizeof(float); i++) {
            ((float *)s_buf)[i] = 1.0f;
        }
    } else {
        memset(s_buf, 'a', (size_t)len);
    }
    memset(r_buf, 'b', (size_t)len);

    print_header(o, np);
    for (size = one_size ? 0 : o->min_size; size <= o->max_size; size = (size ? size * 2 : 1)) {
        if (IS_REDUCTION(o->bench) && size % (long)sizeof(float) != 0) {
            /* not a whole number of floats */
        } else if (IS_NBC(o->bench)) {
            run_nbc(o, np, (int)size, s_buf, r_buf, counts, displs, &nst);
            report_nbc(o, np, size, &nst);
        } else {
            long iters, skip;
            coll_iterations(o, size > LARGE_MESSAGE_SIZE, &iters, &skip);
            run_coll(o->bench, iters, skip, np, (int)size, s_buf, r_buf, counts, displs, &st);
            report_coll(o, np, size, &st);
        }
        if (one_size || size > INT_MAX / 2) {
            break; /* barrier has one size; or the next doubling would overflow */
        }
    }
    free(s_buf);
    free(r_buf);
    free(counts);
    free(displs);
    return 0;
}

int main(int argc, char **argv)
{
    struct options o;
    int np;
    long size;
    char *s_buf, *r_buf;
    MPI_Request req[2 * WINDOW_SIZE];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);

    parse_args(argc, argv, &o);
    g_pt2pt_iterations = IS_COLL(o.bench) ? 0 : o.iterations;

    if (IS_COLL(o.bench)) {
        int rc = run_collective_bench(&o, np);
        MPI_Finalize();
        return rc;
    }
    if (o.bench == B_MBW_MR) {
        if (np < 2 || np % 2 != 0) {
            fatal(1, "%s needs an even number of ranks (>= 2)", bench_names[o.bench]);
        }
    } else if (np != 2) {
        fatal(1, "%s needs exactly 2 ranks", bench_names[o.bench]);
    }

    if (o.bench == B_STRIDED) {
        long rows = o.max_size / (long)sizeof(double);
        double *matrix = (double *)alloc_buffer(rows * rows * (long)sizeof(double));
        long k;
        for (k = 0; k < rows * rows; k++) {
            matrix[k] = (double)k; /* touches every page before anything is timed */
        }
        print_header(&o, np);
        for (size = o.min_size; size <= o.max_size; size *= 2) {
            report(&o, np, size, run_strided(matrix, rows, (int)size), 0.0);
        }
        free(matrix);
        MPI_Finalize();
        return 0;
    }

    s_buf = alloc_buffer(o.max_size);
    r_buf = alloc_buffer(o.max_size);
    /* Touch the buffers (fault the pages in) before anything is timed. */
    memset(s_buf, 'a', (size_t)(o.max_size > 0 ? o.max_size : 1));
    memset(r_buf, 'b', (size_t)(o.max_size > 0 ? o.max_size : 1));

    print_header(&o, np);

    for (size = o.min_size; size <= o.max_size; size = (size ? size * 2 : 1)) {
        double value = 0.0, rate = 0.0;
        int isize = (int)size;

        MPI_Barrier(MPI_COMM_WORLD);
        switch (o.bench) {
        case B_LATENCY:
            value = run_latency(s_buf, r_buf, isize);
            break;
        case B_BW:
            value = run_bw(s_buf, r_buf, isize, req);
            break;
        case B_BIBW:
            value = run_bibw(s_buf, r_buf, isize, req);
            break;
        case B_MBW_MR:
            value = run_mbw_mr(s_buf, r_buf, isize, req, np);
            rate = size > 0 ? value * 1e6 / size : 0.0;
            break;
        default:
            break;
        }
        report(&o, np, size, value, rate);
        if (size > INT_MAX / 2) {
            break; /* next doubling would overflow an MPI count */
        }
    }

    free(s_buf);
    free(r_buf);
    MPI_Finalize();
    return 0;
}
