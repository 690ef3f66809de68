/* SPDX-License-Identifier: Apache-2.0 */
/* policy/hf_config: Hugging Face config.json files, real ones and broken ones, as layer
 * descriptions whose parameter counts match the published ones. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "hf_config.h"
#include "model.h"

/* meta-llama/Llama-2-7b-hf, as published. */
static const char llama2_7b[] = "{\n"
                                "  \"_name_or_path\": \"meta-llama/Llama-2-7b-hf\",\n"
                                "  \"architectures\": [\"LlamaForCausalLM\"],\n"
                                "  \"bos_token_id\": 1,\n"
                                "  \"eos_token_id\": 2,\n"
                                "  \"hidden_act\": \"silu\",\n"
                                "  \"hidden_size\": 4096,\n"
                                "  \"initializer_range\": 0.02,\n"
                                "  \"intermediate_size\": 11008,\n"
                                "  \"max_position_embeddings\": 4096,\n"
                                "  \"model_type\": \"llama\",\n"
                                "  \"num_attention_heads\": 32,\n"
                                "  \"num_hidden_layers\": 32,\n"
                                "  \"num_key_value_heads\": 32,\n"
                                "  \"pretraining_tp\": 1,\n"
                                "  \"rms_norm_eps\": 1e-05,\n"
                                "  \"rope_scaling\": null,\n"
                                "  \"tie_word_embeddings\": false,\n"
                                "  \"torch_dtype\": \"float16\",\n"
                                "  \"transformers_version\": \"4.31.0.dev0\",\n"
                                "  \"use_cache\": true,\n"
                                "  \"vocab_size\": 32000\n"
                                "}\n";

/* meta-llama/Meta-Llama-3-8B: grouped-query attention, 128K vocabulary, no _name_or_path. */
static const char llama3_8b[] = "{\n"
                                "  \"architectures\": [\"LlamaForCausalLM\"],\n"
                                "  \"attention_bias\": false,\n"
                                "  \"attention_dropout\": 0.0,\n"
                                "  \"bos_token_id\": 128000,\n"
                                "  \"eos_token_id\": 128001,\n"
                                "  \"hidden_act\": \"silu\",\n"
                                "  \"hidden_size\": 4096,\n"
                                "  \"initializer_range\": 0.02,\n"
                                "  \"intermediate_size\": 14336,\n"
                                "  \"max_position_embeddings\": 8192,\n"
                                "  \"model_type\": \"llama\",\n"
                                "  \"num_attention_heads\": 32,\n"
                                "  \"num_hidden_layers\": 32,\n"
                                "  \"num_key_value_heads\": 8,\n"
                                "  \"pretraining_tp\": 1,\n"
                                "  \"rms_norm_eps\": 1e-05,\n"
                                "  \"rope_scaling\": null,\n"
                                "  \"rope_theta\": 500000.0,\n"
                                "  \"tie_word_embeddings\": false,\n"
                                "  \"torch_dtype\": \"bfloat16\",\n"
                                "  \"transformers_version\": \"4.40.0.dev0\",\n"
                                "  \"use_cache\": true,\n"
                                "  \"vocab_size\": 128256\n"
                                "}\n";

/* meta-llama/Llama-3.1-8B: Llama-3-8B's weights' shapes with a rope_scaling object, a
 * 128K context, mlp_bias and a list of end tokens. */
