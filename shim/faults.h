/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The faults a test injects into recompute mode (LYNX_FAULT) to show that a safety check
 * matters, declared once: the executor's enum (executor.h) and the setting's values
 * (options.def) both come from this list. No CUDA: config.c and the lynx command include it.
 */
#ifndef LYNX_FAULTS_H
#define LYNX_FAULTS_H

/* X(ID, name); "none" first, the default. */
#define LYNX_EXEC_FAULTS(X)                                                                       \
	X(NONE, "none")                                                                           \
	X(SKIP_STREAM_WAITS, "skip-stream-waits") /* no stream waits for another's event */       \
	X(FAIL_STREAM_WAITS, "fail-stream-waits") /* every stream wait fails (the host waits) */  \
	X(FAIL_PREFETCH, "fail-prefetch")         /* every restore on the restore stream fails */ \
	X(FAIL_REPLAY, "fail-replay")             /* each replay's first launch fails */          \
	X(LOSE_REPLAYS, "lose-replays")           /* every replay launch fails: bytes lost */     \
	/* every iteration's second non-synchronising call differs from the script: lost */       \
	X(LOSE_TRACK, "lose-track")                                                               \
	/* the plan counts buffers below a granule as evictable and leaves no room for what       \
	 * warm-up had beyond its tensors: it predicts low */                                     \
	X(PLAN_LOW, "plan-low")

/* The names joined by '|' ("none|skip-stream-waits|..."), options.def's values for
 * LYNX_FAULT: each name follows a bar, and the string starts past the first. */
#define LYNX_EXEC_FAULT_BAR_NAME(id, name) "|" name
#define LYNX_EXEC_FAULT_VALUES (&LYNX_EXEC_FAULTS(LYNX_EXEC_FAULT_BAR_NAME)[1])

#endif
