"""Kokoro's front end: espeak IPA -> Kokoro's alphabet, Japanese readings, language tags,
the 510-token limit, and the trimming of Kokoro's padding silence (the language choice:
test_language_resolve.py, test_kokoro_family.py)."""

from __future__ import annotations

import numpy as np
import pytest

from voxflow.models.base import match_language
from voxflow.models.kokoro.frontend import KokoroFrontend, split_phonemes
from voxflow.models.kokoro.frontend.english import espeak_to_kokoro
from voxflow.models.kokoro.loader import MAX_TOKENS, load_vocab
from voxflow.models.kokoro.synth import trim_silence


@pytest.fixture(scope="module")
def frontend() -> KokoroFrontend:
    return KokoroFrontend(load_vocab())


@pytest.mark.parametrize(
    ("espeak", "kokoro"),
    [
        ("həlˈo^ʊ", "həlˈO"),  # US diphthongs become misaki's capitals
        ("wˈa^ɪ hˈa^ʊ bˈɔ^ɪ sˈe^ɪ", "wˈI hˈW bˈY sˈA"),
        ("d^ʒˈʌmp t^ʃˈɜːtʃ", "ʤˈʌmp ʧˈɜɹtʃ"),  # affricates; "ɜː" is "ɜɹ" in American
        ("bˈʌʔn̩", "bˈʌtᵊn"),  # glottal stop + syllabic n: one schwa, not two
        ("lˈɪɾə^l", "lˈɪTᵊl"),  # American flap is "T"; "ə^l" a reduced schwa
        ("bˈe^ɪkɚɹi", "bˈAkəɹi"),  # "ɚɹ" -> "əɹ", not "əɹɹ"
        ("fˈɑːðɚ", "fˈɑðəɹ"),  # length marks dropped in American
        ("ɐbˈa^ʊt", "əbˈWt"),
    ],
)
def test_espeak_ipa_maps_onto_kokoro_symbols(espeak, kokoro):
    assert espeak_to_kokoro(espeak) == kokoro


def test_british_keeps_length_and_its_own_diphthongs():
    assert espeak_to_kokoro("həlˈə^ʊ hˈe^ə nˈiə", british=True) == "həlˈQ hˈɛː nˈɪə"


def test_english_phonemes_of_a_fixed_sentence(frontend):
    text = "The little red kite circled twice above the harbor before settling on the mast."
    assert frontend.phonemize(text, "en-us") == (
        "ðə lˈɪTᵊl ɹˈɛd kˈIt sˈɜɹkᵊld twˈIs əbˌʌv ðə hˈɑɹbəɹ bᵻfˌɔɹ sˈɛTᵊlɪŋ ɔnðə mˈæst."
    )


def test_the_japanese_dictionary_loads_on_the_first_japanese_text_only():
    fresh = KokoroFrontend(load_vocab())
    assert fresh.phonemize("The mast.", "en-us") == "ðə mˈæst."
    assert not fresh.japanese.loaded  # English traffic never holds OpenJTalk's dictionary
    assert fresh.phonemize("駅", "ja") == "ekʲi"
    assert fresh.japanese.loaded


def test_japanese_phonemes_of_a_fixed_sentence(frontend):
    assert frontend.phonemize("こんにちは。今日の説明を始めます。", "ja") == (
        "koɲɲiʨiβa. kʲoː no seʦɨmeː o haʥimemasɨ."
    )
    assert frontend.phonemize("東京駅から新幹線で大阪へ向かいます。", "ja") == (
        "toːkʲoː ekʲi kaɾa ɕiŋkaɴseɴ de oːsaka e mɯkaimasɨ."
    )


def test_a_clock_time_is_not_read_with_a_colon_pause(frontend):
    assert ":" not in frontend.phonemize("It opens at 6:45 sharp.", "en-us")


def test_every_phoneme_is_in_the_vocabulary(frontend):
    text = "Café, naïve — résumé; “quoted” (paren) ... 3.5% of $20? Yes!"
    vocab = frontend.vocab
    for language in ("en-us", "en-gb"):
        assert set(frontend.phonemize(text, language)) <= set(vocab)
    assert set(frontend.phonemize("「こんにちは」（テスト）と言った。", "ja")) <= set(vocab)


def test_match_language_by_primary_subtag():
    assert match_language("en", ["en-US"]) == "en-US"
    assert match_language("en-us", ["en-US"]) == "en-US"
    assert match_language("ja-JP", ["ja", "en-us"]) == "ja"
    assert match_language("en-GB", ["en-US"]) is None
    assert match_language("e", ["en-US"]) is None


def test_long_phonemes_are_cut_at_sentence_punctuation_first():
    sentence = "ab cd ef. "
    phonemes = (sentence * 80).strip()  # 799 characters
    pieces = split_phonemes(phonemes, 100)
    assert all(len(p) <= 100 and p.endswith(".") for p in pieces)
    assert " ".join(pieces) == phonemes


def test_cuts_fall_back_to_commas_then_spaces_then_hard():
    assert split_phonemes("aaaa, bbbb; cccc", 12) == ["aaaa, bbbb;", "cccc"]
    assert split_phonemes("aaaa, bbbb cccc", 12) == ["aaaa,", "bbbb cccc"]
    assert split_phonemes("aaaa bbbb cccc", 12) == ["aaaa bbbb", "cccc"]
    assert split_phonemes("a" * 25, 10) == ["a" * 10, "a" * 10, "a" * 5]
    assert split_phonemes("  short  ", 10) == ["short"]