static const char llama31_8b[] = "{\n"
                                 "  \"architectures\": [\"LlamaForCausalLM\"],\n"
                                 "  \"attention_bias\": false,\n"
                                 "  \"attention_dropout\": 0.0,\n"
                                 "  \"bos_token_id\": 128000,\n"
                                 "  \"eos_token_id\": [128001, 128008, 128009],\n"
                                 "  \"hidden_act\": \"silu\",\n"
                                 "  \"hidden_size\": 4096,\n"
                                 "  \"initializer_range\": 0.02,\n"
                                 "  \"intermediate_size\": 14336,\n"
                                 "  \"max_position_embeddings\": 131072,\n"
                                 "  \"mlp_bias\": false,\n"
                                 "  \"model_type\": \"llama\",\n"
                                 "  \"num_attention_heads\": 32,\n"
                                 "  \"num_hidden_layers\": 32,\n"
                                 "  \"num_key_value_heads\": 8,\n"
                                 "  \"pretraining_tp\": 1,\n"
                                 "  \"rms_norm_eps\": 1e-05,\n"
                                 "  \"rope_scaling\": {\n"
                                 "    \"factor\": 8.0,\n"
                                 "    \"low_freq_factor\": 1.0,\n"
                                 "    \"high_freq_factor\": 4.0,\n"
                                 "    \"original_max_position_embeddings\": 8192,\n"
                                 "    \"rope_type\": \"llama3\"\n"
                                 "  },\n"
                                 "  \"rope_theta\": 500000.0,\n"
                                 "  \"tie_word_embeddings\": false,\n"
                                 "  \"torch_dtype\": \"bfloat16\",\n"
                                 "  \"transformers_version\": \"4.43.0.dev0\",\n"
                                 "  \"use_cache\": true,\n"
                                 "  \"vocab_size\": 128256\n"
                                 "}\n";

/* meta-llama/Llama-2-70b-hf: 64 query heads over 8 key/value heads. */
static const char llama2_70b[] = "{\n"
                                 "  \"_name_or_path\": \"meta-llama/Llama-2-70b-hf\",\n"
                                 "  \"architectures\": [\"LlamaForCausalLM\"],\n"
                                 "  \"bos_token_id\": 1,\n"
                                 "  \"eos_token_id\": 2,\n"
                                 "  \"hidden_act\": \"silu\",\n"
                                 "  \"hidden_size\": 8192,\n"
                                 "  \"initializer_range\": 0.02,\n"
                                 "  \"intermediate_size\": 28672,\n"
                                 "  \"max_position_embeddings\": 4096,\n"
                                 "  \"model_type\": \"llama\",\n"
                                 "  \"num_attention_heads\": 64,\n"
                                 "  \"num_hidden_layers\": 80,\n"
                                 "  \"num_key_value_heads\": 8,\n"
                                 "  \"pretraining_tp\": 1,\n"
                                 "  \"rms_norm_eps\": 1e-05,\n"
                                 "  \"rope_scaling\": null,\n"
                                 "  \"tie_word_embeddings\": false,\n"
                                 "  \"torch_dtype\": \"float16\",\n"
                                 "  \"transformers_version\": \"4.31.0.dev0\",\n"
                                 "  \"use_cache\": true,\n"
                                 "  \"vocab_size\": 32000\n"
                                 "}\n";

/* openai-community/gpt2 (GPT-2 small), as published: no n_inner key at all. */
static const char gpt2_small[] = "{\n"
                                 "  \"activation_function\": \"gelu_new\",\n"
                                 "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
                                 "  \"attn_pdrop\": 0.1,\n"
                                 "  \"bos_token_id\": 50256,\n"
                                 "  \"embd_pdrop\": 0.1,\n"
                                 "  \"eos_token_id\": 50256,\n"
                                 "  \"initializer_range\": 0.02,\n"
                                 "  \"layer_norm_epsilon\": 1e-05,\n"
                                 "  \"model_type\": \"gpt2\",\n"
                                 "  \"n_ctx\": 1024,\n"
                                 "  \"n_embd\": 768,\n"
                                 "  \"n_head\": 12,\n"
                                 "  \"n_layer\": 12,\n"
                                 "  \"n_positions\": 1024,\n"
                                 "  \"resid_pdrop\": 0.1,\n"
                                 "  \"summary_activation\": null,\n"
                                 "  \"summary_first_dropout\": 0.1,\n"
                                 "  \"summary_proj_to_labels\": true,\n"
                                 "  \"summary_type\": \"cls_index\",\n"
                                 "  \"summary_use_proj\": true,\n"
                                 "  \"task_specific_params\": {\n"
                                 "    \"text-generation\": {\"do_sample\": true, "
                                 "\"max_length\": 50}\n"
                                 "  },\n"
                                 "  \"vocab_size\": 50257\n"
                                 "}\n";

/* GPT-2 small as GPT2Config().to_json_string() writes it: n_inner null. */
static const char gpt2_null_inner[] =
        "{\"model_type\": \"gpt2\", \"n_layer\": 12, \"n_embd\": 768, \"n_head\": 12, "
        "\"n_inner\": null, \"n_positions\": 1024, \"vocab_size\": 50257, "
        "\"activation_function\": \"gelu_new\", \"attn_pdrop\": 0.1, \"resid_pdrop\": 0.1}";

