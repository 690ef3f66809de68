/* SPDX-License-Identifier: Apache-2.0 */
/* A Hugging Face config.json read into a layer description, strictly: see hf_config.h. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "hf_config.h"
#include "refuse.h"

/* What one reading needs: the file's object, its model_type, and where a refusal goes. */
struct reader {
	const cJSON *root;
	const char *type;
	char *why;
	size_t why_len;
};

/*
 * The kinds of field a config.json holds for Lynx. A field that is absent leaves *out as the
 * reader set it, its default; so does null for an optional size, which is how Hugging Face
 * writes an unset one (n_inner, num_key_value_heads, head_dim).
 */
enum field_kind {
	FIELD_REQUIRED_SIZE, /* uint32_t, a whole JSON number in 1..UINT32_MAX */
	FIELD_OPTIONAL_SIZE, /* the same, or absent or null */
	FIELD_BOOL,          /* bool, JSON true or false */
	FIELD_PROBABILITY,   /* double, a JSON number in 0..1 (a dropout rate) */
	FIELD_STRING,        /* const char *, into the parsed tree */
};

struct field {
	const char *key; /* as in the file */
	enum field_kind kind;
	void *out; /* of the kind's type */
};

#define COUNT_OF(array) (sizeof(array) / sizeof((array)[0]))

/* What a JSON value is, for a sentence that says what was found instead. */
static const char *kind_of(const cJSON *item)
{
	if (cJSON_IsNull(item))
		return "null";
	if (cJSON_IsBool(item))
		return cJSON_IsTrue(item) ? "true" : "false";
	if (cJSON_IsNumber(item))
		return "a number";
	if (cJSON_IsString(item))
		return "a string";
	if (cJSON_IsArray(item))
		return "an array";
	if (cJSON_IsObject(item))
		return "an object";
	return "an unknown value";
}

static int refuse_type(const struct reader *r, const char *key, const char *wanted,
                       const cJSON *item)
{
	if (cJSON_IsString(item))
		return lynx_policy_refuse(r->why, r->why_len,
		                          "%s must be %s, not the string '%.40s'", key, wanted,
		                          item->valuestring);
	return lynx_policy_refuse(r->why, r->why_len, "%s must be %s, not %s", key, wanted,
	                          kind_of(item));
}

static int read_size(const struct reader *r, const struct field *f, const cJSON *item)
{
	double v;

	if (!item || (cJSON_IsNull(item) && f->kind == FIELD_OPTIONAL_SIZE)) {
		if (f->kind == FIELD_REQUIRED_SIZE)
			return lynx_policy_refuse(r->why, r->why_len,
			                          "the %s config.json has no %s", r->type, f->key);
		return 0;
	}
	if (!cJSON_IsNumber(item))
		return refuse_type(r, f->key, "a whole number", item);
	v = item->valuedouble;
	/* Written so that NaN fails too; cJSON reads 1e999 as infinity. */
	if (!(v >= 1 && v <= UINT32_MAX) || v != floor(v))
		return lynx_policy_refuse(r->why, r->why_len,
		                          "%s=%.15g is not a whole number in 1..%u", f->key, v,
		                          UINT32_MAX);
	*(uint32_t *)f->out = (uint32_t)v;
	return 0;
}

static int read_field(const struct reader *r, const struct field *f)
{
	const cJSON *item = cJSON_GetObjectItemCaseSensitive(r->root, f->key);

	switch (f->kind) {
	case FIELD_REQUIRED_SIZE:
	case FIELD_OPTIONAL_SIZE:
		return read_size(r, f, item);
	case FIELD_BOOL:
		if (!item)
			return 0;
		if (!cJSON_IsBool(item))
			return refuse_type(r, f->key, "true or false", item);
		*(bool *)f->out = cJSON_IsTrue(item);
		return 0;
	case FIELD_PROBABILITY:
		if (!item)
			return 0;
		if (!cJSON_IsNumber(item))
			return refuse_type(r, f->key, "a number", item);
		if (!(item->valuedouble >= 0 && item->valuedouble <= 1))
			return lynx_policy_refuse(r->why, r->why_len,
			                          "%s=%.15g is not a probability in 0..1", f->key,
			                          item->valuedouble);
		*(double *)f->out = item->valuedouble;
		return 0;
	case FIELD_STRING:
		if (!item)
			return 0;
		if (!cJSON_IsString(item))
			return refuse_type(r, f->key, "a string", item);
		*(const char **)f->out = item->valuestring;
		return 0;
	}
	return lynx_policy_refuse(r->why, r->why_len, "internal error: field %s has kind %d",
	                          f->key, f->kind);
}

