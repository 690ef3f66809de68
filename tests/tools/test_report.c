/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Runs the built `lynx report` on directories made from a recorded tinytrain run (pp2:
 * `lynx profile EVENTS --trace` per rank): its tables (ranks, stages, per-layer times, memory
 * by class, windows by kind), report.svg (well-formed, one panel per rank, the memory plot
 * and stream use from the timelines, or what is missing without them), the busy share of a
 * stream from device-timed slices, and the exit status and message of every bad input:
 * truncated or corrupted profiles and timelines, a misnamed profile, no profiles, bad usage;
 * report.html (one self-contained page, rendered by headless Chromium);
 * a directory that holds two runs' profiles (one run read, which one said, --run for another);
 * one run's ranks split over per-node directories (the same report as one shared directory, a
 * rank in two of them refused, --run across them).
 * Also `lynx profile --trace` on a dump with no iteration: the timeline is still written.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "../harness.h"

static char lynx[PATH_MAX + 16];
static char full[1200], bare[1200]; /* profiles with timelines; profiles only */
static char launcher[1500];         /* the launcher's dump: no iteration in it */

static int count(const char *text, const char *needle)
{
	int n = 0;

	for (const char *at = text; (at = strstr(at, needle)); at += strlen(needle))
		n++;
	return n;
}

static void sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sh(const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	if (system(cmd))
		fail_msg("failed: %s", cmd);
}

static struct output report(const char *dir)
{
	char cmd[sizeof(lynx) + 1500];

	snprintf(cmd, sizeof(cmd), "'%s' report '%s'", lynx, dir);
	return run("-i PATH=/usr/bin:/bin", cmd);
}

/* A new directory under the scratch one holding the given files of src. */
static void copy_dir(const char *src, const char *name, const char *files, char *out, size_t len)
{
	snprintf(out, len, "%s/%s", scratch, name);
	sh("rm -rf '%s' && mkdir -p '%s' && cd '%s' && cp %s '%s'/", out, out, src, files, out);
}

/* Tags balance (every open tag closed in order, self-closing ones aside) and the first one
 * is <svg>: enough to know a browser will parse the file as the one SVG document. */
static bool balanced_svg(const char *text)
{
	char stack[64][32];
	int depth = 0, tags = 0;

	while (*text == ' ' || *text == '\n')
		text++;
	if (strncmp(text, "<svg", 4))
		return false;
	for (const char *at = strchr(text, '<'); at; at = strchr(at + 1, '<')) {
		const char *end = strchr(at, '>');
		char name[32];
		size_t n;
		if (!end)
			return false;
		if (at[1] == '?' || at[1] == '!')
			continue;
		bool closing = at[1] == '/';
		const char *p = at + 1 + closing;
		n = strcspn(p, " \t\n/>");
		if (!n || n >= sizeof(name) || memchr(at + 1, '<', (size_t)(end - at - 1)))
			return false;
		memcpy(name, p, n);
		name[n] = '\0';
		tags++;
		if (closing) {
			if (!depth || strcmp(stack[depth - 1], name))
				return false;
			depth--;
		} else if (end[-1] != '/') {
			if (depth == 64)
				return false;
			strcpy(stack[depth++], name);
		}
	}
	return depth == 0 && tags > 1;
}

static char *svg_of(const char *dir)
{
	char path[1400];

	snprintf(path, sizeof(path), "%s/report.svg", dir);
	return slurp(path);
}

/* Lines of a per-layer table: "  <index>  <time> ms ...". */
static int layer_rows(const char *text)
{
	int n = 0;

	for (const char *line = text; line; line = strchr(line, '\n')) {
		unsigned k;
		char unit[8];
		double ms;
		line += *line == '\n';
		if (sscanf(line, "  %u %lf %7s", &k, &ms, unit) == 3 && !strcmp(unit, "ms"))
			n++;
	}
	return n;
}

static void test_report_tables_and_svg_from_profiles_and_timelines(void **state)
{
	(void)state;
	struct output o = report(full);
	char *svg = svg_of(full);

	if (o.exit_code)
		fail_msg("exit %d: %s", o.exit_code, o.err);
	assert_non_null(strstr(o.out, ": 2 ranks of 2, 2 stages"));
	assert_non_null(strstr(o.out, "stage 0 (rank 0): 2 layers, 2 micro-batches"));
	assert_non_null(strstr(o.out, "stage 1 (rank 1): 2 layers, 2 micro-batches"));
	assert_int_equal(layer_rows(o.out), 2 + 2);
	assert_int_equal(count(o.out, "activation memory:"), 2);
	assert_int_equal(count(o.out, "saved_activation"), 2);
	/* The first stage sends activations and receives gradients; the last the other way. */
	assert_non_null(strstr(o.out, "  pp_send_fwd       2"));
	assert_non_null(strstr(o.out, "  pp_recv_fwd       2"));
	assert_non_null(strstr(o.out, "report.svg: 2 panels"));
	assert_non_null(svg);
	assert_true(balanced_svg(svg));
	assert_non_null(strstr(svg, "rank 0 (stage 0)"));
	assert_non_null(strstr(svg, "rank 1 (stage 1)"));
	assert_int_equal(count(svg, "<polyline"), 2);
	assert_int_equal(count(svg, "live device memory over iteration 1"), 2);
	/* Each stream (compute and communication at least, per rank): a share or why not. */
	assert_true(count(svg, "not timed on the device") + count(svg, "%</text>") >= 4);
	assert_null(strstr(svg, "no trace."));
	free(svg);
	release(&o);
}