/* EleutherAI/gpt-neox-20b: parallel residual, a quarter of each head rotary, untied. */
static const char neox_20b[] = "{\n"
                               "  \"architectures\": [\"GPTNeoXForCausalLM\"],\n"
                               "  \"bos_token_id\": 0,\n"
                               "  \"eos_token_id\": 0,\n"
                               "  \"hidden_act\": \"gelu_fast\",\n"
                               "  \"hidden_size\": 6144,\n"
                               "  \"initializer_range\": 0.02,\n"
                               "  \"intermediate_size\": 24576,\n"
                               "  \"layer_norm_eps\": 1e-05,\n"
                               "  \"max_position_embeddings\": 2048,\n"
                               "  \"model_type\": \"gpt_neox\",\n"
                               "  \"num_attention_heads\": 64,\n"
                               "  \"num_hidden_layers\": 44,\n"
                               "  \"rotary_emb_base\": 10000,\n"
                               "  \"rotary_pct\": 0.25,\n"
                               "  \"tie_word_embeddings\": false,\n"
                               "  \"torch_dtype\": \"float16\",\n"
                               "  \"transformers_version\": \"4.21.0.dev0\",\n"
                               "  \"use_cache\": true,\n"
                               "  \"use_parallel_residual\": true,\n"
                               "  \"vocab_size\": 50432\n"
                               "}\n";

/* A small llama config for the refusals, with one key left for the test to fill in. */
#define LLAMA_WITH(extra)                                                             \
	"{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"hidden_size\": 64, " \
	"\"num_attention_heads\": 4, \"intermediate_size\": 172, "                    \
	"\"max_position_embeddings\": 128, \"vocab_size\": 1000" extra "}"

/* Run settings the reader must leave alone. */
static struct lynx_model_desc run_settings(void)
{
	return (struct lynx_model_desc){
	        .micro_batch = 3,
	        .global_batch = 48,
	        .tp = 8,
	        .pp = 2,
	        .dp = 2,
	        .sp = true,
	        .arch = {.attention = LYNX_ATTENTION_UNFUSED, .ffn = 7, .kv_heads = 5},
	};
}

static int parse(const char *json, struct lynx_model_desc *m, char *name, size_t name_len,
                 char *why, size_t why_len)
{
	return lynx_hf_config_parse(json, strlen(json), m, name, name_len, why, why_len);
}

/* Parses json, which must be accepted, and checks the run settings survived. */
static struct lynx_model_desc accept(const char *json, char *name, size_t name_len)
{
	struct lynx_model_desc m = run_settings();
	char why[256] = "";

	if (parse(json, &m, name, name_len, why, sizeof(why)))
		fail_msg("refused: %s", why);
	assert_int_equal(m.micro_batch, 3);
	assert_int_equal(m.global_batch, 48);
	assert_int_equal(m.tp, 8);
	assert_int_equal(m.pp, 2);
	assert_int_equal(m.dp, 2);
	assert_true(m.sp);
	return m;
}

/* Parses json, which must be refused with a sentence containing each of the words. */
static void refuse(const char *json, const char *word1, const char *word2)
{
	struct lynx_model_desc m = run_settings();
	char why[256] = "";

	assert_int_equal(parse(json, &m, NULL, 0, why, sizeof(why)), -EINVAL);
	if (!strstr(why, word1) || (word2 && !strstr(why, word2)))
		fail_msg("'%s' does not name '%s' and '%s'", why, word1, word2 ? word2 : "");
}

/* The shape the reader set: L, h, a, s, v. */
static void assert_shape(const struct lynx_model_desc *m, uint32_t layers, uint32_t hidden,
                         uint32_t heads, uint32_t seq, uint32_t vocab)
{
	assert_int_equal(m->layers, layers);
	assert_int_equal(m->hidden, hidden);
	assert_int_equal(m->heads, heads);
	assert_int_equal(m->seq, seq);
	assert_int_equal(m->vocab, vocab);
}

