/* SPDX-License-Identifier: Apache-2.0 */
/* `lynx report`'s report.svg, written by hand (no plotting library): see report_model.h. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../profiler/atomic_file.h"
#include "report_model.h"

#define SVG_W 980
#define PANEL_H 330
#define PLOT_X 70
#define PLOT_W 520
#define PLOT_Y 50
#define PLOT_H 190
#define USE_X 640
#define USE_W 200

static const char *const class_colour[LYNX_PROFILE_MEMORY_CLASS_COUNT] = {
        "#4e79a7", "#e15759", "#f28e2b", "#76b7b2", "#9c9c9c"};

void lynx_report_escaped(FILE *f, const char *text)
{
	for (const char *c = text; *c; c++) {
		if (*c == '<')
			fputs("&lt;", f);
		else if (*c == '>')
			fputs("&gt;", f);
		else if (*c == '&')
			fputs("&amp;", f);
		else if (*c == '"')
			fputs("&quot;", f);
		else
			fputc(*c, f);
	}
}

static void svg_text(FILE *f, double x, double y, const char *attrs, const char *text)
{
	fprintf(f, "<text x=\"%.1f\" y=\"%.1f\"%s%s>", x, y, *attrs ? " " : "", attrs);
	lynx_report_escaped(f, text);
	fputs("</text>\n", f);
}

/*
 * After a recompute run: device memory in use over its last followed iteration (the
 * executor's samples, summary.<rank>.json), over the same width as warm-up's iteration and
 * on the same scale, with its peak. The executor samples cuMemGetInfo, which on a GPU also
 * counts the CUDA context, so the two curves differ by that much there.
 */
static void svg_after(FILE *f, const struct lynx_summary *s, double y0, double top)
{
	double peak = 0;
	char a[40], line[160];

	fputs("<polyline fill=\"none\" stroke=\"#f28e2b\" stroke-width=\"1.5\" points=\"", f);
	for (size_t i = 0; i < s->n_curve; i++) {
		double x = PLOT_X + PLOT_W * s->curve_t[i] / s->curve_ns;
		double y = y0 + PLOT_Y + PLOT_H - PLOT_H * s->curve_bytes[i] / top;
		fprintf(f, "%.1f,%.1f ", x, y);
		peak = s->curve_bytes[i] > peak ? s->curve_bytes[i] : peak;
	}
	fputs("\"/>\n", f);
	snprintf(line, sizeof(line), "after (recompute, %s): in use (cuMemGetInfo), peak %s",
	         s->planner, fmt_bytes((uint64_t)peak, a, sizeof(a)));
	svg_text(f, PLOT_X + 6, y0 + PLOT_Y + PLOT_H - 6, "font-size=\"10\" fill=\"#c0640f\"",
	         line);
}

