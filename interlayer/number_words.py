"""A generated multilingual translation task for the attention-bridge demonstration: the numbers 0..999 written out
in English, German, French and Spanish, to be translated from one language into another.

Each language's spelling rules are written out (German `einundzwanzig`, French `soixante et onze` and
`quatre-vingts`, Spanish `veintiuno` and `ciento`), and a character-level vocabulary covers all four (also as a
transformers tokenizer, `CharVocabulary().tokenizer()`). `translation_rows` gives the pairs as the rows
`examples/run_translation.py` reads (`source`, `target`, `tgt_lang`).
"""

LANGUAGES = ("en", "de", "fr", "es")

_EN = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen"
).split()
_EN_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_DE = (
    "null eins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf dreizehn vierzehn fünfzehn sechzehn "
    "siebzehn achtzehn neunzehn"
).split()
_DE_TENS = "_ _ zwanzig dreißig vierzig fünfzig sechzig siebzig achtzig neunzig".split()
_FR = "zéro un deux trois quatre cinq six sept huit neuf dix onze douze treize quatorze quinze seize".split()
_FR_TENS = {20: "vingt", 30: "trente", 40: "quarante", 50: "cinquante", 60: "soixante"}
_ES = (
    "cero uno dos tres cuatro cinco seis siete ocho nueve diez once doce trece catorce quince dieciséis diecisiete "
    "dieciocho diecinueve veinte veintiuno veintidós veintitrés veinticuatro veinticinco veintiséis veintisiete "
    "veintiocho veintinueve"
).split()
_ES_TENS = "_ _ _ treinta cuarenta cincuenta sesenta setenta ochenta noventa".split()
_ES_HUNDREDS = (
    "_ ciento doscientos trescientos cuatrocientos quinientos seiscientos setecientos ochocientos novecientos"
).split()


def _en(n: int) -> str:
    if n < 20:
        return _EN[n]
    if n < 100:
        return _EN_TENS[n // 10] + (f"-{_EN[n % 10]}" if n % 10 else "")
    return f"{_EN[n // 100]} hundred" + (f" {_en(n % 100)}" if n % 100 else "")


def _de(n: int) -> str:
    if n < 20:
        return _DE[n]
    if n < 100:
        unit = n % 10
        return (("ein" if unit == 1 else _DE[unit]) + "und" if unit else "") + _DE_TENS[n // 10]
    hundreds = "ein" if n // 100 == 1 else _DE[n // 100]
    return f"{hundreds}hundert" + (_de(n % 100) if n % 100 else "")


def _fr(n: int) -> str:
    if n < 17:
        return _FR[n]
    if n < 20:
        return f"dix-{_FR[n - 10]}"
    if n < 70:
        unit = n % 10
        return _FR_TENS[n - unit] + ("" if unit == 0 else " et un" if unit == 1 else f"-{_FR[unit]}")
    if n < 80:
        return "soixante et onze" if n == 71 else f"soixante-{_fr(n - 60)}"
    if n == 80:
        return "quatre-vingts"
    if n < 100:
        return f"quatre-vingt-{_fr(n - 80)}"
    hundreds, rest = divmod(n, 100)
    head = "cent" if hundreds == 1 else f"{_FR[hundreds]} cent" + ("" if rest else "s")
    return head + (f" {_fr(rest)}" if rest else "")


def _es(n: int) -> str:
    if n < 30:
        return _ES[n]
    if n < 100:
        return _ES_TENS[n // 10] + (f" y {_ES[n % 10]}" if n % 10 else "")
    if n == 100:
        return "cien"
    return _ES_HUNDREDS[n // 100] + (f" {_es(n % 100)}" if n % 100 else "")


_WRITERS = {"en": _en, "de": _de, "fr": _fr, "es": _es}


def number_words(n: int, language: str) -> str:
    """`n` (0..999) written out in `language` (one of `LANGUAGES`)."""
    if language not in _WRITERS:
        raise ValueError(f"`language` must be one of {list(LANGUAGES)}, got {language!r}.")
    if not 0 <= n <= 999:
        raise ValueError(f"`n` must be in [0, 999], got {n!r}.")
    return _WRITERS[language](n)


class CharVocabulary:
    """Characters of every language's numbers 0..999, plus padding (0) and end of sequence (1)."""

    PAD, EOS = 0, 1

    def __init__(self):
        chars = sorted({c for lang in LANGUAGES for n in range(1000) for c in number_words(n, lang)})
        self.chars = chars
        self.index = {c: i + 2 for i, c in enumerate(chars)}

    def __len__(self) -> int:
        return len(self.chars) + 2

    def encode(self, text: str) -> list[int]:
        return [self.index[c] for c in text] + [self.EOS]

    def decode(self, ids) -> str:
        return "".join(self.chars[i - 2] for i in ids if i >= 2)

    def tokenizer(self):
        """The same vocabulary as a transformers tokenizer (`PreTrainedTokenizerFast`, saved and reloaded with
        `AutoTokenizer`): one token per character, `</s>` appended as Marian's tokenizer does, `<pad>` 0, `</s>` 1,
        and `<unk>` (the last id, `len(self)`) for a character of no number; `decode` joins the characters back."""
        from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
        from transformers import PreTrainedTokenizerFast

        vocab = {"<pad>": self.PAD, "</s>": self.EOS, **self.index, "<unk>": len(self)}
        tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
        tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
        tokenizer.decoder = decoders.Fuse()
        tokenizer.post_processor = processors.TemplateProcessing(
            single="$A </s>", pair="$A $B </s>", special_tokens=[("</s>", self.EOS)]
        )
        special = dict(pad_token="<pad>", eos_token="</s>", unk_token="<unk>")
        return PreTrainedTokenizerFast(tokenizer_object=tokenizer, **special)


def translation_rows(numbers, source: str, targets) -> list[dict]:
    """The translation pairs of `numbers` from `source` into each of `targets`, as rows `{"source", "target",
    "tgt_lang"}` (every number into the first target language, then into the next...)."""
    return [
        {"source": number_words(n, source), "target": number_words(n, target), "tgt_lang": target}
        for target in targets
        for n in numbers
    ]
