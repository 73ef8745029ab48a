"""The encoder-decoder families (`families.Seq2SeqFamily`): Marian, BART, mBART, M2M100 (NLLB), T5, each declared once
by its stock encoder, decoder, base model and LM. `SEQ2SEQ_FAMILIES` lists them in order.

It imports these families' stock modules only, and sits beside the modeling files that import it, so that
`save_pretrained` ships it with the remote code of a seq2seq checkpoint.
"""

# first, before any transformers import: a clear error under transformers 4
from .zoo_requirements import MIN_TRANSFORMERS  # noqa: F401

# isort: split

import dataclasses

from transformers.models.bart import modeling_bart as bart
from transformers.models.m2m_100 import modeling_m2m_100 as m2m_100
from transformers.models.marian import modeling_marian as marian
from transformers.models.mbart import modeling_mbart as mbart
from transformers.models.t5 import modeling_t5 as t5


@dataclasses.dataclass(frozen=True)
class Seq2SeqFamily:
    """A stock encoder-decoder family, declared by the roles its pieces play: the encoder, whose output
    (`last_hidden_state`) is the memory; the decoder, whose cross-attention reads the memory (`encoder_hidden_states`,
    masked by `encoder_attention_mask`); the class that owns the two (the base model, or an LM that has none); the LM.

    Attributes:
        model_type: the stock `model_type` (`"marian"`).
        name: the family's part of the zoo's class names (`"Marian"`: `MarianAttentionBridgeModel`, ...).
        title: how a docstring names the family's LM (`"Marian translation model"`); `note` a sentence after it.
        encoder, decoder: the stock encoder and decoder classes (T5's `T5Stack` is both).
        model: the stock base model (it owns the shared embedding, the encoder and the decoder).
        lm: the stock seq2seq LM class.
        lm_owns_stack: the stock LM builds the encoder and the decoder itself instead of wrapping `model` (T5).
        no_split_modules: the FSDP units, where the stock classes name none (Marian's layers).
    """

    model_type: str
    name: str
    title: str
    encoder: type
    decoder: type
    model: type
    lm: type
    lm_owns_stack: bool = False
    no_split_modules: tuple[str, ...] = ()
    note: str = ""


MARIAN = Seq2SeqFamily(
    "marian",
    "Marian",
    "Marian translation model",
    marian.MarianEncoder,
    marian.MarianDecoder,
    marian.MarianModel,
    marian.MarianMTModel,
    no_split_modules=("MarianEncoderLayer", "MarianDecoderLayer"),  # stock Marian names none: FSDP wraps these
)
BART = Seq2SeqFamily(
    "bart", "Bart", "BART", bart.BartEncoder, bart.BartDecoder, bart.BartModel, bart.BartForConditionalGeneration
)
MBART = Seq2SeqFamily(
    "mbart",
    "MBart",
    "mBART",
    mbart.MBartEncoder,
    mbart.MBartDecoder,
    mbart.MBartModel,
    mbart.MBartForConditionalGeneration,
)
M2M100 = Seq2SeqFamily(
    "m2m_100",
    "M2M100",
    "M2M100 / NLLB",
    m2m_100.M2M100Encoder,
    m2m_100.M2M100Decoder,
    m2m_100.M2M100Model,
    m2m_100.M2M100ForConditionalGeneration,
    note="NLLB's own target language token, `forced_bos_token_id`, still works as in the stock model.",
)
# T5: one stack class for the encoder and the decoder; the LM owns them (no base model inside)
T5 = Seq2SeqFamily(
    "t5", "T5", "T5", t5.T5Stack, t5.T5Stack, t5.T5Model, t5.T5ForConditionalGeneration, lm_owns_stack=True
)

SEQ2SEQ_FAMILIES = tuple(value for value in tuple(globals().values()) if isinstance(value, Seq2SeqFamily))
