/* SPDX-License-Identifier: Apache-2.0 */
/* The event dump (LYNX_EVENTS): drained events as JSON lines, through one fixed buffer. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dump.h"
#include "launch_attrs.h"
#include "log.h"

#define BUFFER_BYTES ((size_t)64 << 10)
/* Room left before a line starts; a fuller buffer is written first. Lines without
 * parameter bytes are some 400 bytes at most, so they never straddle two writes. */
#define LINE_ROOM ((size_t)1024)

/*
 * The one dump of this process. busy says a thread is using the buffer: taken by every
 * function that touches buf, len or fd (normal contexts spin, the signal handler only
 * tries), so that a signal handler can write the buffer while no line is half-built.
 */
static struct {
	int fd;      /* -1: no dump */
	bool reopen; /* a forked child whose parent had a dump open */
	atomic_bool busy;
	size_t len;
	lynx_dump_hook_name hook_name;
	lynx_dump_kernel_name kernel_name;
	unsigned int hooks;
	char prefix[PATH_MAX];
	char path[PATH_MAX + 32];
	char buf[BUFFER_BYTES];
} dump = {.fd = -1};

/* Contention is rare (the drainer against exit or fork in another thread), and a thread
 * that waits here holds no lock a hook needs. */
static void take(void)
{
	while (atomic_exchange_explicit(&dump.busy, true, memory_order_acquire))
		sched_yield();
}

static void release(void)
{
	atomic_store_explicit(&dump.busy, false, memory_order_release);
}

