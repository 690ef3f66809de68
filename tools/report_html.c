/* SPDX-License-Identifier: Apache-2.0 */
/*
 * `lynx report`'s report.html: the tables and the plot on one page that a browser opens from
 * the file alone (no script, no style sheet or image fetched), to pass around or attach to a
 * ticket. The tables are the terminal's text, so that each number is printed once, by the
 * function that prints it there.
 */
#include <stdio.h>

#include "../profiler/atomic_file.h"
#include "report_model.h"

int lynx_report_write_html(const struct report *rep, const char *text, const char *path)
{
	struct lynx_atomic_file file;
	int err = lynx_atomic_file_open(&file, path);
	FILE *f = file.f;

	if (err)
		return err;
	fputs("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
	      "<title>Lynx report: ",
	      f);
	lynx_report_escaped(f, rep->where);
	fputs("</title>\n<style>\n"
	      "body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1100px; }\n"
	      "h1 { font-size: 22px; } h2 { font-size: 17px; margin-top: 28px; }\n"
	      "pre { font-size: 12.5px; background: #f6f6f6; padding: 12px; "
	      "overflow-x: auto; }\n"
	      "p.note { color: #555; font-size: 13px; }\n"
	      "</style>\n</head>\n<body>\n<h1>Lynx report</h1>\n<p>",
	      f);
	lynx_report_escaped(f, rep->where);
	fputs("</p>\n<p class=\"note\">What each rank's profile says (layers, memory at the peak "
	      "by class, communication windows), what Lynx's planner would save, and, after a "
	      "recompute run, each rank's plan beside what it achieved. The same text as "
	      "<code>lynx report</code> prints; the plot is report.svg.</p>\n"
	      "<h2>Tables</h2>\n<pre>",
	      f);
	lynx_report_escaped(f, text);
	fputs("</pre>\n<h2>Device memory over one iteration, streams' busy share, and the peak "
	      "by class, per rank</h2>\n",
	      f);
	lynx_report_svg(f, rep);
	fputs("</body>\n</html>\n", f);
	return lynx_atomic_file_commit(&file);
}
