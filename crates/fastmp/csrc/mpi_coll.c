/* The mpi device's delegated collectives: one entry per MPI collective, over bytes (MPI_BYTE)
 * except the reductions, whose element type and operation arrive as small codes.
 *
 * Every entry takes the communicator's handle and `req`: NULL runs the blocking collective,
 * otherwise the nonblocking one (MPI_Ibcast, ...) whose request is stored at `req` (16 bytes,
 * 8-aligned, that the caller owns) and completed with fastmp_coll_test or
 * fastmp_coll_wait. A NULL send buffer is MPI_IN_PLACE. Every entry returns an MPI error code. */

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "fastmp_mpi.h"

/* Room the caller gives a request (an MPI_Request is a pointer in Open MPI, an int in MPICH). */
#define FASTMP_COLL_REQUEST_BYTES 16
_Static_assert(sizeof(MPI_Request) <= FASTMP_COLL_REQUEST_BYTES, "MPI_Request fits the caller's storage");
_Static_assert(_Alignof(MPI_Request) <= 8, "MPI_Request needs at most 8-byte alignment");

/* Element types of the reductions: the shared codes of `fastmp_mpi_element_type`. */
#define element_type fastmp_mpi_element_type

/* Predefined operations, in the order of the Rust side's `Predefined`. */
static MPI_Op predefined_op(int code) {
    switch (code) {
    case 0: return MPI_SUM;
    case 1: return MPI_PROD;
    case 2: return MPI_MIN;
    case 3: return MPI_MAX;
    case 4: return MPI_LAND;
    case 5: return MPI_LOR;
    case 6: return MPI_LXOR;
    case 7: return MPI_BAND;
    case 8: return MPI_BOR;
    case 9: return MPI_BXOR;
    default: return MPI_OP_NULL;
    }
}

#define SEND(buf) ((buf) == NULL ? MPI_IN_PLACE : (buf))

/* The reduction's type and op from their codes, or an MPI error code from the enclosing entry. */
#define REDUCTION_ARGS(type, op)                                                                  \
    MPI_Datatype dt = element_type(type);                                                         \
    MPI_Op mop = predefined_op(op);                                                               \
    if (dt == MPI_DATATYPE_NULL) return MPI_ERR_TYPE;                                             \
    if (mop == MPI_OP_NULL) return MPI_ERR_OP

int fastmp_coll_test(void *req, int *done) {
    return MPI_Test((MPI_Request *)req, done, MPI_STATUS_IGNORE);
}

int fastmp_coll_wait(void *req) { return MPI_Wait((MPI_Request *)req, MPI_STATUS_IGNORE); }

int fastmp_coll_barrier(int comm, void *req) {
    MPI_Comm c = fastmp_mpi_comm(comm);
    return req ? MPI_Ibarrier(c, (MPI_Request *)req) : MPI_Barrier(c);
}

int fastmp_coll_bcast(int comm, void *buf, int count, int root, void *req) {
    MPI_Comm c = fastmp_mpi_comm(comm);
    return req ? MPI_Ibcast(buf, count, MPI_BYTE, root, c, (MPI_Request *)req)
               : MPI_Bcast(buf, count, MPI_BYTE, root, c);
}

/* `count` bytes per rank; `send` is only read at the root. */
int fastmp_coll_scatter(int comm, const void *send, void *recv, int count, int root, void *req) {
    MPI_Comm c = fastmp_mpi_comm(comm);
    return req ? MPI_Iscatter(send, count, MPI_BYTE, recv, count, MPI_BYTE, root, c, (MPI_Request *)req)
               : MPI_Scatter(send, count, MPI_BYTE, recv, count, MPI_BYTE, root, c);
}

/* `counts`/`displs` (bytes) are only read at the root. */
int fastmp_coll_scatterv(int comm, const void *send, const int *counts, const int *displs, void *recv,
                         int recv_count, int root, void *req) {
    MPI_Comm c = fastmp_mpi_comm(comm);
    return req ? MPI_Iscatterv(send, counts, displs, MPI_BYTE, recv, recv_count, MPI_BYTE, root, c,
                               (MPI_Request *)req)
               : MPI_Scatterv(send, counts, displs, MPI_BYTE, recv, recv_count, MPI_BYTE, root, c);
}

/* `count` bytes per rank; `recv` is only written at the root. */
int fastmp_coll_gather(int comm, const void *send, void *recv, int count, int root, void *req) {
    MPI_Comm c = fastmp_mpi_comm(comm);
    return req ? MPI_Igather(send, count, MPI_BYTE, recv, count, MPI_BYTE, root, c, (MPI_Request *)req)
               : MPI_Gather(send, count, MPI_BYTE, recv, count, MPI_BYTE, root, c);
}

int fastmp_coll_gatherv(int comm, const void *send, int send_count, void *recv, const int *counts,
                        const int *displs, int root, void *req) {
    MPI_Comm c = fastmp_mpi_comm(comm);
    return req ? MPI_Igatherv(send, send_count, MPI_BYTE, recv, counts, displs, MPI_BYTE, root, c,
                              (MPI_Request *)req)
               : MPI_Gatherv(send, send_count, MPI_BYTE, recv, counts, displs, MPI_BYTE, root, c);
}

