/* Point-to-point: nonblocking sends and receives, matched probes, request completion. Sources
 * and tags below 0 are the wildcards (MPI_ANY_SOURCE / MPI_ANY_TAG), so Rust needs none of MPI's
 * constants. */
/* mmap's MAP_ANONYMOUS and MAP_NORESERVE under -std=c11. */
#define _DEFAULT_SOURCE
#include "fastmp_mpi.h"

#include <limits.h>
#include <pthread.h>
#include <sys/mman.h>
#include <stdlib.h>
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

/* The largest count of one MPI call (INT_MAX); lowered only by the hidden test knob
 * FASTMP_MPI_MAX_COUNT (read once, at fastmp_mpi_init) so that CI runs the path of messages over
 * 2 GiB with small data. */
static size_t max_count = INT_MAX;

void fastmp_mpi_read_max_count(void) {
    const char *knob = getenv("FASTMP_MPI_MAX_COUNT");
    if (knob == NULL) return;
    char *end = NULL;
    unsigned long long n = strtoull(knob, &end, 10);
    if (end != knob && *end == '\0' && n >= 1 && n <= INT_MAX) max_count = (size_t)n;
}

/* `len` bytes as (count, type): MPI_BYTE while `len` fits one count, else one element of a
 * committed datatype of `max_count`-byte chunks plus the remaining bytes (MPI matches type
 * signatures, so either side may use either form). Release the type with release_type once the
 * operation is started (MPI keeps a type alive while operations use it). */
static int bytes_type(size_t len, int *count, MPI_Datatype *type) {
    if (len <= max_count) {
        *count = (int)len;
        *type = MPI_BYTE;
        return MPI_SUCCESS;
    }
    size_t chunks = len / max_count, tail = len % max_count;
    if (chunks > INT_MAX) return MPI_ERR_COUNT;
    MPI_Datatype chunk, body;
    int rc = MPI_Type_contiguous((int)max_count, MPI_BYTE, &chunk);
    if (rc != MPI_SUCCESS) return rc;
    rc = MPI_Type_contiguous((int)chunks, chunk, &body);
    MPI_Type_free(&chunk);
    if (rc != MPI_SUCCESS) return rc;
    if (tail == 0) {
        *type = body;
    } else {
        int lengths[2] = {1, (int)tail};
        MPI_Aint displacements[2] = {0, (MPI_Aint)(chunks * max_count)};
        MPI_Datatype types[2] = {body, MPI_BYTE};
        rc = MPI_Type_create_struct(2, lengths, displacements, types, type);
        MPI_Type_free(&body);
        if (rc != MPI_SUCCESS) return rc;
    }
    rc = MPI_Type_commit(type);
    if (rc != MPI_SUCCESS) {
        MPI_Type_free(type);
        return rc;
    }
    *count = 1;
    return MPI_SUCCESS;
}

static void release_type(MPI_Datatype *type) {
    if (*type != MPI_BYTE) MPI_Type_free(type);
}

int fastmp_mpi_isend(const void *buf, size_t len, int dest, int tag, int comm, int synchronous,
                     fastmp_slot *request, int *done) {
    RESOLVE(c, comm);
    int count;
    MPI_Datatype type;
    int rc = bytes_type(len, &count, &type);
    if (rc != MPI_SUCCESS) return rc;
    MPI_Request r;
    rc = synchronous ? MPI_Issend(buf, count, type, dest, tag, c, &r) : MPI_Isend(buf, count, type, dest, tag, c, &r);
    release_type(&type);
    if (rc != MPI_SUCCESS) return rc;
    /* Small sends usually complete at once: then Rust tracks no request at all. */
    rc = MPI_Test(&r, done, MPI_STATUS_IGNORE);
    store_request(request, r);
    return rc;
}

/* A blocking MPI_Send: no request to allocate, test and free (the caller only sends small
 * messages this way, which MPI delivers eagerly). */
int fastmp_mpi_send(const void *buf, size_t len, int dest, int tag, int comm) {
    RESOLVE(c, comm);
    int count;
    MPI_Datatype type;
    int rc = bytes_type(len, &count, &type);
    if (rc != MPI_SUCCESS) return rc;
    rc = MPI_Send(buf, count, type, dest, tag, c);
    release_type(&type);
    return rc;
}

/* MPI_Get_count is cheaper than MPI_Get_elements_x in Open MPI 4.1 (callgrind: 44 against 57
 * instructions, paid by every small receive); only a count beyond an int (MPI_UNDEFINED) needs
 * the latter. */
static void describe(const MPI_Status *st, int *source, int *tag, long long *bytes) {
    int count = MPI_UNDEFINED;
    MPI_Get_count(st, MPI_BYTE, &count);
    if (count == MPI_UNDEFINED) {
        MPI_Count n = 0;
        MPI_Get_elements_x(st, MPI_BYTE, &n);
        *bytes = (long long)n;
    } else {
        *bytes = count;
    }
    *source = st->MPI_SOURCE;
    *tag = st->MPI_TAG;
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
    MPI_Datatype type;
    int rc = bytes_type(capacity, &count, &type);
    if (rc != MPI_SUCCESS) return rc;
    MPI_Message m;
    memcpy(&m, message, sizeof m);
    MPI_Request r;
    rc = MPI_Imrecv(buf, count, type, &m, &r);
    release_type(&type);
    if (rc == MPI_SUCCESS) store_request(request, r);
    return rc;
}