/* All of len bytes, despite short writes and EINTR; 0 or -errno. Async-signal-safe. */
static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t n = write(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Writes the buffer (busy held). A failed write stops the dump, with one warning. */
static void flush_locked(void)
{
	int err;

	if (dump.fd < 0 || !dump.len) {
		dump.len = 0;
		return;
	}
	err = write_all(dump.fd, dump.buf, dump.len);
	dump.len = 0;
	if (err) {
		lynx_warn("LYNX_EVENTS: cannot write %s (%s): the event dump stops here", dump.path,
		          strerror(-err));
		close(dump.fd);
		dump.fd = -1;
	}
}

static void close_locked(void)
{
	flush_locked();
	if (dump.fd >= 0)
		close(dump.fd);
	dump.fd = -1;
}

/* ---- Building a line in the buffer (busy held) ---------------------------------------- */

static void put_bytes(const char *s, size_t n)
{
	while (n && dump.fd >= 0) {
		size_t room = BUFFER_BYTES - dump.len;
		size_t k = n < room ? n : room;

		memcpy(dump.buf + dump.len, s, k);
		dump.len += k;
		s += k;
		n -= k;
		if (dump.len == BUFFER_BYTES)
			flush_locked();
	}
}

static void put(const char *s)
{
	put_bytes(s, strlen(s));
}

static void put_u64(uint64_t v)
{
	char digits[20];
	size_t i = sizeof(digits);

	do {
		digits[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	put_bytes(digits + i, sizeof(digits) - i);
}

static void put_i64(int64_t v)
{
	if (v < 0) {
		put("-");
		put_u64(-(uint64_t)v);
	} else {
		put_u64((uint64_t)v);
	}
}

static const char hex_digits[] = "0123456789abcdef";

/* A pointer or handle: "0x" and lower-case hex without padding, quoted. */
static void put_ptr(uint64_t v)
{
	char text[2 + 16 + 1];
	size_t i = sizeof(text);

	text[--i] = '"';
	do {
		text[--i] = hex_digits[v & 15];
		v >>= 4;
	} while (v);
	text[--i] = 'x';
	text[--i] = '0';
	put("\"");
	put_bytes(text + i, sizeof(text) - i);
}

/* Bytes as quoted hex, two digits each, in memory order. */
static void put_hex_bytes(const unsigned char *p, size_t n)
{
	char chunk[256];

	put("\"");
	while (n) {
		size_t k = n < sizeof(chunk) / 2 ? n : sizeof(chunk) / 2;
		for (size_t i = 0; i < k; i++) {
			chunk[2 * i] = hex_digits[p[i] >> 4];
			chunk[2 * i + 1] = hex_digits[p[i] & 15];
		}
		put_bytes(chunk, 2 * k);
		p += k;
		n -= k;
	}
	put("\"");
}

/* Hook and kind names are C identifiers and lower-case words: nothing to escape. */
static void put_string(const char *s)
{
	put("\"");
	put(s);
	put("\"");
}

static void put_bool(bool b)
{
	put(b ? "true" : "false");
}

static void put_dim3(const uint32_t d[3])
{
	put("[");
	put_u64(d[0]);
	put(",");
	put_u64(d[1]);
	put(",");
	put_u64(d[2]);
	put("]");
}

/* `,"name":` before a value. */
static void key(const char *name)
{
	put(",\"");
	put(name);
	put("\":");
}

/* ---- Payloads, one per union member of struct lynx_event ------------------------------ */

static void payload_none(const struct lynx_event *ev)
{
}

static void payload_mem(const struct lynx_event *ev)
{
	key("ptr");
	put_ptr(ev->u.mem.ptr);
	key("bytes");
	put_u64(ev->u.mem.bytes);
}

static void payload_copy(const struct lynx_event *ev)
{
	key("dst");
	put_ptr(ev->u.copy.dst);
	key("src");
	put_ptr(ev->u.copy.src);
	key("bytes");
	put_u64(ev->u.copy.bytes);
	key("dir");
	put_i64(ev->u.copy.direction);
}

/* The parameter bytes and a launch config's attributes follow the struct (launch_attrs.h);
 * never more than the record holds. */
static void payload_launch(const struct lynx_event *ev)
{
	size_t room = ev->size > sizeof(*ev) ? ev->size - sizeof(*ev) : 0;
	size_t n = ev->u.launch.param_bytes < room ? ev->u.launch.param_bytes : room;
	const CUlaunchAttribute *attrs = lynx_launch_attrs_of(ev);
	size_t attrs_at = lynx_launch_attrs_offset(ev->u.launch.param_bytes);
	uint32_t recorded = attrs ? lynx_launch_attrs_recorded(ev->u.launch.attr_count) : 0;

	const char *name = dump.kernel_name ? dump.kernel_name(ev->u.launch.function) : NULL;

	key("function");
	put_ptr(ev->u.launch.function);
	key("name");
	if (name)
		put_string(name);
	else
		put_bytes("null", 4);
	key("grid");
	put_dim3(ev->u.launch.grid);
	key("block");
	put_dim3(ev->u.launch.block);
	key("shared");
	put_u64(ev->u.launch.shared_mem);
	key("params");
	put_hex_bytes((const unsigned char *)(ev + 1), n);
	key("param_count");
	put_u64(ev->u.launch.param_count);
	key("attrs");
	put("[");
	for (uint32_t i = 0; i < recorded && attrs_at + (i + 1) * sizeof(*attrs) <= room; i++) {
		if (i)
			put(",");
		put_u64((uint64_t)attrs[i].id);
	}
	put("]");
	key("attr_count");
	put_u64(ev->u.launch.attr_count);
}

static void payload_sync(const struct lynx_event *ev)
{
	key("handle");
	put_ptr(ev->u.sync.handle);
}

static void payload_nccl(const struct lynx_event *ev)
{
	key("comm");
	put_ptr(ev->u.nccl.comm);
	key("send");
	put_ptr(ev->u.nccl.sendbuf);
	key("recv");
	put_ptr(ev->u.nccl.recvbuf);
	key("count");
	put_u64(ev->u.nccl.count);
	key("type");
	put_i64(ev->u.nccl.datatype);
	key("op");
	put_i64(ev->u.nccl.op);
	key("peer");
	put_i64(ev->u.nccl.peer);
	key("group_depth");
	put_i64(ev->u.nccl.group_depth);
}

/* Each kind's name and payload, from events.def. */
static const struct {
	const char *name;
	void (*payload)(const struct lynx_event *ev);
} kinds[LYNX_EV_COUNT] = {
#define LYNX_EVENT(id, name, payload) [LYNX_EV_##id] = {name, payload_##payload},
#include "events.def"
#undef LYNX_EVENT
};

static void put_event(const struct lynx_event *ev)
{
	const char *hook = ev->hook < dump.hooks ? dump.hook_name(ev->hook) : NULL;
	bool known = ev->kind < LYNX_EV_COUNT;

	if (BUFFER_BYTES - dump.len < LINE_ROOM)
		flush_locked();
	put("{\"t\":");
	put_u64(ev->host_ns);
	key("tid");
	put_u64(ev->tid);
	key("hook");
	put_string(hook ? hook : "unknown");
	key("kind");
	put_string(known ? kinds[ev->kind].name : "unknown");
	key("result");
	put_i64(ev->result);
	key("stream");
	put_ptr(ev->stream);
	key("nested");
	put_bool(ev->flags & LYNX_EVENT_NESTED);
	key("captured");
	put_bool(ev->flags & LYNX_EVENT_CAPTURED);
	if (known)
		kinds[ev->kind].payload(ev);
	put("}\n");
}

/* ---- The file ------------------------------------------------------------------------- */

/* Creates <prefix>.<pid>.jsonl and writes the header at once, so that a file that cannot
 * be written (a full disk) shows at start-up. busy held. */
static int open_locked(void)
{
	int n = snprintf(dump.path, sizeof(dump.path), "%s.%d.jsonl", dump.prefix, (int)getpid());
	int fd, err;

	if (n < 0 || (size_t)n >= sizeof(dump.path) || (size_t)n >= PATH_MAX) {
		err = -ENAMETOOLONG;
		goto out_warn;
	}
	fd = open(dump.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		err = -errno;
		goto out_warn;
	}
	dump.fd = fd;
	dump.len = 0;
	put("{\"format\":\"lynx-events\",\"version\":1,\"pid\":");
	put_u64((uint64_t)getpid());
	put(",\"hooks\":");
	put_u64(dump.hooks);
	put("}\n");
	flush_locked(); /* on failure it warns once and closes */
	return dump.fd >= 0 ? 0 : -EIO;

out_warn:
	lynx_warn("LYNX_EVENTS='%s': cannot create %s (%s): recording goes on without the event "
	          "dump",
	          dump.prefix, dump.path, strerror(-err));
	return err;
}

int lynx_dump_open(const char *prefix, lynx_dump_hook_name hook_name, unsigned int hooks,
                   lynx_dump_kernel_name kernel_name)
{
	int err;

	take();
	close_locked();
	dump.reopen = false;
	dump.hook_name = hook_name;
	dump.kernel_name = kernel_name;
	dump.hooks = hook_name ? hooks : 0;
	if (!prefix || !*prefix) {
		err = -EINVAL;
		goto out_release;
	}
	if (strlen(prefix) >= sizeof(dump.prefix)) {
		lynx_warn("LYNX_EVENTS is longer than PATH_MAX: recording goes on without the "
		          "event dump");
		err = -ENAMETOOLONG;
		goto out_release;
	}
	strcpy(dump.prefix, prefix);
	err = open_locked();
out_release:
	release();
	return err;
}

int lynx_dump_reopen(void)
{
	int err = 0;

	take();
	if (dump.reopen) {
		dump.reopen = false;
		err = open_locked();
	}
	release();
	return err;
}

void lynx_dump_event(const struct lynx_event *event, void *arg)
{
	take();
	if (dump.fd >= 0)
		put_event(event);
	release();
}

void lynx_dump_flush(void)
{
	take();
	flush_locked();
	release();
}

void lynx_dump_close(void)
{
	take();
	close_locked();
	release();
}

void lynx_dump_flush_from_signal(void)
{
	if (atomic_exchange_explicit(&dump.busy, true, memory_order_acquire))
		return;
	if (dump.fd >= 0 && dump.len)
		write_all(dump.fd, dump.buf, dump.len); /* nowhere to report a failure */
	dump.len = 0;
	release();
}

void lynx_dump_after_fork(void)
{
	if (dump.fd >= 0) {
		close(dump.fd);
		dump.fd = -1;
		dump.reopen = true;
	}
	dump.len = 0;
	atomic_store_explicit(&dump.busy, false, memory_order_relaxed);
}
