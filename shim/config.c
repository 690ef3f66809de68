/* SPDX-License-Identifier: Apache-2.0 */
/* Parses Lynx's LYNX_* settings (options.def) strictly; a bad value keeps its default. */
#include <errno.h>
#include <stddef.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

const struct lynx_option_info lynx_options[LYNX_OPT_COUNT] = {
#define LYNX_OPTION(name, kind, field, def, values, help) {#name, #kind, def, values, help},
#include "options.def"
#undef LYNX_OPTION
};

/* Index of text among "a|b|c", or -1. */
static int enum_index(const char *values, const char *text)
{
	size_t len = strlen(text);
	int index = 0;

	for (const char *v = values; *v; index++) {
		const char *bar = strchr(v, '|');
		size_t vlen = bar ? (size_t)(bar - v) : strlen(v);
		if (vlen == len && !strncmp(v, text, len))
			return index;
		if (!bar)
			break;
		v = bar + 1;
	}
	return -1;
}

/* "<digits>[K|M|G|T]" in powers of 1024 (suffix only when allow_suffix). */
static int parse_number(const char *text, bool allow_suffix, uint64_t *out)
{
	char *end;
	uint64_t scale = 1;

	if (text[0] < '0' || text[0] > '9')
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(text, &end, 10);
	if (errno)
		return -EINVAL;
	if (*end) {
		const char *at = allow_suffix && !end[1] ? strchr("KMGT", *end) : NULL;
		if (!at || !*end)
			return -EINVAL;
		for (const char *s = "KMGT"; s <= at; s++)
			scale <<= 10;
	}
	if (v > UINT64_MAX / scale)
		return -EINVAL;
	*out = v * scale;
	return 0;
}

enum kind { KIND_ENUM, KIND_SIZE, KIND_SHARE, KIND_UINT, KIND_PATH, KIND_TEXT };

/* "<1 to 100>%" into *percent; -EINVAL otherwise. */
static int parse_percent(const char *text, uint32_t *percent)
{
	size_t len = strlen(text);
	char digits[8];
	uint64_t v;

	if (len < 2 || len > 4 || text[len - 1] != '%')
		return -EINVAL;
	memcpy(digits, text, len - 1);
	digits[len - 1] = 0;
	if (parse_number(digits, false, &v) || v < 1 || v > 100)
		return -EINVAL;
	*percent = (uint32_t)v;
	return 0;
}

/* Where each option lives in struct lynx_config, and how it is stored. */
static const struct {
	enum kind kind;
	size_t offset;
} slots[LYNX_OPT_COUNT] = {
#define LYNX_OPTION(name, kind, field, def, values, help) \
	{KIND_##kind, offsetof(struct lynx_config, field)},
#include "options.def"
#undef LYNX_OPTION
};

/* Parses text as option i into cfg; returns 0 or -EINVAL (cfg untouched). */
static int parse_one(struct lynx_config *cfg, int i, const char *text)
{
	void *field = (char *)cfg + slots[i].offset;
	uint64_t number;
	int index;

	switch (slots[i].kind) {
	case KIND_ENUM:
		if ((index = enum_index(lynx_options[i].values, text)) < 0)
			return -EINVAL;
		*(int *)field = index;
		return 0;
	case KIND_SIZE:
	case KIND_UINT:
		if (parse_number(text, slots[i].kind == KIND_SIZE, &number))
			return -EINVAL;
		*(uint64_t *)field = number;
		return 0;
	case KIND_SHARE: {
		struct lynx_share share = {0, 0};

		if (parse_percent(text, &share.percent) && parse_number(text, true, &share.bytes))
			return -EINVAL;
		*(struct lynx_share *)field = share;
		return 0;
	}
	case KIND_PATH:
	case KIND_TEXT:
		*(const char **)field = text;
		return 0;
	}
	return -EINVAL;
}

int lynx_config_parse(struct lynx_config *cfg, const char *(*lookup)(const char *name),
                      void (*warn)(const char *line))
{
	int refused = 0;

	memset(cfg, 0, sizeof(*cfg));
	for (int i = 0; i < LYNX_OPT_COUNT; i++) {
		const struct lynx_option_info *o = &lynx_options[i];
		const char *given = lookup(o->name);
		char line[512];

		parse_one(cfg, i, o->default_value);
		if (!given || !parse_one(cfg, i, given))
			continue;
		refused++;
		snprintf(line, sizeof(line), "%s='%s' is not %s%s; using the default '%s'", o->name,
		         given,
		         !strcmp(o->kind, "ENUM")    ? "one of "
		         : !strcmp(o->kind, "SIZE")  ? "a size (e.g. 512M, 4G, 0)"
		         : !strcmp(o->kind, "SHARE") ? "a size or a percentage (e.g. 4G, 60%, 0)"
		                                     : "a non-negative integer",
		         !strcmp(o->kind, "ENUM") ? o->values : "", o->default_value);
		if (warn)
			warn(line);
	}
	return refused;
}

void lynx_config_format(const struct lynx_config *cfg, enum lynx_option_id id, char *buf,
                        size_t len)
{
	const void *field = (const char *)cfg + slots[id].offset;
	const char *v = lynx_options[id].values;

	switch (slots[id].kind) {
	case KIND_ENUM:
		for (int k = 0; k < *(const int *)field && strchr(v, '|'); k++)
			v = strchr(v, '|') + 1;
		snprintf(buf, len, "%.*s", (int)strcspn(v, "|"), v);
		return;
	case KIND_SIZE:
	case KIND_UINT:
		snprintf(buf, len, "%" PRIu64, *(const uint64_t *)field);
		return;
	case KIND_SHARE: {
		const struct lynx_share *share = field;

		if (share->percent)
			snprintf(buf, len, "%" PRIu32 "%%", share->percent);
		else
			snprintf(buf, len, "%" PRIu64, share->bytes);
		return;
	}
	case KIND_PATH:
	case KIND_TEXT:
		snprintf(buf, len, "%s",
		         *(const char *const *)field ? *(const char *const *)field : "");
		return;
	}
}
