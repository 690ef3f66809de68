/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Which launch of a job a profile comes from, and the launches ("runs") among the profiles a
 * reader was given. The shim names its run with lynx_run_identify(), from what every rank of
 * one launch sees alike; `lynx report` and `lynx plan` group what they read with
 * lynx_runs_group(), take one run, and say which (lynx_runs_print_choice), since LYNX_OUT is
 * often reused and each launch overwrites only the profile.<rank>.json of its own ranks.
 *
 * The id, the first of these that is there:
 *  - TORCHELASTIC_RUN_ID (torchrun's rendezvous id), unless empty or "none": torchrun gives
 *    every launch "none" unless it runs with --standalone or --rdzv-id. An elastic restart
 *    keeps the id, so TORCHELASTIC_RESTART_COUNT = N > 0 makes it "ID.restartN".
 *  - SLURM_JOB_ID, as "JOB.STEP" when SLURM_STEP_ID is set (a job runs several launches as
 *    steps; a batch script that starts two launches itself gives both the same id).
 *  - The FNV-1a 64-bit hash, as 16 hex digits, of the ncclUniqueId of the largest
 *    communicator the process made with ncclCommInitRank(Config): the ranks of a launch share
 *    it (its world), and NCCL makes a new one, at random, per launch.
 *  - None: source "none", id "".
 * Control characters in an id become '_' and it is cut at LYNX_PROFILE_RUN_ID_MAX bytes.
 *
 * Profiles are of one run when they have:
 *  - an id: the same source, id and world size. Another world size under one id is another
 *    launch (an id reused by hand, an elastic restart at another size). Two launches that
 *    reuse one id at one world size look like one run; their ranks' files overwrite each
 *    other's, so only a later launch that writes fewer ranks mixes in.
 *  - source "none": the same world size, and process starts each within
 *    LYNX_RUN_START_WINDOW_S of the one before (the ranks of a launch start together).
 *  - no "run" (profiles from before it, or built by `lynx profile` from a dump): the same world
 *    size. Nothing else tells them apart; they are never one run with profiles that have one.
 *
 * A run's start is its earliest rank's; runs are ordered newest first, by start, or for
 * profiles without "run" by their files' newest modification time; ties go to the run with
 * more ranks, then by name. No global state: any thread may call these on its own data.
 */
#ifndef LYNX_PROF_RUN_H
#define LYNX_PROF_RUN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "profile.h"

/* Ranks of one launch without an id start within this many seconds of each other. */
#define LYNX_RUN_START_WINDOW_S 60

/* What the process knows of its launch; NULL strings are unset variables. */
struct lynx_run_facts {
	const char *torchelastic_run_id, *torchelastic_restart_count;
	const char *slurm_job_id, *slurm_step_id;
	bool comm_hashed;   /* comm_hash holds the world communicator's id, hashed */
	uint64_t comm_hash; /* lynx_run_hash of its ncclUniqueId */
	uint64_t started;   /* unix seconds when the process started */
};

/* The run the facts name (known true), as the header says. */
void lynx_run_identify(const struct lynx_run_facts *facts, struct lynx_profile_run *out);

/* FNV-1a, 64 bits, of bytes[0..len). */
uint64_t lynx_run_hash(const void *bytes, size_t len);

/*
 * The process's start in unix seconds, from the text of /proc/self/stat (its 22nd field,
 * clock ticks since boot) and of /proc/stat (btime, the boot in unix seconds). Returns 0, or
 * -EINVAL when either text lacks its field.
 */
int lynx_run_parse_started(const char *self_stat, const char *proc_stat, long ticks_per_s,
                           uint64_t *out);

/* This process's start, read from /proc. Returns 0 or -errno (no /proc: -ENOENT). */
int lynx_run_process_started(uint64_t *out);

/* Whether a and b are of one run, by the rules above (for one profile against another; a
 * chain of starts is lynx_runs_group's). */
bool lynx_run_same(const struct lynx_profile *a, const struct lynx_profile *b);

/* One run among the profiles given. */
struct lynx_run_group {
	struct lynx_profile_run run; /* its first profile's, started the earliest rank's */
	int32_t world;               /* -1: unknown */
	size_t *members;             /* indices into the profiles given, ascending */
	size_t count;
	int64_t newest_mtime; /* the newest modification time of its files; 0: unknown */
	/* What --run takes: the id ("#2", "#3"... after an id another run has too), or
	 * "none@<started>" for a run without an id, or "unknown@world<W>" ("unknown" with no
	 * world) for profiles without "run". */
	char name[LYNX_PROFILE_RUN_ID_MAX + 32];
};

struct lynx_runs {
	struct lynx_run_group *groups; /* newest first */
	size_t count;
};

/*
 * Groups profiles[0..n) into runs; mtimes[i] is profile i's file's modification time in unix
 * seconds (0 or a NULL mtimes: unknown). Returns 0 or -ENOMEM (out then holds nothing to
 * free). O(n log n), and O(runs^2) to name the runs.
 */
int lynx_runs_group(const struct lynx_profile *const *profiles, const int64_t *mtimes, size_t n,
                    struct lynx_runs *out);

/* The run --run NAME names, or NULL. */
const struct lynx_run_group *lynx_runs_find(const struct lynx_runs *runs, const char *name);

/* Every run's name, comma-separated, newest first, into buf (cut to len). */
void lynx_runs_names(const struct lynx_runs *runs, char *buf, size_t len);

/* A unix time as local time, "2026-11-27 16:20:01", in buf (returned). */
const char *lynx_run_local_time(int64_t when, char *buf, size_t len);

/* "4 ranks of 4, started 2026-11-27 16:20:01" (local time), the start only when with_start
 * and known, or for profiles without "run" "written <newest modification time>". */
void lynx_runs_describe(const struct lynx_run_group *g, bool with_start, char *buf, size_t len);

/*
 * When runs holds more than one run, the line that says which one a reader takes, on out:
 * "<about> 2 runs: reading run 4711 (4 ranks of 4, started ...), the newest; the other: run
 * 4690 (2 ranks of 2); --run ID picks one". about is e.g. "lynx report: DIR holds profiles
 * of"; asked: the user named chosen with --run (said instead of "the newest"). Nothing for
 * one run.
 */
void lynx_runs_print_choice(FILE *out, const char *about, const struct lynx_runs *runs,
                            const struct lynx_run_group *chosen, bool asked);

void lynx_runs_free(struct lynx_runs *runs);

#endif /* LYNX_PROF_RUN_H */
