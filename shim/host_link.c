/* SPDX-License-Identifier: Apache-2.0 */
/* The link to pinned host memory, measured: see host_link.h. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "host_link.h"

/* What one measurement holds, so that every exit path releases the same things. */
struct measurement {
	const struct lynx_host_link_driver *d;
	CUdeviceptr device;
	void *host;
	CUstream stream;
	CUevent marks[2];
};

static int errno_of(CUresult r)
{
	return r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

/* One copy of `bytes` on the measurement's stream, to host or not: its device time in s, or
 * a negative errno. */
static double timed_copy(struct measurement *m, size_t bytes, bool to_host)
{
	const struct lynx_host_link_driver *d = m->d;
	float ms = 0;
	CUresult r;

	if ((r = d->event_record(m->marks[0], m->stream)) ||
	    (r = to_host ? d->memcpy_dtoh_async(m->host, m->device, bytes, m->stream)
	                 : d->memcpy_htod_async(m->device, m->host, bytes, m->stream)) ||
	    (r = d->event_record(m->marks[1], m->stream)) ||
	    (r = d->stream_synchronize(m->stream)) ||
	    (r = d->event_elapsed(&ms, m->marks[0], m->marks[1])))
		return errno_of(r);
	return ms > 0 ? (double)ms / 1e3 : -EIO;
}

static void release(struct measurement *m)
{
	const struct lynx_host_link_driver *d = m->d;
	/* A failed call may have returned with copies still queued on the stream: the buffers
	 * are freed once it is idle, or else left allocated (a few MiB leaked) rather than
	 * freed under the copies. */
	bool idle = !m->stream || d->stream_synchronize(m->stream) == CUDA_SUCCESS;

	for (int i = 0; i < 2; i++)
		if (m->marks[i])
			d->event_destroy(m->marks[i]);
	if (m->stream)
		d->stream_destroy(m->stream);
	if (m->host && idle)
		d->mem_free_host(m->host);
	if (m->device && idle)
		d->mem_free(m->device);
}

static bool complete(const struct lynx_host_link_driver *d)
{
	return d && d->mem_alloc && d->mem_free && d->mem_alloc_host && d->mem_free_host &&
	       d->stream_create && d->stream_destroy && d->stream_synchronize && d->event_create &&
	       d->event_destroy && d->event_record && d->event_elapsed && d->memcpy_dtoh_async &&
	       d->memcpy_htod_async;
}

int lynx_host_link_measure(const struct lynx_host_link_driver *driver, size_t bytes,
                           struct lynx_host_link *out)
{
	struct measurement m = {.d = driver};
	double t[4]; /* large to host, large to device, small to host, small to device */
	CUresult r;
	int err = 0;

	memset(out, 0, sizeof(*out));
	if (!complete(driver) || bytes <= LYNX_HOST_LINK_SMALL_BYTES)
		return -EINVAL;
	if ((r = driver->mem_alloc(&m.device, bytes)) ||
	    (r = driver->mem_alloc_host(&m.host, bytes)) ||
	    (r = driver->stream_create(&m.stream, CU_STREAM_NON_BLOCKING)) ||
	    (r = driver->event_create(&m.marks[0], CU_EVENT_DEFAULT)) ||
	    (r = driver->event_create(&m.marks[1], CU_EVENT_DEFAULT))) {
		err = errno_of(r);
		goto out;
	}
	memset(m.host, 0, bytes); /* pinned pages touched, the copies move defined bytes */
	/* Untimed: the first copy each way pays for mappings the driver makes lazily. */
	if (timed_copy(&m, bytes, true) < 0 || timed_copy(&m, bytes, false) < 0) {
		err = -EIO;
		goto out;
	}
	t[0] = timed_copy(&m, bytes, true);
	t[1] = timed_copy(&m, bytes, false);
	t[2] = timed_copy(&m, LYNX_HOST_LINK_SMALL_BYTES, true);
	t[3] = timed_copy(&m, LYNX_HOST_LINK_SMALL_BYTES, false);
	for (int i = 0; i < 4; i++) {
		if (t[i] < 0) {
			err = (int)t[i];
			goto out;
		}
	}
	/* Two points per direction: the rate from the difference, so that the copy's fixed
	 * cost does not lower it; the small copy's time beyond its bytes at that rate is the
	 * latency (the larger direction's, never below 0). */
	for (int dir = 0; dir < 2; dir++) {
		double extra = t[dir] - t[2 + dir];
		if (extra <= 0) {
			err = -EIO;
			goto out;
		}
		double rate = (double)(bytes - LYNX_HOST_LINK_SMALL_BYTES) / extra;
		double beyond = t[2 + dir] - (double)LYNX_HOST_LINK_SMALL_BYTES / rate;
		*(dir ? &out->h2d_bytes_per_s : &out->d2h_bytes_per_s) = rate;
		if (beyond > out->latency_s)
			out->latency_s = beyond;
	}
out:
	release(&m);
	if (err)
		memset(out, 0, sizeof(*out));
	return err;
}
