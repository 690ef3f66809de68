/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Lynx's exact planner (OPT): one MILP per stage, solved by COIN-OR CBC through its C
 * interface, loaded at run time (cbc.h). Every layer is decided on its own (HEU decides one
 * representative layer and mixes two policies over the identical layers).
 *
 * Units. As in HEU, a layer's groups that rerun the same ops are one unit (the checker
 * rebuilds dropped siblings together); the layer's input is always kept.
 *
 * Slots: the stage's windows, each with one occurrence per micro-batch j that serves j's
 * rebuilds (problem.h), its idle capacity c_k, the share f_k of micro-batches it serves (the
 * others rebuild on demand), and whether what it rebuilds is resident at the stage's peak:
 *   - PP_RECV_FWD, before the forward that precedes j's backward: stages with warm-up
 *     forwards only, f = max(m - warmup, 1) / m, held; open to every layer;
 *   - TP_FWD of layer l' at op o: with warm-up forwards, in that same forward, open to every
 *     layer, f as above; without (the last stage), in j's own forward, open to layers l < l',
 *     f = 1; held;
 *   - PP_RECV_BWD, before j's backward: f = 1, held, every layer;
 *   - TP_BWD of layer l' at op o, in j's backward: f = 1, not held; open to layer l' - 1 and
 *     to layer l' itself for units all of whose consumers precede o.
 * Windows of zero capacity are left out (rebuilding there costs as much as on demand).
 * HEU uses the same slots but TP_FWD of the layer itself only, and gives each layer 1/n of
 * a PP window.
 *
 * Variables. Binary x[l,u,c] for each layer l, unit u and choice c in {keep, on demand, each
 * slot open to (l, u)}; continuous ov_k >= 0 per slot: the time by which the slot's
 * occurrence overflows.
 * Constraints.
 *   - choice:     sum_c x[l,u,c] = 1;
 *   - dependency: for u in slot k and each unit d that u needs,
 *                 x[l,d,keep] + sum over slots k' of d occurring no later than k of
 *                 x[l,d,k'] >= x[l,u,k] (a dependency on demand or rebuilt later would be
 *                 rebuilt inside k too, which the checker does and the MILP would not count);
 *   - capacity:   sum over (l,u) of r_u · x[l,u,k] - ov_k <= c_k · (1 - q + q / g), and,
 *                 when q > 1, g (1 - 1/q) · sum r_u · x[l,u,k] - ov_k <= 0, where g and q are
 *                 the problem's compute and communication slowdowns (lynx_window_delay(); without
 *                 interference, the first row alone, on c_k);
 *   - memory, at the end of the forward of the last in-flight micro-batch (where 1F1B
 *     peaks; planner.c), at n + 1 event points: after each layer l's forward,
 *       static + k·emb + (k - 1)·K + sum_{l' < l} kept(l') + all(l) + H <= B,
 *     and after the head's forward, static + k·emb + k·K + head + H <= B, where K is the
 *     stage's kept bytes, kept(l) layer l's, all(l) its kept and dropped bytes (the dropped
 *     ones are freed at the end of its forward), H the bytes rebuilt in held slots (counted
 *     at every point, as HEU does: an upper bound) and B the budget. Backward-side points
 *     are not modelled: a backward frees at least the head before it rebuilds, and TP_BWD
 *     rebuilds stay within one layer's transient (HEU's argument).
 * Objective (added time per micro-batch): sum r_u · x[l,u,on demand]
 *   + sum_k (f_k · ov_k + (1 - f_k) · sum r_u · x[l,u,k]).
 * Scaled to milliseconds and MiB for CBC's tolerances. The gap is reported relative to the
 * stage's whole micro-batch time, (added - bound) / (forward + backward + added), and CBC
 * stops once the absolute gap is below stop_gap times the forward and backward; the gap of
 * the added time alone is in the report (added_gap).
 *
 * The MILP's accounting, like HEU's, ignores pipeline timing and bounds memory, so OPT
 * replays its plan in the checker and re-solves a stage whose replayed peak exceeds the
 * budget with the budget lowered by the excess (up to MAX_ROUNDS). The plan's step time,
 * peaks and fits are the checker's; the plan's gap is the largest stage gap of the last
 * solves (a bound on the step time's gap only as far as the MILP's accounting is the
 * checker's). Then it compares with HEU's plan, by the checker, and keeps the faster one that
 * fits.
 *
 * Time: o->time_limit_s counts from lynx_opt_plan()'s start (HEU's plan and loading CBC
 * included) and bounds every stage's solves, over every round; cbc.h says how the solves share
 * it. A stage left without a solution keeps HEU's decisions (the plan starts as a copy of
 * HEU's), and the plan's note says so.
 *
 * Size: n · U · (4n + 4) binaries at most (n layers, U units, two TP windows per direction
 * per layer without sequence parallelism): about 7,000 for a 16-layer stage.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cbc.h"
