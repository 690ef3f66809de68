/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A Hugging Face model's config.json as a layer description: `lynx sim --hf-config` and
 * `lynx plan --hf-config` read it instead of a preset. It knows the architectures whose
 * layer model.h can describe: Llama (LlamaForCausalLM, model_type "llama"), GPT-2 ("gpt2")
 * and GPT-NeoX ("gpt_neox"). Any other model_type is refused with a message that names it.
 * Pure functions of their arguments: safe from any thread (cJSON's parser writes its own
 * last-error global, which this reader never reads).
 */
#ifndef LYNX_POLICY_HF_CONFIG_H
#define LYNX_POLICY_HF_CONFIG_H

#include <stddef.h>

#include "model.h"

/*
 * Parses the JSON text json[0..len) (not necessarily NUL-terminated) and sets m's shape
 * (layers, hidden, heads, seq, vocab) and m->arch from it; the run settings (micro-batch,
 * global batch, tp, pp, dp, sp) are left as they were. name gets the model's name for
 * reports: its "_name_or_path" when that is a non-empty string, else its model_type
 * (truncated to name_len; may be NULL). Returns 0, or -EINVAL with one sentence in why
 * (truncated to why_len; may be NULL) naming the file's problem: not JSON (with the byte
 * where parsing stopped; text after the top-level value counts), not an object, an unknown
 * or missing model_type, a missing, mistyped or out-of-range field (named as in the file:
 * sizes are whole numbers in 1..UINT32_MAX, flags true or false, dropout rates numbers in
 * 0..1), heads that do not divide the hidden size or are not a multiple of the key/value
 * heads, or a choice the layer description does not have (an activation other than
 * SiLU/GeLU, a head_dim other than hidden_size / num_attention_heads, ...). On failure m
 * and name are unchanged. The caller still runs lynx_model_validate() once it has set the
 * run settings. Keys not listed below (rope_scaling, rms_norm_eps, torch_dtype, ...) are
 * ignored; null for an optional size (n_inner, num_key_value_heads, head_dim) is its
 * default, as Hugging Face writes an unset one.
 *
 * Fields read, by model_type (defaults as Hugging Face's config classes have them):
 *   llama    num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads
 *            (default: num_attention_heads), intermediate_size, max_position_embeddings,
 *            vocab_size, hidden_act ("silu", the default and the only one: SwiGLU),
 *            tie_word_embeddings (false), attention_bias and mlp_bias (false; either one
 *            gives the whole layer biases), attention_dropout (0), head_dim (default and
 *            only value: hidden_size / num_attention_heads). RMSNorm, rotary positions.
 *   gpt2     n_layer, n_embd, n_head, n_inner (null: 4·n_embd), n_positions, vocab_size,
 *            activation_function (gelu*; default gelu_new), tie_word_embeddings (true),
 *            attn_pdrop and resid_pdrop (0.1). LayerNorm, biases, learned positions.
 *   gpt_neox num_hidden_layers, hidden_size, num_attention_heads, intermediate_size,
 *            max_position_embeddings, vocab_size, hidden_act (gelu*; default gelu),
 *            tie_word_embeddings (false), attention_bias (true), attention_dropout and
 *            hidden_dropout (0). LayerNorm, rotary positions.
 * Attention is flash for all three: Hugging Face's default implementation (SDPA) runs the
 * flash kernel on current GPUs; callers override it with the user's --attention.
 */
int lynx_hf_config_parse(const char *json, size_t len, struct lynx_model_desc *m, char *name,
                         size_t name_len, char *why, size_t why_len);

#endif /* LYNX_POLICY_HF_CONFIG_H */
