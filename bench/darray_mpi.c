/*
 * darray_mpi.c - the C+MPI baseline of `fastmp-bench halo` and `fastmp-bench remap` (the
 * distributed-array collectives of crates/fastmp-darray), written the way an MPI programmer
 * would write them by hand. bench/compare.sh darray runs both alternately.
 *
 * Build:  mpicc -O2 -o target/darray_mpi bench/darray_mpi.c
 * Run:    mpirun -np 2 --bind-to core target/darray_mpi halo|remap
 *                [--size N] [--width W] [--iterations N] [--json]
 *
 * Both work on an N x N array of doubles, element (i, j) = i * N + j, over the 2-D grid
 * MPI_Dims_create(np, 2) gives (MPI_Cart_create, no periods, no reordering: ranks row-major by
 * coordinates, as fastmp_darray::Grid::auto). Block distributions are balanced as
 * fastmp_darray::Range::block: the first N % p coordinates hold one more index.
 *
 *   halo:  block x block with W ghost cells on each side of both dimensions, stored row-major
 *          with the ghosts (leading dimension nl1 + 2W). Four MPI_Sendrecv (MPI_PROC_NULL at the
 *          edges of the grid): first the columns (an MPI_Type_vector of the physical rows, W
 *          wide), then the rows including their ghost columns (contiguous), which fills the
 *          corners as fastmp's one-phase write_halo does.
 *   remap: rows block -> cyclic, columns block on both sides: each rank packs its rows by
 *          destination, MPI_Alltoallv over its grid column (MPI_Cart_sub), and unpacks them
 *          into its cyclic block.
 *
 * Timing as fastmp-bench's darray.rs: per size, 3 rounds; a round is MPI_Barrier, warm-up
 * iterations (a tenth, at least one), then a timed loop; every rank's mean per iteration is
 * averaged over the ranks (MPI_Reduce sum / np); the median round is printed. Iterations: halo
 * 1000; remap about 1 GiB moved per round (2^30 / (8 N^2), from 5 to 1000); --iterations N sets
 * them for every size. Sizes: N = 256, 512, 1024, 2048, 4096 unless --size is given. The result
 * is checked after the rounds.
 *
 * --json prints one object per size:
 *   {"bench":"halo","device":"mpi","np":2,"size":4096,"width":1,"avg_us":12.345}
 *   {"bench":"remap","device":"mpi","np":2,"size":4096,"avg_us":34567.890}
 */
#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 3

enum bench { HALO, REMAP };

struct options {
    enum bench bench;
    int size; /* 0: the default sweep */
    int width;
    int iterations; /* 0: the default per size */
    int json;
};

static int g_rank, g_np;

static void fail(const char *what) {
    if (g_rank == 0) {
        fprintf(stderr, "darray_mpi: %s\n", what);
    }
    MPI_Abort(MPI_COMM_WORLD, 2);
}

static void usage(FILE *f) {
    fprintf(f, "usage: darray_mpi halo|remap [--size N] [--width W] [--iterations N] [--json]\n");
}

