/* SPDX-License-Identifier: Apache-2.0 */
/* Expands LYNX_OUT's %p, %h, %q{VAR} and %% (out_path.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "out_path.h"

struct sink {
	char *buf;
	size_t len, used;
	bool full;
};

static void put(struct sink *s, const char *text, size_t n)
{
	if (s->used + n >= s->len) {
		s->full = true;
		return;
	}
	memcpy(s->buf + s->used, text, n);
	s->used += n;
	s->buf[s->used] = 0;
}

int lynx_out_path_expand(const char *pattern, const struct lynx_out_path_facts *facts, char *out,
                         size_t len, char *problem, size_t problem_len)
{
	struct sink s = {out, len, 0, false};
	char pid[24];

	if (!len)
		return -ENAMETOOLONG;
	out[0] = 0;
	if (problem_len)
		problem[0] = 0;
	snprintf(pid, sizeof(pid), "%d", facts->pid);
	for (const char *p = pattern; *p && !s.full; p++) {
		if (*p != '%') {
			put(&s, p, 1);
			continue;
		}
		switch (p[1]) {
		case '%':
			put(&s, "%", 1);
			p++;
			break;
		case 'p':
			put(&s, pid, strlen(pid));
			p++;
			break;
		case 'h':
			put(&s, facts->host ? facts->host : "",
			    facts->host ? strlen(facts->host) : 0);
			p++;
			break;
		case 'q': {
			const char *end = p[2] == '{' ? strchr(p + 3, '}') : NULL;
			char name[128];
			if (!end || end == p + 3 || (size_t)(end - (p + 3)) >= sizeof(name)) {
				snprintf(problem, problem_len,
				         "%%q must name a variable as %%q{NAME} (at offset %zu)",
				         (size_t)(p - pattern));
				snprintf(out, len, "%s", pattern);
				return -EINVAL;
			}
			memcpy(name, p + 3, (size_t)(end - (p + 3)));
			name[end - (p + 3)] = 0;
			const char *value = facts->getenv ? facts->getenv(name) : NULL;
			if (!value) {
				snprintf(problem, problem_len,
				         "%s is not set: the process id stands in", name);
				value = pid;
			}
			put(&s, value, strlen(value));
			p = end;
			break;
		}
		default:
			snprintf(problem, problem_len,
			         "'%%%c' at offset %zu is not %%p, %%h, %%q{VAR} or %%%%",
			         p[1] ? p[1] : ' ', (size_t)(p - pattern));
			snprintf(out, len, "%s", pattern);
			return -EINVAL;
		}
	}
	if (s.full) {
		snprintf(problem, problem_len, "the expansion is longer than %zu bytes", len - 1);
		snprintf(out, len, "%s", "");
		return -ENAMETOOLONG;
	}
	return 0;
}

/* True when pattern holds one of the conversions named by letters (%% is not one). */
static bool names_any(const char *pattern, const char *letters)
{
	for (const char *p = pattern; *p; p++) {
		if (*p != '%' || !p[1])
			continue;
		if (p[1] != '%' && strchr(letters, p[1]))
			return true;
		p++;
	}
	return false;
}

bool lynx_out_path_private(const char *pattern)
{
	return names_any(pattern, "phq");
}

bool lynx_out_path_per_process(const char *pattern)
{
	return names_any(pattern, "p");
}