static void test_report_without_timelines_says_what_is_missing(void **state)
{
	char dir[1300];

	(void)state;
	struct output o = report(bare);
	char *svg = svg_of(bare);
	assert_int_equal(o.exit_code, 0);
	assert_int_equal(count(o.out, "missing\n"), 2);
	assert_non_null(svg);
	assert_true(balanced_svg(svg));
	assert_non_null(strstr(svg, "no trace.0.json here"));
	assert_non_null(strstr(svg, "no trace.1.json here"));
	assert_null(strstr(svg, "<polyline"));
	assert_int_equal(count(svg, "by class (profile)"), 2);
	free(svg);
	release(&o);
	/* One rank of two: said so, and the report covers the one. */
	copy_dir(bare, "one", "profile.1.json", dir, sizeof(dir));
	o = report(dir);
	assert_int_equal(o.exit_code, 0);
	assert_non_null(strstr(o.out, ": 1 rank of 2, 1 stage\nmissing ranks: 0\n"));
	release(&o);
}

/* A timeline by hand: one 100 us iteration; a stream busy 50 us of it (nested slices count
 * once, a slice past the end only inside), another with untimed items only. */
static void test_report_stream_busy_share_from_device_slices(void **state)
{
	char dir[1300], path[1400];
	FILE *f;

	(void)state;
	copy_dir(bare, "busy", "profile.0.json", dir, sizeof(dir));
	snprintf(path, sizeof(path), "%s/trace.0.json", dir);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("{\"traceEvents\":[\n"
	      "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":0,\"tid\":11,\"args\":{\"name\":"
	      "\"stream 0x1\"}},\n"
	      "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":0,\"tid\":12,\"args\":{\"name\":"
	      "\"stream 0x2\"}},\n"
	      "{\"ph\":\"X\",\"name\":\"iteration 0\",\"cat\":\"iteration\",\"pid\":0,\"tid\":10,"
	      "\"ts\":1000,\"dur\":100},\n"
	      "{\"ph\":\"X\",\"name\":\"k\",\"pid\":0,\"tid\":11,\"ts\":1010,\"dur\":40,"
	      "\"args\":{\"clock\":\"device\"}},\n"
	      "{\"ph\":\"X\",\"name\":\"k2\",\"pid\":0,\"tid\":11,\"ts\":1020,\"dur\":10,"
	      "\"args\":{\"clock\":\"device\"}},\n"
	      "{\"ph\":\"X\",\"name\":\"k3\",\"pid\":0,\"tid\":11,\"ts\":1090,\"dur\":30,"
	      "\"args\":{\"clock\":\"device\"}},\n"
	      "{\"ph\":\"X\",\"name\":\"before\",\"pid\":0,\"tid\":11,\"ts\":900,\"dur\":30,"
	      "\"args\":{\"clock\":\"device\"}},\n"
	      "{\"ph\":\"i\",\"name\":\"copy\",\"pid\":0,\"tid\":12,\"ts\":1005,\"s\":\"t\","
	      "\"args\":{\"clock\":\"host\"}},\n"
	      "{\"ph\":\"C\",\"name\":\"device memory\",\"pid\":0,\"ts\":990,\"args\":{\"bytes\":"
	      "100}},\n"
	      "{\"ph\":\"C\",\"name\":\"device memory\",\"pid\":0,\"ts\":1050,\"args\":{\"bytes\":"
	      "300}}\n"
	      "]}\n",
	      f);
	fclose(f);
	struct output o = report(dir);
	char *svg = svg_of(dir);
	if (o.exit_code)
		fail_msg("exit %d: %s", o.exit_code, o.err);
	assert_non_null(svg);
	assert_true(balanced_svg(svg));
	assert_non_null(strstr(svg, ">stream 0x1</text>"));
	assert_non_null(strstr(svg, ">50.0%</text>"));
	assert_non_null(strstr(svg, ">not timed on the device (1 items)</text>"));
	assert_non_null(strstr(svg, "live device memory over iteration 0"));
	assert_non_null(strstr(svg, ">0.100 ms</text>"));
	free(svg);
	release(&o);
}

static void expect_refusal(const char *dir, const char *want)
{
	struct output o = report(dir);

	if (o.exit_code != 2 || !strstr(o.err, want))
		fail_msg("wanted exit 2 and \"%s\", got exit %d: %s", want, o.exit_code, o.err);
	assert_int_equal(count(o.err, "\n"), 1); /* one clear line */
	release(&o);
}

