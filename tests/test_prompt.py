"""PVPs, the prompt encoder and the verbalizer-only prompt model."""

import pytest
import torch
from transformers import BertConfig, BertForMaskedLM

from fedml_fes.config import config_from_dict
from fedml_fes.errors import FesError
from fedml_fes.models import load_tokenizer
from fedml_fes.prompt.model import PromptEncoder, PromptMLM
from fedml_fes.prompt.pvp import REGISTRY, get_pvp, match_classes, split_pattern, verbalizer_token_ids


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer("offline:all-MiniLM-L6-v2")


def test_every_builtin_pattern_has_one_mask_and_text_a(tok):
    for name, pvp in REGISTRY.items():
        for i, pattern in enumerate(pvp.patterns):
            kinds = [k for k, _ in split_pattern(pattern)]
            assert kinds.count("mask") == 1 and "text_a" in kinds, (name, i)
            assert set(pvp.verbalizer(i)) and all(isinstance(w, str) for w in pvp.verbalizer(i).values())


def test_literature_counts():
    assert len(REGISTRY["agnews"].patterns) == 6 and len(REGISTRY["yahoo_answers"].patterns) == 6
    assert len(REGISTRY["yelp_review_full"].patterns) == 4 and len(REGISTRY["mnli"].patterns) == 4
    assert REGISTRY["mnli"].verbalizer(2)["entailment"] == "Yes"
    assert REGISTRY["mnli"].verbalizer(0)["entailment"] == "Right"


@pytest.mark.parametrize(
    "pattern, match",
    [
        ("{text_a} is great", "exactly one {mask}"),
        ("{mask} {mask} {text_a}", "exactly one {mask}"),
        ("It was {mask}.", "must contain {text_a}"),
    ],
)
def test_bad_patterns_fail_at_config_time(pattern, match):
    with pytest.raises(FesError, match=match):
        config_from_dict({"prompt_args": {"pattern": pattern, "verbalizer": {"a": "b"}}})


def test_verbalizer_rules(tok):
    classes = ("business", "tech")
    ids = verbalizer_token_ids(tok, {"business": "Business", "tech": "Sci/Tech"}, classes)
    assert ids[1] == tok.convert_tokens_to_ids("sci")  # multi-piece word: its first piece
    with pytest.raises(FesError, match="missing from the model's vocabulary"):
        verbalizer_token_ids(tok, {"business": "\u2603", "tech": "tech"}, classes)
    with pytest.raises(FesError, match="share their first sub-token"):
        verbalizer_token_ids(tok, {"business": "sci", "tech": "Sci/Tech"}, classes)
    with pytest.raises(FesError, match="does not cover classes"):
        verbalizer_token_ids(tok, {"business": "Business"}, classes)


def test_encoder_truncates_text_never_pattern(tok):
    enc = PromptEncoder(tok, "{text_a} ( {mask} ) {text_b}", max_len=24)
    long_a, long_b = "word " * 100, "other " * 100
    ids = enc.ids(long_a, long_b)
    assert len(ids) == 24 and ids.count(tok.mask_token_id) == 1
    text = tok.decode(ids)
    assert "( [MASK] )" in text and text.startswith("[CLS] word") and text.endswith("other [SEP]")
    short = enc.ids("hello", "there")
    assert tok.decode(short) == "[CLS] hello ( [MASK] ) there [SEP]"


def test_encoder_pads_to_longest_of_batch(tok):
    enc = PromptEncoder(tok, "{mask}: {text_a}", max_len=128)
    batch = enc.batch(["a b c", "a"], None)
    assert batch["input_ids"].shape == (2, 2 + 2 + 3)  # [CLS] mask : a b c [SEP]
    assert (batch["input_ids"][torch.arange(2), batch["mask_pos"]] == tok.mask_token_id).all()
    assert batch["attention_mask"][1].sum() == 5


def test_pattern_longer_than_max_len_is_an_error(tok):
    with pytest.raises(FesError, match="more than max_seq_length"):
        PromptEncoder(tok, "this is a long pattern " * 5 + "{text_a} {mask}", max_len=16)


