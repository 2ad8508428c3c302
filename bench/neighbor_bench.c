/* MPI_Neighbor_alltoall on a periodic 2-D grid (MPI_Dims_create(np, 2)), the Open MPI side of
 * crates/fastmp/examples/neighbor_bench.rs, with the same sizes, rounds and statistic: for each
 * block size, 7 rounds of `iters` calls after a warm-up, the median round's µs per call.
 *
 *   mpicc -O2 -o neighbor_bench bench/neighbor_bench.c
 *   mpirun --allow-run-as-root -np 2 --bind-to core ./neighbor_bench
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int np, rank, dims[2] = {0, 0}, periods[2] = {1, 1};
    MPI_Comm_size(MPI_COMM_WORLD, &np);
    MPI_Dims_create(np, 2, dims);
    MPI_Comm grid;
    MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &grid);
    MPI_Comm_rank(grid, &rank);
    if (rank == 0) {
        printf("# MPI_Neighbor_alltoall, %d ranks, grid [%d, %d] periodic\n", np, dims[0], dims[1]);
        printf("# %8s %12s\n", "bytes", "median us");
    }
    const int slots = 4;
    const size_t blocks[] = {8, 64, 512, 4096, 32768, 262144};
    for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
        size_t block = blocks[b];
        char *send = malloc(slots * block), *recv = malloc(slots * block);
        memset(send, 1, slots * block);
        int iters = block <= 4096 ? 2000 : 200;
        for (int i = 0; i < iters / 10; i++)
            MPI_Neighbor_alltoall(send, (int)block, MPI_CHAR, recv, (int)block, MPI_CHAR, grid);
        double rounds[7];
        for (int r = 0; r < 7; r++) {
            MPI_Barrier(grid);
            double start = MPI_Wtime();
            for (int i = 0; i < iters; i++)
                MPI_Neighbor_alltoall(send, (int)block, MPI_CHAR, recv, (int)block, MPI_CHAR, grid);
            rounds[r] = (MPI_Wtime() - start) * 1e6 / iters;
        }
        qsort(rounds, 7, sizeof rounds[0], cmp);
        if (rank == 0) printf("  %8zu %12.2f\n", block, rounds[3]);
        free(send);
        free(recv);
    }
    MPI_Comm_free(&grid);
    MPI_Finalize();
    return 0;
}
