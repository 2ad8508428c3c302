/* Initialisation, the communicator handle table, error strings and abort (see fastmp_mpi.h). */
#include "fastmp_mpi.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Enough for every communicator Open MPI or MPICH can create at once (both run out of context
 * ids well before this). */
#define FASTMP_MAX_COMMS 16384

static MPI_Comm comms[FASTMP_MAX_COMMS];
static int comms_used = 0; /* highest handle ever given out + 1 */
static pthread_mutex_t comms_lock = PTHREAD_MUTEX_INITIALIZER;

MPI_Comm fastmp_mpi_comm(int handle) {
    if (handle < 0 || handle >= FASTMP_MAX_COMMS) return MPI_COMM_NULL;
    return comms[handle];
}

/* Stores `comm` in a free slot; MPI_ERR_INTERN when the table is full. */
static int store(MPI_Comm comm, int *handle) {
    int rc = MPI_ERR_INTERN;
    pthread_mutex_lock(&comms_lock);
    if (comms_used == 0) {
        for (int i = 0; i < FASTMP_MAX_COMMS; i++) comms[i] = MPI_COMM_NULL;
    }
    for (int i = 0; i < FASTMP_MAX_COMMS; i++) {
        if (comms[i] == MPI_COMM_NULL) {
            comms[i] = comm;
            *handle = i;
            if (i >= comms_used) comms_used = i + 1;
            rc = MPI_SUCCESS;
            break;
        }
    }
    pthread_mutex_unlock(&comms_lock);
    return rc;
}

static void finalize_at_exit(void) {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
}

/* Thread levels as the Rust side codes them (`Level`). */
static int level_code(int provided) {
    if (provided >= MPI_THREAD_MULTIPLE) return 2;
    return provided >= MPI_THREAD_SERIALIZED ? 1 : 0;
}

int fastmp_mpi_init(int wanted, int *granted) {
    int initialized = 0, provided = MPI_THREAD_SINGLE;
    int rc = MPI_Initialized(&initialized);
    if (rc != MPI_SUCCESS) return rc;
    if (initialized) {
        rc = MPI_Query_thread(&provided);
    } else {
        int level = wanted >= 2 ? MPI_THREAD_MULTIPLE : wanted == 1 ? MPI_THREAD_SERIALIZED : MPI_THREAD_SINGLE;
        rc = MPI_Init_thread(NULL, NULL, level, &provided);
        if (rc == MPI_SUCCESS) atexit(finalize_at_exit);
    }
    if (rc != MPI_SUCCESS) return rc;
    fastmp_mpi_read_max_count();
    *granted = level_code(provided);
    if (wanted >= 1 && provided < MPI_THREAD_SERIALIZED) return MPI_ERR_OTHER;
    /* Errors of the world itself (and of anything before a dup) return too. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    return MPI_SUCCESS;
}

/* A new communicator gets MPI_ERRORS_RETURN and a handle; freed again if no handle is left. */
static int adopt(MPI_Comm comm, int *handle) {
    int rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    if (rc == MPI_SUCCESS) rc = store(comm, handle);
    if (rc != MPI_SUCCESS) MPI_Comm_free(&comm);
    return rc;
}

/* A copy of the world by MPI_Comm_create_group, not MPI_Comm_dup: Open MPI 4.1 agrees on a dup's
 * context id with a nonblocking allreduce on the world, after which libnbc's progress function
 * runs in every progress loop of the process for good (11 % of the instructions of a loop of
 * 8-byte ping-pongs and allreduces); create_group agrees by point-to-point messages. Copies of
 * the world are made one at a time, in the same order by every process: one tag serves them all. */
int fastmp_mpi_world_dup(int *handle) {
    MPI_Group group;
    int rc = MPI_Comm_group(MPI_COMM_WORLD, &group);
    if (rc != MPI_SUCCESS) return rc;
    MPI_Comm dup;
    rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, 0, &dup);
    MPI_Group_free(&group);
    if (rc != MPI_SUCCESS) return rc;
    return adopt(dup, handle);
}

