/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lynx's configuration: every LYNX_* variable of options.def, parsed once into an
 * immutable struct. Pure C with no CUDA, shared by liblynx.so and the lynx command (which
 * shows it with `lynx env`).
 */
#ifndef LYNX_CONFIG_H
#define LYNX_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "faults.h"

enum lynx_mode { LYNX_MODE_OFF, LYNX_MODE_PROFILE, LYNX_MODE_RECOMPUTE };
enum lynx_timing { LYNX_TIMING_OFF, LYNX_TIMING_DEVICE }; /* LYNX_TIMING, in its values' order */
enum lynx_pack_mode { LYNX_PACK_OFF, LYNX_PACK_ON };      /* LYNX_PACK, likewise */
enum lynx_log_level {
	LYNX_LOG_ERROR,
	LYNX_LOG_WARN,
	LYNX_LOG_INFO,
	LYNX_LOG_DEBUG,
	LYNX_LOG_TRACE
};

/* A SHARE option's value: bytes, or (percent > 0) a percentage of what its help names. */
struct lynx_share {
	uint64_t bytes;
	uint32_t percent;
};

struct lynx_config {
#define LYNX_OPTION(name, kind, field, def, values, help) LYNX_OPTION_TYPE_##kind field;
#define LYNX_OPTION_TYPE_ENUM int
#define LYNX_OPTION_TYPE_SIZE uint64_t
#define LYNX_OPTION_TYPE_SHARE struct lynx_share
#define LYNX_OPTION_TYPE_PERCENT uint32_t /* hundredths of a percent: 2% is 200 */
#define LYNX_OPTION_TYPE_UINT uint64_t
#define LYNX_OPTION_TYPE_PATH const char *
#define LYNX_OPTION_TYPE_TEXT const char *
#include "options.def"
#undef LYNX_OPTION
};

enum lynx_option_id {
#define LYNX_OPTION(name, kind, field, def, values, help) LYNX_OPT_##name,
#include "options.def"
#undef LYNX_OPTION
	LYNX_OPT_COUNT
};

struct lynx_option_info {
	const char *name, *kind, *default_value, *values, *help;
};
extern const struct lynx_option_info lynx_options[LYNX_OPT_COUNT];

/*
 * Fills cfg from lookup (getenv in the library). Each bad value is refused: the default
 * stays, and warn is called once with a line naming the variable, the value and what is
 * allowed. Returns the number of refused values. Strings point into lookup's storage.
 */
int lynx_config_parse(struct lynx_config *cfg, const char *(*lookup)(const char *name),
                      void (*warn)(const char *line));

/*
 * A size in bytes: digits, optionally a decimal point and digits, and a unit: none or B
 * (bytes, whole), K, M, G, T or KiB, MiB, GiB, TiB (powers of 1024), KB, MB, GB, TB
 * (powers of 1000). "4.5M" is 4718592 bytes, "70GB" 70000000000; a fraction of a byte is
 * dropped. Returns 0, or -EINVAL (out untouched) for anything else or a size past 2^64.
 */
int lynx_size_parse(const char *text, uint64_t *out);
#define LYNX_SIZE_UNITS_HELP                                                             \
	"bytes, or a number, decimals allowed, with K, M, G or T (powers of 1024, also " \
	"written KiB...), or KB, MB, GB or TB (powers of 1000): 512M, 4.5GiB, 70GB"

/*
 * A percentage from "0%" to "100%", at most two decimals ("2%", "0.5%", "1.25%"), in
 * hundredths of a percent (2% is 200): the PERCENT settings' form. Returns 0, or -EINVAL (out
 * untouched).
 */
int lynx_percent_parse(const char *text, uint32_t *out);

/* Writes the value of option id in cfg as text (for `lynx env`). */
void lynx_config_format(const struct lynx_config *cfg, enum lynx_option_id id, char *buf,
                        size_t len);

#endif /* LYNX_CONFIG_H */
