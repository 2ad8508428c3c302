//! The C shim's functions from `csrc/mpi_core.c` and `csrc/mpi_p2p.c` (declared in
//! `csrc/fastmp_mpi.h`): only C ints, sizes, pointers and 64-bit opaque slots cross, so no MPI
//! type or constant is needed on this side. Every function returns an MPI error code.

use std::ffi::{c_char, c_int, c_longlong, c_void};

/// An MPI request or matched message, opaque to Rust (`fastmp_slot` in the header).
pub(crate) type Slot = u64;

unsafe extern "C" {
    pub(crate) fn fastmp_mpi_init(wanted: c_int, granted: *mut c_int) -> c_int;
    pub(crate) fn fastmp_mpi_world_dup(handle: *mut c_int) -> c_int;
    pub(crate) fn fastmp_mpi_comm_create_group(
        parent: c_int,
        ranks: *const c_int,
        n: c_int,
        tag: c_int,
        handle: *mut c_int,
    ) -> c_int;
    pub(crate) fn fastmp_mpi_comm_free(handle: c_int) -> c_int;
    pub(crate) fn fastmp_mpi_comm_rank(handle: c_int, rank: *mut c_int) -> c_int;
    pub(crate) fn fastmp_mpi_comm_size(handle: c_int, size: *mut c_int) -> c_int;
    pub(crate) fn fastmp_mpi_error_string(code: c_int, buf: *mut c_char, capacity: c_int, len: *mut c_int) -> c_int;
    pub(crate) fn fastmp_mpi_max_name() -> c_int;
    pub(crate) fn fastmp_mpi_gather_names(handle: c_int, names: *mut c_char, name_capacity: c_int) -> c_int;
    pub(crate) fn fastmp_mpi_abort(handle: c_int, code: c_int) -> c_int;

    pub(crate) fn fastmp_mpi_isend(
        buf: *const c_void,
        len: usize,
        dest: c_int,
        tag: c_int,
        comm: c_int,
        synchronous: c_int,
        request: *mut Slot,
        done: *mut c_int,
    ) -> c_int;
    pub(crate) fn fastmp_mpi_send(buf: *const c_void, len: usize, dest: c_int, tag: c_int, comm: c_int) -> c_int;
    pub(crate) fn fastmp_mpi_test(
        request: *mut Slot,
        done: *mut c_int,
        source: *mut c_int,
        tag: *mut c_int,
        bytes: *mut c_longlong,
        cancelled: *mut c_int,
    ) -> c_int;
    pub(crate) fn fastmp_mpi_cancel(request: *mut Slot) -> c_int;
    pub(crate) fn fastmp_mpi_iprobe(
        source: c_int,
        tag: c_int,
        comm: c_int,
        found: *mut c_int,
        out_source: *mut c_int,
        out_tag: *mut c_int,
        bytes: *mut c_longlong,
    ) -> c_int;
    pub(crate) fn fastmp_mpi_improbe(
        source: c_int,
        tag: c_int,
        comm: c_int,
        found: *mut c_int,
        message: *mut Slot,
        out_source: *mut c_int,
        out_tag: *mut c_int,
        bytes: *mut c_longlong,
    ) -> c_int;
    pub(crate) fn fastmp_mpi_imrecv(buf: *mut c_void, capacity: usize, message: *mut Slot, request: *mut Slot)
    -> c_int;
    pub(crate) fn fastmp_mpi_mrecv(buf: *mut c_void, capacity: usize, message: *mut Slot) -> c_int;
    pub(crate) fn fastmp_mpi_irecv(
        buf: *mut c_void,
        len: usize,
        source: c_int,
        tag: c_int,
        comm: c_int,
        request: *mut Slot,
    ) -> c_int;
    pub(crate) fn fastmp_mpi_bounce_slots() -> c_int;
    pub(crate) fn fastmp_mpi_bounce_bytes() -> usize;
    pub(crate) fn fastmp_mpi_bounce_irecv(
        slot: c_int,
        source: c_int,
        tag: c_int,
        comm: c_int,
        request: *mut Slot,
    ) -> c_int;
    pub(crate) fn fastmp_mpi_bounce_take(slot: c_int, buf: *mut c_void, copy: usize, received: usize);
    pub(crate) fn fastmp_mpi_bounce_recv(
        slot: c_int,
        source: c_int,
        tag: c_int,
        comm: c_int,
        buf: *mut c_void,
        capacity: usize,
        out_source: *mut c_int,
        out_tag: *mut c_int,
        bytes: *mut c_longlong,
    ) -> c_int;
    pub(crate) fn fastmp_mpi_tag_ub(tag_ub: *mut c_int) -> c_int;
}