/* Every field of the layer's choices. */
static void assert_arch(const struct lynx_model_desc *m, const struct lynx_layer_arch *want)
{
	assert_int_equal(m->arch.mlp, want->mlp);
	assert_int_equal(m->arch.norm, want->norm);
	assert_int_equal(m->arch.position, want->position);
	assert_int_equal(m->arch.attention, want->attention);
	assert_int_equal(m->arch.ffn, want->ffn);
	assert_int_equal(m->arch.kv_heads, want->kv_heads);
	assert_int_equal(m->arch.no_bias, want->no_bias);
	assert_int_equal(m->arch.no_dropout, want->no_dropout);
	assert_int_equal(m->arch.untied, want->untied);
}

/* Llama's choices, with its own f and k. */
static void assert_llama_arch(const struct lynx_model_desc *m, uint32_t ffn, uint32_t kv_heads)
{
	assert_arch(m, &(struct lynx_layer_arch){.mlp = LYNX_MLP_SWIGLU,
	                                         .norm = LYNX_NORM_RMSNORM,
	                                         .position = LYNX_POSITION_ROTARY,
	                                         .attention = LYNX_ATTENTION_FLASH,
	                                         .ffn = ffn,
	                                         .kv_heads = kv_heads,
	                                         .no_bias = true,
	                                         .no_dropout = true,
	                                         .untied = true});
}

/* 32 layers of 4096 with 11008-wide SwiGLU: 6,738,415,616 parameters, as Meta publishes. */
static void test_llama2_7b_matches_the_published_parameter_count(void **state)
{
	char name[64];
	struct lynx_model_desc m = accept(llama2_7b, name, sizeof(name));

	assert_shape(&m, 32, 4096, 32, 4096, 32000);
	assert_llama_arch(&m, 11008, 32);
	assert_string_equal(name, "meta-llama/Llama-2-7b-hf");
	assert_int_equal(lynx_model_params(&m), 6738415616ull);
}

/* 8 key/value heads of 128 and a 128,256-token vocabulary: 8,030,261,248. */
static void test_llama3_8b_has_grouped_query_attention(void **state)
{
	char name[64];
	struct lynx_model_desc m = accept(llama3_8b, name, sizeof(name));

	assert_shape(&m, 32, 4096, 32, 8192, 128256);
	assert_llama_arch(&m, 14336, 8);
	assert_string_equal(name, "llama"); /* no _name_or_path: the model_type */
	assert_int_equal(lynx_model_params(&m), 8030261248ull);
}

/* rope_scaling's object and eos_token_id's list are keys Lynx does not read. */
static void test_llama31_8b_ignores_rope_scaling(void **state)
{
	struct lynx_model_desc m = accept(llama31_8b, NULL, 0);

	assert_shape(&m, 32, 4096, 32, 131072, 128256);
	assert_llama_arch(&m, 14336, 8);
	assert_int_equal(lynx_model_params(&m), 8030261248ull);
}

/* 80 layers of 8192, 64 heads over 8 key/value heads: 68,976,648,192. */
static void test_llama2_70b_matches_the_published_parameter_count(void **state)
{
	struct lynx_model_desc m = accept(llama2_70b, NULL, 0);

	assert_shape(&m, 80, 8192, 64, 4096, 32000);
	assert_llama_arch(&m, 28672, 8);
	assert_int_equal(lynx_model_params(&m), 68976648192ull);
}

/* The description the reader fills is one the caller's validation accepts, here with
 * Llama-2-70B's usual tp 8, pp 2 split. */
static void test_accepted_descriptions_validate_once_run_settings_are_set(void **state)
{
	struct lynx_model_desc m = accept(llama2_70b, NULL, 0);
	char why[256] = "";

	m.sp = false;
	if (lynx_model_validate(&m, why, sizeof(why)))
		fail_msg("%s", why);
}

/*
 * GPT-2 small, by hand: a layer is 12h² + 13h = 7,077,888 + 9,984 = 7,087,872 (QKV 3h² + 3h,
 * projection h² + h, FC1 4h² + 4h, FC2 4h² + h, two LayerNorms 4h); 12 layers 85,054,464,
 * the word embedding 50257·768 = 38,597,376, learned positions 1024·768 = 786,432, the final
 * LayerNorm 1,536, the output layer tied: 124,439,808, Hugging Face's count.
 */