int fastmp_mpi_comm_create_group(int parent, const int *ranks, int n, int tag, int *handle) {
    MPI_Comm parent_comm = fastmp_mpi_comm(parent);
    if (parent_comm == MPI_COMM_NULL) return MPI_ERR_COMM;
    MPI_Group parent_group, group;
    int rc = MPI_Comm_group(parent_comm, &parent_group);
    if (rc != MPI_SUCCESS) return rc;
    rc = MPI_Group_incl(parent_group, n, ranks, &group);
    MPI_Group_free(&parent_group);
    if (rc != MPI_SUCCESS) return rc;
    MPI_Comm comm;
    rc = MPI_Comm_create_group(parent_comm, group, tag, &comm);
    MPI_Group_free(&group);
    if (rc != MPI_SUCCESS) return rc;
    return adopt(comm, handle);
}

int fastmp_mpi_comm_free(int handle) {
    MPI_Comm comm = fastmp_mpi_comm(handle);
    if (comm == MPI_COMM_NULL) return MPI_ERR_COMM;
    pthread_mutex_lock(&comms_lock);
    comms[handle] = MPI_COMM_NULL;
    pthread_mutex_unlock(&comms_lock);
    return MPI_Comm_free(&comm);
}

int fastmp_mpi_comm_rank(int handle, int *rank) {
    MPI_Comm comm = fastmp_mpi_comm(handle);
    return comm == MPI_COMM_NULL ? MPI_ERR_COMM : MPI_Comm_rank(comm, rank);
}

int fastmp_mpi_comm_size(int handle, int *size) {
    MPI_Comm comm = fastmp_mpi_comm(handle);
    return comm == MPI_COMM_NULL ? MPI_ERR_COMM : MPI_Comm_size(comm, size);
}

int fastmp_mpi_error_string(int code, char *buf, int capacity, int *len) {
    char text[MPI_MAX_ERROR_STRING];
    int n = 0;
    int rc = MPI_Error_string(code, text, &n);
    if (rc != MPI_SUCCESS) return rc;
    if (n > capacity) n = capacity;
    memcpy(buf, text, (size_t)n);
    *len = n;
    return MPI_SUCCESS;
}

int fastmp_mpi_max_name(void) { return MPI_MAX_PROCESSOR_NAME; }

/* Every rank's processor name, `name_capacity` bytes each (NUL-padded), in rank order. */
int fastmp_mpi_gather_names(int handle, char *names, int name_capacity) {
    MPI_Comm comm = fastmp_mpi_comm(handle);
    if (comm == MPI_COMM_NULL) return MPI_ERR_COMM;
    char *mine = calloc((size_t)name_capacity, 1);
    if (mine == NULL) return MPI_ERR_NO_MEM;
    int len = 0;
    int rc = name_capacity >= MPI_MAX_PROCESSOR_NAME ? MPI_Get_processor_name(mine, &len) : MPI_ERR_ARG;
    if (rc == MPI_SUCCESS)
        rc = MPI_Allgather(mine, name_capacity, MPI_CHAR, names, name_capacity, MPI_CHAR, comm);
    free(mine);
    return rc;
}

int fastmp_mpi_abort(int handle, int code) {
    MPI_Comm comm = fastmp_mpi_comm(handle);
    return MPI_Abort(comm == MPI_COMM_NULL ? MPI_COMM_WORLD : comm, code);
}

MPI_Datatype fastmp_mpi_element_type(int code) {
    switch (code) {
    case 0: return MPI_INT8_T;
    case 1: return MPI_INT16_T;
    case 2: return MPI_INT32_T;
    case 3: return MPI_INT64_T;
    case 4: return MPI_UINT8_T;
    case 5: return MPI_UINT16_T;
    case 6: return MPI_UINT32_T;
    case 7: return MPI_UINT64_T;
    case 8: return MPI_FLOAT;
    case 9: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
    }
}