/* Reads fields in order; the first refusal wins. */
static int read_fields(const struct reader *r, const struct field *fields, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		int err = read_field(r, &fields[i]);

		if (err)
			return err;
	}
	return 0;
}

/* What model.h's validation would refuse later, said now in the file's own field names. */
static int check_heads(const struct reader *r, const char *hidden_key, uint32_t hidden,
                       const char *heads_key, uint32_t heads, const char *kv_key, uint32_t kv_heads)
{
	if (hidden % heads)
		return lynx_policy_refuse(r->why, r->why_len, "%s=%u is not divisible by %s=%u",
		                          hidden_key, hidden, heads_key, heads);
	if (heads % kv_heads)
		return lynx_policy_refuse(r->why, r->why_len,
		                          "%s=%u is not a multiple of %s=%u (each key/value head "
		                          "serves a whole group of query heads)",
		                          heads_key, heads, kv_key, kv_heads);
	return 0;
}

/* Hugging Face's GeLU variants (gelu, gelu_new, gelu_fast, gelu_pytorch_tanh, ...): the
 * approximations differ in the last bits, not in the layer's shape or memory. */
static int check_gelu(const struct reader *r, const char *key, const char *act)
{
	if (strncmp(act, "gelu", 4))
		return lynx_policy_refuse(r->why, r->why_len,
		                          "%s '%.40s' is not a GeLU, the only activation of Lynx's "
		                          "%s layer",
		                          key, act, r->type);
	return 0;
}

/* LlamaConfig: SwiGLU, RMSNorm, rotary positions, grouped-query attention. */
static int read_llama(const struct reader *r, struct lynx_model_desc *m)
{
	uint32_t kv_heads = 0, head_dim = 0;
	bool tied = false, attention_bias = false, mlp_bias = false;
	double attention_dropout = 0;
	const char *act = "silu";
	const struct field fields[] = {
	        {"num_hidden_layers", FIELD_REQUIRED_SIZE, &m->layers},
	        {"hidden_size", FIELD_REQUIRED_SIZE, &m->hidden},
	        {"num_attention_heads", FIELD_REQUIRED_SIZE, &m->heads},
	        {"num_key_value_heads", FIELD_OPTIONAL_SIZE, &kv_heads},
	        {"intermediate_size", FIELD_REQUIRED_SIZE, &m->arch.ffn},
	        {"max_position_embeddings", FIELD_REQUIRED_SIZE, &m->seq},
	        {"vocab_size", FIELD_REQUIRED_SIZE, &m->vocab},
	        {"head_dim", FIELD_OPTIONAL_SIZE, &head_dim},
	        {"hidden_act", FIELD_STRING, &act},
	        {"tie_word_embeddings", FIELD_BOOL, &tied},
	        {"attention_bias", FIELD_BOOL, &attention_bias},
	        {"mlp_bias", FIELD_BOOL, &mlp_bias},
	        {"attention_dropout", FIELD_PROBABILITY, &attention_dropout},
	};
	int err = read_fields(r, fields, COUNT_OF(fields));

	if (err)
		return err;
	if (strcmp(act, "silu"))
		return lynx_policy_refuse(r->why, r->why_len,
		                          "hidden_act '%.40s' is not SiLU: Lynx's Llama layer is "
		                          "SwiGLU (hidden_act \"silu\")",
		                          act);
	m->arch.kv_heads = kv_heads ? kv_heads : m->heads;
	err = check_heads(r, "hidden_size", m->hidden, "num_attention_heads", m->heads,
	                  "num_key_value_heads", m->arch.kv_heads);
	if (err)
		return err;
	/* Gemma-like heads wider or narrower than h/a change every projection's shape. */
	if (head_dim && head_dim != m->hidden / m->heads)
		return lynx_policy_refuse(r->why, r->why_len,
		                          "head_dim=%u is not hidden_size / num_attention_heads = "
		                          "%u / %u = %u, the only head size Lynx's layer has",
		                          head_dim, m->hidden, m->heads, m->hidden / m->heads);
	m->arch.mlp = LYNX_MLP_SWIGLU;
	m->arch.norm = LYNX_NORM_RMSNORM;
	m->arch.position = LYNX_POSITION_ROTARY;
	/* One flag for all the layer's biases: either of the file's turns them on. */
	m->arch.no_bias = !attention_bias && !mlp_bias;
	m->arch.no_dropout = attention_dropout <= 0;
	m->arch.untied = !tied;
	return 0;
}