#include "checker.h"
#include "opt.h"
#include "units.h"
#include "planner.h"

#define MAX_ROUNDS 6
#define MIB (1024.0 * 1024.0)
#define MS 1e3
#define C_KEEP 0
#define C_DEMAND 1

/* A stage window as a place to rebuild in. */
struct slot {
	uint32_t window; /* the stage's window index */
	enum lynx_window_kind kind;
	int32_t layer, op;
	int key; /* order of occurrence within one micro-batch's service */
	double cap_s, served;
	bool held;
	int ov; /* column of its overflow */
};

/* One stage's MILP: columns of x[l][u] are first[l][u] + choice, choices in ch[l][u]. */
struct model {
	const struct lynx_problem *p;
	const struct lynx_problem_stage *st;
	uint32_t s, n;
	const struct lynx_layer_units *lu;
	struct slot *slots;
	uint32_t n_slots;
	int *first;    /* [l * U + u]: the column of choice 0 (keep) */
	int *n_choice; /* [l * U + u]: 2 + slots open to it */
	int *slot_of;  /* [column]: the slot of a slot choice, -1 for keep and on demand */
	int n_cols;
	/* The problem's interference as the capacity rows' two lines (lynx_window_delay()):
	 * ov_k >= work - cap_share · c_k and ov_k >= shared_slope · work; 1 and 0 without. */
	double cap_share, shared_slope;
};

/* The slots of stage st (see the top comment), into m->slots. Returns 0 or -ENOMEM. */
static int find_slots(struct model *m)
{
	const struct lynx_problem_stage *st = m->st;
	uint32_t ops = m->p->layer.n_ops, n = m->n, mb = m->p->micro_batches;
	double fwd_served =
	        st->warmup >= 1 ? (double)(mb > st->warmup ? mb - st->warmup : 1) / mb : 1;

	m->slots = calloc(st->n_windows ? st->n_windows : 1, sizeof(*m->slots));
	if (!m->slots)
		return -ENOMEM;
	for (uint32_t w = 0; w < st->n_windows; w++) {
		const struct lynx_window *win = &st->windows[w];
		struct slot k = {.window = w,
		                 .kind = win->kind,
		                 .layer = win->layer,
		                 .op = win->op,
		                 .cap_s = win->capacity_s,
		                 .served = 1,
		                 .held = true};

		if (!(win->capacity_s > 0))
			continue;
		switch (win->kind) {
		case LYNX_WINDOW_PP_RECV_FWD:
			if (st->warmup < 1)
				continue;
			k.served = fwd_served;
			k.key = 0;
			break;
		case LYNX_WINDOW_TP_FWD:
			k.served = fwd_served;
			k.key = 1 + win->layer * (int)ops + win->op;
			break;
		case LYNX_WINDOW_PP_RECV_BWD:
			k.key = 1 + (int)(n * ops);
			break;
		case LYNX_WINDOW_TP_BWD:
			k.held = false;
			k.key = 2 + (int)(n * ops) +
			        (int)(n - 1 - (uint32_t)win->layer) * (int)ops +
			        (int)(ops - 1 - (uint32_t)win->op);
			break;
		default:
			continue; /* DP_GRAD: after every backward, never in time */
		}
		m->slots[m->n_slots++] = k;
	}
	return 0;
}