int fastmp_coll_allgather(int comm, const void *send, void *recv, int count, void *req) {
    MPI_Comm c = fastmp_mpi_comm(comm);
    return req ? MPI_Iallgather(SEND(send), count, MPI_BYTE, recv, count, MPI_BYTE, c, (MPI_Request *)req)
               : MPI_Allgather(SEND(send), count, MPI_BYTE, recv, count, MPI_BYTE, c);
}

int fastmp_coll_allgatherv(int comm, const void *send, int send_count, void *recv, const int *counts,
                           const int *displs, void *req) {
    MPI_Comm c = fastmp_mpi_comm(comm);
#ifdef MPICH_VERSION
    /* MPICH 4.0.2's (i)allgatherv on one rank copies the send buffer to the start of `recv`,
     * ignoring the displacement; its in-place form is right. So the rank's block is placed here
     * and MPI runs in place. */
    int size = 0;
    if (send != NULL && MPI_Comm_size(c, &size) == MPI_SUCCESS && size == 1 && send_count == counts[0]) {
        memmove((char *)recv + displs[0], send, (size_t)send_count);
        send = NULL;
    }
#endif
    return req ? MPI_Iallgatherv(SEND(send), send_count, MPI_BYTE, recv, counts, displs, MPI_BYTE, c,
                                 (MPI_Request *)req)
               : MPI_Allgatherv(SEND(send), send_count, MPI_BYTE, recv, counts, displs, MPI_BYTE, c);
}

/* `count` bytes per peer. */
int fastmp_coll_alltoall(int comm, const void *send, void *recv, int count, void *req) {
    MPI_Comm c = fastmp_mpi_comm(comm);
    return req ? MPI_Ialltoall(SEND(send), count, MPI_BYTE, recv, count, MPI_BYTE, c, (MPI_Request *)req)
               : MPI_Alltoall(SEND(send), count, MPI_BYTE, recv, count, MPI_BYTE, c);
}

int fastmp_coll_alltoallv(int comm, const void *send, const int *send_counts, const int *send_displs,
                          void *recv, const int *recv_counts, const int *recv_displs, void *req) {
    MPI_Comm c = fastmp_mpi_comm(comm);
    return req ? MPI_Ialltoallv(SEND(send), send_counts, send_displs, MPI_BYTE, recv, recv_counts,
                                recv_displs, MPI_BYTE, c, (MPI_Request *)req)
               : MPI_Alltoallv(SEND(send), send_counts, send_displs, MPI_BYTE, recv, recv_counts,
                               recv_displs, MPI_BYTE, c);
}

/* `count` elements of type code `type`, combined with predefined op code `op`. */
int fastmp_coll_reduce(int comm, const void *send, void *recv, int count, int type, int op, int root,
                       void *req) {
    MPI_Comm c = fastmp_mpi_comm(comm);
    REDUCTION_ARGS(type, op);
#ifdef MPICH_VERSION
    /* MPICH 4.0.2's blocking MPI_Reduce with MPI_IN_PLACE at the root reads from MPI_IN_PLACE's
     * address once the vector is 4000 bytes or more (segfault; MPI_Ireduce is fine): there the
     * root's contribution goes through a copy instead. Only the root passes NULL (in place). */
    if (send == NULL && req == NULL) {
        int size = 0;
        int rc = MPI_Type_size(dt, &size);
        if (rc != MPI_SUCCESS) return rc;
        size_t bytes = (size_t)count * (size_t)size;
        void *own = malloc(bytes > 0 ? bytes : 1);
        if (own == NULL) return MPI_ERR_NO_MEM;
        memcpy(own, recv, bytes);
        rc = MPI_Reduce(own, recv, count, dt, mop, root, c);
        free(own);
        return rc;
    }
#endif
    return req ? MPI_Ireduce(SEND(send), recv, count, dt, mop, root, c, (MPI_Request *)req)
               : MPI_Reduce(SEND(send), recv, count, dt, mop, root, c);
}

int fastmp_coll_allreduce(int comm, const void *send, void *recv, int count, int type, int op, void *req) {
    MPI_Comm c = fastmp_mpi_comm(comm);
    REDUCTION_ARGS(type, op);
    return req ? MPI_Iallreduce(SEND(send), recv, count, dt, mop, c, (MPI_Request *)req)
               : MPI_Allreduce(SEND(send), recv, count, dt, mop, c);
}

/* `counts` in elements, one per rank. */
int fastmp_coll_reduce_scatter(int comm, const void *send, void *recv, const int *counts, int type, int op,
                               void *req) {
    MPI_Comm c = fastmp_mpi_comm(comm);
    REDUCTION_ARGS(type, op);
    return req ? MPI_Ireduce_scatter(send, recv, counts, dt, mop, c, (MPI_Request *)req)
               : MPI_Reduce_scatter(send, recv, counts, dt, mop, c);
}

/* MPI_Scan, or MPI_Exscan when `exclusive` is non-zero. */
int fastmp_coll_scan(int comm, const void *send, void *recv, int count, int type, int op, int exclusive,
                     void *req) {
    MPI_Comm c = fastmp_mpi_comm(comm);
    REDUCTION_ARGS(type, op);
    if (exclusive)
        return req ? MPI_Iexscan(SEND(send), recv, count, dt, mop, c, (MPI_Request *)req)
                   : MPI_Exscan(SEND(send), recv, count, dt, mop, c);
    return req ? MPI_Iscan(SEND(send), recv, count, dt, mop, c, (MPI_Request *)req)
               : MPI_Scan(SEND(send), recv, count, dt, mop, c);
}
