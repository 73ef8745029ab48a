"""Tiny stock checkpoints, each built with a fixed seed and saved in the folder given: the decoder families (the
decoder mechanisms convert them: hyper-connections, latent back-projection, sentinel gates), GPT-2, the encoder
families (bridges, sentinel gates), and the seq2seq families (attention bridges).

A builder `build_stock_<family>(folder)` returns the stock model it saved; the `TINY_*` dicts are the shapes."""

import torch
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    BertConfig,
    BertForSequenceClassification,
    BertModel,
    Gemma2Config,
    Gemma2ForCausalLM,
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MarianConfig,
    MarianMTModel,
    MistralConfig,
    MistralForCausalLM,
    Olmo2Config,
    Olmo2ForCausalLM,
    Phi3Config,
    Phi3ForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
    Qwen3Config,
    Qwen3ForCausalLM,
    RobertaConfig,
    RobertaForSequenceClassification,
)

# -- decoder families ------------------------------------------------------------------------------------------------

TINY_DECODER = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=8,
    vocab_size=128,
    max_position_embeddings=64,
    tie_word_embeddings=True,
)


def decoder_builder(config_class, model_class, **family_options):
    """`build(folder, **overrides)`: a tiny stock causal LM of one family (fixed seed), saved in `folder`."""

    def build(folder, **overrides):
        torch.manual_seed(0)
        model = model_class(config_class(**{**TINY_DECODER, **family_options, **overrides}))
        model.save_pretrained(folder)
        return model

    return build


# the family options exercise what each family adds: a sliding window shorter than the test batches (so padding,
# the cache and generation meet it), a bias on q/k/v, Phi-3's residual dropout (in training), Gemma's logit
# soft-capping (stock defaults) and Gemma 3's local/global rotary bases
SHORT_WINDOW = 8  # below the generation tests' 15 tokens; above the conformance batches' longest padding run (7)
build_stock_qwen3 = decoder_builder(Qwen3Config, Qwen3ForCausalLM)
build_stock_llama = decoder_builder(LlamaConfig, LlamaForCausalLM)
build_stock_qwen2 = decoder_builder(
    Qwen2Config, Qwen2ForCausalLM, use_sliding_window=True, sliding_window=SHORT_WINDOW, max_window_layers=1
)
# Qwen2 as its stock config has it: every layer full attention
build_stock_qwen2_full_attention = decoder_builder(Qwen2Config, Qwen2ForCausalLM)
build_stock_mistral = decoder_builder(MistralConfig, MistralForCausalLM, sliding_window=SHORT_WINDOW)
build_stock_phi3 = decoder_builder(
    Phi3Config, Phi3ForCausalLM, resid_pdrop=0.1, bos_token_id=1, eos_token_id=2, pad_token_id=0
)
build_stock_olmo2 = decoder_builder(Olmo2Config, Olmo2ForCausalLM, eos_token_id=2)
build_stock_gemma2 = decoder_builder(Gemma2Config, Gemma2ForCausalLM, sliding_window=SHORT_WINDOW)
build_stock_gemma3 = decoder_builder(
    Gemma3TextConfig,
    Gemma3ForCausalLM,
    sliding_window=SHORT_WINDOW,
    layer_types=["sliding_attention", "full_attention", "sliding_attention"],
)
# TINY_DECODER's names map to GPT-2's n_embd, n_layer, n_head, n_positions
build_stock_gpt2_decoder = decoder_builder(GPT2Config, GPT2LMHeadModel, bos_token_id=1, eos_token_id=2)


def save_tiny_llama_with_tokenizer(folder, text: str, layers: int = 2):
    """A tiny stock Llama whose vocabulary is a byte-level BPE tokenizer trained on `text`, both saved in `folder`."""
    from interlayer.training import train_byte_bpe

    tokenizer = train_byte_bpe(text, vocab_size=300)
    torch.manual_seed(0)
    shape = {"num_hidden_layers": layers, "vocab_size": len(tokenizer), "max_position_embeddings": 512}
    config = LlamaConfig(**{**TINY_DECODER, **shape})
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return tokenizer


# -- GPT-2 (the sentinel gates' first family) ------------------------------------------------------------------------

TINY_GPT2 = dict(n_embd=32, n_layer=4, n_head=4, vocab_size=128, n_positions=64)


def build_stock_gpt2(folder, **overrides):
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(**{**TINY_GPT2, **overrides}))
    model.save_pretrained(folder)
    return model


def build_gpt2(folder):
    """A 2-layer GPT-2 LM (unseeded, returns nothing): the wrong architecture for the encoder classes."""
    GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=128, n_positions=64)).save_pretrained(folder)


# -- encoder families ------------------------------------------------------------------------------------------------

TINY_ENCODER = dict(
    vocab_size=128,
    hidden_size=32,
    num_hidden_layers=4,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=64,
    num_labels=3,
)