/* Whether slot k can serve unit u of layer l. */
static bool open_to(const struct model *m, const struct slot *k, uint32_t l,
                    const struct lynx_unit *u)
{
	switch (k->kind) {
	case LYNX_WINDOW_TP_FWD:
		return m->st->warmup >= 1 || k->layer > (int32_t)l;
	case LYNX_WINDOW_TP_BWD:
		return k->layer == (int32_t)l + 1 ||
		       (k->layer == (int32_t)l && u->max_consumer < k->op);
	default:
		return true;
	}
}

/* Lays out the columns. Returns 0 or -ENOMEM. */
static int layout(struct model *m)
{
	uint32_t U = m->lu->n_units;
	int col = 0;

	m->first = calloc((size_t)m->n * U + 1, sizeof(int));
	m->n_choice = calloc((size_t)m->n * U + 1, sizeof(int));
	if (!m->first || !m->n_choice)
		return -ENOMEM;
	for (uint32_t l = 0; l < m->n; l++)
		for (uint32_t u = 0; u < U; u++) {
			int c = 2;

			for (uint32_t k = 0; k < m->n_slots; k++)
				c += open_to(m, &m->slots[k], l, &m->lu->units[u]);
			m->first[l * U + u] = col;
			m->n_choice[l * U + u] = c;
			col += c;
		}
	for (uint32_t k = 0; k < m->n_slots; k++)
		m->slots[k].ov = col++;
	m->n_cols = col;
	m->slot_of = malloc((size_t)col * sizeof(int));
	if (!m->slot_of)
		return -ENOMEM;
	for (int i = 0; i < col; i++)
		m->slot_of[i] = -1;
	for (uint32_t l = 0; l < m->n; l++)
		for (uint32_t u = 0; u < U; u++) {
			int c = m->first[l * U + u] + 2;

			for (uint32_t k = 0; k < m->n_slots; k++)
				if (open_to(m, &m->slots[k], l, &m->lu->units[u]))
					m->slot_of[c++] = (int)k;
		}
	return 0;
}

/* The column of unit u of layer l in slot k, or -1. */
static int slot_col(const struct model *m, uint32_t l, uint32_t u, uint32_t k)
{
	int c = m->first[l * m->lu->n_units + u];

	for (int i = 2; i < m->n_choice[l * m->lu->n_units + u]; i++)
		if (m->slot_of[c + i] == (int)k)
			return c + i;
	return -1;
}

static void model_free(struct model *m)
{
	free(m->slots);
	free(m->first);
	free(m->n_choice);
	free(m->slot_of);
}

/* A row under construction. */
struct row {
	int n;
	int *col;
	double *val;
};

static void put(struct row *r, int col, double val)
{
	r->col[r->n] = col;
	r->val[r->n++] = val;
}

/*
 * The MILP's columns and rows, collected and handed to CBC in one Cbc_loadProblem(): its
 * Cbc_addRow() copies the whole matrix on every call, quadratic in the rows (2.9 s for a
 * 16-layer stage of 6,000 columns, outside CBC's time limit).
 */
struct matrix {
	double *obj, *ub; /* [n_cols]: each column's objective coefficient, upper bound */
	int n_rows;       /* rows: lb[i] <= row i <= ub[i] */
	size_t nnz, cap, rows_cap;
	int *row, *col;          /* [nnz]: the nonzeros, in the order added */
	double *val;             /* [nnz] */
	double *row_lb, *row_ub; /* [n_rows] */
	bool failed;             /* out of memory: the matrix is incomplete */
};

static void matrix_free(struct matrix *a)
{
	free(a->obj);
	free(a->ub);
	free(a->row);
	free(a->col);
	free(a->val);
	free(a->row_lb);
	free(a->row_ub);
}

