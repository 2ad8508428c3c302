/* Point-to-point: nonblocking sends and receives, matched probes, request completion. Sources
 * and tags below 0 are the wildcards (MPI_ANY_SOURCE / MPI_ANY_TAG), so Rust needs none of MPI's
 * constants. */
#include "fastmp_mpi.h"

#include <limits.h>
#include <string.h>

_Static_assert(sizeof(MPI_Request) <= sizeof(fastmp_slot), "MPI_Request fits a 64-bit slot");
_Static_assert(sizeof(MPI_Message) <= sizeof(fastmp_slot), "MPI_Message fits a 64-bit slot");

static MPI_Request load_request(const fastmp_slot *slot) {
    MPI_Request r;
    memcpy(&r, slot, sizeof r);
    return r;
}

static void store_request(fastmp_slot *slot, MPI_Request r) {
    *slot = 0;
    memcpy(slot, &r, sizeof r);
}

/* Resolves a handle; MPI_COMM_NULL would make MPI raise the error on a communicator whose
 * handler is fatal, so an unknown handle is refused here. */
#define RESOLVE(var, handle)                          \
    MPI_Comm var = fastmp_mpi_comm(handle);           \
    if (var == MPI_COMM_NULL) return MPI_ERR_COMM

static int count_of(size_t len, int *count) {
    if (len > INT_MAX) return MPI_ERR_COUNT;
    *count = (int)len;
    return MPI_SUCCESS;
}

int fastmp_mpi_isend(const void *buf, size_t len, int dest, int tag, int comm, int synchronous,
                     fastmp_slot *request, int *done) {
    int count;
    int rc = count_of(len, &count);
    if (rc != MPI_SUCCESS) return rc;
    RESOLVE(c, comm);
    MPI_Request r;
    rc = synchronous ? MPI_Issend(buf, count, MPI_BYTE, dest, tag, c, &r)
                     : MPI_Isend(buf, count, MPI_BYTE, dest, tag, c, &r);
    if (rc != MPI_SUCCESS) return rc;
    /* Small sends usually complete at once: then Rust tracks no request at all. */
    rc = MPI_Test(&r, done, MPI_STATUS_IGNORE);
    store_request(request, r);
    return rc;
}

static void describe(const MPI_Status *st, int *source, int *tag, long long *bytes) {
    MPI_Count n = 0;
    MPI_Get_elements_x(st, MPI_BYTE, &n);
    *source = st->MPI_SOURCE;
    *tag = st->MPI_TAG;
    *bytes = (long long)n;
}

int fastmp_mpi_test(fastmp_slot *request, int *done, int *source, int *tag, long long *bytes,
                    int *cancelled) {
    MPI_Request r = load_request(request);
    MPI_Status st;
    int rc = MPI_Test(&r, done, &st);
    store_request(request, r);
    if (*done) {
        describe(&st, source, tag, bytes);
        MPI_Test_cancelled(&st, cancelled);
    }
    return rc;
}

int fastmp_mpi_cancel(fastmp_slot *request) {
    MPI_Request r = load_request(request);
    return MPI_Cancel(&r);
}

int fastmp_mpi_request_free(fastmp_slot *request) {
    MPI_Request r = load_request(request);
    int rc = MPI_Request_free(&r);
    store_request(request, r);
    return rc;
}

int fastmp_mpi_iprobe(int source, int tag, int comm, int *found, int *out_source, int *out_tag,
                      long long *bytes) {
    RESOLVE(c, comm);
    MPI_Status st;
    int rc = MPI_Iprobe(source < 0 ? MPI_ANY_SOURCE : source, tag < 0 ? MPI_ANY_TAG : tag, c, found, &st);
    if (rc == MPI_SUCCESS && *found) describe(&st, out_source, out_tag, bytes);
    return rc;
}

int fastmp_mpi_improbe(int source, int tag, int comm, int *found, fastmp_slot *message,
                       int *out_source, int *out_tag, long long *bytes) {
    RESOLVE(c, comm);
    MPI_Status st;
    MPI_Message m;
    int rc = MPI_Improbe(source < 0 ? MPI_ANY_SOURCE : source, tag < 0 ? MPI_ANY_TAG : tag, c, found, &m, &st);
    if (rc == MPI_SUCCESS && *found) {
        describe(&st, out_source, out_tag, bytes);
        *message = 0;
        memcpy(message, &m, sizeof m);
    }
    return rc;
}

int fastmp_mpi_imrecv(void *buf, size_t capacity, fastmp_slot *message, fastmp_slot *request) {
    int count;
    int rc = count_of(capacity, &count);
    if (rc != MPI_SUCCESS) return rc;
    MPI_Message m;
    memcpy(&m, message, sizeof m);
    MPI_Request r;
    rc = MPI_Imrecv(buf, count, MPI_BYTE, &m, &r);
    if (rc == MPI_SUCCESS) store_request(request, r);
    return rc;
}

int fastmp_mpi_irecv(void *buf, size_t len, int source, int tag, int comm, fastmp_slot *request) {
    int count;
    int rc = count_of(len, &count);
    if (rc != MPI_SUCCESS) return rc;
    if (source < 0 || tag < 0) return MPI_ERR_ARG;
    RESOLVE(c, comm);
    MPI_Request r;
    rc = MPI_Irecv(buf, count, MPI_BYTE, source, tag, c, &r);
    if (rc == MPI_SUCCESS) store_request(request, r);
    return rc;
}

int fastmp_mpi_tag_ub(int *tag_ub) {
    int *value = NULL, flag = 0;
    int rc = MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &value, &flag);
    if (rc != MPI_SUCCESS) return rc;
    if (!flag || value == NULL) return MPI_ERR_OTHER;
    *tag_ub = *value;
    return MPI_SUCCESS;
}
