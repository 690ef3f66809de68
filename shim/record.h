/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Filling an event's payload from a hook's arguments (hooks.def's record column). Each
 * takes the event being recorded, or NULL when the call is not recorded (then only the
 * state that must be kept regardless, the NCCL group depth, is updated).
 */
#ifndef LYNX_RECORD_H
#define LYNX_RECORD_H

#include <cuda_runtime_api.h>

#include "recorder.h"

/* The calling thread's NCCL group depth (ncclGroupStart/End nesting). */
extern __thread int lynx_group_depth __attribute__((tls_model("initial-exec")));

static inline void lynx_record_mem(struct lynx_event *ev, uint64_t ptr, uint64_t bytes,
                                   uint64_t stream)
{
	if (!ev)
		return;
	ev->u.mem.ptr = ptr;
	ev->u.mem.bytes = bytes;
	ev->stream = stream;
}

static inline void lynx_record_copy(struct lynx_event *ev, uint64_t dst, uint64_t src,
                                    uint64_t bytes, int direction, uint64_t stream)
{
	if (!ev)
		return;
	ev->u.copy.dst = dst;
	ev->u.copy.src = src;
	ev->u.copy.bytes = bytes;
	ev->u.copy.direction = direction;
	ev->stream = stream;
}

/* handle: the stream, event or communicator concerned; stream: where it happens. */
static inline void lynx_record_handle(struct lynx_event *ev, uint64_t stream, uint64_t handle)
{
	if (!ev)
		return;
	ev->u.sync.handle = handle;
	ev->stream = stream;
}

static inline void lynx_record_launch(struct lynx_event *ev, uint64_t function, uint32_t gx,
                                      uint32_t gy, uint32_t gz, uint32_t bx, uint32_t by,
                                      uint32_t bz, uint32_t shared_mem, uint64_t stream)
{
	if (!ev)
		return;
	ev->u.launch.function = function;
	ev->u.launch.grid[0] = gx;
	ev->u.launch.grid[1] = gy;
	ev->u.launch.grid[2] = gz;
	ev->u.launch.block[0] = bx;
	ev->u.launch.block[1] = by;
	ev->u.launch.block[2] = bz;
	ev->u.launch.shared_mem = shared_mem;
	ev->stream = stream;
}

static inline void lynx_record_launch_config(struct lynx_event *ev, const cudaLaunchConfig_t *cfg,
                                             uint64_t function)
{
	if (!ev || !cfg)
		return;
	lynx_record_launch(ev, function, cfg->gridDim.x, cfg->gridDim.y, cfg->gridDim.z,
	                   cfg->blockDim.x, cfg->blockDim.y, cfg->blockDim.z,
	                   (uint32_t)cfg->dynamicSmemBytes, (uint64_t)(uintptr_t)cfg->stream);
}

/* peer: the root of rooted collectives, the peer of send/recv, -1 otherwise; op -1 when
 * the call has no reduction. */
static inline void lynx_record_nccl(struct lynx_event *ev, uint64_t send, uint64_t recv,
                                    uint64_t count, int type, int op, int peer, uint64_t comm,
                                    uint64_t stream)
{
	if (!ev)
		return;
	ev->u.nccl.sendbuf = send;
	ev->u.nccl.recvbuf = recv;
	ev->u.nccl.count = count;
	ev->u.nccl.datatype = type;
	ev->u.nccl.op = op;
	ev->u.nccl.peer = peer;
	ev->u.nccl.comm = comm;
	ev->u.nccl.group_depth = lynx_group_depth;
	ev->stream = stream;
}

/* A communicator made: its handle (in nccl.comm), size (in nccl.count) and this rank in it
 * (in nccl.peer); 0 and -1 when not known. */
static inline void lynx_record_comm(struct lynx_event *ev, uint64_t comm, int nranks, int rank)
{
	if (!ev)
		return;
	ev->u.nccl.comm = comm;
	ev->u.nccl.count = nranks > 0 ? (uint64_t)nranks : 0;
	ev->u.nccl.peer = rank;
	ev->u.nccl.group_depth = lynx_group_depth;
}

/* delta: +1 for a successful ncclGroupStart, -1 for ncclGroupEnd, 0 on failure. */
static inline void lynx_record_group(struct lynx_event *ev, int delta)
{
	lynx_group_depth += delta;
	if (!ev)
		return;
	ev->u.nccl.group_depth = lynx_group_depth;
}

#endif /* LYNX_RECORD_H */
