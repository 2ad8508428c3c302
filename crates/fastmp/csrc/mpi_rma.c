/*
 * mpi_rma.c - the one-sided half of fastmp's mpi device: MPI windows behind an opaque handle.
 *
 * Rust (src/device/mpi/one_sided.rs) decides the epoch structure; this file only maps each call
 * onto MPI and returns MPI's error code. Every blocking operation completes locally before it
 * returns (MPI_Win_flush_local), so its buffers are free; remote completion is the caller's
 * flush or unlock. Offsets are bytes (displacement unit 1); counts above INT_MAX are split.
 * Only ints, size_t and pointers cross the boundary: MPI types stay on this side.
 */
#include "fastmp_mpi.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Largest piece of one MPI call, in bytes (a multiple of every element size). */
#define FASTMP_RMA_CHUNK ((size_t)1 << 30)

struct fastmp_rma_win {
    MPI_Comm comm;
    MPI_Win win;
};

/* Element codes: the shared codes of `fastmp_mpi_element_type` (the order of Rust's `Element`). */
#define element_type fastmp_mpi_element_type

/* Compare-and-swap compares bits: floats travel as unsigned integers of their size (MPI does
 * not define MPI_Compare_and_swap on floating-point types). */
static MPI_Datatype bits_type(int element)
{
    switch (element) {
    case 8: return MPI_UINT32_T;
    case 9: return MPI_UINT64_T;
    default: return element_type(element);
    }
}

static size_t element_size(int element)
{
    static const size_t sizes[10] = {1, 2, 4, 8, 1, 2, 4, 8, 4, 8};
    return element >= 0 && element < 10 ? sizes[element] : 0;
}

/* Operator codes (the order of Rust's `AccumulateOp`). */
static MPI_Op accumulate_op(int op)
{
    switch (op) {
    case 0: return MPI_REPLACE;
    case 1: return MPI_NO_OP;
    case 2: return MPI_SUM;
    case 3: return MPI_PROD;
    case 4: return MPI_MIN;
    case 5: return MPI_MAX;
    case 6: return MPI_BAND;
    case 7: return MPI_BOR;
    case 8: return MPI_BXOR;
    case 9: return MPI_LAND;
    case 10: return MPI_LOR;
    case 11: return MPI_LXOR;
    default: return MPI_OP_NULL;
    }
}

int fastmp_rma_create(int world, const int *members, int n, int tag, void *base, size_t len,
                      unsigned long long *lengths, int *my_index, void **out)
{
    MPI_Comm parent = fastmp_mpi_comm(world);
    MPI_Group all, group;
    struct fastmp_rma_win *w;
    unsigned long long mine = len;
    int rc;

    *out = NULL;
    if (parent == MPI_COMM_NULL || n <= 0) {
        return MPI_ERR_COMM;
    }
    if (len > (size_t)LLONG_MAX) {
        return MPI_ERR_SIZE;
    }
    w = malloc(sizeof *w);
    if (w == NULL) {
        return MPI_ERR_NO_MEM;
    }
    w->comm = MPI_COMM_NULL;
    w->win = MPI_WIN_NULL;
    rc = MPI_Comm_group(parent, &all);
    if (rc == MPI_SUCCESS) {
        rc = MPI_Group_incl(all, n, members, &group);
        MPI_Group_free(&all);
        if (rc == MPI_SUCCESS) {
            /* Collective over the members only: ranks outside the window take no part. */
            rc = MPI_Comm_create_group(parent, group, tag, &w->comm);
            MPI_Group_free(&group);
        }
    }
    if (rc == MPI_SUCCESS) {
        rc = MPI_Comm_set_errhandler(w->comm, MPI_ERRORS_RETURN);
    }
    if (rc == MPI_SUCCESS) {
        rc = MPI_Comm_rank(w->comm, my_index);
    }
    if (rc == MPI_SUCCESS) {
        rc = MPI_Win_create(base, (MPI_Aint)len, 1, MPI_INFO_NULL, w->comm, &w->win);
    }
    if (rc == MPI_SUCCESS) {
        rc = MPI_Win_set_errhandler(w->win, MPI_ERRORS_RETURN);
    }
    if (rc == MPI_SUCCESS) {
        rc = MPI_Allgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, lengths, 1, MPI_UNSIGNED_LONG_LONG,
                           w->comm);
    }
    if (rc != MPI_SUCCESS) {
        if (w->win != MPI_WIN_NULL) {
            MPI_Win_free(&w->win);
        }
        if (w->comm != MPI_COMM_NULL) {
            MPI_Comm_free(&w->comm);
        }
        free(w);
        return rc;
    }
    *out = w;
    return MPI_SUCCESS;
}

/* Collective over the window's members; every epoch must be closed. */
int fastmp_rma_free(void *handle)
{
    struct fastmp_rma_win *w = handle;
    int rc = MPI_Win_free(&w->win);
    int rc2 = MPI_Comm_free(&w->comm);
    free(w);
    return rc != MPI_SUCCESS ? rc : rc2;
}

int fastmp_rma_lock(void *handle, int target, int exclusive)
{
    struct fastmp_rma_win *w = handle;
    return MPI_Win_lock(exclusive ? MPI_LOCK_EXCLUSIVE : MPI_LOCK_SHARED, target, 0, w->win);
}