static void test_report_refuses_corrupt_inputs_naming_file_and_place(void **state)
{
	char dir[1300], want[1500];

	(void)state;
	copy_dir(full, "cut", "profile.0.json profile.1.json", dir, sizeof(dir));
	sh("head -c 2000 '%s/profile.1.json' > '%s/cut' && mv '%s/cut' '%s/profile.1.json'", dir,
	   dir, dir, dir);
	snprintf(want, sizeof(want),
	         "lynx report: %s/profile.1.json: not valid JSON: the text ends early (after 2000 "
	         "bytes",
	         dir);
	expect_refusal(dir, want);

	copy_dir(full, "field", "profile.0.json", dir, sizeof(dir));
	sh("sed -i 's/\"peak_bytes\":/\"peak\":/' '%s/profile.0.json'", dir);
	snprintf(want, sizeof(want), "%s/profile.0.json: memory.peak_bytes: missing", dir);
	expect_refusal(dir, want);

	copy_dir(full, "trace-cut", "profile.0.json trace.0.json", dir, sizeof(dir));
	sh("head -c 5000 '%s/trace.0.json' > '%s/cut' && mv '%s/cut' '%s/trace.0.json'", dir, dir,
	   dir, dir);
	snprintf(want, sizeof(want), "%s/trace.0.json: not valid JSON: the text ends early", dir);
	expect_refusal(dir, want);

	/* A timeline that is JSON but breaks a rule: two kernels overlapping on one stream. */
	copy_dir(full, "overlap", "profile.0.json", dir, sizeof(dir));
	sh("printf '%%s' '[{\"ph\":\"X\",\"name\":\"a\",\"pid\":0,\"tid\":1,\"ts\":0,\"dur\":5},"
	   "{\"ph\":\"X\",\"name\":\"b\",\"pid\":0,\"tid\":1,\"ts\":3,\"dur\":5}]' > "
	   "'%s/trace.0.json'",
	   dir);
	expect_refusal(dir, "trace.0.json: traceEvents[1] (\"b\", 3.000 to 8.000 us) partly "
	                    "overlaps traceEvents[0]");

	copy_dir(full, "misnamed", "profile.0.json", dir, sizeof(dir));
	sh("mv '%s/profile.0.json' '%s/profile.5.json'", dir, dir);
	expect_refusal(dir, "profile.5.json: holds rank 0, not 5");

	snprintf(dir, sizeof(dir), "%s/empty", scratch);
	sh("mkdir -p '%s'", dir);
	expect_refusal(dir, ": no profile.<rank>.json here");
	snprintf(want, sizeof(want), "%s/nowhere", scratch);
	expect_refusal(want, "nowhere: No such file or directory");
}

/* `lynx profile --trace` writes the timeline even when no profile can be built from the dump,
 * and says why there is no profile; the timeline then has no layers and says why. */
static void test_profile_trace_is_written_without_a_profile(void **state)
{
	char cmd[sizeof(lynx) + 4096], path[1300];

	(void)state;
	snprintf(path, sizeof(path), "%s/launcher.trace.json", scratch);
	snprintf(cmd, sizeof(cmd), "'%s' profile '%s' -o '%s/none.json' --trace '%s'", lynx,
	         launcher, scratch, path);
	struct output o = run("", cmd);
	assert_int_equal(o.exit_code, 1);
	assert_non_null(strstr(o.err, "no profile: "));
	assert_non_null(strstr(o.out, "launcher.trace.json: timeline (Chrome trace-event JSON)"));
	release(&o);
	char *text = slurp(path);
	assert_non_null(text);
	assert_non_null(strstr(text, "\"format\":\"lynx-trace\""));
	assert_non_null(strstr(text, "\"layers\":\"none: "));
	assert_null(strstr(text, "\"cat\":\"iteration\""));
	free(text);
	snprintf(path, sizeof(path), "%s/none.json", scratch);
	assert_int_equal(access(path, F_OK), -1);
}

