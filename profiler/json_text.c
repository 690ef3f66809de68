/* SPDX-License-Identifier: Apache-2.0 */
/* Describing JSON text that does not parse: see json_text.h. */
#include "json_text.h"

bool lynx_json_unclosed(const char *text, size_t len)
{
	bool in_string = false;
	long depth = 0;

	for (size_t i = 0; i < len; i++) {
		char c = text[i];
		if (in_string) {
			if (c == '\\')
				i++;
			else if (c == '"')
				in_string = false;
		} else if (c == '"') {
			in_string = true;
		} else if (c == '{' || c == '[') {
			depth++;
		} else if ((c == '}' || c == ']') && --depth < 0) {
			return false;
		}
	}
	return in_string || depth > 0;
}

void lynx_json_position(const char *text, size_t offset, size_t *line, size_t *col)
{
	*line = 1;
	*col = 1;
	for (size_t i = 0; i < offset && text[i]; i++) {
		if (text[i] == '\n') {
			(*line)++;
			*col = 1;
		} else {
			(*col)++;
		}
	}
}
