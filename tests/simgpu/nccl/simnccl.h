/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The one place simgpu's NCCL layer includes <nccl.h>. NCCL 2.28's header (through
 * cuda_fp16.h and cuda_bf16.h) tests undefined macros and declares functions without
 * prototypes; the project builds with -Wundef -Wstrict-prototypes -Werror and takes
 * CUDA headers with -I, so those two warnings are silenced for that header alone.
 */
#ifndef SIMGPU_NCCL_SIMNCCL_H
#define SIMGPU_NCCL_SIMNCCL_H

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include <stdint.h>

/* Longest message the layer keeps (last error, failure reasons). */
#define SIMNCCL_MSG_LEN 1024

#endif /* SIMGPU_NCCL_SIMNCCL_H */