/* Writes DIR/name from a printf format (the summaries' "%%" among it). */
static void write_file(const char *dir, const char *name, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void write_file(const char *dir, const char *name, const char *fmt, ...)
{
	char path[1500];
	va_list ap;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	assert_int_equal(fclose(f), 0);
}

/* A recompute summary as the executor writes it (shim/executor.h), for rank r. */
#define SUMMARY(r)                                                                               \
	"{\"format\": \"lynx-summary\", \"version\": 1, \"rank\": " #r ", \"plan\": "            \
	"{\"planner\": \"heu\", \"budget_bytes\": 2201600, \"max_slowdown\": \"2%%\", "          \
	"\"decisions\": {\"keep\": 136, \"offload\": 0, \"recompute\": 168}}, \"memory\": "      \
	"{\"measured_peak_bytes\": 2818048, \"predicted_peak_bytes\": 2200064, "                 \
	"\"achieved_peak_bytes\": 2195456}, \"step\": {\"measured_ns\": 257609573, "             \
	"\"predicted_slowdown\": 1.1656, \"achieved_ns\": 269764984, \"timed_iterations\": 1}, " \
	"\"evictions\": {\"offloaded\": 448, \"replayed\": 224, \"bytes\": 5570560, "            \
	"\"peak_bytes\": 675840}, \"replay\": {\"reproduces\": 80, \"refused\": "                \
	"[{\"verdict\": \"DIFFERS\", \"count\": 28, \"first\": \"layer 3\"}]}, \"stats\": {}}"

/* SUMMARY(r) with the memory curve of its last followed iteration. */
#define SUMMARY_WITH_CURVE(r, points)                                                       \
	"{\"format\": \"lynx-summary\", \"version\": 1, \"rank\": " #r ", \"plan\": "       \
	"{\"planner\": \"heu\", \"budget_bytes\": 2201600, \"max_slowdown\": null, "        \
	"\"decisions\": {\"keep\": 136, \"offload\": 0, \"recompute\": 168}}, \"memory\": " \
	"{\"measured_peak_bytes\": 2818048, \"predicted_peak_bytes\": 2200064, "            \
	"\"achieved_peak_bytes\": 2195456, \"curve\": {\"iteration_ns\": 1000, "            \
	"\"points\": " points "}}, \"step\": {\"measured_ns\": 257609573, "                 \
	"\"predicted_slowdown\": 1.1656, \"achieved_ns\": null}, \"evictions\": "           \
	"{\"offloaded\": 448, \"replayed\": 224}, \"replay\": {\"refused\": []}}"

/*
 * report.svg after a recompute run: each rank's device memory over its last followed
 * iteration (its summary's curve) beside warm-up's, on one scale, with its peak. A curve
 * out of order or out of its iteration leaves that summary out, with the reason.
 */
static void test_report_plots_memory_after_the_plan(void **state)
{
	char dir[1300];

	(void)state;
	copy_dir(full, "after", "*", dir, sizeof(dir));
	write_file(dir, "summary.0.json",
	           SUMMARY_WITH_CURVE(0, "[[0, 1048576], [500, 2195456], [1000, 1572864]]"));
	write_file(dir, "summary.1.json",
	           SUMMARY_WITH_CURVE(1, "[[0, 1048576], [900, 2195456], [800, 1572864]]"));
	struct output o = report(dir);
	if (o.exit_code)
		fail_msg("exit %d: %s", o.exit_code, o.err);
	char *svg = svg_of(dir);
	assert_non_null(svg);
	assert_true(balanced_svg(svg));
	assert_int_equal(count(svg, "after (recompute, heu): in use (cuMemGetInfo), peak 2.09 MiB"),
	                 1);
	assert_int_equal(count(svg, "stroke=\"#f28e2b\""), 1);
	assert_non_null(strstr(o.err, "summary.1.json: memory.curve.points[2] is not [ns within "
	                              "the iteration, in order; bytes]; left out"));
	free(svg);
	release(&o);
}

/*
 * Recompute mode's outcome per rank, from summary.<rank>.json: planned and achieved peak
 * and step beside warm-up's, evictions and refused replays. A corrupt summary is named on
 * stderr and left out; the rest of the report stands.
 */
static void test_report_shows_each_ranks_recompute_summary(void **state)
{
	char dir[1300];

	(void)state;
	copy_dir(full, "summaries", "profile.0.json profile.1.json", dir, sizeof(dir));
	write_file(dir, "summary.0.json", SUMMARY(0));
	write_file(dir, "summary.1.json",
	           "{\"format\": \"lynx-summary\", \"version\": 1, \"rank\": 1}");
	struct output o = report(dir);
	if (o.exit_code)
		fail_msg("exit %d: %s", o.exit_code, o.err);
	assert_non_null(strstr(o.out, "recompute mode (summary.<rank>.json)"));
	assert_non_null(strstr(o.out, "  0     heu        2.10 MiB*   2.69 MiB, 2.10 MiB, 2.09 MiB "
	                              "(-22.1%)"));
	assert_non_null(strstr(o.out, "257.610 ms, +16.6%, +4.7%"));
	assert_non_null(strstr(o.out, "448/224; replays refused: DIFFERS 28"));
	assert_non_null(strstr(o.out, "LYNX_MAX_SLOWDOWN=2%"));
	assert_null(strstr(o.out, "  1     heu"));
	assert_non_null(strstr(o.err, "summary.1.json: no \"plan\" object; left out"));
	release(&o);
	/* No summaries (profiling only): no such section. */
	o = report(full);
	assert_null(strstr(o.out, "recompute mode"));
	release(&o);
}

/* The size of file path in bytes, or -1. */
static long file_size(const char *path)
{
	FILE *f = fopen(path, "rb");
	long n = -1;

	if (f && !fseek(f, 0, SEEK_END))
		n = ftell(f);
	if (f)
		fclose(f);
	return n;
}

/* Headless Chromium's screenshot of page (an absolute path) into png; its log (console
 * messages among it) into log. Returns the exit status. */
static int screenshot(const char *page, const char *png, const char *log)
{
	char cmd[6000];

	snprintf(cmd, sizeof(cmd),
	         "timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "
	         "--no-first-run --user-data-dir='%s/chromium-profile' --enable-logging=stderr "
	         "--v=0 --window-size=1200,1600 --screenshot='%s' 'file://%s' >/dev/null 2>'%s'",
	         scratch, png, page, log);
	return system(cmd);
}

/*
 * report.html: the tables the terminal shows and the plot, on one page that needs nothing
 * else (no script, style sheet, image or font to fetch), and that a real browser renders:
 * headless Chromium (make deps installs it) takes its screenshot, which must hold far more
 * than the same browser's picture of an empty page, with nothing said on the console.
 */
static void test_report_html_is_one_page_a_browser_renders(void **state)
{
	static const char *const fetches[] = {"<script", "<link", "<img",   "<iframe",
	                                      " src=",   "url(",  "@import"};
	char dir[1300], path[1400], png[1400], log[1400], blank[1400];

	(void)state;
	if (access("/usr/bin/chromium", X_OK))
		fail_msg("/usr/bin/chromium is missing: `make deps` installs it (Debian's "
		         "chromium)");
	copy_dir(full, "html", "*", dir, sizeof(dir));
	write_file(dir, "summary.0.json", SUMMARY(0));
	struct output o = report(dir);
	if (o.exit_code)
		fail_msg("exit %d: %s", o.exit_code, o.err);
	snprintf(path, sizeof(path), "%s/report.html", dir);
	char want[1500];
	snprintf(want, sizeof(want), "%s: the tables and the plot, one self-contained page\n",
	         path);
	assert_non_null(strstr(o.out, want));
	char *html = slurp(path);
	assert_non_null(html);
	assert_int_equal(strncmp(html, "<!DOCTYPE html>", 15), 0);
	assert_non_null(strstr(html, "</html>"));
	/* The terminal's text, escaped; the plot inline, once. */
	assert_non_null(strstr(html, "stage 0 (rank 0): 2 layers, 2 micro-batches"));
	assert_non_null(strstr(html, "recompute mode (summary.&lt;rank&gt;.json)"));
	assert_non_null(strstr(html, "448/224; replays refused: DIFFERS 28"));
	assert_int_equal(count(html, "<svg "), 1);
	assert_int_equal(count(html, "</svg>"), 1);
	for (size_t i = 0; i < sizeof(fetches) / sizeof(fetches[0]); i++)
		if (strstr(html, fetches[i]))
			fail_msg("report.html fetches something: '%s'", fetches[i]);
	free(html);
	release(&o);

	snprintf(png, sizeof(png), "%s/report.png", dir);
	snprintf(log, sizeof(log), "%s/chromium.log", dir);
	if (screenshot(path, png, log))
		fail_msg("chromium failed on %s (its log: %s)", path, log);
	char *said = slurp(log);
	assert_non_null(said);
	if (strstr(said, ":CONSOLE"))
		fail_msg("the page said something on the console:\n%s", said);
	free(said);
	snprintf(blank, sizeof(blank), "%s/blank.html", dir);
	FILE *f = fopen(blank, "w");
	assert_non_null(f);
	fputs("<!DOCTYPE html><html><body></body></html>\n", f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/blank.png", dir);
	if (screenshot(blank, path, log))
		fail_msg("chromium failed on an empty page (its log: %s)", log);
	long shown = file_size(png), empty = file_size(path);
	if (empty <= 0 || shown < 5 * empty)
		fail_msg("the screenshot of report.html is %ld bytes, an empty page's %ld", shown,
		         empty);
}

static void test_report_usage_errors(void **state)
{
	char cmd[sizeof(lynx) + 64];

	(void)state;
	snprintf(cmd, sizeof(cmd), "'%s' report", lynx);
	struct output o = run("", cmd);
	assert_int_equal(o.exit_code, 2);
	assert_non_null(strstr(o.err, "lynx report: expected a directory"));
	release(&o);
	/* Several directories are allowed; the first that is not there is named. */
	snprintf(cmd, sizeof(cmd), "'%s' report /nonexistent-a /nonexistent-b", lynx);
	o = run("", cmd);
	assert_int_equal(o.exit_code, 2);
	assert_non_null(strstr(o.err, "lynx report: /nonexistent-a: No such file or directory"));
	release(&o);
	snprintf(cmd, sizeof(cmd), "'%s' report --frobnicate x", lynx);
	o = run("", cmd);
	assert_int_equal(o.exit_code, 2);
	release(&o);
	snprintf(cmd, sizeof(cmd), "'%s' help report", lynx);
	o = run("", cmd);
	assert_int_equal(o.exit_code, 0);
	assert_non_null(strstr(o.out, "usage: lynx report [--run ID] DIR"));
	release(&o);
}

/* `lynx report [--run ID] DIR`, in UTC (the runs' starts are printed in local time). */
static struct output report_run(const char *dir, const char *run_id)
{
	char cmd[sizeof(lynx) + 1700];

	snprintf(cmd, sizeof(cmd), "'%s' report %s%s%s '%s'", lynx, run_id ? "--run '" : "",
	         run_id ? run_id : "", run_id ? "'" : "", dir);
	return run("-i PATH=/usr/bin:/bin TZ=UTC", cmd);
}

/* dir/profile.<rank>.json: bare's profile of stage rank % 2 as a rank of a run of world ranks
 * that Slurm named id, started at unix time started. */
static void write_run_profile(const char *dir, int rank, int world, const char *id,
                              long long started)
{
	sh("sed -e 's/\"rank\":\t%d,/\"rank\":\t%d,/' -e 's/\"world\":\t2,/\"world\":\t%d,\\n"
	   "\t\"run\":\t{\"id\": \"%s\", \"source\": \"SLURM_JOB_ID\", \"started\": %lld},/' "
	   "'%s/profile.%d.json' > '%s/profile.%d.json'",
	   rank % 2, rank, world, id, started, bare, rank % 2, dir, rank);
}

/*
 * The case: a 4-rank run wrote profile.0-3.json, then a 2-rank run into the same
 * directory overwrote 0 and 1. The report reads the newest run's two ranks and says on
 * stderr which run it read and which it left; --run reads the other (ranks 0 and 1 missing);
 * an unknown --run is a usage error that lists the runs.
 */
static void test_report_reads_one_run_of_two_in_a_directory(void **state)
{
	char dir[1300];

	(void)state;
	snprintf(dir, sizeof(dir), "%s/two-runs", scratch);
	sh("rm -rf '%s' && mkdir -p '%s'", dir, dir);
	for (int r = 0; r < 4; r++)
		write_run_profile(dir, r, 4, "4690", 1795792801); /* 2026-11-27 15:20:01 UTC */
	for (int r = 0; r < 2; r++)
		write_run_profile(dir, r, 2, "4711", 1795796401); /* an hour later */

	struct output o = report_run(dir, NULL);
	if (o.exit_code)
		fail_msg("exit %d: %s", o.exit_code, o.err);
	assert_non_null(strstr(o.out, ", run 4711 (SLURM_JOB_ID, started 2026-11-27 16:20:01): 2 "
	                              "ranks of 2, 2 stages\n"));
	assert_null(strstr(o.out, "missing ranks"));
	assert_non_null(strstr(o.err, " holds profiles of 2 runs: reading run 4711 (2 ranks of 2, "
	                              "started 2026-11-27 16:20:01), the newest; the other: run "
	                              "4690 (2 ranks of 4); --run ID picks one\n"));
	assert_int_equal(count(o.err, "\n"), 1); /* one line, nothing else */
	assert_non_null(strstr(o.out, "report.svg: 2 panels"));
	release(&o);

	o = report_run(dir, "4690");
	assert_int_equal(o.exit_code, 0);
	assert_non_null(strstr(o.out, ", run 4690 (SLURM_JOB_ID, started 2026-11-27 15:20:01): 2 "
	                              "ranks of 4, 2 stages\nmissing ranks: 0 1\n"));
	assert_non_null(strstr(o.err, "reading run 4690 (2 ranks of 4, started 2026-11-27 "
	                              "15:20:01), as --run asks; the other: run 4711 (2 ranks of "
	                              "2)"));
	release(&o);

	o = report_run(dir, "4712");
	assert_int_equal(o.exit_code, 2);
	assert_non_null(strstr(o.err, "lynx report: --run 4712: no such run in "));
	assert_non_null(strstr(o.err, " (it holds: 4711, 4690)\n"));
	assert_non_null(strstr(o.err, "usage: lynx report [--run ID] DIR"));
	release(&o);

	/* One run: no line on stderr, and --run may name it. */
	sh("rm -f '%s'/profile.[23].json", dir);
	o = report_run(dir, "4711");
	assert_int_equal(o.exit_code, 0);
	assert_string_equal(o.err, "");
	assert_non_null(strstr(o.out, ", run 4711 (SLURM_JOB_ID, started 2026-11-27 16:20:01): 2 "
	                              "ranks of 2, 2 stages\n"));
	release(&o);
}

/* `lynx report ARGS` (ARGS quoted by the caller), in UTC. */
static struct output report_args(const char *args)
{
	char cmd[sizeof(lynx) + 6000];

	snprintf(cmd, sizeof(cmd), "'%s' report %s", lynx, args);
	return run("-i PATH=/usr/bin:/bin TZ=UTC", cmd);
}

/* The tables of a report: its stdout without the header (which names the directories), the
 * line that says where report.svg went, and the what-if's search times (wall clock). */
static char *tables_of(const char *out)
{
	const char *from = strchr(out, '\n'), *to = strstr(out, "/report.svg: ");
	char *text, *at;

	if (!from || !to)
		return NULL;
	while (to > from && to[-1] != '\n')
		to--;
	text = strndup(from, (size_t)(to - from));
	for (at = text; text && (at = strstr(at, "(search ")); at++) {
		char *end = strchr(at, ')');
		if (end)
			memmove(at + 1, end, strlen(end) + 1);
	}
	return text;
}

/*
 * The cluster case: a 4-rank run (two stages) on two nodes without a shared file
 * system, each node's ranks' profiles, timelines and summaries in its own directory. `lynx
 * report node0 node1` prints the same tables as `lynx report shared` on all the files in one
 * directory, with each rank's timeline and summary from its own node; report.svg goes in the
 * first directory.
 */
static void test_report_merges_per_node_directories_like_one_shared(void **state)
{
	char shared[1300], node0[1300], node1[1300], args[5000], path[1600];

	(void)state;
	snprintf(shared, sizeof(shared), "%s/nodes-shared", scratch);
	sh("rm -rf '%s' && mkdir -p '%s'", shared, shared);
	for (int r = 0; r < 4; r++) {
		write_run_profile(shared, r, 4, "5000", 1795792801);
		sh("cp '%s/trace.%d.json' '%s/trace.%d.json'", full, r % 2, shared, r);
	}
	/* Ranks 0 and 3, one on each node, wrote a summary. */
	write_file(shared, "summary.0.json", SUMMARY(0));
	sh("sed 's/\"rank\": 0/\"rank\": 3/' '%s/summary.0.json' > '%s/summary.3.json'", shared,
	   shared);
	copy_dir(shared, "node0", "profile.[01].json trace.[01].json summary.0.json", node0,
	         sizeof(node0));
	copy_dir(shared, "node1", "profile.[23].json trace.[23].json summary.3.json", node1,
	         sizeof(node1));

	struct output one = report_args(shared);
	snprintf(args, sizeof(args), "'%s' '%s'", node0, node1);
	struct output two = report_args(args);
	if (one.exit_code || two.exit_code)
		fail_msg("exit %d, %d: %s%s", one.exit_code, two.exit_code, one.err, two.err);
	assert_string_equal(two.err, "");
	snprintf(args, sizeof(args),
	         "%s + %s, run 5000 (SLURM_JOB_ID, started 2026-11-27 15:20:01): 4 ranks of 4, 2 "
	         "stages\n",
	         node0, node1);
	assert_true(!strncmp(two.out, args, strlen(args)));
	assert_non_null(strstr(one.out, "nodes-shared, run 5000 (SLURM_JOB_ID"));
	/* A directory without profiles among them (the launcher's under out/proc-%p): left
	 * out, and said. */
	char own[1300];
	snprintf(own, sizeof(own), "%s/launcher", scratch);
	sh("rm -rf '%s' && mkdir -p '%s' && echo '{}' > '%s/calls.1.json'", own, own, own);
	snprintf(args, sizeof(args), "'%s' '%s' '%s'", own, node0, node1);
	struct output three = report_args(args);
	assert_int_equal(three.exit_code, 0);
	snprintf(path, sizeof(path), "lynx report: %s: no profile.<rank>.json here; left out\n",
	         own);
	assert_string_equal(three.err, path);
	assert_null(strstr(three.out, "/launcher")); /* not in the header either */
	char *a = tables_of(one.out), *b = tables_of(two.out), *c = tables_of(three.out);
	assert_non_null(a);
	assert_non_null(b);
	assert_non_null(c);
	assert_string_equal(a, b);
	assert_string_equal(a, c);
	free(a);
	free(b);
	free(c);
	release(&three);
	/* Every rank's timeline and summary was found, in its own node's directory. */
	assert_int_equal(count(two.out, "  yes\n"), 4);
	assert_non_null(strstr(two.out, "\n  0     heu "));
	assert_non_null(strstr(two.out, "\n  3     heu "));
	snprintf(path, sizeof(path), "\n%s/report.svg: 4 panels\n", node0);
	assert_non_null(strstr(two.out, path));
	char *svg = svg_of(node0);
	assert_non_null(svg);
	assert_true(balanced_svg(svg));
	assert_non_null(strstr(svg, "rank 3 (stage 1)"));
	assert_int_equal(count(svg, "<polyline"), 4);
	free(svg);
	snprintf(path, sizeof(path), "%s/report.svg", node1);
	assert_int_equal(access(path, F_OK), -1);
	release(&one);
	release(&two);
}

/*
 * A rank's profile in two of the directories: of the run read, it is refused with both paths
 * named (which one is meant cannot be known); of another run, the run choice separates them
 * and --run reads that run across the directories. A directory not there, or named twice, is
 * refused too. Uses the directories the test before made.
 */
static void test_report_per_node_directories_duplicate_rank_and_run(void **state)
{
	char node0[1300], dup[1300], old[1300], args[4000], want[3000];

	(void)state;
	snprintf(node0, sizeof(node0), "%s/node0", scratch);
	copy_dir(node0, "dup", "profile.1.json", dup, sizeof(dup));
	sh("cp '%s/nodes-shared'/profile.[23].json '%s'/", scratch, dup);
	snprintf(args, sizeof(args), "'%s' '%s'", node0, dup);
	struct output o = report_args(args);
	snprintf(want, sizeof(want),
	         "lynx report: rank 1 of the run read is in %s/profile.1.json and in "
	         "%s/profile.1.json: give the report one of them\n",
	         node0, dup);
	assert_int_equal(o.exit_code, 2);
	assert_string_equal(o.err, want);
	release(&o);

	/* Rank 1 of an older run in the second node's directory. */
	snprintf(old, sizeof(old), "%s/node1-old", scratch);
	sh("rm -rf '%s' && mkdir -p '%s' && cp '%s/nodes-shared'/profile.[23].json '%s'/", old, old,
	   scratch, old);
	write_run_profile(old, 1, 4, "4999", 1795789201); /* an hour before 5000 */
	snprintf(args, sizeof(args), "'%s' '%s'", node0, old);
	o = report_args(args);
	if (o.exit_code)
		fail_msg("exit %d: %s", o.exit_code, o.err);
	assert_non_null(strstr(o.out, ", run 5000 (SLURM_JOB_ID, started 2026-11-27 15:20:01): 4 "
	                              "ranks of 4, 2 stages\n"));
	snprintf(want, sizeof(want),
	         "lynx report: %s + %s hold profiles of 2 runs: reading run 5000 (4 ranks of 4, "
	         "started 2026-11-27 15:20:01), the newest; the other: run 4999 (1 rank of 4); "
	         "--run ID picks one\n",
	         node0, old);
	assert_string_equal(o.err, want);
	release(&o);

	snprintf(args, sizeof(args), "--run 4999 '%s' '%s'", node0, old);
	o = report_args(args);
	assert_int_equal(o.exit_code, 0);
	assert_non_null(strstr(o.out, ", run 4999 (SLURM_JOB_ID, started 2026-11-27 14:20:01): 1 "
	                              "rank of 4, 1 stage\nmissing ranks: 0 2 3\n"));
	/* Its rank 1 has no timeline beside it (node0's trace.1.json is the other run's rank). */
	assert_int_equal(count(o.out, "  missing\n"), 1);
	release(&o);

	snprintf(args, sizeof(args), "--run 4998 '%s' '%s'", node0, old);
	o = report_args(args);
	assert_int_equal(o.exit_code, 2);
	snprintf(want, sizeof(want), "--run 4998: no such run in %s + %s (they hold: 5000, 4999)\n",
	         node0, old);
	assert_non_null(strstr(o.err, want));
	release(&o);

	snprintf(args, sizeof(args), "'%s' '%s/nowhere'", node0, scratch);
	o = report_args(args);
	assert_int_equal(o.exit_code, 2);
	snprintf(want, sizeof(want), "lynx report: %s/nowhere: No such file or directory\n",
	         scratch);
	assert_string_equal(o.err, want);
	release(&o);

	snprintf(args, sizeof(args), "'%s' '%s/'", node0, node0);
	o = report_args(args);
	assert_int_equal(o.exit_code, 2);
	assert_non_null(strstr(o.err, "are one directory"));
	release(&o);
}

/* Records tinytrain (pp2) under the shim and builds both directories with `lynx profile`. */
static int setup(void **state)
{
	char rec[1200], cmd[3 * sizeof(lynx) + 16384], pids[2][1500];
	int found = 0;
	struct dirent *d;

	(void)state;
	snprintf(rec, sizeof(rec), "%s/rec", scratch);
	snprintf(full, sizeof(full), "%s/full", scratch);
	snprintf(bare, sizeof(bare), "%s/bare", scratch);
	snprintf(cmd, sizeof(cmd),
	         "mkdir -p '%s' '%s' '%s' && env LD_PRELOAD='%s/liblynx.so' LYNX_MODE=profile "
	         "LYNX_OUT='%s' LYNX_EVENTS='%s/ev' '%s/bin/tinytrain' --nproc 2 --pp 2 --layers 4 "
	         "--microbatches 2 --steps 2 >'%s/stdout' 2>'%s/stderr'",
	         rec, full, bare, build_dir, rec, rec, build_dir, rec, rec);
	if (system(cmd))
		return -1;
	/* The ranks' dumps (the launcher's holds a handful of events), by pid: tinytrain forks
	 * its ranks in rank order. */
	DIR *dir = opendir(rec);
	if (!dir)
		return -1;
	while ((d = readdir(dir))) {
		char path[1500];
		if (strncmp(d->d_name, "ev.", 3))
			continue;
		snprintf(path, sizeof(path), "%s/%s", rec, d->d_name);
		char *text = slurp(path);
		int lines = text ? count(text, "\n") : 0;
		free(text);
		if (lines < 100) {
			snprintf(launcher, sizeof(launcher), "%s", path);
			continue;
		}
		if (found == 2)
			continue;
		snprintf(pids[found++], sizeof(pids[0]), "%s", path);
	}
	closedir(dir);
	if (found != 2 || !launcher[0])
		return -1;
	if (atoi(strrchr(pids[0], '/') + 4) > atoi(strrchr(pids[1], '/') + 4)) {
		char t[sizeof(pids[0])];
		memcpy(t, pids[0], sizeof(t));
		memcpy(pids[0], pids[1], sizeof(t));
		memcpy(pids[1], t, sizeof(t));
	}
	for (int r = 0; r < 2; r++) {
		snprintf(cmd, sizeof(cmd),
		         "'%s' profile '%s' -o '%s/profile.%d.json' --trace '%s/trace.%d.json' "
		         "--rank %d --world 2 >/dev/null && '%s' profile '%s' -o "
		         "'%s/profile.%d.json' --rank %d --world 2 >/dev/null",
		         lynx, pids[r], full, r, full, r, r, lynx, pids[r], bare, r, r);
		if (system(cmd))
			return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_report_tables_and_svg_from_profiles_and_timelines),
	        cmocka_unit_test(test_report_without_timelines_says_what_is_missing),
	        cmocka_unit_test(test_report_stream_busy_share_from_device_slices),
	        cmocka_unit_test(test_report_refuses_corrupt_inputs_naming_file_and_place),
	        cmocka_unit_test(test_profile_trace_is_written_without_a_profile),
	        cmocka_unit_test(test_report_usage_errors),
	        cmocka_unit_test(test_report_reads_one_run_of_two_in_a_directory),
	        cmocka_unit_test(test_report_shows_each_ranks_recompute_summary),
	        cmocka_unit_test(test_report_html_is_one_page_a_browser_renders),
	        cmocka_unit_test(test_report_plots_memory_after_the_plan),
	        cmocka_unit_test(test_report_merges_per_node_directories_like_one_shared),
	        cmocka_unit_test(test_report_per_node_directories_duplicate_rank_and_run),
	};

	if (argc < 1 || harness_init(argv[0], "test_report")) {
		fprintf(stderr, "cannot find the build directory from %s\n", argc ? argv[0] : "?");
		return 1;
	}
	snprintf(lynx, sizeof(lynx), "%s/bin/lynx", build_dir);
	return harness_finish(cmocka_run_group_tests(tests, setup, NULL));
}
