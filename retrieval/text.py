"""Light, dependency-free text normalisation for the pure core (grader, rewrites, router).

The BM25 index has its own stemming tokenizer (indexes/bm25_index.py); this one only needs to be
stable so that term coverage and query normalisation are comparable across attempts.
"""

from __future__ import annotations

import re
import unicodedata

# Lucene's English stopwords plus question words that carry no topical content.
STOPWORDS = frozenset(
    """a an and are as at be but by for if in into is it no not of on or such that the their
    then there these they this to was will with what which who whom whose when where why how
    does do did can could should would may might i me my we our you your he she his her its
    them us about from has have had been being were than so any all some also""".split()
)

_WORD = re.compile(r"\w+", re.UNICODE)


def normalize(text: str) -> str:
    """NFKC, lower case, single spaces: two queries equal under this are the same query."""
    if not text.isascii():  # NFKC leaves ASCII unchanged; skip the pass on long English passages
        text = unicodedata.normalize("NFKC", text)
    return " ".join(text.lower().split())


def words(text: str) -> list[str]:
    return _WORD.findall(normalize(text))


def content_terms(text: str) -> tuple[str, ...]:
    """Words that carry meaning (no stopwords, no single characters), in order, deduplicated."""
    seen: dict[str, None] = {}
    for w in words(text):
        if len(w) > 1 and w not in STOPWORDS:
            seen.setdefault(w, None)
    return tuple(seen)


def stem(word: str) -> str:
    """Plural folding only (incidents -> incident, policies -> policy): cheap and predictable."""
    for suf in ("ies", "es", "s"):
        if word.endswith(suf) and len(word) > len(suf) + 2 and not word.endswith("ss"):
            return word[: -len(suf)] + ("y" if suf == "ies" else "")
    return word


def term_set(text: str) -> frozenset[str]:
    """Stemmed content terms, for coverage: which of the question's terms a passage contains."""
    return frozenset(stem(w) for w in content_terms(text))


_MONTHS_AND_DAYS = frozenset(
    """january february march april may june july august september october november december
    monday tuesday wednesday thursday friday saturday sunday""".split()
)
_NAME = re.compile(r"[^\W\d_](?:[^\W\d_]|['’&-](?=[^\W\d_]))*\Z")
_OPENERS = "\"'“‘([*-•"


def name_words(text: str) -> list[str]:
    """Words the text writes as names: capitalised (or all capitals) where a sentence does not
    start, letters only, outside quotes, not stopwords, month or day names (those are dates),
    with a possessive 's dropped; in order, deduplicated; then the numbers it names things by
    (`record_numbers`). A text in title case or all capitals (its small words capitalised too)
    names nothing by casing, so it gives only those numbers."""
    unquoted = re.sub(r'"[^"\n]*"|“[^”\n]*”|`[^`\n]*`', " . ", text)
    tokens = unquoted.split()
    out: list[str] = []
    small = small_capitalised = 0
    for i, raw in enumerate(tokens):
        word = re.sub(r"['’]s\Z", "", raw.strip(".,;:!?()[]{}\"'“”‘’*"))
        if not word:
            continue
        starts = i == 0 or tokens[i - 1].endswith((".", "?", "!", ":", ";")) or tokens[i - 1][-1] in _OPENERS \
            or raw[0] in _OPENERS
        if word.lower() in STOPWORDS:
            if not starts and word.lower() != "i":
                small += 1
                small_capitalised += word[0].isupper()
            continue
        if starts or not word[0].isupper() or not _NAME.match(word) or word.lower() in _MONTHS_AND_DAYS \
                or word.lower().startswith(("i'", "i’")):
            continue
        out.append(word)
    if small and small_capitalised * 2 >= small:
        out = []
    return list(dict.fromkeys(out + record_numbers(unquoted)))


# "coach 4406", "room 101": a word, then a number of three digits or more standing alone
_NUMBERED = re.compile(r"(?<![\w.,/-])([^\W\d_]+)\s+(\d{3,})(?![\w.,/%-])")
# English words after which a number is an amount, a limit or a time, never a name
_AMOUNT_BEFORE = frozenset("""over under above below around approximately nearly almost roughly about top first last
next past least most exactly only just within per every after before since until up down more less fewer beyond
exceeding than""".split())


def record_numbers(text: str) -> list[str]:
    """Numbers the text gives a thing as its name: three digits or more right after a word
    that is no stopword, month or day, nor a word that makes it an amount ("bus 2214", "coach
    4406", "room 101"; not "in 2025", "March 2025", "over 500", "top 100", "3.5", "1,200" or
    "20%"). A question about coach 4406 is about
    that coach: a context about another one does not answer it."""
    return [m.group(2) for m in _NUMBERED.finditer(text)
            if m.group(1).lower() not in STOPWORDS | _MONTHS_AND_DAYS | _AMOUNT_BEFORE]