def test_verbalizer_logits_equal_full_head(tok):
    torch.manual_seed(0)
    mlm = BertForMaskedLM(
        BertConfig(
            vocab_size=len(tok), hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64
        )
    ).eval()
    verb = [tok.convert_tokens_to_ids(w) for w in ("good", "bad", "okay")]
    model = PromptMLM(mlm, verb).eval()
    batch = PromptEncoder(tok, "{text_a} It was {mask}.", 32).batch(["the food", "a much longer review here"], None)
    fast = model(**batch)
    full = mlm(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    ref = full[torch.arange(2), batch["mask_pos"]][:, verb]
    assert torch.allclose(fast, ref, atol=1e-5)


@pytest.mark.parametrize(
    "typed, classes",
    [
        ("agnews", "AGNEWS_CLASSES"),
        ("ag_news", "AGNEWS_CLASSES"),
        ("yelp_review_full", "YELP_FULL_CLASSES"),
        ("yelp_full", "YELP_FULL_CLASSES"),
        ("yahoo_answers", "YAHOO_CLASSES"),
        ("yahoo", "YAHOO_CLASSES"),
        ("mnli", "NLI"),
        ("snli", "NLI"),
    ],
)
def test_builtin_pvps_cover_their_readers_classes_under_the_names_users_type(tok, typed, classes):
    from fedml_fes.data import readers
    from fedml_fes.data.nli import NLI_CLASSES

    names = NLI_CLASSES if classes == "NLI" else getattr(readers, classes)
    pvp = get_pvp(typed)
    for i in range(len(pvp.patterns)):
        assert len(set(verbalizer_token_ids(tok, pvp.verbalizer(i), names))) == len(names)


def test_numbered_classes_take_the_verbalizer_in_official_order(tok):
    words = get_pvp("agnews").verbalizer(1)
    # FedNLP h5 files and CSVs without classes.txt number the classes
    assert match_classes(words, ("1", "2", "3", "4")) == {"1": "World", "2": "Sports", "3": "Business", "4": "Tech"}
    assert match_classes(words, ("0", "1", "2", "3"))["3"] == "Tech"
    stars = get_pvp("yelp_review_full").verbalizer(0)
    assert match_classes(stars, tuple("12345"))["5"] == "great"
    with pytest.raises(FesError, match="does not cover classes"):
        match_classes(words, ("1", "2", "3"))  # 3 numbered classes, 4 words: no guess
    with pytest.raises(FesError, match=r"does not cover classes \['Health'\]"):
        match_classes(words, ("World", "Sports", "Business", "Health"))


# ---- long texts are cut to their first max_len words before tokenizing (prompt/words.py) ----


def _byte_level_bpe():
    """A GPT-2-style byte-level BPE (SmolLM2's and RoBERTa's kind), trained here on a few texts."""
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    from fedml_fes.data.readers import read_bbc_news

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(read_bbc_news().texts[:200], vocab_size=600, show_progress=False)
    return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, pad_token="<pad>", mask_token="<mask>")


def _whole_text_only():
    """A BPE whose pre-tokenizer does not split on whitespace: nothing may be cut."""
    from tokenizers import Tokenizer, models, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE(unk_token="<unk>"))
    raw.train_from_iterator(["some words here and there"] * 5, trainers.BpeTrainer(special_tokens=["<unk>"]))
    return PreTrainedTokenizerFast(tokenizer_object=raw, unk_token="<unk>")


ODD_TEXTS = [
    "one two  three\tfour\n\nfive " + " ".join(f"w{i}" for i in range(80)),  # runs of whitespace
    "   leading spaces then " + "word, " * 70 + " and a trailing run   ",
    "Ünïcödé naïve café — déjà vu! " * 20 + "x" * 300,  # accents, a 300-letter word
    "short text",
    "exactly " * 16,
    "It's the 1990s' best: $12.50/hr (e.g. \"quotes\"), isn't it? " * 15,
]


@pytest.mark.parametrize("kind", ["wordpiece", "byte_level"])
def test_cut_texts_give_the_tokens_of_the_whole_text(tok, kind):
    """The prompt encoder's ids (single texts and pairs) and the head classifier's batches are the
    same as from the whole texts, on real articles (about 400 words each) and on odd spacing,
    punctuation and long words."""
    from fedml_fes.data.readers import read_bbc_news
    from fedml_fes.prompt.classifier import encode
    from fedml_fes.prompt.words import words_apart

    tokenizer = tok if kind == "wordpiece" else _byte_level_bpe()
    assert words_apart(tokenizer)
    texts = list(read_bbc_news().texts[:60]) + ODD_TEXTS
    for max_len in (8, 64):
        pattern = "{text_a} Topic: {mask}" if kind == "byte_level" else "[Topic: {mask}] {text_a} {text_b}"
        fast = PromptEncoder(tokenizer, pattern, max_len, causal=kind == "byte_level")
        whole = PromptEncoder(tokenizer, pattern, max_len, causal=kind == "byte_level")
        whole._cut = False
        assert fast._cut
        for i, text in enumerate(texts):
            b = None if kind == "byte_level" else texts[-1 - i]
            assert fast.ids(text, b) == whole.ids(text, b), (max_len, text[:60])
        got = encode(tokenizer, texts, max_len)["input_ids"].tolist()
        want = tokenizer(texts, truncation=True, max_length=max_len, padding="longest")["input_ids"]
        assert got == want  # pairs are never cut: the longer of the two decides their truncation


def test_tokenizers_that_may_not_be_cut_get_the_whole_text(tok):
    from fedml_fes.prompt.words import cut_texts, head_words, words_apart

    assert head_words("a b  c d", 2) == "a b" and head_words("  a b ", 2) == "  a b ", head_words("a b c", 5) == "a b c"
    left = load_tokenizer("offline:all-MiniLM-L6-v2")
    left.truncation_side = "left"  # keeps a text's last tokens: its first words are the wrong ones
    no_split = _whole_text_only()
    long = " ".join(["word"] * 50)
    for tokenizer in (left, no_split):
        assert not words_apart(tokenizer)
        assert cut_texts(tokenizer, [long], 8) == [long]
    assert cut_texts(tok, [long], 8) == [" ".join(["word"] * 8)]