static void test_gpt2_small_matches_the_published_parameter_count(void **state)
{
	char name[64];
	struct lynx_model_desc m = accept(gpt2_small, name, sizeof(name));

	assert_shape(&m, 12, 768, 12, 1024, 50257);
	assert_arch(&m, &(struct lynx_layer_arch){.mlp = LYNX_MLP_GELU,
	                                          .norm = LYNX_NORM_LAYERNORM,
	                                          .position = LYNX_POSITION_LEARNED,
	                                          .attention = LYNX_ATTENTION_FLASH,
	                                          .ffn = 3072,
	                                          .kv_heads = 12});
	assert_string_equal(name, "gpt2");
	assert_int_equal(12 * (12ull * 768 * 768 + 13 * 768) + 50257ull * 768 + 1024 * 768 +
	                         2 * 768,
	                 124439808ull);
	assert_int_equal(lynx_model_params(&m), 124439808ull);
}

static void test_gpt2_n_inner_null_is_four_times_n_embd(void **state)
{
	struct lynx_model_desc m = accept(gpt2_null_inner, NULL, 0);

	assert_int_equal(m.arch.ffn, 3072);
	assert_int_equal(lynx_model_params(&m), 124439808ull);
	m = accept("{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 64, \"n_head\": 4, "
	           "\"n_inner\": 100, \"n_positions\": 32, \"vocab_size\": 10}",
	           NULL, 0);
	assert_int_equal(m.arch.ffn, 100);
}

/* Dropout is off only when both of the layer's rates are 0; tying can be turned off. */
static void test_gpt2_dropout_and_tying_follow_the_file(void **state)
{
	struct lynx_model_desc m = accept(
	        "{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 64, \"n_head\": 4, "
	        "\"n_positions\": 32, \"vocab_size\": 10, \"attn_pdrop\": 0, \"resid_pdrop\": 0.0, "
	        "\"tie_word_embeddings\": false, \"activation_function\": \"gelu_pytorch_tanh\"}",
	        NULL, 0);

	assert_true(m.arch.no_dropout);
	assert_true(m.arch.untied);
	m = accept("{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 64, \"n_head\": 4, "
	           "\"n_positions\": 32, \"vocab_size\": 10, \"attn_pdrop\": 0}",
	           NULL, 0);
	assert_false(m.arch.no_dropout); /* resid_pdrop defaults to 0.1 */
	refuse("{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 64, \"n_head\": 4, "
	       "\"n_positions\": 32, \"vocab_size\": 10, \"activation_function\": \"relu\"}",
	       "activation_function", "relu");
}

/*
 * GPT-NeoX-20B, by hand: a layer is 12h² + 13h = 453,064,704 (h = 6144, f = 4h, biases);
 * 44 layers 19,934,846,976, two untied 50432·6144 embeddings 619,708,416, the final
 * LayerNorm 12,288: 20,554,567,680, EleutherAI's count.
 */
static void test_gpt_neox_20b_matches_the_published_parameter_count(void **state)
{
	char name[64];
	struct lynx_model_desc m = accept(neox_20b, name, sizeof(name));

	assert_shape(&m, 44, 6144, 64, 2048, 50432);
	assert_arch(&m, &(struct lynx_layer_arch){.mlp = LYNX_MLP_GELU,
	                                          .norm = LYNX_NORM_LAYERNORM,
	                                          .position = LYNX_POSITION_ROTARY,
	                                          .attention = LYNX_ATTENTION_FLASH,
	                                          .ffn = 24576,
	                                          .kv_heads = 64,
	                                          .no_dropout = true,
	                                          .untied = true});
	assert_string_equal(name, "gpt_neox");
	assert_int_equal(lynx_model_params(&m), 20554567680ull);
}

static void test_gpt_neox_biases_and_dropout_follow_the_file(void **state)
{
	struct lynx_model_desc m = accept(
	        "{\"model_type\": \"gpt_neox\", \"num_hidden_layers\": 2, \"hidden_size\": 64, "
	        "\"num_attention_heads\": 4, \"intermediate_size\": 256, "
	        "\"max_position_embeddings\": 32, \"vocab_size\": 10, \"attention_bias\": false, "
	        "\"hidden_dropout\": 0.1, \"tie_word_embeddings\": true}",
	        NULL, 0);

	assert_true(m.arch.no_bias);
	assert_false(m.arch.no_dropout);
	assert_false(m.arch.untied);
	refuse("{\"model_type\": \"gpt_neox\", \"num_hidden_layers\": 2, \"hidden_size\": 64, "
	       "\"num_attention_heads\": 4, \"intermediate_size\": 256, "
	       "\"max_position_embeddings\": 32, \"vocab_size\": 10, \"hidden_act\": \"silu\"}",
	       "hidden_act", "silu");
}