/* GPT2Config: GeLU MLP, LayerNorm with biases, learned positions, tied embeddings. */
static int read_gpt2(const struct reader *r, struct lynx_model_desc *m)
{
	uint32_t inner = 0;
	bool tied = true;
	double attn_pdrop = 0.1, resid_pdrop = 0.1;
	const char *act = "gelu_new";
	const struct field fields[] = {
	        {"n_layer", FIELD_REQUIRED_SIZE, &m->layers},
	        {"n_embd", FIELD_REQUIRED_SIZE, &m->hidden},
	        {"n_head", FIELD_REQUIRED_SIZE, &m->heads},
	        {"n_inner", FIELD_OPTIONAL_SIZE, &inner},
	        {"n_positions", FIELD_REQUIRED_SIZE, &m->seq},
	        {"vocab_size", FIELD_REQUIRED_SIZE, &m->vocab},
	        {"activation_function", FIELD_STRING, &act},
	        {"tie_word_embeddings", FIELD_BOOL, &tied},
	        {"attn_pdrop", FIELD_PROBABILITY, &attn_pdrop},
	        {"resid_pdrop", FIELD_PROBABILITY, &resid_pdrop},
	};
	int err = read_fields(r, fields, COUNT_OF(fields));

	if (!err)
		err = check_gelu(r, "activation_function", act);
	if (!err)
		err = check_heads(r, "n_embd", m->hidden, "n_head", m->heads, "n_head", m->heads);
	if (err)
		return err;
	if (!inner && 4ull * m->hidden > UINT32_MAX)
		return lynx_policy_refuse(r->why, r->why_len,
		                          "n_inner is unset and 4·n_embd = %llu exceeds %u",
		                          4ull * m->hidden, UINT32_MAX);
	m->arch.ffn = inner ? inner : 4 * m->hidden;
	m->arch.kv_heads = m->heads;
	m->arch.mlp = LYNX_MLP_GELU;
	m->arch.norm = LYNX_NORM_LAYERNORM;
	m->arch.position = LYNX_POSITION_LEARNED;
	m->arch.no_bias = false;
	m->arch.no_dropout = attn_pdrop <= 0 && resid_pdrop <= 0;
	m->arch.untied = !tied;
	return 0;
}

/* GPTNeoXConfig (Pythia, GPT-NeoX-20B): GeLU MLP, LayerNorm, rotary positions. Its parallel
 * residual and partial rotary change neither parameters nor saved activations' sizes. */
static int read_gpt_neox(const struct reader *r, struct lynx_model_desc *m)
{
	bool tied = false, attention_bias = true;
	double attention_dropout = 0, hidden_dropout = 0;
	const char *act = "gelu";
	const struct field fields[] = {
	        {"num_hidden_layers", FIELD_REQUIRED_SIZE, &m->layers},
	        {"hidden_size", FIELD_REQUIRED_SIZE, &m->hidden},
	        {"num_attention_heads", FIELD_REQUIRED_SIZE, &m->heads},
	        {"intermediate_size", FIELD_REQUIRED_SIZE, &m->arch.ffn},
	        {"max_position_embeddings", FIELD_REQUIRED_SIZE, &m->seq},
	        {"vocab_size", FIELD_REQUIRED_SIZE, &m->vocab},
	        {"hidden_act", FIELD_STRING, &act},
	        {"tie_word_embeddings", FIELD_BOOL, &tied},
	        {"attention_bias", FIELD_BOOL, &attention_bias},
	        {"attention_dropout", FIELD_PROBABILITY, &attention_dropout},
	        {"hidden_dropout", FIELD_PROBABILITY, &hidden_dropout},
	};
	int err = read_fields(r, fields, COUNT_OF(fields));

	if (!err)
		err = check_gelu(r, "hidden_act", act);
	if (!err)
		err = check_heads(r, "hidden_size", m->hidden, "num_attention_heads", m->heads,
		                  "num_attention_heads", m->heads);
	if (err)
		return err;
	m->arch.kv_heads = m->heads;
	m->arch.mlp = LYNX_MLP_GELU;
	m->arch.norm = LYNX_NORM_LAYERNORM;
	m->arch.position = LYNX_POSITION_ROTARY;
	m->arch.no_bias = !attention_bias;
	m->arch.no_dropout = attention_dropout <= 0 && hidden_dropout <= 0;
	m->arch.untied = !tied;
	return 0;
}