# each family's tiny stock config: its own layout at its most demanding (ELECTRA's smaller embeddings and their
# projection; DeBERTa-v3's bucketed relative attention both ways, no absolute positions, plus v2's convolution;
# ModernBERT's alternating full / sliding-window attention with a window narrower than the batch)
FAMILY_CONFIG = {
    "bert": dict(model_type="bert"),
    "roberta": dict(model_type="roberta"),
    "xlm-roberta": dict(model_type="xlm-roberta"),
    "electra": dict(model_type="electra", embedding_size=16),
    "deberta-v2": dict(
        model_type="deberta-v2",
        relative_attention=True,
        pos_att_type=["p2c", "c2p"],
        position_buckets=8,
        max_relative_positions=16,
        norm_rel_ebd="layer_norm",
        share_att_key=True,
        position_biased_input=False,
        conv_kernel_size=3,
    ),
    "modernbert": dict(
        model_type="modernbert",
        local_attention=4,
        global_attn_every_n_layers=2,
        pad_token_id=0,
        cls_token_id=1,
        sep_token_id=2,
        bos_token_id=1,
        eos_token_id=2,
    ),
}
STOCK_AUTO = {
    "base": AutoModel,
    "sequence-classification": AutoModelForSequenceClassification,
    "token-classification": AutoModelForTokenClassification,
}


def tiny_stock_config(family: str):
    options = dict(FAMILY_CONFIG[family])
    return AutoConfig.for_model(options.pop("model_type"), **TINY_ENCODER, **options)


def encoder_builder(family: str, task: str = "sequence-classification"):
    """`build(folder) -> stock model`: the family's tiny stock model for `task` (seed 0), saved into folder."""

    def build(folder):
        torch.manual_seed(0)
        model = STOCK_AUTO[task].from_config(tiny_stock_config(family))
        model.save_pretrained(folder)
        return model

    build.__name__ = f"build_stock_{family}_{task}"
    return build


build_stock_roberta = encoder_builder("roberta")
build_stock_bert = encoder_builder("bert")


def build_stock_encoder_wide(folder, stock_class, config_class):
    """The tiny classifier with weights drawn 5x wider: at the stock 0.02 its logits are near 1e-3, where even the
    stock model's fp16 rounding is at the edge of the conformance suite's fp16 tolerance (the sentinel gates' cases)."""
    torch.manual_seed(0)
    model = stock_class(config_class(**TINY_ENCODER, initializer_range=0.1))
    model.save_pretrained(folder)
    return model


def build_stock_bert_wide(folder):
    return build_stock_encoder_wide(folder, BertForSequenceClassification, BertConfig)


def build_stock_roberta_wide(folder):
    return build_stock_encoder_wide(folder, RobertaForSequenceClassification, RobertaConfig)


def build_bert(folder):
    """A 2-layer BERT base model (unseeded, returns nothing): the wrong architecture for the decoder classes."""
    BertModel(
        BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=128)
    ).save_pretrained(folder)


# -- seq2seq families ------------------------------------------------------------------------------------------------

PAD = 63
TINY_MARIAN = dict(
    vocab_size=64,
    decoder_vocab_size=64,
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=64,
    decoder_ffn_dim=64,
    max_position_embeddings=64,
    pad_token_id=PAD,
    decoder_start_token_id=PAD,
    eos_token_id=1,
    forced_eos_token_id=None,
)
TINY_BART = {k: v for k, v in TINY_MARIAN.items() if k != "decoder_vocab_size"}
TINY_T5 = dict(
    vocab_size=64,
    d_model=32,
    d_kv=8,
    d_ff=64,
    num_layers=2,
    num_heads=4,
    relative_attention_num_buckets=8,
    relative_attention_max_distance=16,
    pad_token_id=PAD,
    decoder_start_token_id=PAD,
    eos_token_id=1,
)


def _build(folder, model_class, config):
    torch.manual_seed(0)
    model = model_class(config)
    model.save_pretrained(folder)
    return model


def build_stock_marian(folder):
    return _build(folder, MarianMTModel, MarianConfig(**TINY_MARIAN))


def build_stock_bart(folder):
    from transformers import BartConfig, BartForConditionalGeneration

    return _build(folder, BartForConditionalGeneration, BartConfig(**TINY_BART, bos_token_id=0))


def build_stock_mbart(folder):
    from transformers import MBartConfig, MBartForConditionalGeneration

    return _build(folder, MBartForConditionalGeneration, MBartConfig(**TINY_BART, bos_token_id=0))


def build_stock_m2m100(folder):
    from transformers import M2M100Config, M2M100ForConditionalGeneration

    # decoding starts with a token other than the padding (as NLLB's, which starts with </s>): M2M100 counts positions
    # from the non-padding tokens, so a padding start token would put cached and uncached decoding at other positions
    config = M2M100Config(**{**TINY_BART, "decoder_start_token_id": 0}, bos_token_id=0)
    return _build(folder, M2M100ForConditionalGeneration, config)


def build_stock_t5(folder):
    from transformers import T5Config, T5ForConditionalGeneration

    return _build(folder, T5ForConditionalGeneration, T5Config(**TINY_T5))


def build_number_words_marian(folder):
    """A tiny stock Marian whose vocabulary is the number words' characters, with that tokenizer, in `folder`."""
    from interlayer.number_words import CharVocabulary

    vocab = CharVocabulary()
    tokenizer = vocab.tokenizer()
    shape = dict(vocab_size=len(tokenizer), decoder_vocab_size=len(tokenizer), pad_token_id=vocab.PAD)
    config = MarianConfig(**{**TINY_MARIAN, **shape, "decoder_start_token_id": vocab.PAD, "eos_token_id": vocab.EOS})
    torch.manual_seed(0)
    MarianMTModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return tokenizer
