/*
 * mpi_bench.c - OSU Micro-Benchmarks (v7.4) style point-to-point benchmarks,
 * used as the MPI baseline for fastmp (see bench/compare.sh).
 *
 * Build:  mpicc -O2 -o target/mpi_bench bench/mpi_bench.c
 * Run:    mpirun -np 2 --bind-to core target/mpi_bench latency|bw|bibw|mbw_mr
 *                [--min-size B] [--max-size B] [--json]
 *
 * Methodology follows OSU 7.4 (osu_latency, osu_bw, osu_bibw, osu_mbw_mr):
 *   - sizes: min, then doubling up to max (0 -> 1 -> 2 -> 4 ...);
 *   - latency: blocking MPI_Send/MPI_Recv ping-pong, 10000 iters / 100 skip
 *     for size <= 8192, 1000 / 10 above; latency = t * 1e6 / (2 * iters);
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
 * --json prints one object per size instead of the OSU table:
 *   {"bench":"latency","device":"mpi","np":2,"size":8,"avg_us":0.153}
 *   {"bench":"bw","device":"mpi","np":2,"size":8,"mb_s":123.45}
 *   {"bench":"mbw_mr","device":"mpi","np":2,"size":8,"mb_s":123.45,"msg_s":15430625.00}
 */
#define _POSIX_C_SOURCE 200809L /* posix_memalign under -std=c99 */
#include <mpi.h>

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
#define ALIGNMENT 64
#define FIELD_WIDTH 20
#define FLOAT_PRECISION 2
#define TAG_DATA 100
#define TAG_ACK 101
#define TAG_BIBW 10

enum bench { B_LATENCY, B_BW, B_BIBW, B_MBW_MR };

static const char *bench_names[] = {"latency", "bw", "bibw", "mbw_mr"};

struct options {
    enum bench bench;
    long min_size;
    long max_size;
    int json;
};

static int g_rank = 0;

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mpi_bench latency|bw|bibw|mbw_mr [--min-size B] [--max-size B] [--json]\n"
            "  latency        ping-pong latency, exactly 2 ranks (default sizes 0..4194304)\n"
            "  bw             unidirectional bandwidth, window 64, exactly 2 ranks (sizes 1..4194304)\n"
            "  bibw           bidirectional bandwidth, window 64, exactly 2 ranks\n"
            "  mbw_mr         multi-pair bandwidth / message rate, even number of ranks\n"
            "  --min-size B   smallest message size in bytes\n"
            "  --max-size B   largest message size in bytes (default 4194304)\n"
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

static void parse_args(int argc, char **argv, struct options *o)
{
    int i, have_min = 0, have_bench = 0;

    o->min_size = 0;
    o->max_size = DEFAULT_MAX_SIZE;
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
        } else if (strncmp(a, "--max-size=", 11) == 0) {
            o->max_size = parse_size("--max-size", a + 11);
        } else if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            if (g_rank == 0) {
                usage(stdout);
            }
            MPI_Finalize();
            exit(0);
        } else if (a[0] != '-' && !have_bench) {
            int b, found = 0;
            for (b = 0; b < (int)(sizeof(bench_names) / sizeof(bench_names[0])); b++) {
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
    if (!have_min && o->bench != B_LATENCY) {
        o->min_size = 1; /* OSU bandwidth tests start at 1 byte */
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

static void print_header(const struct options *o, int np)
{
    if (g_rank != 0 || o->json) {
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
    case B_MBW_MR:
        printf("# OSU MPI Multiple Bandwidth / Message Rate Test v" OSU_VERSION "\n");
        printf("# [ pairs: %d ] [ window size: %d ]\n", np / 2, WINDOW_SIZE);
        printf("%-10s%*s%*s\n", "# Size", FIELD_WIDTH, "MB/s", FIELD_WIDTH, "Messages/s");
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
        if (o->bench == B_LATENCY) {
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

/* ---- osu_latency ------------------------------------------------------ */
static double run_latency(char *s_buf, char *r_buf, int size)
{
    int iters = size > LARGE_MESSAGE_SIZE ? LAT_ITERS_LARGE : LAT_ITERS;
    int skip = size > LARGE_MESSAGE_SIZE ? LAT_SKIP_LARGE : LAT_SKIP;
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
    int iters = large ? BW_ITERS_LARGE : BW_ITERS;
    int skip = large ? BW_SKIP_LARGE : BW_SKIP;
    double t;

    MPI_Barrier(MPI_COMM_WORLD);
    t = bw_loop(s_buf, r_buf, size, g_rank == 0 ? 1 : 0, g_rank == 0, 0, req, iters, skip);
    return size / 1e6 * iters * WINDOW_SIZE / t;
}

/* ---- osu_bibw --------------------------------------------------------- */
static double run_bibw(char *s_buf, char *r_buf, int size, MPI_Request *req)
{
    int large = size > LARGE_MESSAGE_SIZE;
    int iters = large ? BW_ITERS_LARGE : BW_ITERS;
    int skip = large ? BW_SKIP_LARGE : BW_SKIP;
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
    int iters = large ? BW_ITERS_LARGE : BW_ITERS;
    int skip = large ? BW_SKIP_LARGE : BW_SKIP;
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

    if (o.bench == B_MBW_MR) {
        if (np < 2 || np % 2 != 0) {
            fatal(1, "%s needs an even number of ranks (>= 2)", bench_names[o.bench]);
        }
    } else if (np != 2) {
        fatal(1, "%s needs exactly 2 ranks", bench_names[o.bench]);
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
