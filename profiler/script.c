/* SPDX-License-Identifier: Apache-2.0 */
/* The executor's script of one iteration: see script.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "period.h"
#include "script.h"

bool lynx_prof_script_counts_alloc(const struct lynx_prof_event *ev)
{
	return ev->kind == LYNX_PROF_ALLOC && !ev->nested && !ev->captured &&
	       !(ev->hook && strstr(ev->hook, "Host"));
}

/* Tokens whose event comes before event e: the token index of e when e is one. */
static uint32_t tokens_before(const struct lynx_prof_tokens *tok, uint32_t e)
{
	size_t lo = 0, hi = tok->count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (tok->event[mid] < e)
			lo = mid + 1;
		else
			hi = mid;
	}
	return (uint32_t)lo;
}

/* The token at or before event e (a reference is always a token's own event, unless the
 * call was captured: then the token before stands for it). */
static uint32_t token_at(const struct lynx_prof_tokens *tok, uint32_t e)
{
	uint32_t t = tokens_before(tok, e);

	if (t < tok->count && tok->event[t] == e)
		return t;
	return t ? t - 1 : 0;
}

/* Fills b from buffer buf of span sp; false when no token references it in its forward
 * and its backward both. */
static bool place(const struct lynx_prof_script_input *in, const struct lynx_prof_tokens *tok,
                  const struct lynx_prof_buffer *buf, const struct lynx_prof_layer_span *sp,
                  struct lynx_prof_script_buffer *b)
{
	const struct lynx_prof_lifetimes *lt = in->lifetimes;
	bool fwd = false, bwd = false;

	b->layer = sp->layer;
	b->microbatch = sp->microbatch;
	b->bytes = buf->bytes;
	b->alloc_token = tokens_before(tok, buf->alloc_event);
	b->alloc_ordinal = 0;
	for (uint32_t e = b->alloc_token ? tok->event[b->alloc_token - 1] + 1 : (uint32_t)in->first;
	     e < buf->alloc_event; e++)
		b->alloc_ordinal += lynx_prof_script_counts_alloc(&in->trace->events[e]);
	for (size_t r = 0; r < buf->ref_count; r++) {
		uint32_t e = lt->refs[buf->first_ref + r].event;
		if (e < sp->backward.begin) {
			b->last_forward_token = token_at(tok, e);
			fwd = true;
		} else if (!bwd) {
			b->first_backward_token = token_at(tok, e);
			bwd = true;
		}
	}
	/* Its own backward segment's start: a restore any earlier holds memory through the
	 * layer before (one layer's activations at the backward's peak), and the copy of one
	 * activation takes microseconds. The last layer of the last stage is used backward
	 * right after its forward: then the restore starts as soon as it is evicted. */
	b->restore_token = tokens_before(tok, sp->backward.begin);
	if (b->restore_token <= b->last_forward_token)
		b->restore_token = b->last_forward_token + 1;
	if (b->restore_token > b->first_backward_token)
		b->restore_token = b->first_backward_token;
	return fwd && bwd && b->last_forward_token < b->first_backward_token;
}

/* The profile's test for a window's call (build.c's is_nccl_call). */
static bool is_nccl_call(const struct lynx_prof_event *ev)
{
	return (ev->kind == LYNX_PROF_COLL || ev->kind == LYNX_PROF_P2P) && !ev->nested;
}

/* Fills out->nccl_tokens, which has room for every NCCL call of the iteration. */
static void place_nccl(const struct lynx_prof_script_input *in, const struct lynx_prof_tokens *tok,
                       struct lynx_prof_script *out)
{
	for (size_t i = in->first; i < in->end; i++)
		if (is_nccl_call(&in->trace->events[i]))
			out->nccl_tokens[out->n_nccl++] = token_at(tok, (uint32_t)i);
}

int lynx_prof_script_build(const struct lynx_prof_script_input *in, struct lynx_prof_script *out,
                           char *why, size_t why_len)
{
	const struct lynx_prof_lifetimes *lt = in->lifetimes;
	struct lynx_prof_tokens tok;
	uint32_t *per_span = NULL;
	size_t n_nccl = 0;
	int err;

	memset(out, 0, sizeof(*out));
	if ((err = lynx_prof_tokenise(in->trace, in->first, in->end, &tok)))
		return err;
	if (!tok.count) {
		lynx_prof_tokens_free(&tok);
		snprintf(why, why_len, "the iteration has no tokens");
		return -EINVAL;
	}
	out->n_tokens = (uint32_t)tok.count;
	out->sig = malloc(tok.count * sizeof(*out->sig));
	out->kind = malloc(tok.count * sizeof(*out->kind));
	out->buffers = calloc(lt->count ? lt->count : 1, sizeof(*out->buffers));
	per_span = calloc(in->span_count ? in->span_count : 1, sizeof(*per_span));
	for (size_t i = in->first; i < in->end; i++)
		n_nccl += is_nccl_call(&in->trace->events[i]);
	out->nccl_tokens = malloc((n_nccl ? n_nccl : 1) * sizeof(*out->nccl_tokens));
	if (!out->sig || !out->kind || !out->buffers || !per_span || !out->nccl_tokens) {
		err = -ENOMEM;
		goto out;
	}
	memcpy(out->sig, tok.sig, tok.count * sizeof(*out->sig));
	for (size_t t = 0; t < tok.count; t++)
		out->kind[t] = (uint8_t)in->trace->events[tok.event[t]].kind;
	place_nccl(in, &tok, out);
	/* Buffers are in allocation order, which is token order within the iteration. */
	for (size_t i = 0; i < lt->count; i++) {
		const struct lynx_prof_buffer *buf = &lt->buffers[i];
		if (buf->cls != LYNX_PROF_CLASS_SAVED || buf->span >= in->span_count ||
		    in->spans[buf->span].iteration != in->iteration)
			continue;
		struct lynx_prof_script_buffer *b = &out->buffers[out->n_buffers];
		/* Numbered whether or not it is placed, as the profile numbers groups. */
		b->index = per_span[buf->span]++;
		if (buf->alloc_event < in->first || buf->alloc_event >= in->end)
			continue; /* allocated before the iteration: not the executor's to route */
		if (place(in, &tok, buf, &in->spans[buf->span], b))
			out->n_buffers++;
	}
out:
	free(per_span);
	lynx_prof_tokens_free(&tok);
	if (err)
		lynx_prof_script_free(out);
	return err;
}

void lynx_prof_script_free(struct lynx_prof_script *script)
{
	free(script->sig);
	free(script->kind);
	free(script->buffers);
	free(script->nccl_tokens);
	memset(script, 0, sizeof(*script));
}