/* Grows a to hold nnz nonzeros and `rows` rows. Returns false when out of memory. */
static bool grow(struct matrix *a, size_t nnz, size_t rows)
{
	size_t cap = nnz > 2 * a->cap ? nnz : 2 * a->cap;
	size_t rows_cap = rows > 2 * a->rows_cap ? rows : 2 * a->rows_cap;
	int *row, *col;
	double *val, *lb, *ub;

	if (nnz > a->cap) {
		/* Each array that grew is kept, whether or not the next one does. */
		row = realloc(a->row, cap * sizeof(*row));
		a->row = row ? row : a->row;
		col = row ? realloc(a->col, cap * sizeof(*col)) : NULL;
		a->col = col ? col : a->col;
		val = col ? realloc(a->val, cap * sizeof(*val)) : NULL;
		if (!val)
			return false;
		a->val = val;
		a->cap = cap;
	}
	if (rows > a->rows_cap) {
		lb = realloc(a->row_lb, rows_cap * sizeof(*lb));
		a->row_lb = lb ? lb : a->row_lb;
		ub = lb ? realloc(a->row_ub, rows_cap * sizeof(*ub)) : NULL;
		if (!ub)
			return false;
		a->row_ub = ub;
		a->rows_cap = rows_cap;
	}
	return true;
}

/* Adds row r, `sense` ('E', 'G', 'L') rhs, to a; sets a->failed when out of memory. */
static void add_row(struct matrix *a, const struct row *r, char sense, double rhs)
{
	a->failed = a->failed || !grow(a, a->nnz + (size_t)r->n, (size_t)a->n_rows + 1);
	if (a->failed)
		return;
	for (int i = 0; i < r->n; i++) {
		a->row[a->nnz] = a->n_rows;
		a->col[a->nnz] = r->col[i];
		a->val[a->nnz++] = r->val[i];
	}
	a->row_lb[a->n_rows] = sense == 'L' ? -DBL_MAX : rhs;
	a->row_ub[a->n_rows++] = sense == 'G' ? DBL_MAX : rhs;
}

/*
 * Loads a into CBC model cm, as compressed columns, the first n_binary columns binary.
 * Returns 0 or -ENOMEM.
 */
static int load(const struct lynx_cbc *c, Cbc_Model *cm, const struct matrix *a, int n_cols,
                int n_binary)
{
	CoinBigIndex *start = calloc((size_t)n_cols + 2, sizeof(*start));
	int *index = malloc((a->nnz + 1) * sizeof(*index));
	double *value = malloc((a->nnz + 1) * sizeof(*value));
	int err = start && index && value ? 0 : -ENOMEM;

	for (size_t k = 0; !err && k < a->nnz; k++)
		start[a->col[k] + 2]++;
	for (int j = 0; !err && j < n_cols; j++)
		start[j + 2] += start[j + 1];
	/* start[j + 1] is where column j's next nonzero goes; once placed, its end. */
	for (size_t k = 0; !err && k < a->nnz; k++) {
		CoinBigIndex at = start[a->col[k] + 1]++;

		index[at] = a->row[k];
		value[at] = a->val[k];
	}
	if (!err) {
		c->Cbc_loadProblem(cm, n_cols, a->n_rows, start, index, value, NULL, a->ub, a->obj,
		                   a->row_lb, a->row_ub);
		for (int j = 0; j < n_binary; j++)
			c->Cbc_setInteger(cm, j);
	}
	free(start);
	free(index);
	free(value);
	return err;
}

/*
 * Collects every column and row of m with budget `budget` into a (its obj and ub sized
 * m->n_cols), with r as the row under construction; a->failed when out of memory.
 */
