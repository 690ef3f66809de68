/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Describing JSON text that does not parse, the same way for every reader of Lynx's files
 * (profiles, traces): where cJSON stopped, and whether the text was cut short.
 */
#ifndef LYNX_PROF_JSON_TEXT_H
#define LYNX_PROF_JSON_TEXT_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Whether text[0..len) ends inside a string, an object or an array: a truncated document,
 * wherever cJSON happened to stop in its last token. A corruption that drops a closing
 * bracket looks the same; the messages give cJSON's offset either way.
 */
bool lynx_json_unclosed(const char *text, size_t len);

/* The 1-based line and column of byte offset in text. */
void lynx_json_position(const char *text, size_t offset, size_t *line, size_t *col);

#endif /* LYNX_PROF_JSON_TEXT_H */