/* Either bias flag gives the layer biases; any attention dropout turns dropout on; head_dim
 * of h/a and null for the optional sizes are accepted. */
static void test_llama_options_follow_the_file(void **state)
{
	struct lynx_model_desc m = accept(LLAMA_WITH(", \"attention_bias\": true"), NULL, 0);

	assert_false(m.arch.no_bias);
	assert_true(m.arch.no_dropout);
	m = accept(LLAMA_WITH(", \"mlp_bias\": true, \"attention_dropout\": 0.1, "
	                      "\"tie_word_embeddings\": true"),
	           NULL, 0);
	assert_false(m.arch.no_bias);
	assert_false(m.arch.no_dropout);
	assert_false(m.arch.untied);
	m = accept(LLAMA_WITH(", \"head_dim\": 16, \"num_key_value_heads\": 2"), NULL, 0);
	assert_int_equal(m.arch.kv_heads, 2);
	m = accept(LLAMA_WITH(", \"head_dim\": null, \"num_key_value_heads\": null"), NULL, 0);
	assert_int_equal(m.arch.kv_heads, 4);
	m = accept(LLAMA_WITH(""), NULL, 0); /* hidden_act absent: Hugging Face's silu */
	assert_int_equal(m.arch.mlp, LYNX_MLP_SWIGLU);
}

/* The caller's architecture does not leak into the file's: its ffn and kv_heads (7, 5) and
 * unfused attention are replaced. */
static void test_the_architecture_comes_from_the_file_alone(void **state)
{
	struct lynx_model_desc m = accept(LLAMA_WITH(""), NULL, 0);

	assert_int_equal(m.arch.ffn, 172);
	assert_int_equal(m.arch.kv_heads, 4);
	assert_int_equal(m.arch.attention, LYNX_ATTENTION_FLASH);
}

static void test_refuses_text_that_is_not_json(void **state)
{
	refuse("{\"model_type\": \"llama\", \"num_hidden_layers\": }", "not JSON", "byte 45 ");
	refuse("", "not JSON", "empty");
	refuse("   ", "not JSON", NULL);
	refuse("{\"model_type\": \"llama\"} {}", "not JSON", "follows");
}

/* json[0..len) only: what comes after len is not part of the text. */
static void test_reads_only_len_bytes(void **state)
{
	struct lynx_model_desc m = run_settings();
	char text[sizeof(gpt2_null_inner) + 8], why[128] = "";

	snprintf(text, sizeof(text), "%s@@@@", gpt2_null_inner);
	assert_int_equal(
	        lynx_hf_config_parse(text, strlen(gpt2_null_inner), &m, NULL, 0, why, sizeof(why)),
	        0);
	assert_int_equal(m.layers, 12);
	assert_int_equal(lynx_hf_config_parse(text, strlen(gpt2_null_inner) - 1, &m, NULL, 0, why,
	                                      sizeof(why)),
	                 -EINVAL);
	assert_non_null(strstr(why, "not JSON"));
}

static void test_refuses_a_top_level_that_is_not_an_object(void **state)
{
	refuse("[{\"model_type\": \"llama\"}]", "object", "an array");
	refuse("\"llama\"", "object", "a string");
	refuse("null", "object", "null");
}

static void test_refuses_an_unknown_or_missing_model_type(void **state)
{
	refuse("{\"model_type\": \"mixtral\"}", "model_type 'mixtral'", "(llama, gpt2, gpt_neox)");
	refuse("{\"architectures\": [\"LlamaForCausalLM\"]}", "no model_type", "llama");
	refuse("{\"model_type\": 7}", "model_type", "a number");
	refuse("{\"model_type\": null}", "model_type", "null");
}

