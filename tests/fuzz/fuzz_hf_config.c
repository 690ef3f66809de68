/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libFuzzer harness for the Hugging Face config.json reader (policy/hf_config.c), run by
 * `make fuzz` (seeds in tests/fuzz/corpus_hf_config). The input is handed over as it is,
 * without a NUL, so ASan sees any read past len. Any input must be accepted or refused with a
 * reason, never crash (ASan and UBSan watch). A refusal leaves the description and the name
 * as they were. An accepted description keeps the caller's run settings, has a positive shape
 * whose heads divide the hidden size and are a multiple of the key/value heads, and, with
 * one rank of everything, passes lynx_model_validate() unless it is too large for 64 bits.
 */
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "hf_config.h"
#include "model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Run settings of one rank, which the reader must leave as they are. */
static struct lynx_model_desc one_rank(void)
{
	return (struct lynx_model_desc){
	        .micro_batch = 1,
	        .global_batch = 1,
	        .tp = 1,
	        .pp = 1,
	        .dp = 1,
	};
}

/* Field by field: struct assignment need not copy padding, so memcmp would see noise. */
static bool same_desc(const struct lynx_model_desc *a, const struct lynx_model_desc *b)
{
	return a->layers == b->layers && a->hidden == b->hidden && a->heads == b->heads &&
	       a->seq == b->seq && a->vocab == b->vocab && a->micro_batch == b->micro_batch &&
	       a->global_batch == b->global_batch && a->tp == b->tp && a->pp == b->pp &&
	       a->dp == b->dp && a->sp == b->sp && a->arch.mlp == b->arch.mlp &&
	       a->arch.norm == b->arch.norm && a->arch.attention == b->arch.attention &&
	       a->arch.position == b->arch.position && a->arch.ffn == b->arch.ffn &&
	       a->arch.kv_heads == b->arch.kv_heads && a->arch.no_bias == b->arch.no_bias &&
	       a->arch.no_dropout == b->arch.no_dropout && a->arch.untied == b->arch.untied;
}

static void check_accepted(const struct lynx_model_desc *m, const char *name, size_t name_len)
{
	char why[256] = "";
	const struct lynx_model_desc run = one_rank();

	if (m->micro_batch != run.micro_batch || m->global_batch != run.global_batch ||
	    m->tp != run.tp || m->pp != run.pp || m->dp != run.dp || m->sp != run.sp)
		abort(); /* the reader changed a run setting */
	if (!m->layers || !m->hidden || !m->heads || !m->seq || !m->vocab || !m->arch.ffn ||
	    !m->arch.kv_heads)
		abort(); /* accepted a shape with a zero in it */
	if (m->hidden % m->heads || m->heads % m->arch.kv_heads)
		abort(); /* accepted heads the layer cannot have */
	if (memchr(name, 0, name_len) == NULL || !name[0])
		abort(); /* the name is not a NUL-terminated, non-empty string */
	if (lynx_model_validate(m, why, sizeof(why)) &&
	    strncmp(why, "shape too large", strlen("shape too large")))
		abort(); /* the caller's validation refuses what the reader let through */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *json = (const char *)data;
	struct lynx_model_desc m = one_rank(), before;
	char name[24], why[256];
	/* A short reason buffer too: truncation must still leave a string. */
	char short_why[5];
	int err;

	memset(name, 0x5a, sizeof(name));
	memset(why, 0, sizeof(why));
	memcpy(&before, &m, sizeof(m));
	err = lynx_hf_config_parse(json, size, &m, name, sizeof(name), why, sizeof(why));
	if (err) {
		if (err != -EINVAL || !why[0])
			abort(); /* a refusal always says why */
		if (memcmp(&m, &before, sizeof(m)))
			abort(); /* a refusal wrote the description (any byte of it) */
		for (size_t i = 0; i < sizeof(name); i++)
			if (name[i] != 0x5a)
				abort(); /* a refusal wrote the name */
		if (lynx_hf_config_parse(json, size, &m, NULL, 0, short_why, sizeof(short_why)) !=
		            err ||
		    !memchr(short_why, 0, sizeof(short_why)))
			abort(); /* the answer depends on the buffers, or truncation broke it */
		return 0;
	}
	check_accepted(&m, name, sizeof(name));
	/* The same text read again gives the same description: no hidden state. */
	before = one_rank();
	if (lynx_hf_config_parse(json, size, &before, NULL, 0, NULL, 0) || !same_desc(&m, &before))
		abort();
	return 0;
}
