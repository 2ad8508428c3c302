/* The C twin of `fastmp-bench halo_persistent` for the system MPI: each rank exchanges `size`
 * bytes with both ring neighbours per iteration, with persistent requests (MPI_Send_init /
 * MPI_Recv_init once, MPI_Startall + MPI_Waitall per iteration) and, alternately, with
 * MPI_Irecv/MPI_Isend + MPI_Waitall per iteration. Same sizes (8 B..1 MiB), iterations (OSU:
 * 1000 + 100 warm-up up to 8 KiB, 100 + 10 above), 7 rounds alternating which goes first, and the
 * median round of each (mean over ranks of the per-exchange time).
 *
 *   mpicc -O2 -o halo_persistent bench/halo_persistent.c
 *   mpirun --allow-run-as-root -np 2 --bind-to core ./halo_persistent
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 7
#define TO_RIGHT 1
#define TO_LEFT 2

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double timed(int persistent, MPI_Request *reqs, char **bufs, size_t size, int left, int right,
                    int iters, int skip)
{
    double start = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < iters + skip; i++) {
        if (i == skip) start = MPI_Wtime();
        if (persistent) {
            MPI_Startall(4, reqs);
        } else {
            MPI_Irecv(bufs[0], (int)size, MPI_BYTE, left, TO_RIGHT, MPI_COMM_WORLD, &reqs[0]);
            MPI_Irecv(bufs[1], (int)size, MPI_BYTE, right, TO_LEFT, MPI_COMM_WORLD, &reqs[1]);
            MPI_Isend(bufs[2], (int)size, MPI_BYTE, right, TO_RIGHT, MPI_COMM_WORLD, &reqs[2]);
            MPI_Isend(bufs[3], (int)size, MPI_BYTE, left, TO_LEFT, MPI_COMM_WORLD, &reqs[3]);
        }
        MPI_Waitall(4, reqs, MPI_STATUSES_IGNORE);
    }
    double mine = (MPI_Wtime() - start) * 1e6 / iters, sum = 0;
    int np;
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    MPI_Allreduce(&mine, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sum / np;
}

int main(int argc, char **argv)
{
    int rank, np;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    int left = (rank + np - 1) % np, right = (rank + 1) % np;
    if (rank == 0) {
        printf("# MPI Halo Exchange Latency Test, persistent vs per-iteration requests (np %d)\n", np);
        printf("# Medians of %d alternating rounds; Ratio = Persistent / Isend-Irecv\n", ROUNDS);
        printf("%-10s%20s%20s%20s\n", "# Size", "Persistent(us)", "Isend-Irecv(us)", "Ratio");
    }
    for (size_t size = 8; size <= (1u << 20); size *= 2) {
        int iters = size <= 8192 ? 1000 : 100, skip = size <= 8192 ? 100 : 10;
        char *pbufs[4], *ibufs[4];
        for (int b = 0; b < 4; b++) {
            pbufs[b] = malloc(size);
            ibufs[b] = malloc(size);
            memset(pbufs[b], 1, size);
            memset(ibufs[b], 1, size);
        }
        MPI_Request preqs[4], ireqs[4];
        MPI_Recv_init(pbufs[0], (int)size, MPI_BYTE, left, TO_RIGHT, MPI_COMM_WORLD, &preqs[0]);
        MPI_Recv_init(pbufs[1], (int)size, MPI_BYTE, right, TO_LEFT, MPI_COMM_WORLD, &preqs[1]);
        MPI_Send_init(pbufs[2], (int)size, MPI_BYTE, right, TO_RIGHT, MPI_COMM_WORLD, &preqs[2]);
        MPI_Send_init(pbufs[3], (int)size, MPI_BYTE, left, TO_LEFT, MPI_COMM_WORLD, &preqs[3]);
        double p[ROUNDS], q[ROUNDS];
        for (int r = 0; r < ROUNDS; r++) {
            if (r % 2 == 0) {
                p[r] = timed(1, preqs, pbufs, size, left, right, iters, skip);
                q[r] = timed(0, ireqs, ibufs, size, left, right, iters, skip);
            } else {
                q[r] = timed(0, ireqs, ibufs, size, left, right, iters, skip);
                p[r] = timed(1, preqs, pbufs, size, left, right, iters, skip);
            }
        }
        qsort(p, ROUNDS, sizeof p[0], cmp);
        qsort(q, ROUNDS, sizeof q[0], cmp);
        if (rank == 0)
            printf("%-10zu%20.2f%20.2f%20.2f\n", size, p[ROUNDS / 2], q[ROUNDS / 2], p[ROUNDS / 2] / q[ROUNDS / 2]);
        for (int b = 0; b < 4; b++) {
            MPI_Request_free(&preqs[b]);
            free(pbufs[b]);
            free(ibufs[b]);
        }
    }
    MPI_Finalize();
    return 0;
}
