"""Inputs for the tiny stock checkpoints of `stock_checkpoints`: right-padded batches and their labels (causal LM,
sentence pairs as each encoder family's tokenizer lays them out, seq2seq), and a small question-answer data file."""

import json

import torch
from stock_checkpoints import PAD, TINY_ENCODER, TINY_GPT2

# -- causal LM -------------------------------------------------------------------------------------------------------


def lm_batch(lengths=(12, 9, 5), seed=0):
    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    input_ids = torch.zeros(len(lengths), width, dtype=torch.long)
    attention_mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for i, n in enumerate(lengths):
        input_ids[i, :n] = torch.randint(1, TINY_GPT2["vocab_size"], (n,), generator=g)
        attention_mask[i, :n] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def lm_labels(batch):
    return batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)


# -- sentence pairs (encoder families) -------------------------------------------------------------------------------

# the tokens each family's tokenizer lays a pair out with: first token, separator, padding, `A sep sep B`, token types
TOKENS = {
    "bert": (101, 102, 0, False, True),
    "electra": (101, 102, 0, False, True),
    "roberta": (0, 2, 1, True, False),
    "xlm-roberta": (0, 2, 1, True, False),
    "deberta-v2": (1, 2, 0, False, False),
    "modernbert": (1, 2, 0, False, False),
}
# ModernBERT's sliding-window layers (window 2 each side here) leave a padded row with no visible token when the padding
# is longer than the window, and on such rows the stock model's eager and SDPA attention differ (the outputs there
# are undefined); its batch pads each example by at most 2 tokens, so every row sees at least one token
PAIR_LENGTHS = {"modernbert": ((6, 5), (6, 4), (5, 4))}


def pair_batch(family: str, lengths=None, seed=0):
    """Sentence pairs as the family's tokenizer lays them out, right-padded.

    roberta: <s> A </s></s> B </s> (cls 0, sep 2, pad 1); bert: [CLS] A [SEP] B [SEP] with token types; the other
    families per `TOKENS`.
    """
    lengths = lengths or PAIR_LENGTHS.get(family, ((6, 5), (4, 3), (2, 2)))
    g = torch.Generator().manual_seed(seed)
    cls, sep, pad, double_sep, with_types = TOKENS[family]
    rows, types = [], []
    for la, lb in lengths:
        a = torch.randint(5, 100, (la,), generator=g).tolist()
        b = torch.randint(5, 100, (lb,), generator=g).tolist()
        ids = [cls] + a + [sep] * (2 if double_sep else 1) + b + [sep]
        rows.append(ids)
        types.append([0] * (len(ids) - lb - 1) + [1] * (lb + 1))
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    token_type_ids = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (r, t) in enumerate(zip(rows, types)):
        input_ids[i, : len(r)] = torch.tensor(r)
        attention_mask[i, : len(r)] = 1
        token_type_ids[i, : len(t)] = torch.tensor(t)
    batch = {"input_ids": input_ids, "attention_mask": attention_mask}
    if with_types:
        batch["token_type_ids"] = token_type_ids
    return batch


def labels_for(batch):
    return torch.arange(batch["input_ids"].shape[0]) % TINY_ENCODER["num_labels"]


def token_labels_for(batch):
    """A label per token (-100 on padding, which the loss ignores)."""
    ids = batch["input_ids"]
    labels = (ids + torch.arange(ids.shape[1])) % TINY_ENCODER["num_labels"]
    return labels.masked_fill(batch["attention_mask"] == 0, -100)


# -- seq2seq ---------------------------------------------------------------------------------------------------------


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


# -- a data file -----------------------------------------------------------------------------------------------------


def write_qa_pairs(path, n: int) -> str:
    """`n` GSM8K-shaped JSONL rows (`question`, `answer` ending in `#### N`) in `path`; returns them as plain text."""
    rows, words = [], ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
    for i in range(n):
        a, b = i % 9, (i * 4) % 9
        rows.append(
            {"question": f"What is {words[a]} plus {words[b]}?", "answer": f"It is {a + b + 2}. #### {a + b + 2}"}
        )
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return "\n".join(r["question"] + " " + r["answer"] for r in rows)
