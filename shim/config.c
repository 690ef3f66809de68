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

/* The units a size may end in, and what each multiplies by. */
static const struct {
	const char *unit;
	uint64_t scale;
} size_units[] = {
        {"B", 1},
        {"K", 1ull << 10},
        {"KiB", 1ull << 10},
        {"KB", 1000ull},
        {"M", 1ull << 20},
        {"MiB", 1ull << 20},
        {"MB", 1000000ull},
        {"G", 1ull << 30},
        {"GiB", 1ull << 30},
        {"GB", 1000000000ull},
        {"T", 1ull << 40},
        {"TiB", 1ull << 40},
        {"TB", 1000000000000ull},
};

/* At most this many digits after the point (10^12 fits beside a unit of 2^40 in 128 bits). */
#define SIZE_FRACTION_DIGITS 12

int lynx_size_parse(const char *text, uint64_t *out)
{
	uint64_t whole = 0, fraction = 0, scale = 0;
	unsigned fraction_digits = 0;
	const char *p = text;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (whole > (UINT64_MAX - (uint64_t)(*p - '0')) / 10)
			return -EINVAL;
		whole = whole * 10 + (uint64_t)(*p - '0');
	}
	if (*p == '.') {
		if (p[1] < '0' || p[1] > '9')
			return -EINVAL;
		for (p++; *p >= '0' && *p <= '9'; p++) {
			if (++fraction_digits > SIZE_FRACTION_DIGITS)
				return -EINVAL;
			fraction = fraction * 10 + (uint64_t)(*p - '0');
		}
	}
	if (!*p)
		scale = 1;
	for (size_t i = 0; !scale && i < sizeof(size_units) / sizeof(size_units[0]); i++)
		if (!strcmp(p, size_units[i].unit))
			scale = size_units[i].scale;
	/* Bytes are whole: a decimal point needs a unit larger than one. */
	if (!scale || (fraction_digits && scale == 1) || whole > UINT64_MAX / scale)
		return -EINVAL;
	unsigned __int128 part = (unsigned __int128)fraction * scale;
	for (unsigned d = 0; d < fraction_digits; d++)
		part /= 10;
	if (whole * scale > UINT64_MAX - (uint64_t)part)
		return -EINVAL;
	*out = whole * scale + (uint64_t)part;
	return 0;
}

/* Digits only (a UINT option), or a size (lynx_size_parse) when allow_size. */
static int parse_number(const char *text, bool allow_size, uint64_t *out)
{
	char *end;

	if (allow_size)
		return lynx_size_parse(text, out);
	if (text[0] < '0' || text[0] > '9')
		return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(text, &end, 10);
	if (errno || *end)
		return -EINVAL;
	*out = v;
	return 0;
}

enum kind { KIND_ENUM, KIND_SIZE, KIND_SHARE, KIND_PERCENT, KIND_UINT, KIND_PATH, KIND_TEXT };

/* config.h: "<0 to 100>[.<one or two digits>]%" into hundredths of a percent. */
int lynx_percent_parse(const char *text, uint32_t *out)
{
	uint32_t whole = 0, hundredths = 0, digits = 0;
	const char *p = text;

	for (; *p >= '0' && *p <= '9' && digits < 4; p++, digits++)
		whole = whole * 10 + (uint32_t)(*p - '0');
	if (!digits || (*p >= '0' && *p <= '9'))
		return -EINVAL;
	if (*p == '.') {
		p++;
		for (digits = 0; *p >= '0' && *p <= '9' && digits < 2; p++, digits++)
			hundredths = hundredths * 10 + (uint32_t)(*p - '0');
		if (!digits)
			return -EINVAL;
		if (digits == 1)
			hundredths *= 10;
	}
	if (strcmp(p, "%") || whole * 100 + hundredths > 10000)
		return -EINVAL;
	*out = whole * 100 + hundredths;
	return 0;
}

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
	case KIND_PERCENT:
		return lynx_percent_parse(text, (uint32_t *)field);
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
		         : !strcmp(o->kind, "SIZE")  ? "a size (" LYNX_SIZE_UNITS_HELP ")"
		         : !strcmp(o->kind, "SHARE") ? "a size (" LYNX_SIZE_UNITS_HELP
		                                       ") or a percentage (60%)"
		         : !strcmp(o->kind, "PERCENT")
		                 ? "a percentage from 0% to 100%, at most two decimals (2%, 0.5%)"
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
	case KIND_PERCENT: {
		uint32_t bp = *(const uint32_t *)field;

		if (bp % 100 == 0)
			snprintf(buf, len, "%" PRIu32 "%%", bp / 100);
		else if (bp % 10 == 0)
			snprintf(buf, len, "%" PRIu32 ".%" PRIu32 "%%", bp / 100, bp % 100 / 10);
		else
			snprintf(buf, len, "%" PRIu32 ".%02" PRIu32 "%%", bp / 100, bp % 100);
		return;
	}
	case KIND_PATH:
	case KIND_TEXT:
		snprintf(buf, len, "%s",
		         *(const char *const *)field ? *(const char *const *)field : "");
		return;
	}
}
