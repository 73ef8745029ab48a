"""The one-shot structured-pruning baselines of the sentinel sweep against transcriptions of their authors' code
(CASIA-IVA-Lab/FLAP: `lib/layerwrapper.py` and `lib/prune.py`), written here from that code's equations and run on
the output projections' inputs of a tiny model: FLAP (`flap`) and the structured Wanda of the FLAP paper
(`wanda-sp`). The authors run LLaMA (`nn.Linear` projections); GPT-2's `Conv1D` stores the weight the other way
round, so both are checked."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

from interlayer import GPT2SentinelLMHeadModel, LlamaSentinelForCausalLM
from interlayer.sentinel import head_scores, select_heads_to_prune

SAMPLES, LENGTH, VOCAB = 32, 24, 64


def tiny_model(tmp_path, family: str):
    torch.manual_seed(0)
    if family == "llama":
        config = LlamaConfig(vocab_size=VOCAB, hidden_size=48, intermediate_size=64, num_hidden_layers=3,
                             num_attention_heads=6, num_key_value_heads=2, head_dim=8)  # fmt: skip
        LlamaForCausalLM(config).save_pretrained(tmp_path / family)
        model = LlamaSentinelForCausalLM.from_pretrained(str(tmp_path / family))
        projections = [layer.self_attn.o_proj for layer in model.model.layers]
        weights = [p.weight.detach().double() for p in projections]  # (out, in), as the authors' code reads it
    else:
        GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, n_embd=48, n_layer=3, n_head=6, n_positions=64)).save_pretrained(
            tmp_path / family
        )
        model = GPT2SentinelLMHeadModel.from_pretrained(str(tmp_path / family))
        projections = [block.attn.c_proj for block in model.transformer.h]
        weights = [p.weight.detach().double().t() for p in projections]  # Conv1D holds (in, out)
    return model.eval(), projections, weights


def calibration_samples():
    """Unpadded samples of one sequence each, as the authors' calibration loop feeds them (`inps[j].unsqueeze(0)`)."""
    ids = torch.randint(0, VOCAB, (SAMPLES, LENGTH), generator=torch.Generator().manual_seed(1))
    return [{"input_ids": row[None], "attention_mask": torch.ones(1, LENGTH, dtype=torch.long)} for row in ids]


def projection_inputs(model, projections, samples):
    """Per layer, the output projection's input for each sample: (1, length, features)."""
    seen = [[] for _ in projections]
    hooks = [
        p.register_forward_pre_hook(lambda module, args, i=i: seen[i].append(args[0].detach().double()))
        for i, p in enumerate(projections)
    ]
    with torch.no_grad():
        for sample in samples:
            model(**sample)
    for hook in hooks:
        hook.remove()
    return seen


class AuthorsFluctuation:
    """`BiasGPT` with the WIFV metric, transcribed: a running mean of the input features and a running fluctuation
    updated sample by sample. As in the original, `old_baseline_inp` is the same tensor as `baseline_inp` (the
    in-place updates change both), and the first sample only sets the mean."""

    def __init__(self, in_dim):
        self.nsamples = 0
        self.baseline_inp = torch.zeros(in_dim, dtype=torch.float64)
        self.fluc_inp = torch.zeros(in_dim, dtype=torch.float64)

    def add_batch(self, inp):
        batch_size = inp.shape[0]
        inp = inp.reshape((-1, inp.shape[-1])).t()
        old_baseline_inp = self.baseline_inp
        self.baseline_inp *= self.nsamples / (self.nsamples + batch_size)
        self.baseline_inp += torch.mean(inp, dim=1) / (self.nsamples + batch_size)
        if self.nsamples == 0:
            self.fluc_inp = 0
        else:
            self.fluc_inp *= (self.nsamples - 1) / (self.nsamples + batch_size - 1)
            self.fluc_inp += torch.sum(
                (inp - self.baseline_inp.unsqueeze(1)) * (inp - old_baseline_inp.unsqueeze(1)), dim=1
            ) / (self.nsamples + batch_size)
        self.nsamples += batch_size


