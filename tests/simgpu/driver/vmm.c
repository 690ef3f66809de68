/* SPDX-License-Identifier: Apache-2.0 */
/* simgpu driver: virtual memory management (cuMemCreate, cuMemMap and friends). */
#include "driver.h"

/*
 * What simgpu models: pinned device memory of one of this process's devices. Handle
 * types requested for export, compression and the other properties are accepted and
 * ignored (no IPC between simulated processes goes through VMM handles).
 */
static CUresult prop_check(const CUmemAllocationProp *prop)
{
	if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	if (!simgpu_driver_device_valid(prop->location.id))
		return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}

/*
 * One access descriptor. Sets *read_write for PROT_READWRITE, clears it for PROT_NONE;
 * read-only mappings are not modelled.
 */
static CUresult access_check(const CUmemAccessDesc *desc, bool *read_write)
{
	if (desc->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	if (!simgpu_driver_device_valid(desc->location.id))
		return CUDA_ERROR_INVALID_DEVICE;
	switch (desc->flags) {
	case CU_MEM_ACCESS_FLAGS_PROT_READWRITE:
		*read_write = true;
		return CUDA_SUCCESS;
	case CU_MEM_ACCESS_FLAGS_PROT_NONE:
		*read_write = false;
		return CUDA_SUCCESS;
	case CU_MEM_ACCESS_FLAGS_PROT_READ:
		return CUDA_ERROR_NOT_SUPPORTED;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* Both options answer the same size: simgpu has one granularity (SIMGPU_VMM_GRANULARITY). */
SIMGPU_EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity,
                                                     const CUmemAllocationProp *prop,
                                                     CUmemAllocationGranularity_flags option)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemGetAllocationGranularity);
	CUresult res;

	if (err)
		return err;
	if (!granularity || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
	                     option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
		return CUDA_ERROR_INVALID_VALUE;
	res = prop_check(prop);
	if (res != CUDA_SUCCESS)
		return res;
	*granularity = simgpu_vmm_granularity();
	return CUDA_SUCCESS;
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemGetAllocationGranularity);

SIMGPU_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment,
                                           CUdeviceptr addr, unsigned long long flags)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemAddressReserve);

	if (err)
		return err;
	if (!ptr || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	return simgpu_vmm_reserve(ptr, size, alignment, addr);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemAddressReserve);

SIMGPU_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemAddressFree);

	if (err)
		return err;
	return simgpu_vmm_address_free(ptr, size);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemAddressFree);

SIMGPU_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                                   const CUmemAllocationProp *prop, unsigned long long flags)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemCreate);
	CUresult res;

	if (err)
		return err;
	if (!handle || flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	res = prop_check(prop);
	if (res != CUDA_SUCCESS)
		return res;
	return simgpu_vmm_create(handle, size);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemCreate);

SIMGPU_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemRelease);

	if (err)
		return err;
	return simgpu_vmm_release(handle);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemRelease);

SIMGPU_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                                CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemMap);

	if (err)
		return err;
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	return simgpu_vmm_map(ptr, size, offset, handle);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemMap);

SIMGPU_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemUnmap);

	if (err)
		return err;
	return simgpu_vmm_unmap(ptr, size);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemUnmap);

/*
 * simgpu's devices share one memory, so it cannot tell which device touches a range:
 * the range becomes read-write if any descriptor grants read-write, inaccessible if
 * all say PROT_NONE. All descriptors are checked before anything changes.
 */
SIMGPU_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                                      size_t count)
{
	CUresult err = simgpu_driver_enter(SIMGPU_API_cuMemSetAccess);
	bool any_read_write = false;

	if (err)
		return err;
	if (!desc || count == 0)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++) {
		bool read_write;
		CUresult res = access_check(&desc[i], &read_write);

		if (res != CUDA_SUCCESS)
			return res;
		any_read_write |= read_write;
	}
	return simgpu_vmm_set_access(ptr, size, any_read_write);
}
SIMGPU_DRIVER_LOCAL_NAME(cuMemSetAccess);
