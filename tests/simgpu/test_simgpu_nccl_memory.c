/* SPDX-License-Identifier: Apache-2.0 */
/* simgpu's NCCL memory and buffer registration, on a one-rank communicator. */
#include <cuda_runtime_api.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "simgpu.h"

static int setup(void **state)
{
	static ncclComm_t comm;
	ncclUniqueId id;

	if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess)
		return -1;
	*state = comm;
	return 0;
}

static int teardown(void **state)
{
	return ncclCommDestroy(*state) == ncclSuccess ? 0 : -1;
}

static void test_nccl_memory_is_device_memory_that_registers(void **state)
{
	ncclComm_t comm = *state;
	struct simgpu_memory_stats before, during;
	void *buf = NULL, *handle = NULL;

	simgpu_memory_stats(&before);
	assert_int_equal(ncclMemAlloc(&buf, 1 << 20), ncclSuccess);
	simgpu_memory_stats(&during);
	assert_int_equal(during.current_bytes, before.current_bytes + (1 << 20));
	/* Usable by CUDA like any device buffer. */
	assert_int_equal(cudaMemset(buf, 7, 1 << 20), cudaSuccess);
	assert_int_equal(ncclCommRegister(comm, buf, 1 << 20, &handle), ncclSuccess);
	assert_non_null(handle);
	assert_int_equal(ncclCommDeregister(comm, handle), ncclSuccess);
	assert_int_equal(ncclMemFree(buf), ncclSuccess);
	simgpu_memory_stats(&during);
	assert_int_equal(during.current_bytes, before.current_bytes);
}

static void test_bad_registrations_are_refused(void **state)
{
	ncclComm_t comm = *state;
	void *handle = NULL, *buf = NULL;
	char host[64];

	assert_int_equal(ncclMemAlloc(NULL, 64), ncclInvalidArgument);
	assert_int_equal(ncclCommRegister(comm, host, sizeof(host), &handle), ncclInvalidArgument);
	assert_int_equal(ncclMemAlloc(&buf, 4096), ncclSuccess);
	assert_int_equal(ncclCommRegister(comm, buf, 8192, &handle), ncclInvalidArgument);
	assert_int_equal(ncclCommDeregister(comm, NULL), ncclInvalidArgument);
	assert_int_equal(ncclMemFree(host), ncclInvalidArgument);
	assert_int_equal(ncclMemFree(buf), ncclSuccess);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_nccl_memory_is_device_memory_that_registers),
	        cmocka_unit_test(test_bad_registrations_are_refused),
	};
	return cmocka_run_group_tests_name("simgpu_nccl_memory", tests, setup, teardown);
}