def test_a_long_japanese_sentence_stays_within_the_token_limit(frontend):
    # 296 characters without a full stop read as ~700 tokens: cut again at "," in phonemes.
    text = "、".join(["名前はまだ無い"] * 37) + "。"
    segments = frontend.segments(text, "ja", 300, None)
    assert len(segments) >= 2
    for s in segments:
        assert 1 <= s.token_ids.size <= MAX_TOKENS and s.token_ids.dtype == np.int64
        assert s.token_ids.size == len(s.phonemes) and s.language == "ja"


def test_punctuation_only_text_has_no_segments(frontend):
    assert frontend.segments("... !!! 🙂", "en-us", 300, 100) == []


def test_first_segment_is_capped_shorter(frontend):
    text = "One two three four five six seven eight nine ten eleven twelve thirteen, fourteen."
    segments = frontend.segments(text, "en-us", 300, 40)
    assert len(segments) >= 2 and len(segments[0].text) <= 40
    # The capped piece ends inside the sentence (a comma's pause after it), the last does not.
    assert segments[0].cut and not segments[-1].cut
    assert [s.cut for s in frontend.segments(text, "en-us", 300, None)] == [False]


def test_pieces_cut_again_past_the_token_limit_end_inside_the_sentence(frontend):
    text = "、".join(["名前はまだ無い"] * 37) + "。"
    segments = frontend.segments(text, "ja", 300, None)
    assert [s.cut for s in segments] == [True] * (len(segments) - 1) + [False]


def test_a_piece_cut_again_at_a_full_stop_ends_its_sentence(frontend, monkeypatch):
    import voxflow.models.kokoro.frontend as module

    monkeypatch.setattr(module, "split_phonemes", lambda p: ["wˈʌn.", "tˈuː,", "θɹˈiː"])
    assert [s.cut for s in frontend.segments("One two three", "en-us", 300, None)] == [
        False, True, False]


def _speech(rate: int, lead_s: float, speech_s: float, tail_s: float) -> np.ndarray:
    t = np.arange(int(speech_s * rate)) / rate
    tone = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    noise = np.float32(1e-6)  # Kokoro's padding is around -110 dB, not exact zeros
    return np.concatenate([
        np.full(int(lead_s * rate), noise, np.float32), tone,
        np.full(int(tail_s * rate), noise, np.float32),
    ])


def test_trim_keeps_50_ms_before_and_the_pause_after_the_speech():
    rate = 24000
    audio = _speech(rate, 0.3, 1.0, 0.6)
    out = trim_silence(audio, rate, pause_s=0.25)
    assert abs(out.size / rate - (0.05 + 1.0 + 0.25)) < 0.011
    start = int(0.3 * rate) - int(0.05 * rate)
    assert np.array_equal(out, audio[start : start + out.size])  # a cut, nothing rescaled


def test_trim_never_adds_and_leaves_silence_or_tiny_input_alone():
    rate = 24000
    short = _speech(rate, 0.01, 0.05, 0.01)
    assert trim_silence(short, rate, 0.25).size == short.size
    zeros = np.zeros(1000, np.float32)
    assert trim_silence(zeros, rate, 0.25).size == 1000
    assert trim_silence(np.zeros(10, np.float32), rate, 0.25).size == 10
    assert trim_silence(np.full(500, 2.0, np.float32), rate, 0.0).max() == 1.0  # clipped


def test_spoken_words_cover_each_token_and_split_joined_words(frontend):
    [segment] = frontend.segments("Streaming on the 3rd, at 6:40 pm.", "en-us", 300, None,
                                  words_run=4)
    assert segment.phonemes == "stɹˈimɪŋ ɔnðə θˈɜɹd, æt sˈɪks fˈɔɹTi pˌiˈɛm."
    # positions index the graph's tokens: the leading pad is 0, phoneme i is i + 1
    spans = [(w.key, w.text, segment.phonemes[w.id_start - 1 : w.id_end - 1])
             for w in segment.spoken]
    assert spans == [
        ((4, 0), "Streaming", "stɹˈimɪŋ"),
        ((4, 1), "on", "ɔn"),  # espeak joins "on the" into one word: cut at the tokens' break
        ((4, 2), "the", "ðə"),
        ((4, 3), "3rd,", "θˈɜɹd"),
        ((4, 4), "at", "æt"),
        ((4, 5), "6:40", "sˈɪks fˈɔɹTi"),
        ((4, 6), "pm.", "pˌiˈɛm"),
    ]


def test_word_keys_run_on_across_the_segments_of_one_run(frontend):
    segments = frontend.segments("One two. Three four.", "en-us", 300, None, words_run=1)
    assert [[(w.key, w.text) for w in s.spoken] for s in segments] == [
        [((1, 0), "One"), ((1, 1), "two.")],
        [((1, 2), "Three"), ((1, 3), "four.")],
    ]


def test_words_only_when_asked_and_none_in_japanese(frontend):
    assert all(not s.spoken for s in frontend.segments("One two.", "en-us", 300, None))
    japanese = frontend.segments("今日は良い天気です。", "ja", 300, None, words_run=0)
    assert japanese and all(not s.spoken for s in japanese)


def test_client_ipa_is_one_word(frontend):
    [segment] = frontend.ipa_segments("tomato", "təmˈAtO", "en-us", words_run=2)
    [word] = segment.spoken
    assert (word.key, word.text, word.id_start, word.id_end) == ((2, 0), "tomato", 1, 8)