static void build(const struct model *m, uint64_t budget, struct row *r, struct matrix *a)
{
	const struct lynx_problem_stage *st = m->st;
	uint32_t U = m->lu->n_units, n = m->n;
	/* Micro-batches kept at the peak (interleaved: passes in flight over v). */
	const double k_in = lynx_problem_held_micro_batches(m->p, m->s);
	double emb = st->embedding.present ? (double)st->embedding.act_bytes : 0;
	double head = st->head.present ? (double)st->head.act_bytes : 0;
	double base = (double)st->static_bytes + (double)st->inflight * emb;
	double in = (double)m->lu->input_bytes;

	/* Columns: binaries, then the slots' overflows; their objective coefficients. */
	memset(a->obj, 0, (size_t)m->n_cols * sizeof(double));
	for (uint32_t l = 0; l < n; l++)
		for (uint32_t u = 0; u < U; u++) {
			int f = m->first[l * U + u];
			double rerun = m->lu->units[u].rerun_s * MS;

			a->obj[f + C_DEMAND] = rerun;
			for (int i = 2; i < m->n_choice[l * U + u]; i++)
				a->obj[f + i] = (1 - m->slots[m->slot_of[f + i]].served) * rerun;
		}
	for (uint32_t k = 0; k < m->n_slots; k++)
		a->obj[m->slots[k].ov] = m->slots[k].served;
	for (int col = 0; col < m->n_cols; col++)
		a->ub[col] = col < m->n_cols - (int)m->n_slots ? 1 : 1e30;
	/* One choice per unit and layer. */
	for (uint32_t lu = 0; lu < n * U; lu++) {
		r->n = 0;
		for (int i = 0; i < m->n_choice[lu]; i++)
			put(r, m->first[lu] + i, 1);
		add_row(a, r, 'E', 1);
	}
	/* Dependencies. */
	for (uint32_t l = 0; l < n; l++)
		for (uint32_t u = 0; u < U; u++)
			for (int i = 2; i < m->n_choice[l * U + u]; i++) {
				int col = m->first[l * U + u] + i;
				const struct slot *k = &m->slots[m->slot_of[col]];

				for (uint32_t d = 0; d < U; d++) {
					if (!(m->lu->units[u].deps & (1u << d)))
						continue;
					r->n = 0;
					put(r, col, -1);
					put(r, m->first[l * U + d] + C_KEEP, 1);
					for (uint32_t k2 = 0; k2 < m->n_slots; k2++) {
						int c2 = m->slots[k2].key <= k->key
						                 ? slot_col(m, l, d, k2)
						                 : -1;

						if (c2 >= 0)
							put(r, c2, 1);
					}
					add_row(a, r, 'G', 0);
				}
			}
	/* Capacity: ov_k at least each of the delay's two lines (lynx_window_delay()). */
	for (uint32_t k = 0; k < m->n_slots; k++)
		for (int line = 0; line < 2; line++) {
			double slope = line ? m->shared_slope : 1;

			if (!(slope > 0))
				continue;
			r->n = 0;
			for (uint32_t l = 0; l < n; l++)
				for (uint32_t u = 0; u < U; u++) {
					int col = slot_col(m, l, u, k);

					if (col >= 0)
						put(r, col, slope * m->lu->units[u].rerun_s * MS);
				}
			if (!r->n)
				continue;
			put(r, m->slots[k].ov, -1);
			add_row(a, r, 'L', line ? 0 : m->slots[k].cap_s * m->cap_share * MS);
		}
	/*
	 * Memory: after layer l's forward (l < n), and after the head's (l == n). The constant
	 * is the row's value with every unit dropped on demand and nothing held.
	 */
	for (uint32_t l = 0; l <= n; l++) {
		double cst = l < n ? base + (k_in - 1) * n * in + l * in + (double)m->lu->all_bytes
		                   : base + k_in * n * in + head;

		if (l == n && !st->head.present)
			continue;
		r->n = 0;
		for (uint32_t l2 = 0; l2 < n; l2++)
			for (uint32_t u = 0; u < U; u++) {
				double b = (double)m->lu->units[u].bytes / MIB;
				double keep = l < n ? (k_in - 1 + (l2 < l)) * b : k_in * b;
				int f = m->first[l2 * U + u];

				if (keep > 0)
					put(r, f + C_KEEP, keep);
				for (int i = 2; i < m->n_choice[l2 * U + u]; i++)
					if (m->slots[m->slot_of[f + i]].held)
						put(r, f + i, b);
			}
		add_row(a, r, 'L', ((double)budget - cst) / MIB);
	}
}