static int positive(const char *flag, const char *text) {
    char *end;
    long v = strtol(text, &end, 10);
    if (*text == '\0' || *end != '\0' || v < 1 || v > 1 << 30) {
        if (g_rank == 0) {
            fprintf(stderr, "darray_mpi: %s must be a positive integer, got '%s'\n", flag, text);
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return (int)v;
}

static void parse(int argc, char **argv, struct options *o) {
    if (argc < 2) {
        if (g_rank == 0) {
            usage(stderr);
        }
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (strcmp(argv[1], "halo") == 0) {
        o->bench = HALO;
    } else if (strcmp(argv[1], "remap") == 0) {
        o->bench = REMAP;
    } else {
        fail("the benchmark must be halo or remap");
    }
    o->size = 0;
    o->width = 1;
    o->iterations = 0;
    o->json = 0;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--json") == 0) {
            o->json = 1;
        } else if (i + 1 < argc && strcmp(a, "--size") == 0) {
            o->size = positive(a, argv[++i]);
        } else if (i + 1 < argc && strcmp(a, "--width") == 0 && o->bench == HALO) {
            o->width = positive(a, argv[++i]);
        } else if (i + 1 < argc && strcmp(a, "--iterations") == 0) {
            o->iterations = positive(a, argv[++i]);
        } else {
            if (g_rank == 0) {
                fprintf(stderr, "darray_mpi: unknown or incomplete argument '%s'\n", a);
                usage(stderr);
            }
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
    }
}

/* Balanced block distribution of n over p: length and first index of coordinate c. */
static int block_len(int n, int p, int c) { return n / p + (c < n % p); }
static int block_first(int n, int p, int c) { return c * (n / p) + (c < n % p ? c : n % p); }

static double value(int n, long i, long j) { return (double)(i * n + j); }

/* ------------------------------------------------------------------------------------ halo */

struct halo {
    MPI_Comm cart;
    int n, w, nl0, nl1, ld, g0, g1;
    int up, down, left, right;
    MPI_Datatype columns;
    double *a;
};

#define AT(h, r, c) ((h)->a + (size_t)(r) * (size_t)(h)->ld + (size_t)(c))

static void halo_setup(struct halo *h, MPI_Comm cart, const int dims[2], int n, int w) {
    int coords[2];
    MPI_Cart_coords(cart, g_rank, 2, coords);
    h->cart = cart;
    h->n = n;
    h->w = w;
    h->nl0 = block_len(n, dims[0], coords[0]);
    h->nl1 = block_len(n, dims[1], coords[1]);
    if (n < dims[0] || n < dims[1] || w > n / dims[0] || w > n / dims[1]) {
        fail("halo: every rank needs at least --width rows and columns (neighbours only)");
    }
    h->g0 = block_first(n, dims[0], coords[0]);
    h->g1 = block_first(n, dims[1], coords[1]);
    h->ld = h->nl1 + 2 * w;
    size_t stored = (size_t)(h->nl0 + 2 * w) * (size_t)h->ld;
    h->a = calloc(stored, sizeof(double));
    if (h->a == NULL) {
        fail("out of memory");
    }
    for (int r = 0; r < h->nl0; r++) {
        for (int c = 0; c < h->nl1; c++) {
            *AT(h, w + r, w + c) = value(n, h->g0 + r, h->g1 + c);
        }
    }
    MPI_Cart_shift(cart, 0, 1, &h->up, &h->down);
    MPI_Cart_shift(cart, 1, 1, &h->left, &h->right);
    MPI_Type_vector(h->nl0, w, h->ld, MPI_DOUBLE, &h->columns);
    MPI_Type_commit(&h->columns);
}

static void halo_exchange(struct halo *h) {
    int w = h->w, rows = w * h->ld;
    /* Columns of the physical rows: first to the left, last to the right. */
    MPI_Sendrecv(AT(h, w, w), 1, h->columns, h->left, 1, AT(h, w, w + h->nl1), 1, h->columns, h->right, 1,
                 h->cart, MPI_STATUS_IGNORE);
    MPI_Sendrecv(AT(h, w, h->nl1), 1, h->columns, h->right, 2, AT(h, w, 0), 1, h->columns, h->left, 2, h->cart,
                 MPI_STATUS_IGNORE);
    /* Whole stored rows (their ghost columns carry the corners): first up, last down. */
    MPI_Sendrecv(AT(h, w, 0), rows, MPI_DOUBLE, h->up, 3, AT(h, w + h->nl0, 0), rows, MPI_DOUBLE, h->down, 3,
                 h->cart, MPI_STATUS_IGNORE);
    MPI_Sendrecv(AT(h, h->nl0, 0), rows, MPI_DOUBLE, h->down, 4, AT(h, 0, 0), rows, MPI_DOUBLE, h->up, 4, h->cart,
                 MPI_STATUS_IGNORE);
}

/* Every stored cell inside the global array holds its element; 0 on success. */
static int halo_check(const struct halo *h) {
    for (int s0 = 0; s0 < h->nl0 + 2 * h->w; s0++) {
        for (int s1 = 0; s1 < h->ld; s1++) {
            long i = (long)h->g0 + s0 - h->w, j = (long)h->g1 + s1 - h->w;
            if (i >= 0 && i < h->n && j >= 0 && j < h->n && *AT(h, s0, s1) != value(h->n, i, j)) {
                return 1;
            }
        }
    }
    return 0;
}

static void halo_free(struct halo *h) {
    MPI_Type_free(&h->columns);
    free(h->a);
}

/* ----------------------------------------------------------------------------------- remap */

struct remap {
    MPI_Comm line; /* this rank's grid column: the ranks along grid dimension 0 */
    int n, p, me, nl1, g1, src_rows, src_first, dst_rows;
    double *src, *dst, *sendbuf, *recvbuf;
    int *sendcounts, *sdispls, *recvcounts, *rdispls;
};

/* Rows of coordinate c's block (of n over p) that cyclic coordinate q holds. */
static int rows_for(int n, int p, int c, int q) {
    int first = block_first(n, p, c), len = block_len(n, p, c);
    int g = first + ((q - first % p) + p) % p; /* first g >= first with g % p == q */
    return g < first + len ? (first + len - 1 - g) / p + 1 : 0;
}

static void *checked_malloc(size_t bytes) {
    void *p = malloc(bytes > 0 ? bytes : 1);
    if (p == NULL) {
        fail("out of memory");
    }
    return p;
}

static void remap_setup(struct remap *m, MPI_Comm cart, const int dims[2], int n) {
    int coords[2], keep[2] = {1, 0};
    MPI_Cart_coords(cart, g_rank, 2, coords);
    MPI_Cart_sub(cart, keep, &m->line);
    MPI_Comm_rank(m->line, &m->me); /* = coords[0] */
    m->n = n;
    m->p = dims[0];
    m->nl1 = block_len(n, dims[1], coords[1]);
    m->g1 = block_first(n, dims[1], coords[1]);
    m->src_rows = block_len(n, m->p, m->me);
    m->src_first = block_first(n, m->p, m->me);
    m->dst_rows = (n + m->p - 1 - m->me) / m->p;
    size_t cols = (size_t)m->nl1;
    m->src = checked_malloc((size_t)m->src_rows * cols * sizeof(double));
    m->dst = checked_malloc((size_t)m->dst_rows * cols * sizeof(double));
    m->sendbuf = checked_malloc((size_t)m->src_rows * cols * sizeof(double));
    m->recvbuf = checked_malloc((size_t)m->dst_rows * cols * sizeof(double));
    m->sendcounts = checked_malloc(4 * (size_t)m->p * sizeof(int));
    m->sdispls = m->sendcounts + m->p;
    m->recvcounts = m->sdispls + m->p;
    m->rdispls = m->recvcounts + m->p;
    for (int r = 0; r < m->src_rows; r++) {
        for (size_t c = 0; c < cols; c++) {
            m->src[r * cols + c] = value(n, m->src_first + r, m->g1 + (long)c);
        }
    }
    memset(m->dst, 0, (size_t)m->dst_rows * cols * sizeof(double));
    memset(m->sendbuf, 0, (size_t)m->src_rows * cols * sizeof(double));
    memset(m->recvbuf, 0, (size_t)m->dst_rows * cols * sizeof(double));
    int sd = 0, rd = 0;
    for (int q = 0; q < m->p; q++) {
        m->sendcounts[q] = rows_for(n, m->p, m->me, q) * m->nl1;
        m->recvcounts[q] = rows_for(n, m->p, q, m->me) * m->nl1;
        m->sdispls[q] = sd;
        m->rdispls[q] = rd;
        sd += m->sendcounts[q];
        rd += m->recvcounts[q];
    }
}

static void remap_exchange(struct remap *m) {
    size_t row = (size_t)m->nl1 * sizeof(double);
    int p = m->p;
    /* Pack: for each destination, its rows of this block in increasing order. */
    double *to = m->sendbuf;
    for (int q = 0; q < p; q++) {
        int g = m->src_first + ((q - m->src_first % p) + p) % p;
        for (; g < m->src_first + m->src_rows; g += p, to += m->nl1) {
            memcpy(to, m->src + (size_t)(g - m->src_first) * m->nl1, row);
        }
    }
    MPI_Alltoallv(m->sendbuf, m->sendcounts, m->sdispls, MPI_DOUBLE, m->recvbuf, m->recvcounts, m->rdispls,
                  MPI_DOUBLE, m->line);
    /* Unpack: source s sent its rows g with g % p == me, in increasing order; g is local g / p. */
    const double *from = m->recvbuf;
    for (int s = 0; s < p; s++) {
        int first = block_first(m->n, p, s), len = block_len(m->n, p, s);
        int g = first + ((m->me - first % p) + p) % p;
        for (; g < first + len; g += p, from += m->nl1) {
            memcpy(m->dst + (size_t)(g / p) * m->nl1, from, row);
        }
    }
}

static int remap_check(const struct remap *m) {
    for (int l = 0; l < m->dst_rows; l++) {
        for (int c = 0; c < m->nl1; c++) {
            if (m->dst[(size_t)l * m->nl1 + c] != value(m->n, (long)l * m->p + m->me, m->g1 + c)) {
                return 1;
            }
        }
    }
    return 0;
}

static void remap_free(struct remap *m) {
    MPI_Comm_free(&m->line);
    free(m->src);
    free(m->dst);
    free(m->sendbuf);
    free(m->recvbuf);
    free(m->sendcounts);
}

/* ---------------------------------------------------------------------------------- timing */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median over ROUNDS of the mean over ranks of the per-iteration time, in us (rank 0). */
static double measure(int iterations, void (*exchange)(void *), void *state) {
    double rounds[ROUNDS];
    int skip = iterations / 10 > 0 ? iterations / 10 : 1;
    for (int r = 0; r < ROUNDS; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime();
        for (int i = 0; i < skip + iterations; i++) {
            if (i == skip) {
                start = MPI_Wtime();
            }
            exchange(state);
        }
        double mine = (MPI_Wtime() - start) * 1e6 / iterations, sum = 0;
        MPI_Reduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        rounds[r] = sum / g_np;
    }
    qsort(rounds, ROUNDS, sizeof rounds[0], cmp_double);
    return rounds[ROUNDS / 2];
}

static void halo_call(void *h) { halo_exchange(h); }
static void remap_call(void *m) { remap_exchange(m); }

static int default_iterations(enum bench bench, int n) {
    if (bench == HALO) {
        return 1000;
    }
    double it = (double)(1 << 30) / ((double)n * n * sizeof(double));
    return it < 5 ? 5 : it > 1000 ? 1000 : (int)it;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_np);
    struct options o = {HALO, 0, 1, 0, 0};
    parse(argc, argv, &o);
    int dims[2] = {0, 0}, periods[2] = {0, 0};
    MPI_Dims_create(g_np, 2, dims);
    MPI_Comm cart;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart);

    static const int sweep[] = {256, 512, 1024, 2048, 4096};
    int count = o.size ? 1 : (int)(sizeof sweep / sizeof sweep[0]);
    if (g_rank == 0 && !o.json) {
        printf("# MPI distributed-array %s (np %d, grid %d x %d)\n", o.bench == HALO ? "halo" : "remap", g_np,
               dims[0], dims[1]);
        if (o.bench == HALO) {
            printf("# N x N double, block x block, %d ghost cell(s) per side; MPI_Sendrecv of the four faces\n",
                   o.width);
            printf("%-10s%20s%20s\n", "# Size", "Width", "Avg(us)");
        } else {
            printf("# N x N double, rows block -> cyclic; pack + MPI_Alltoallv + unpack\n");
            printf("%-10s%20s\n", "# Size", "Avg(us)");
        }
    }
    for (int k = 0; k < count; k++) {
        int n = o.size ? o.size : sweep[k];
        int iterations = o.iterations ? o.iterations : default_iterations(o.bench, n);
        double avg;
        int wrong;
        if (o.bench == HALO) {
            struct halo h;
            halo_setup(&h, cart, dims, n, o.width);
            avg = measure(iterations, halo_call, &h);
            wrong = halo_check(&h);
            halo_free(&h);
        } else {
            struct remap m;
            remap_setup(&m, cart, dims, n);
            avg = measure(iterations, remap_call, &m);
            wrong = remap_check(&m);
            remap_free(&m);
        }
        int any = 0;
        MPI_Allreduce(&wrong, &any, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
        if (any) {
            fail("wrong result");
        }
        if (g_rank != 0) {
            continue;
        }
        if (o.json && o.bench == HALO) {
            printf("{\"bench\":\"halo\",\"device\":\"mpi\",\"np\":%d,\"size\":%d,\"width\":%d,\"avg_us\":%.3f}\n",
                   g_np, n, o.width, avg);
        } else if (o.json) {
            printf("{\"bench\":\"remap\",\"device\":\"mpi\",\"np\":%d,\"size\":%d,\"avg_us\":%.3f}\n", g_np, n, avg);
        } else if (o.bench == HALO) {
            printf("%-10d%20d%20.2f\n", n, o.width, avg);
        } else {
            printf("%-10d%20.2f\n", n, avg);
        }
        fflush(stdout);
    }
    MPI_Comm_free(&cart);
    MPI_Finalize();
    return 0;
}
