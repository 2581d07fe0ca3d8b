"""Pattern-verbalizer pairs (PET's idea): turn classification into filling one mask.

A pattern is a string with `{text_a}`, optionally `{text_b}`, and exactly one `{mask}`;
a verbalizer maps each class to one word. A causal LM reads the word as the next token, so
its patterns end with `{mask}`: every built-in pair has such causal forms too
(`PVP.causal_patterns`), chosen before any run, never by test accuracy. The registry holds the patterns used in the
literature (PET, Schick & Schütze 2021) for AG News, Yahoo, Yelp-F and MNLI, plus ours for
BBC News, TREC-6, SNLI and movie-review sentiment; users add their own in YAML (`prompt_args`).

Multi-piece words: a verbalizer word is scored by its FIRST sub-token (e.g. RoBERTa's
" Entertainment" may split; its first piece stands for it). Two classes whose words share a
first piece are ambiguous and rejected; a word that maps to the unknown token is missing
from the vocabulary and rejected. Both at config time, with one error line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from ..errors import FesError

_FIELD = re.compile(r"\{(text_a|text_b|mask)\}")


@dataclass(frozen=True)
class PVP:
    patterns: tuple[str, ...]
    verbalizers: tuple[dict[str, str], ...]  # one or more label->word maps
    # pattern id -> verbalizer index (PET's MNLI patterns 2, 3 reuse 0, 1 with Yes/No words)
    verbalizer_of_pattern: tuple[int, ...] = ()
    # causal-LM forms (slot last) and their verbalizer, when it differs from the first one
    causal_patterns: tuple[str, ...] = ()
    causal_verbalizer: dict[str, str] | None = None

    def pattern(self, pattern_id: int, causal: bool = False) -> str:
        patterns = self.causal_patterns if causal else self.patterns
        if not 0 <= pattern_id < len(patterns):
            kind = "causal-LM " if causal else ""
            raise FesError(
                f"prompt_args.pattern_id {pattern_id} does not exist for this {kind}pattern set "
                f"(0..{len(patterns) - 1})"
            )
        return patterns[pattern_id]

    def verbalizer(self, pattern_id: int, causal: bool = False) -> dict[str, str]:
        if causal:
            return self.causal_verbalizer or self.verbalizers[0]
        idx = self.verbalizer_of_pattern[pattern_id] if self.verbalizer_of_pattern else 0
        return self.verbalizers[idx]


_NEWS6 = (
    "{mask}: {text_a} {text_b}",
    "{mask} News: {text_a} {text_b}",
    "{text_a} ( {mask} ) {text_b}",
    "{text_a} {text_b} ( {mask} )",
    "[ Category: {mask} ] {text_a} {text_b}",
    "{mask} - {text_a} {text_b}",
)
_NLI4 = (
    '"{text_a}" ? {mask}, "{text_b}"',
    "{text_a} ? {mask}, {text_b}",
    '"{text_a}" ? {mask}, "{text_b}"',
    "{text_a} ? {mask}, {text_b}",
)
# causal forms: the text, then a cue that the class word comes next
_NEWS_CAUSAL = (
    "{text_a} {text_b}\nTopic: {mask}",
    "{text_a} {text_b}\nThis news article is about {mask}",
    "News: {text_a} {text_b}\nCategory: {mask}",
)
_NLI_CAUSAL = (
    '"{text_a}"\nQuestion: does this imply "{text_b}"? Yes, no or maybe? Answer: {mask}',
    "{text_a}\nQuestion: {text_b} Yes, no or maybe? Answer: {mask}",
)
_NLI_WORDS = (
    {"contradiction": "Wrong", "entailment": "Right", "neutral": "Maybe"},
    {"contradiction": "No", "entailment": "Yes", "neutral": "Maybe"},
)

REGISTRY: dict[str, PVP] = {
    "agnews": PVP(
        _NEWS6,
        ({"World": "World", "Sports": "Sports", "Business": "Business", "Sci/Tech": "Tech"},),
        causal_patterns=_NEWS_CAUSAL,
        causal_verbalizer={"World": "World", "Sports": "Sports", "Business": "Business", "Sci/Tech": "Technology"},
    ),
    "yahoo_answers": PVP(
        tuple(p.replace("News:", "Question:") for p in _NEWS6),
        (
            {
                "Society & Culture": "Society",
                "Science & Mathematics": "Science",
                "Health": "Health",
                "Education & Reference": "Education",
                "Computers & Internet": "Computer",
                "Sports": "Sports",
                "Business & Finance": "Business",
                "Entertainment & Music": "Entertainment",
                "Family & Relationships": "Relationship",
                "Politics & Government": "Politics",
            },
        ),
        causal_patterns=("{text_a} {text_b}\nTopic: {mask}", "Question: {text_a} {text_b}\nCategory: {mask}"),
    ),
    "yelp_review_full": PVP(
        (
            "It was {mask}. {text_a}",
            "{text_a} All in all, it was {mask}.",
            "Just {mask}! {text_a}",
            "{text_a} In summary, the restaurant is {mask}.",
        ),
        ({"1 star": "terrible", "2 stars": "bad", "3 stars": "okay", "4 stars": "good", "5 stars": "great"},),
        causal_patterns=("{text_a}\nAll in all, it was {mask}", "{text_a}\nIn summary, the restaurant is {mask}"),
    ),
    "mnli": PVP(_NLI4, _NLI_WORDS, (0, 0, 1, 1), _NLI_CAUSAL, _NLI_WORDS[1]),
    "snli": PVP(_NLI4, _NLI_WORDS, (0, 0, 1, 1), _NLI_CAUSAL, _NLI_WORDS[1]),
    "bbc_news": PVP(
        _NEWS6,
        (
            {
                "business": "Business",
                "entertainment": "Entertainment",
                "politics": "Politics",
                "sports": "Sports",
                "tech": "Tech",
            },
        ),
        causal_patterns=_NEWS_CAUSAL,
        causal_verbalizer={
            "business": "Business",
            "entertainment": "Entertainment",
            "politics": "Politics",
            "sports": "Sports",
            "tech": "Technology",
        },
    ),
    "trec": PVP(
        ("{mask} question: {text_a}", "{text_a} Answer type: {mask}.", "[ {mask} ] {text_a}", "{text_a} ( {mask} )"),
        (
            {
                "ABBR": "Abbreviation",
                "DESC": "Description",
                "ENTY": "Entity",
                "HUM": "Person",
                "LOC": "Location",
                "NUM": "Number",
            },
        ),
        causal_patterns=("Question: {text_a}\nThe answer is a {mask}", "{text_a}\nAnswer type: {mask}"),
    ),
    # PET's Yelp patterns with a movie in place of the restaurant, and its polarity words
    "movie_sentiment": PVP(
        (
            "It was {mask}. {text_a}",
            "{text_a} All in all, it was {mask}.",
            "Just {mask}! {text_a}",
            "{text_a} In summary, the movie is {mask}.",
        ),
        ({"negative": "bad", "positive": "good"},),
        causal_patterns=("{text_a}\nAll in all, the movie was {mask}", "Review: {text_a}\nSentiment: {mask}"),
    ),
}


# the names users type for the same datasets (HF hub ids, PET's task names)
ALIASES = {
    "ag_news": "agnews",
    "yahoo": "yahoo_answers",
    "yelp_full": "yelp_review_full",
    "yelp-full": "yelp_review_full",
    "bbc": "bbc_news",
    "trec6": "trec",
}


def get_pvp(name: str) -> PVP:
    try:
        return REGISTRY[ALIASES.get(name, name)]
    except KeyError:
        raise FesError(
            f"no built-in pattern-verbalizer pair for '{name}' (known: {', '.join(REGISTRY)}); "
            f"define prompt_args.pattern and prompt_args.verbalizer"
        ) from None


def split_pattern(pattern: str) -> list[tuple[str, str]]:
    """[(kind, value)]: kind 'lit' with its text, or 'text_a' / 'text_b' / 'mask'."""
    if pattern.count("{mask}") != 1:
        raise FesError(f"pattern {pattern!r} must contain exactly one {{mask}}")
    if "{text_a}" not in pattern:
        raise FesError(f"pattern {pattern!r} must contain {{text_a}}")
    parts: list[tuple[str, str]] = []
    pos = 0
    for m in _FIELD.finditer(pattern):
        if m.start() > pos:
            parts.append(("lit", pattern[pos : m.start()]))
        parts.append((m.group(1), ""))
        pos = m.end()
    if pos < len(pattern):
        parts.append(("lit", pattern[pos:]))
    return parts


def match_classes(verbalizer: dict[str, str], classes: tuple[str, ...]) -> dict[str, str]:
    """The verbalizer keyed by these class names. Data that numbers its classes instead of naming
    them (FedNLP h5 files, a CSV without classes.txt: "1".."N" or "0".."N-1") takes the
    verbalizer's words in their order, the official class order."""
    missing = [c for c in classes if c not in verbalizer]
    if not missing:
        return verbalizer
    n = len(classes)
    numbered = [str(i) for i in range(1, n + 1)], [str(i) for i in range(n)]
    if len(verbalizer) == n and sorted(classes, key=lambda c: (len(c), c)) in numbered:
        words = list(verbalizer.values())
        return {c: words[int(c) - (1 if "0" not in classes else 0)] for c in classes}
    raise FesError(f"verbalizer does not cover classes {missing} (it maps {sorted(verbalizer)})")


def verbalizer_token_ids(
    tokenizer: PreTrainedTokenizerBase, verbalizer: dict[str, str], classes: tuple[str, ...]
) -> list[int]:
    """One vocabulary id per class (first sub-token of its word, with a leading space)."""
    verbalizer = match_classes(verbalizer, classes)
    ids: list[int] = []
    for c in classes:
        word = verbalizer[c]
        pieces = tokenizer(" " + word, add_special_tokens=False)["input_ids"]
        if not pieces or pieces[0] == tokenizer.unk_token_id:
            raise FesError(f"verbalizer word {word!r} (class {c!r}) is missing from the model's vocabulary")
        ids.append(pieces[0])
    if len(set(ids)) != len(ids):
        dup = [classes[i] for i, t in enumerate(ids) if ids.count(t) > 1]
        raise FesError(f"verbalizer words of classes {dup} share their first sub-token: pick distinct words")
    return ids