/* The MIP start from plan `from` (HEU's) for stage m->s, into x. */
static void start_from(const struct model *m, const struct lynx_plan *from, double *x)
{
	uint32_t U = m->lu->n_units;
	double *work = calloc(m->n_slots + 1, sizeof(double));

	memset(x, 0, (size_t)m->n_cols * sizeof(*x));
	for (uint32_t l = 0; l < m->n; l++)
		for (uint32_t u = 0; u < U; u++) {
			const struct lynx_decision *d = lynx_plan_get(
			        from, m->s, l, (uint32_t)__builtin_ctz(m->lu->units[u].groups));
			int col = m->first[l * U + u] + C_DEMAND;

			if (d->action == LYNX_ACTION_KEEP)
				col = m->first[l * U + u] + C_KEEP;
			for (uint32_t k = 0;
			     d->action == LYNX_ACTION_RECOMPUTE_IN_WINDOW && k < m->n_slots; k++)
				if (m->slots[k].window == d->window && slot_col(m, l, u, k) >= 0)
					col = slot_col(m, l, u, k);
			x[col] = 1;
			if (m->slot_of[col] >= 0 && work)
				work[m->slot_of[col]] += m->lu->units[u].rerun_s * MS;
		}
	for (uint32_t k = 0; work && k < m->n_slots; k++)
		x[m->slots[k].ov] = MS * lynx_window_delay(&m->p->interference, work[k] / MS,
		                                           m->slots[k].cap_s);
	free(work);
}

/* Writes the solution x of stage m->s into plan. */
static void write_stage(const struct model *m, const double *x, struct lynx_plan *plan)
{
	const struct lynx_problem_layer *L = &m->p->layer;
	uint32_t U = m->lu->n_units;

	for (uint32_t l = 0; l < m->n; l++)
		for (uint32_t u = 0; u < U; u++) {
			int f = m->first[l * U + u], best = C_DEMAND;
			struct lynx_decision dec = {.action = LYNX_ACTION_RECOMPUTE_ON_DEMAND};

			for (int i = 0; i < m->n_choice[l * U + u]; i++)
				if (x[f + i] > x[f + best])
					best = i;
			if (best == C_KEEP)
				dec.action = LYNX_ACTION_KEEP;
			else if (best >= 2)
				dec = (struct lynx_decision){
				        .action = LYNX_ACTION_RECOMPUTE_IN_WINDOW,
				        .window = m->slots[m->slot_of[f + best]].window};
			for (uint32_t g = 0; g < L->n_groups; g++)
				if (m->lu->units[u].groups & (1u << g))
					*lynx_plan_decision(plan, m->s, l, g) = dec;
		}
}

/*
 * Solves stage s within `budget`, starting from `from`, into plan, in `seconds` (building the
 * model included). Returns 0 (out->solved false when CBC found nothing) or -ENOMEM.
 */
static int solve_stage(const struct lynx_cbc *c, const struct lynx_opt_options *o,
                       const struct lynx_problem *p, const struct lynx_layer_units *lu, uint32_t s,
                       uint64_t budget, double seconds, const struct lynx_plan *from,
                       struct lynx_plan *plan, struct lynx_cbc_stage_solve *out)
{
	struct model m = {.p = p, .st = &p->stages[s], .s = s, .n = p->stages[s].layers, .lu = lu};
	struct row r = {0};
	struct matrix a = {0};
	Cbc_Model *cm = NULL;
	double *x0 = NULL;
	int *idx = NULL;
	double t0 = lynx_planner_now(), base_ms = lynx_cbc_stage_base_ms(p, &p->stages[s]), cbc_s;
	int err = find_slots(&m);

