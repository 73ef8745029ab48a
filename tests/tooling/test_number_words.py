"""The generated number-words task: spelling rules of each language, checked on the numbers that exercise them."""

import pytest

from interlayer.number_words import LANGUAGES, CharVocabulary, number_words

CASES = {
    "en": {0: "zero", 15: "fifteen", 21: "twenty-one", 100: "one hundred", 342: "three hundred forty-two"},
    "de": {1: "eins", 21: "einundzwanzig", 30: "dreißig", 101: "einhunderteins", 777: "siebenhundertsiebenundsiebzig"},
    "fr": {
        17: "dix-sept",
        21: "vingt et un",
        71: "soixante et onze",
        77: "soixante-dix-sept",
        80: "quatre-vingts",
        81: "quatre-vingt-un",
        91: "quatre-vingt-onze",
        200: "deux cents",
        201: "deux cent un",
        100: "cent",
    },
    "es": {16: "dieciséis", 21: "veintiuno", 31: "treinta y uno", 100: "cien", 101: "ciento uno", 500: "quinientos"},
}


@pytest.mark.parametrize("language", LANGUAGES)
def test_spelling_rules(language):
    for n, words in CASES[language].items():
        assert number_words(n, language) == words
    assert len({number_words(n, language) for n in range(1000)}) == 1000  # one spelling per number


def test_vocabulary_round_trip_and_errors():
    vocab = CharVocabulary()
    ids = vocab.encode("quatre-vingt-onze")
    assert ids[-1] == vocab.EOS and vocab.decode(ids) == "quatre-vingt-onze"
    with pytest.raises(ValueError, match=r"`language` must be one of \['en', 'de', 'fr', 'es'\], got 'it'"):
        number_words(3, "it")
    with pytest.raises(ValueError, match=r"`n` must be in \[0, 999\], got 1000"):
        number_words(1000, "en")


def test_the_tokenizer_has_the_vocabulary_ids_and_reloads(tmp_path):
    from transformers import AutoTokenizer

    from interlayer.number_words import translation_rows

    vocab = CharVocabulary()
    vocab.tokenizer().save_pretrained(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    texts = [number_words(n, language) for language in LANGUAGES for n in range(1000)]
    encoded = tokenizer(texts)["input_ids"]
    assert encoded == [vocab.encode(text) for text in texts]
    assert tokenizer.batch_decode(encoded, skip_special_tokens=True) == texts
    assert tokenizer("un ?")["input_ids"][-2:] == [len(vocab), vocab.EOS]  # <unk>, then </s>
    assert (tokenizer.pad_token_id, tokenizer.eos_token_id, len(tokenizer)) == (vocab.PAD, vocab.EOS, len(vocab) + 1)
    rows = translation_rows([7, 21], "en", ["de", "fr"])
    assert rows[1] == {"source": "twenty-one", "target": "einundzwanzig", "tgt_lang": "de"}
    assert [row["tgt_lang"] for row in rows] == ["de", "de", "fr", "fr"] and rows[3]["target"] == "vingt et un"
