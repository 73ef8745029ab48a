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
