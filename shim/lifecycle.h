/* SPDX-License-Identifier: Apache-2.0 */
/* liblynx.so's state after its lazy initialisation (lifecycle.c). */
#ifndef LYNX_LIFECYCLE_H
#define LYNX_LIFECYCLE_H

#include "config.h"

/* The configuration in force; valid once the first intercepted call has initialised Lynx. */
const struct lynx_config *lynx_config(void);

struct lynx_profile_run;

/*
 * The job's run (profiler/run.h): from TORCHELASTIC_* and SLURM_* as they were at
 * initialisation, else the largest NCCL communicator's unique id, else none; with the
 * process's start. Any thread, once initialised; what it says of NCCL can change until the
 * job's communicators are made (profiles are built after).
 */
void lynx_job_run(struct lynx_profile_run *out);

#endif /* LYNX_LIFECYCLE_H */