static void test_refuses_a_missing_field_naming_it(void **state)
{
	refuse("{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_attention_heads\": 4, "
	       "\"intermediate_size\": 172, \"max_position_embeddings\": 128, "
	       "\"vocab_size\": 1000}",
	       "num_hidden_layers", "llama");
	refuse("{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 64, \"n_head\": 4, "
	       "\"vocab_size\": 10}",
	       "n_positions", "gpt2");
	refuse("{\"model_type\": \"llama\", \"num_hidden_layers\": null, \"hidden_size\": 64}",
	       "num_hidden_layers", "null");
}

static void test_refuses_sizes_that_are_not_whole_numbers_in_range(void **state)
{
	/* The first key wins, so each of these is the one refused. */
	refuse("{\"model_type\": \"llama\", \"num_hidden_layers\": -1}", "num_hidden_layers=-1",
	       "1..4294967295");
	refuse("{\"model_type\": \"llama\", \"num_hidden_layers\": 0}", "num_hidden_layers=0",
	       NULL);
	refuse("{\"model_type\": \"llama\", \"num_hidden_layers\": 32.5}", "num_hidden_layers=32.5",
	       NULL);
	refuse("{\"model_type\": \"llama\", \"num_hidden_layers\": 4294967296}",
	       "num_hidden_layers=4294967296", NULL);
	refuse("{\"model_type\": \"llama\", \"num_hidden_layers\": 1e999}", "num_hidden_layers=inf",
	       NULL);
	refuse(LLAMA_WITH(", \"num_key_value_heads\": 2.5"), "num_key_value_heads=2.5", NULL);
	/* The largest size is accepted as a number; its shape is model.h's to refuse. */
	accept("{\"model_type\": \"gpt2\", \"n_layer\": 4294967295, \"n_embd\": 64, \"n_head\": 4, "
	       "\"n_positions\": 32, \"vocab_size\": 10}",
	       NULL, 0);
	refuse("{\"model_type\": \"gpt2\", \"n_layer\": 1, \"n_embd\": 4294967295, \"n_head\": 5, "
	       "\"n_positions\": 32, \"vocab_size\": 10}",
	       "4·n_embd", NULL);
}

static void test_refuses_a_value_of_the_wrong_type_naming_it(void **state)
{
	refuse(LLAMA_WITH(", \"num_key_value_heads\": \"8\""), "num_key_value_heads",
	       "the string '8'");
	refuse("{\"model_type\": \"llama\", \"num_hidden_layers\": [32]}", "num_hidden_layers",
	       "an array");
	refuse(LLAMA_WITH(", \"tie_word_embeddings\": \"false\""), "tie_word_embeddings",
	       "true or false");
	refuse(LLAMA_WITH(", \"attention_bias\": 0"), "attention_bias", "a number");
	refuse(LLAMA_WITH(", \"attention_dropout\": \"0.1\""), "attention_dropout", "a number");
	refuse(LLAMA_WITH(", \"attention_dropout\": 1.5"), "attention_dropout=1.5", "0..1");
	refuse(LLAMA_WITH(", \"hidden_act\": true"), "hidden_act", "a string");
}

static void test_refuses_a_llama_that_is_not_swiglu(void **state)
{
	refuse(LLAMA_WITH(", \"hidden_act\": \"gelu\""), "hidden_act 'gelu'", "SwiGLU");
}

static void test_refuses_heads_the_layer_cannot_have(void **state)
{
	refuse(LLAMA_WITH(", \"head_dim\": 32"), "head_dim=32",
	       "hidden_size / num_attention_heads");
	refuse(LLAMA_WITH(", \"num_key_value_heads\": 3"), "num_attention_heads=4",
	       "num_key_value_heads=3");
	refuse(LLAMA_WITH(", \"num_key_value_heads\": 8"), "num_key_value_heads=8", NULL);
	refuse("{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 64, \"n_head\": 5, "
	       "\"n_positions\": 32, \"vocab_size\": 10}",
	       "n_embd=64", "n_head=5");
}