/* The model_types Lynx reads, in the order the refusal lists them. */
static const struct {
	const char *type;
	int (*read)(const struct reader *r, struct lynx_model_desc *m);
} readers[] = {
        {"llama", read_llama},
        {"gpt2", read_gpt2},
        {"gpt_neox", read_gpt_neox},
};

/* "llama, gpt2, gpt_neox", for refusals. */
static const char *supported_types(char *buf, size_t len)
{
	size_t used = 0;

	buf[0] = 0;
	for (size_t i = 0; i < COUNT_OF(readers) && used < len; i++) {
		int n = snprintf(buf + used, len - used, "%s%s", i ? ", " : "", readers[i].type);

		if (n < 0)
			break;
		used += (size_t)n;
	}
	return buf;
}

/* Parses json[0..len) as one JSON object with nothing but whitespace after it. */
static int parse_object(const char *json, size_t len, cJSON **root, char *why, size_t why_len)
{
	/* The _Opts form hands back where parsing stopped in a local: cJSON_GetErrorPtr() reads
	 * a global that another thread's parse may have overwritten. */
	const char *end = NULL;
	cJSON *tree;

	if (!json || !len)
		return lynx_policy_refuse(why, why_len, "not JSON: the text is empty");
	tree = cJSON_ParseWithLengthOpts(json, len, &end, false);
	if (!tree) {
		if (end && end >= json && end <= json + len)
			return lynx_policy_refuse(why, why_len,
			                          "not JSON: parsing stopped at byte %zu of %zu",
			                          (size_t)(end - json), len);
		return lynx_policy_refuse(why, why_len, "not JSON");
	}
	while (end && end < json + len && *end && strchr(" \t\r\n", *end))
		end++;
	if (end && end < json + len) {
		cJSON_Delete(tree);
		return lynx_policy_refuse(why, why_len,
		                          "not JSON: text follows the top-level value at byte %zu",
		                          (size_t)(end - json));
	}
	if (!cJSON_IsObject(tree)) {
		int err = lynx_policy_refuse(why, why_len,
		                             "a config.json is a JSON object, not %s at the top "
		                             "level",
		                             kind_of(tree));

		cJSON_Delete(tree);
		return err;
	}
	*root = tree;
	return 0;
}

int lynx_hf_config_parse(const char *json, size_t len, struct lynx_model_desc *m, char *name,
                         size_t name_len, char *why, size_t why_len)
{
	struct lynx_model_desc out = *m;
	struct reader r = {.why = why, .why_len = why_len};
	const cJSON *type, *path;
	char list[64];
	cJSON *root = NULL;
	size_t i;
	int err = parse_object(json, len, &root, why, why_len);

	if (err)
		return err;
	r.root = root;
	type = cJSON_GetObjectItemCaseSensitive(root, "model_type");
	if (!type) {
		err = lynx_policy_refuse(why, why_len,
		                         "the config has no model_type (Lynx reads %s)",
		                         supported_types(list, sizeof(list)));
		goto out_free_root;
	}
	if (!cJSON_IsString(type)) {
		err = refuse_type(&r, "model_type", "a string", type);
		goto out_free_root;
	}
	for (i = 0; i < COUNT_OF(readers) && strcmp(readers[i].type, type->valuestring); i++)
		;
	if (i == COUNT_OF(readers)) {
		err = lynx_policy_refuse(why, why_len,
		                         "model_type '%.40s' is not one Lynx's layer description "
		                         "covers (%s)",
		                         type->valuestring, supported_types(list, sizeof(list)));
		goto out_free_root;
	}
	r.type = readers[i].type;
	/* The whole architecture comes from the file: nothing of the caller's survives. */
	memset(&out.arch, 0, sizeof(out.arch));
	out.arch.attention = LYNX_ATTENTION_FLASH;
	err = readers[i].read(&r, &out);
	if (err)
		goto out_free_root;

	*m = out;
	if (name && name_len) {
		path = cJSON_GetObjectItemCaseSensitive(root, "_name_or_path");
		snprintf(name, name_len, "%s",
		         cJSON_IsString(path) && path->valuestring[0] ? path->valuestring
		                                                      : readers[i].type);
	}
out_free_root:
	cJSON_Delete(root);
	return err;
}
