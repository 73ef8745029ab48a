"""Tiny stock Marian, BART, mBART, M2M100 and T5 checkpoints and seq2seq batches for the attention-bridge tests."""

import torch
from transformers import MarianConfig, MarianMTModel

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
TINY_BRIDGE = dict(bridge_fixed_length=5, bridge_hidden_size=48, bridge_heads=4)


def build_stock_marian(folder):
    torch.manual_seed(0)
    model = MarianMTModel(MarianConfig(**TINY_MARIAN))
    model.save_pretrained(folder)
    return model


def source_batch(lengths=(12, 9, 5), target_length=7, seed=0):
    """Right-padded sources (example 0 unpadded) and unpadded decoder inputs of another length."""
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    input_ids = torch.full((len(lengths), width), PAD, dtype=torch.long)
    attention_mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for i, n in enumerate(lengths):
        input_ids[i, :n] = torch.randint(2, PAD, (n,), generator=g)
        attention_mask[i, :n] = 1
    decoder_input_ids = torch.randint(2, PAD, (len(lengths), target_length), generator=g)
    decoder_input_ids[:, 0] = PAD
    return {"input_ids": input_ids, "attention_mask": attention_mask, "decoder_input_ids": decoder_input_ids}


def target_labels(batch):
    return torch.roll(batch["decoder_input_ids"], -1, dims=1)


def build_stock_bart(folder):
    from transformers import BartConfig, BartForConditionalGeneration

    torch.manual_seed(0)
    config = {k: v for k, v in TINY_MARIAN.items() if k != "decoder_vocab_size"}
    model = BartForConditionalGeneration(BartConfig(**config, bos_token_id=0))
    model.save_pretrained(folder)
    return model


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