def authors_flap(inputs, weights, head_dim, exact_variance=False):
    """`prune_flap`'s attention metric under the adaptive structures (AL-MM / AL-AM): WIFV = fluctuation times the
    squared column norms (`torch.sum(W.pow(2), dim=0)`), squared for the attention output projection, stacked over
    layers, standardised along each layer's channels (`torch.std`, unbiased), then the mean over each head's
    channels. `exact_variance` swaps the running fluctuation for the plain variance over every token."""
    metric = []
    for samples, weight in zip(inputs, weights):
        if exact_variance:
            fluctuation = torch.cat([s.reshape(-1, s.shape[-1]) for s in samples]).var(0, unbiased=False)
        else:
            wrapper = AuthorsFluctuation(weight.shape[1])
            for sample in samples:
                wrapper.add_batch(sample)
            fluctuation = wrapper.fluc_inp
        metric.append((fluctuation * torch.sum(weight.pow(2), dim=0)) ** 2)
    metric = torch.stack(metric)
    metric = (metric - torch.mean(metric, axis=1, keepdim=True)) / torch.std(metric, axis=1, keepdim=True)
    return metric.reshape(len(weights), -1, head_dim).mean(dim=2)


def authors_wanda_sp(inputs, weights, head_dim):
    """`prune_wanda_sp`'s head score (`WrappedGPT.add_batch`'s running `scaler_row`, then
    `|W| * sqrt(scaler_row)`, the mean over output rows, the sum over each head's channels), the statistics of
    every layer taken from the unpruned model."""
    scores = []
    for samples, weight in zip(inputs, weights):
        scaler_row, nsamples = torch.zeros(weight.shape[1], dtype=torch.float64), 0
        for inp in samples:
            tmp = inp.shape[0]
            inp = inp.reshape((-1, inp.shape[-1])).t()
            scaler_row *= nsamples / (nsamples + tmp)
            nsamples += tmp
            scaler_row += torch.norm(inp, p=2, dim=1) ** 2 / nsamples
        metric = torch.abs(weight) * torch.sqrt(scaler_row.reshape((1, -1)))
        scores.append(metric.mean(axis=0).reshape(-1, head_dim).sum(dim=1))
    return torch.stack(scores)


def ranks(values: torch.Tensor) -> torch.Tensor:
    return values.flatten().argsort().argsort().double()


def spearman(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.corrcoef(torch.stack([ranks(a), ranks(b)]))[0, 1])


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_flap_scores_heads_as_the_authors_code_does(tmp_path, family):
    model, projections, weights = tiny_model(tmp_path, family)
    samples = calibration_samples()
    inputs = projection_inputs(model, projections, samples)
    head_dim = model.gated_attentions[0].head_dim
    ours = torch.stack(head_scores(model, "flap", samples)).double()
    # the same equations on the plain variance: equal to float rounding
    torch.testing.assert_close(ours, authors_flap(inputs, weights, head_dim, exact_variance=True), rtol=1e-4, atol=1e-5)
    # the authors' running estimate (the first sample left out): the same order, the same heads pruned
    theirs = authors_flap(inputs, weights, head_dim)
    assert spearman(ours, theirs) > 0.99
    for count in (4, 6, 9):  # 22%, 33% and 50% of the 18 heads, ranked over the whole model as AL-MM does
        assert set(ours.flatten().argsort()[:count].tolist()) == set(theirs.flatten().argsort()[:count].tolist())


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_wanda_sp_scores_and_prunes_heads_as_the_authors_code_does(tmp_path, family):
    model, projections, weights = tiny_model(tmp_path, family)
    samples = calibration_samples()
    inputs = projection_inputs(model, projections, samples)
    head_dim = model.gated_attentions[0].head_dim
    ours = torch.stack(head_scores(model, "wanda-sp", samples)).double()
    theirs = authors_wanda_sp(inputs, weights, head_dim)
    # their running sum of squares is LENGTH times the mean square over tokens: the scores differ by sqrt(LENGTH)
    torch.testing.assert_close(ours * LENGTH**0.5, theirs, rtol=1e-5, atol=1e-8)
    # a third of the heads: every layer loses its 2 weakest (thresh = sort(W_metric)[int(ratio * heads)])
    chosen = select_heads_to_prune(model, 1 / 3, "wanda-sp", samples)
    for layer, scores in enumerate(theirs):
        thresh = torch.sort(scores)[0][int(1 / 3 * len(scores))]
        assert chosen[layer] == torch.nonzero(scores < thresh).flatten().tolist()
    # a count that does not divide evenly: layers lose 2, 2 and 1 heads, each its weakest ones
    uneven = select_heads_to_prune(model, 5 / 18, "wanda-sp", samples)
    assert sorted(len(heads) for heads in uneven.values()) == [1, 2, 2]
    for layer, heads in uneven.items():
        assert heads == sorted(theirs[layer].argsort()[: len(heads)].tolist())