static void svg_memory(FILE *f, const struct rank *r, double y0)
{
	const struct timeline *tl = &r->tl;
	double span = tl->end_us - tl->start_us, top = (double)r->p.memory.peak_bytes;
	char a[40], line[160];

	fprintf(f,
	        "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"none\" "
	        "stroke=\"#888\"/>\n",
	        PLOT_X, y0 + PLOT_Y, PLOT_W, PLOT_H);
	if (!tl->mem_count) {
		svg_text(f, PLOT_X + 10, y0 + PLOT_Y + 20, "font-size=\"12\"",
		         "the timeline has no device memory counter");
		return;
	}
	const struct lynx_summary *after =
	        r->summary && r->summary->n_curve >= 2 ? r->summary : NULL;
	for (size_t i = 0; i < tl->mem_count; i++)
		top = tl->mem[i].bytes > top ? tl->mem[i].bytes : top;
	for (size_t i = 0; after && i < after->n_curve; i++)
		top = after->curve_bytes[i] > top ? after->curve_bytes[i] : top;
	if (top <= 0)
		top = 1;
	if (span <= 0)
		span = 1;
	/* A step line: each value holds until the next change, and the last to the end. */
	fputs("<polyline fill=\"none\" stroke=\"#4e79a7\" stroke-width=\"1.5\" points=\"", f);
	for (size_t i = 0; i < tl->mem_count; i++) {
		double x = PLOT_X + PLOT_W * (tl->mem[i].ts - tl->start_us) / span;
		double y = y0 + PLOT_Y + PLOT_H - PLOT_H * tl->mem[i].bytes / top;
		if (i) {
			double prev = y0 + PLOT_Y + PLOT_H - PLOT_H * tl->mem[i - 1].bytes / top;
			fprintf(f, "%.1f,%.1f ", x, prev);
		}
		fprintf(f, "%.1f,%.1f ", x, y);
	}
	fprintf(f, "%.1f,%.1f\"/>\n", (double)(PLOT_X + PLOT_W),
	        y0 + PLOT_Y + PLOT_H - PLOT_H * tl->mem[tl->mem_count - 1].bytes / top);
	if (after)
		svg_after(f, after, y0, top);
	double peak_y = y0 + PLOT_Y + PLOT_H - PLOT_H * (double)r->p.memory.peak_bytes / top;
	fprintf(f,
	        "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e15759\" "
	        "stroke-dasharray=\"4 3\"/>\n",
	        PLOT_X, peak_y, PLOT_X + PLOT_W, peak_y);
	snprintf(line, sizeof(line), "profile peak %s",
	         fmt_bytes(r->p.memory.peak_bytes, a, sizeof(a)));
	svg_text(f, PLOT_X + PLOT_W - 150, peak_y - 4, "font-size=\"10\" fill=\"#e15759\"", line);
	svg_text(f, PLOT_X - 5, y0 + PLOT_Y + 10, "font-size=\"10\" text-anchor=\"end\"",
	         fmt_bytes((uint64_t)top, a, sizeof(a)));
	svg_text(f, PLOT_X - 5, y0 + PLOT_Y + PLOT_H, "font-size=\"10\" text-anchor=\"end\"", "0");
	svg_text(f, PLOT_X, y0 + PLOT_Y + PLOT_H + 14, "font-size=\"10\"", "0 ms");
	snprintf(line, sizeof(line), "%.3f ms", span / 1e3);
	svg_text(f, PLOT_X + PLOT_W, y0 + PLOT_Y + PLOT_H + 14,
	         "font-size=\"10\" text-anchor=\"end\"", line);
	snprintf(line, sizeof(line), "live device memory over %s (host clock)%s", tl->label,
	         after ? "; after, in orange" : "");
	svg_text(f, PLOT_X, y0 + PLOT_Y - 6, "font-size=\"12\"", line);
}

static void svg_streams(FILE *f, const struct rank *r, double y0)
{
	const struct timeline *tl = &r->tl;
	double span = tl->end_us - tl->start_us;
	char line[200];

	svg_text(f, USE_X, y0 + PLOT_Y - 6, "font-size=\"12\"", "stream busy share (device clock)");
	if (!tl->stream_count)
		svg_text(f, USE_X, y0 + PLOT_Y + 16, "font-size=\"11\"", "no stream tracks");
	for (size_t s = 0; s < tl->stream_count && s < 8; s++) {
		const struct stream_use *u = &tl->streams[s];
		double y = y0 + PLOT_Y + 8 + 24.0 * (double)s;
		svg_text(f, USE_X, y + 9, "font-size=\"10\"", u->name);
		fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"8\" fill=\"#eee\"/>\n",
		        USE_X, y + 12, USE_W);
		if (u->timed && span > 0) {
			double share = u->busy_us / span;
			fprintf(f,
			        "<rect x=\"%d\" y=\"%.1f\" width=\"%.1f\" height=\"8\" "
			        "fill=\"#59a14f\"/>\n",
			        USE_X, y + 12, USE_W * (share > 1 ? 1 : share));
			snprintf(line, sizeof(line), "%.1f%%", 100 * share);
			svg_text(f, USE_X + USE_W + 6, y + 20, "font-size=\"10\"", line);
		} else {
			/* On the empty bar, which is wide enough: beside it the words would run
			 * past the picture's right edge. */
			snprintf(line, sizeof(line), "not timed on the device (%zu items)",
			         u->items);
			svg_text(f, USE_X + 4, y + 19, "font-size=\"8\" fill=\"#666\"", line);
		}
	}
}