int fastmp_mpi_mrecv(void *buf, size_t capacity, fastmp_slot *message) {
    int count;
    MPI_Datatype type;
    int rc = bytes_type(capacity, &count, &type);
    if (rc != MPI_SUCCESS) return rc;
    MPI_Message m;
    memcpy(&m, message, sizeof m);
    rc = MPI_Mrecv(buf, count, type, &m, MPI_STATUS_IGNORE);
    release_type(&type);
    return rc;
}

int fastmp_mpi_irecv(void *buf, size_t len, int source, int tag, int comm, fastmp_slot *request) {
    if (source < 0 || tag < 0) return MPI_ERR_ARG;
    RESOLVE(c, comm);
    int count;
    MPI_Datatype type;
    int rc = bytes_type(len, &count, &type);
    if (rc != MPI_SUCCESS) return rc;
    MPI_Request r;
    rc = MPI_Irecv(buf, count, type, source, tag, c, &r);
    release_type(&type);
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

/* The bounce slots of small receives: BOUNCE_SLOTS buffers of address space for any message up
 * to BOUNCE_BYTES, reserved once and backed only where written, so a receive posted on one with
 * the largest count never truncates (Open MPI 4.1 writes a truncated message above its eager
 * size past the posted buffer, see fastmp_mpi.h) and a small one costs one copy. Rust hands
 * each slot to one receive at a time. */
#define BOUNCE_BYTES ((size_t)1 << 36)
#define BOUNCE_SLOTS 64
/* Slot i starts i colours past its multiple of BOUNCE_BYTES: slots at one power-of-two stride
 * would all map to the same cache set and page offset, so every small receive would miss the
 * L1 and L2 caches (64 slots against 12-16 ways). One page plus one line apart, the slots' first
 * lines fall in distinct sets; each slot still spans at least BOUNCE_BYTES. */
#define BOUNCE_COLOR ((size_t)4096 + 64)
/* Bytes kept backed after a receive; pages above are returned to the system. */
#define BOUNCE_KEEP ((size_t)1 << 16)
static char *bounce = NULL;
static pthread_once_t bounce_once = PTHREAD_ONCE_INIT;

static void reserve_bounce(void) {
    void *p = mmap(NULL, (BOUNCE_BYTES + BOUNCE_COLOR) * BOUNCE_SLOTS, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    bounce = p == MAP_FAILED ? NULL : p;
}

size_t fastmp_mpi_bounce_bytes(void) { return BOUNCE_BYTES; }

/* Where slot `slot` starts (see BOUNCE_COLOR). */
static char *bounce_at(int slot) { return bounce + (size_t)slot * (BOUNCE_BYTES + BOUNCE_COLOR); }

int fastmp_mpi_bounce_slots(void) {
    pthread_once(&bounce_once, reserve_bounce);
    return bounce != NULL ? BOUNCE_SLOTS : 0;
}

int fastmp_mpi_bounce_irecv(int slot, int source, int tag, int comm, fastmp_slot *request) {
    RESOLVE(c, comm);
    if (fastmp_mpi_bounce_slots() <= slot || slot < 0) return MPI_ERR_ARG;
    MPI_Request r;
    int rc = MPI_Irecv(bounce_at(slot), INT_MAX, MPI_BYTE,
                       source < 0 ? MPI_ANY_SOURCE : source, tag < 0 ? MPI_ANY_TAG : tag, c, &r);
    if (rc == MPI_SUCCESS) store_request(request, r);
    return rc;
}

void fastmp_mpi_bounce_take(int slot, void *buf, size_t copy, size_t received) {
    char *at = bounce_at(slot);
    memcpy(buf, at, copy);
    if (received > BOUNCE_KEEP) madvise(at + BOUNCE_KEEP, received - BOUNCE_KEEP, MADV_DONTNEED);
}

int fastmp_mpi_bounce_recv(int slot, int source, int tag, int comm, void *buf, size_t capacity, int *out_source,
                           int *out_tag, long long *bytes) {
    RESOLVE(c, comm);
    /* A caller holding a slot got it after fastmp_mpi_bounce_slots: no pthread_once per receive. */
    if (bounce == NULL || slot >= BOUNCE_SLOTS || slot < 0) return MPI_ERR_ARG;
    MPI_Status st;
    int rc = MPI_Recv(bounce_at(slot), INT_MAX, MPI_BYTE, source < 0 ? MPI_ANY_SOURCE : source,
                      tag < 0 ? MPI_ANY_TAG : tag, c, &st);
    if (rc != MPI_SUCCESS) return rc;
    describe(&st, out_source, out_tag, bytes);
    size_t received = (size_t)*bytes;
    fastmp_mpi_bounce_take(slot, buf, received < capacity ? received : capacity, received);
    return MPI_SUCCESS;
}