	*out = (struct lynx_cbc_stage_solve){.gap = NAN, .added_gap = NAN};
	lynx_window_delay_lines(&p->interference, &m.cap_share, &m.shared_slope);
	err = err ? err : layout(&m);
	if (err)
		goto out;
	r.col = malloc((size_t)m.n_cols * sizeof(int));
	r.val = malloc((size_t)m.n_cols * sizeof(double));
	x0 = malloc((size_t)m.n_cols * sizeof(double));
	idx = malloc((size_t)m.n_cols * sizeof(int));
	a.obj = malloc((size_t)m.n_cols * sizeof(double));
	a.ub = malloc((size_t)m.n_cols * sizeof(double));
	cm = c->Cbc_newModel();
	if (!r.col || !r.val || !x0 || !idx || !a.obj || !a.ub || !cm) {
		err = -ENOMEM;
		goto out;
	}
	build(&m, budget, &r, &a);
	err = a.failed ? -ENOMEM : load(c, cm, &a, m.n_cols, m.n_cols - (int)m.n_slots);
	if (err)
		goto out;
	c->Cbc_setObjSense(cm, 1);
	c->Cbc_setLogLevel(cm, o->log_level);
	/* CBC 2.10 crashes (CglPreProcess::postProcess) when its time limit stops it while
	 * preprocessing: a short share of the deadline made that common. */
	c->Cbc_setParameter(cm, "preprocess", "off");
	/* The share covers building the model too: CBC gets what building left, if any. */
	cbc_s = seconds - (lynx_planner_now() - t0);
	if (!(cbc_s > 0))
		goto out;
	c->Cbc_setMaximumSeconds(cm, cbc_s);
	c->Cbc_setAllowableGap(cm, o->stop_gap * base_ms);
	start_from(&m, from, x0);
	for (int i = 0; i < m.n_cols; i++)
		idx[i] = i;
	c->Cbc_setMIPStartI(cm, m.n_cols, idx, x0);
	c->Cbc_solve(cm);
	if (c->Cbc_bestSolution(cm)) {
		double obj = c->Cbc_getObjValue(cm), bound = c->Cbc_getBestPossibleObjValue(cm);

		write_stage(&m, c->Cbc_bestSolution(cm), plan);
		out->solved = true;
		lynx_cbc_gaps(obj, bound, base_ms, &out->gap, &out->added_gap);
		out->optimal = c->Cbc_isProvenOptimal(cm) || out->gap <= o->stop_gap;
	} else {
		out->infeasible = c->Cbc_isProvenInfeasible(cm);
	}
out:
	if (cm)
		c->Cbc_deleteModel(cm);
	free(r.col);
	free(r.val);
	free(x0);
	free(idx);
	matrix_free(&a);
	model_free(&m);
	return err;
}

/* What solve_one needs besides the stage and its budget. */
struct solve_ctx {
	const struct lynx_cbc *c;
	const struct lynx_opt_options *o;
	const struct lynx_problem *p;
	const struct lynx_layer_units *lu;
	const struct lynx_plan *from;
};

static int solve_one(void *ctx, uint32_t s, uint64_t budget, double seconds, struct lynx_plan *plan,
                     struct lynx_cbc_stage_solve *out)
{
	const struct solve_ctx *x = ctx;

	return solve_stage(x->c, x->o, x->p, x->lu, s, budget, seconds, x->from, plan, out);
}

/*
 * The MILP's plan into plan (initialised, holding HEU's decisions), within what is left of
 * o->time_limit_s since `started`; plan->note says where the limit stopped it short. Returns
 * 0 with rep's solve fields set (a stage CBC did not solve keeps HEU's plan); -ENOMEM; the
 * checker's errors, with why.
 */
static int milp_plan(const struct lynx_cbc *c, const struct lynx_opt_options *o,
                     const struct lynx_problem *p, const struct lynx_plan *heu, double started,
                     struct lynx_plan *plan, struct lynx_opt_report *rep, char *why, size_t len)
{
	struct lynx_layer_units lu;
	struct solve_ctx ctx = {c, o, p, &lu, heu};
	struct lynx_cbc_search search = {.max_rounds = MAX_ROUNDS,
	                                 .limit_s = o->time_limit_s,
	                                 .started = started,
	                                 .solve = solve_one,
	                                 .ctx = &ctx,
	                                 .start = "HEU's plan"};
	struct lynx_cbc_rounds r;
	int err;