/* A refusal leaves every byte of m, and the name, as they were. */
static void test_a_refusal_leaves_m_and_name_unchanged(void **state)
{
	static const char *const bad[] = {
	        "{",
	        "[]",
	        "{\"model_type\": \"mixtral\"}",
	        LLAMA_WITH(", \"hidden_act\": \"gelu\""),
	        LLAMA_WITH(", \"head_dim\": 32"),
	        LLAMA_WITH(", \"mlp_bias\": 1"),
	};
	struct lynx_model_desc m, sentinel;
	char name[16], why[128];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		memset(&m, 0xa5, sizeof(m));
		memcpy(&sentinel, &m, sizeof(m));
		strcpy(name, "unchanged");
		why[0] = 0;
		assert_int_equal(parse(bad[i], &m, name, sizeof(name), why, sizeof(why)), -EINVAL);
		assert_memory_equal(&m, &sentinel, sizeof(m));
		assert_string_equal(name, "unchanged");
		assert_true(why[0]);
	}
}

/* Names and reasons are cut to their buffers, NUL-terminated; NULL buffers are allowed. */
static void test_buffers_are_truncated_safely_and_may_be_null(void **state)
{
	struct lynx_model_desc m = run_settings();
	char name[8], why[8];

	memset(name, 'x', sizeof(name));
	assert_int_equal(parse(llama2_7b, &m, name, sizeof(name), NULL, 0), 0);
	assert_string_equal(name, "meta-ll");
	memset(name, 'x', sizeof(name));
	assert_int_equal(parse(llama2_7b, &m, name, 0, NULL, 0), 0);
	assert_int_equal(name[0], 'x'); /* a zero-length buffer is not written */
	assert_int_equal(parse(llama2_7b, &m, NULL, 64, NULL, 0), 0);
	assert_int_equal(m.layers, 32);

	memset(why, 'x', sizeof(why));
	assert_int_equal(parse("{\"model_type\": \"mixtral\"}", &m, NULL, 0, why, sizeof(why)),
	                 -EINVAL);
	assert_string_equal(why, "model_t");
	assert_int_equal(parse("{\"model_type\": \"mixtral\"}", &m, NULL, 0, NULL, 64), -EINVAL);
	assert_int_equal(lynx_hf_config_parse(NULL, 0, &m, NULL, 0, NULL, 0), -EINVAL);

	/* An empty _name_or_path is no name: the model_type stands in. */
	assert_int_equal(
	        parse(LLAMA_WITH(", \"_name_or_path\": \"\""), &m, name, sizeof(name), NULL, 0), 0);
	assert_string_equal(name, "llama");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	        cmocka_unit_test(test_llama2_7b_matches_the_published_parameter_count),
	        cmocka_unit_test(test_llama3_8b_has_grouped_query_attention),
	        cmocka_unit_test(test_llama31_8b_ignores_rope_scaling),
	        cmocka_unit_test(test_llama2_70b_matches_the_published_parameter_count),
	        cmocka_unit_test(test_accepted_descriptions_validate_once_run_settings_are_set),
	        cmocka_unit_test(test_gpt2_small_matches_the_published_parameter_count),
	        cmocka_unit_test(test_gpt2_n_inner_null_is_four_times_n_embd),
	        cmocka_unit_test(test_gpt2_dropout_and_tying_follow_the_file),
	        cmocka_unit_test(test_gpt_neox_20b_matches_the_published_parameter_count),
	        cmocka_unit_test(test_gpt_neox_biases_and_dropout_follow_the_file),
	        cmocka_unit_test(test_llama_options_follow_the_file),
	        cmocka_unit_test(test_the_architecture_comes_from_the_file_alone),
	        cmocka_unit_test(test_refuses_text_that_is_not_json),
	        cmocka_unit_test(test_reads_only_len_bytes),
	        cmocka_unit_test(test_refuses_a_top_level_that_is_not_an_object),
	        cmocka_unit_test(test_refuses_an_unknown_or_missing_model_type),
	        cmocka_unit_test(test_refuses_a_missing_field_naming_it),
	        cmocka_unit_test(test_refuses_sizes_that_are_not_whole_numbers_in_range),
	        cmocka_unit_test(test_refuses_a_value_of_the_wrong_type_naming_it),
	        cmocka_unit_test(test_refuses_a_llama_that_is_not_swiglu),
	        cmocka_unit_test(test_refuses_heads_the_layer_cannot_have),
	        cmocka_unit_test(test_a_refusal_leaves_m_and_name_unchanged),
	        cmocka_unit_test(test_buffers_are_truncated_safely_and_may_be_null),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