int fastmp_rma_unlock(void *handle, int target)
{
    struct fastmp_rma_win *w = handle;
    return MPI_Win_unlock(target, w->win);
}

int fastmp_rma_flush(void *handle, int target)
{
    struct fastmp_rma_win *w = handle;
    return MPI_Win_flush(target, w->win);
}

int fastmp_rma_sync(void *handle)
{
    struct fastmp_rma_win *w = handle;
    return MPI_Win_sync(w->win);
}

int fastmp_rma_put(void *handle, int target, size_t offset, const void *data, size_t len)
{
    struct fastmp_rma_win *w = handle;
    const char *p = data;
    int rc = MPI_SUCCESS;
    while (len > 0 && rc == MPI_SUCCESS) {
        size_t n = len < FASTMP_RMA_CHUNK ? len : FASTMP_RMA_CHUNK;
        rc = MPI_Put(p, (int)n, MPI_BYTE, target, (MPI_Aint)offset, (int)n, MPI_BYTE, w->win);
        p += n;
        offset += n;
        len -= n;
    }
    return rc == MPI_SUCCESS ? MPI_Win_flush_local(target, w->win) : rc;
}

int fastmp_rma_get(void *handle, int target, size_t offset, void *into, size_t len)
{
    struct fastmp_rma_win *w = handle;
    char *p = into;
    int rc = MPI_SUCCESS;
    while (len > 0 && rc == MPI_SUCCESS) {
        size_t n = len < FASTMP_RMA_CHUNK ? len : FASTMP_RMA_CHUNK;
        rc = MPI_Get(p, (int)n, MPI_BYTE, target, (MPI_Aint)offset, (int)n, MPI_BYTE, w->win);
        p += n;
        offset += n;
        len -= n;
    }
    return rc == MPI_SUCCESS ? MPI_Win_flush_local(target, w->win) : rc;
}

/* MPI_Accumulate, or MPI_Get_accumulate when `result` is not NULL (`data` is then unread with
 * MPI_NO_OP and may be anything). `len` is in bytes, a multiple of the element size. */
int fastmp_rma_accumulate(void *handle, int target, size_t offset, const void *data, void *result,
                          size_t len, int element, int op)
{
    struct fastmp_rma_win *w = handle;
    MPI_Datatype type = element_type(element);
    MPI_Op mop = accumulate_op(op);
    size_t size = element_size(element);
    const char *in = data;
    char *out = result;
    int rc = MPI_SUCCESS;
    if (type == MPI_DATATYPE_NULL || mop == MPI_OP_NULL || len % size != 0) {
        return MPI_ERR_ARG;
    }
    if (mop == MPI_NO_OP || in == NULL) {
        in = out; /* never read, but a valid address */
    }
    while (len > 0 && rc == MPI_SUCCESS) {
        size_t n = len < FASTMP_RMA_CHUNK ? len : FASTMP_RMA_CHUNK;
        int count = (int)(n / size);
        if (out == NULL) {
            rc = MPI_Accumulate(in, count, type, target, (MPI_Aint)offset, count, type, mop, w->win);
        } else {
            rc = MPI_Get_accumulate(in, count, type, out, count, type, target, (MPI_Aint)offset,
                                    count, type, mop, w->win);
            out += n;
        }
        in += n;
        offset += n;
        len -= n;
    }
    return rc == MPI_SUCCESS ? MPI_Win_flush_local(target, w->win) : rc;
}

/* `operand` and `result` hold one element each (the low bytes of a 64-bit word). */
int fastmp_rma_fetch_and_op(void *handle, int target, size_t offset, int element, int op,
                            const void *operand, void *result)
{
    struct fastmp_rma_win *w = handle;
    MPI_Datatype type = element_type(element);
    MPI_Op mop = accumulate_op(op);
    int rc;
    if (type == MPI_DATATYPE_NULL || mop == MPI_OP_NULL) {
        return MPI_ERR_ARG;
    }
    rc = MPI_Fetch_and_op(operand, result, type, target, (MPI_Aint)offset, mop, w->win);
    return rc == MPI_SUCCESS ? MPI_Win_flush_local(target, w->win) : rc;
}

int fastmp_rma_compare_and_swap(void *handle, int target, size_t offset, int element,
                                const void *expected, const void *replacement, void *result)
{
    struct fastmp_rma_win *w = handle;
    MPI_Datatype type = bits_type(element);
    int rc;
    if (type == MPI_DATATYPE_NULL) {
        return MPI_ERR_ARG;
    }
    rc = MPI_Compare_and_swap(replacement, expected, result, type, target, (MPI_Aint)offset, w->win);
    return rc == MPI_SUCCESS ? MPI_Win_flush_local(target, w->win) : rc;
}

/* The major version of Open MPI, or 0 for another MPI library: Rust refuses what Open MPI before
 * 5.0 is known to get wrong over shared memory (see one_sided.rs). */
int fastmp_rma_open_mpi_major(void)
{
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0, major = 0;
    const char *at;
    if (MPI_Get_library_version(version, &len) != MPI_SUCCESS) {
        return 0;
    }
    at = strstr(version, "Open MPI v");
    return at != NULL && sscanf(at + 10, "%d", &major) == 1 ? major : 0;
}