/* The profile's peak split by class: one stacked bar with its legend. */
static void svg_classes(FILE *f, const struct rank *r, double y0)
{
	double x = PLOT_X, y = y0 + PLOT_Y + PLOT_H + 30;
	uint64_t peak = r->p.memory.peak_bytes;
	char a[40], line[120];

	snprintf(line, sizeof(line), "device memory at the peak, by class (profile): %s",
	         fmt_bytes(peak, a, sizeof(a)));
	svg_text(f, PLOT_X, y, "font-size=\"11\"", line);
	for (int c = 0; c < LYNX_PROFILE_MEMORY_CLASS_COUNT; c++) {
		double w = peak ? 600.0 * (double)r->p.memory.at_peak[c] / (double)peak : 0;
		fprintf(f,
		        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"12\" fill=\"%s\"/>\n",
		        x, y + 5, w, class_colour[c]);
		x += w;
	}
	for (int c = 0; c < LYNX_PROFILE_MEMORY_CLASS_COUNT; c++) {
		double lx = PLOT_X + 170.0 * c;
		fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"10\" fill=\"%s\"/>\n",
		        lx, y + 22, class_colour[c]);
		snprintf(line, sizeof(line), "%s %s", lynx_profile_memory_class_name(c),
		         fmt_bytes(r->p.memory.at_peak[c], a, sizeof(a)));
		svg_text(f, lx + 14, y + 31, "font-size=\"10\"", line);
	}
}

static void svg_panel(FILE *f, const struct report *rep, const struct rank *r, double y0)
{
	char st[32], a[40], title[200];

	stage_name(rep, r->stage, st, sizeof(st));
	snprintf(title, sizeof(title), "rank %d (%s): %zu layers, %u micro-batches, iteration %s",
	         r->rank, st, r->p.layer_count, r->p.microbatches,
	         fmt_time(&r->p.iteration.time, a, sizeof(a)));
	svg_text(f, 10, y0 + 22, "font-size=\"14\" font-weight=\"bold\"", title);
	if (r->have_trace) {
		svg_memory(f, r, y0);
		svg_streams(f, r, y0);
	} else {
		fprintf(f,
		        "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"#fafafa\" "
		        "stroke=\"#ccc\"/>\n",
		        PLOT_X, y0 + PLOT_Y, PLOT_W + USE_W + 100, PLOT_H);
		snprintf(title, sizeof(title),
		         "no trace.%d.json here: memory over time and stream use are missing",
		         r->rank);
		svg_text(f, PLOT_X + 12, y0 + PLOT_Y + 30, "font-size=\"12\"", title);
		svg_text(f, PLOT_X + 12, y0 + PLOT_Y + 50, "font-size=\"11\" fill=\"#555\"",
		         "(write it with: lynx profile EVENTS --trace DIR/trace.<rank>.json)");
	}
	svg_classes(f, r, y0);
	fprintf(f, "<line x1=\"0\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
	        y0 + PANEL_H - 2, SVG_W, y0 + PANEL_H - 2);
}

void lynx_report_svg(FILE *f, const struct report *rep)
{
	fprintf(f,
	        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%zu\" "
	        "viewBox=\"0 0 %d %zu\" font-family=\"sans-serif\">\n",
	        SVG_W, PANEL_H * rep->count, SVG_W, PANEL_H * rep->count);
	fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
	for (size_t i = 0; i < rep->count; i++)
		svg_panel(f, rep, &rep->ranks[i], (double)PANEL_H * (double)i);
	fputs("</svg>\n", f);
}

int lynx_report_write_svg(const struct report *rep, const char *path)
{
	struct lynx_atomic_file file;
	int err = lynx_atomic_file_open(&file, path);

	if (err)
		return err;
	lynx_report_svg(file.f, rep);
	return lynx_atomic_file_commit(&file);
}
