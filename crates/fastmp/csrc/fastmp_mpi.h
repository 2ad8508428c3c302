/* The fixed C ABI between fastmp's `mpi` device and the system MPI.
 *
 * Rust never sees an MPI type: communicators are integer handles (see fastmp_mpi_comm), requests
 * and matched messages are opaque 64-bit slots owned by Rust, and every function takes and
 * returns only C ints, long long / size_t, double and pointers, returning an MPI error code
 * (MPI_SUCCESS = 0). The same Rust code therefore links against any MPI whose mpi.h this file
 * compiles with (Open MPI, MPICH, the MPI-5 ABI library).
 */
#ifndef FASTMP_MPI_H
#define FASTMP_MPI_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

/* The MPI communicator behind `handle` (MPI_COMM_NULL for a handle not in use). */
MPI_Comm fastmp_mpi_comm(int handle);

/* The MPI datatype of an element code, shared by the reductions and the one-sided operations:
 * 0-3 int8..int64, 4-7 uint8..uint64, 8 float, 9 double (the order of Rust's `ElementType` and
 * `Element`); MPI_DATATYPE_NULL for any other code. */
MPI_Datatype fastmp_mpi_element_type(int code);

/* Request and message handles travel through Rust as 64-bit slots. */
typedef uint64_t fastmp_slot;

/* ---- mpi_core.c ---- */
/* Initialises MPI once per process at thread level `wanted` (0 MPI_THREAD_SINGLE, 1 SERIALIZED,
 * 2 MULTIPLE); `*granted` is the level MPI granted in the same code (FUNNELED counts as 0).
 * MPI_ERR_OTHER if SERIALIZED or more was wanted and MPI grants less. */
int fastmp_mpi_init(int wanted, int *granted);
int fastmp_mpi_world_dup(int *handle);
int fastmp_mpi_comm_create_group(int parent, const int *ranks, int n, int tag, int *handle);
int fastmp_mpi_comm_free(int handle);
int fastmp_mpi_comm_rank(int handle, int *rank);
int fastmp_mpi_comm_size(int handle, int *size);
int fastmp_mpi_error_string(int code, char *buf, int capacity, int *len);
int fastmp_mpi_gather_names(int handle, char *names, int name_capacity);
int fastmp_mpi_abort(int handle, int code);
int fastmp_mpi_max_name(void);

/* ---- mpi_p2p.c ----
 * Receives go through matched probes (fastmp_mpi_improbe + fastmp_mpi_imrecv) so that a message
 * is only ever received into a buffer it fits: Open MPI 4.1's single-copy path writes a
 * truncated message past the end of a smaller posted MPI_Irecv buffer. */
/* Reads the hidden test knob FASTMP_MPI_MAX_COUNT (the largest count of one MPI call, INT_MAX
 * unless lowered): messages longer than it travel as one element of a derived datatype. */
void fastmp_mpi_read_max_count(void);
int fastmp_mpi_isend(const void *buf, size_t len, int dest, int tag, int comm, int synchronous,
                     fastmp_slot *request, int *done);
int fastmp_mpi_send(const void *buf, size_t len, int dest, int tag, int comm);
int fastmp_mpi_test(fastmp_slot *request, int *done, int *source, int *tag, long long *bytes,
                    int *cancelled);
int fastmp_mpi_cancel(fastmp_slot *request);
int fastmp_mpi_request_free(fastmp_slot *request);
int fastmp_mpi_iprobe(int source, int tag, int comm, int *found, int *out_source, int *out_tag,
                      long long *bytes);
int fastmp_mpi_improbe(int source, int tag, int comm, int *found, fastmp_slot *message,
                       int *out_source, int *out_tag, long long *bytes);
int fastmp_mpi_imrecv(void *buf, size_t capacity, fastmp_slot *message, fastmp_slot *request);
/* The blocking receive of a matched message known to fit `capacity` (one MPI call instead of
 * MPI_Imrecv + MPI_Test: the blocking receive's fast path). */
int fastmp_mpi_mrecv(void *buf, size_t capacity, fastmp_slot *message);
/* A receive of exactly `len` bytes from `source` (>= 0) with `tag` (>= 0): only for messages whose
 * length is known in advance (the hybrid device's payloads, announced by their header). */
int fastmp_mpi_irecv(void *buf, size_t len, int source, int tag, int comm, fastmp_slot *request);
/* Small receives: process-wide bounce slots (Rust hands each to one receive at a time) of
 * address space larger than any message, so MPI never truncates into them.
 * fastmp_mpi_bounce_irecv posts a receive on slot `slot` (wildcards below 0); once it completed,
 * fastmp_mpi_bounce_take copies its first `copy` bytes to `buf` and returns the pages of a long
 * message (`received` bytes). */
int fastmp_mpi_bounce_slots(void); /* how many slots exist: 0 where they could not be reserved */
/* A slot's size: no message may be longer (a longer one would overrun it, as MPI may write a
 * truncated message past the posted buffer). */
size_t fastmp_mpi_bounce_bytes(void);
int fastmp_mpi_bounce_irecv(int slot, int source, int tag, int comm, fastmp_slot *request);
void fastmp_mpi_bounce_take(int slot, void *buf, size_t copy, size_t received);
/* A blocking receive on slot `slot` (MPI_Recv, then fastmp_mpi_bounce_take of the first
 * `capacity` bytes into `buf`): the small blocking receive in one call, with its status. */
int fastmp_mpi_bounce_recv(int slot, int source, int tag, int comm, void *buf, size_t capacity, int *out_source,
                           int *out_tag, long long *bytes);
/* The MPI_TAG_UB attribute of MPI_COMM_WORLD. */
int fastmp_mpi_tag_ub(int *tag_ub);

#endif