	lynx_layer_units_find(&p->layer, &lu);
	err = lynx_cbc_plan_stages(p, plan, &search, &r, why, len);
	rep->solved = r.solved;
	rep->optimal = r.optimal;
	rep->gap = r.gap;
	rep->added_gap = r.added_gap;
	rep->solve_s += r.solve_s;
	rep->rounds = r.rounds;
	rep->kept = r.kept;
	rep->searched = r.searched;
	snprintf(plan->note, sizeof(plan->note), "%s", r.note);
	return err;
}

int lynx_opt_plan(const struct lynx_problem *p, const struct lynx_opt_options *o,
                  struct lynx_plan *plan, struct lynx_opt_report *report, char *why, size_t len)
{
	double started = lynx_planner_now();
	struct lynx_opt_options opt = o ? *o : (struct lynx_opt_options){0};
	struct lynx_opt_report rep = {.gap = NAN, .added_gap = NAN, .milp_step_s = NAN};
	struct lynx_plan heu, milp;
	struct lynx_cbc c;
	char reason[200] = "";
	int err;

	if (!(opt.time_limit_s > 0))
		opt.time_limit_s = LYNX_OPT_DEFAULT_TIME_LIMIT_S;
	if (!(opt.stop_gap > 0))
		opt.stop_gap = 1e-3;
	err = lynx_planner_heu(p, &heu, why, len);
	if (err)
		return err;
	rep.heu_step_s = heu.step_time_s;
	err = lynx_cbc_open(&c, opt.library, reason, sizeof(reason));
	if (!err) {
		err = lynx_plan_init(&milp, p, "opt", false);
		if (!err) {
			lynx_cbc_copy_start(p, &heu, &milp);
			err = milp_plan(&c, &opt, p, &heu, started, &milp, &rep, reason,
			                sizeof(reason));
			if (err)
				lynx_plan_free(&milp);
		}
		lynx_cbc_close(&c);
	}
	if (err == -ENOMEM) {
		lynx_plan_free(&heu);
		return err;
	}
	if (!err) {
		rep.milp_step_s = milp.step_time_s;
		if (rep.kept && rep.kept == rep.searched) {
			/* No stage solved: the MILP's plan is HEU's. */
			snprintf(reason, sizeof(reason), "%s", milp.note);
			lynx_plan_free(&milp);
			err = 1;
		} else if (milp.fits && (!heu.fits || milp.step_time_s <= heu.step_time_s)) {
			lynx_plan_free(&heu);
			*plan = milp;
			plan->gap = rep.gap;
		} else if (milp.note[0]) {
			/* Stopped short: the note says why the MILP's plan loses. */
			snprintf(reason, sizeof(reason), "%s", milp.note);
			lynx_plan_free(&milp);
			err = 1;
		} else {
			snprintf(reason, sizeof(reason),
			         "the checker finds HEU's plan better (MILP %.6g s%s, gap %.2g%%)",
			         milp.step_time_s, milp.fits ? "" : ", over budget", 100 * rep.gap);
			lynx_plan_free(&milp);
			err = 1;
		}
	}
	if (err) {
		*plan = heu;
		rep.used_heu = true;
		snprintf(plan->note, sizeof(plan->note), "HEU's plan: %s", reason);
	}
	if (report)
		*report = rep;
	return 0;
}

/* The planner table's entry: the problem's search limit (the command's --time-limit), if
 * set, bounds the whole search. */
int lynx_planner_opt(const struct lynx_problem *p, struct lynx_plan *plan, char *why, size_t len)
{
	struct lynx_opt_options o = {.time_limit_s = p->search_seconds};

	return lynx_opt_plan(p, &o, plan, NULL, why, len);
}
