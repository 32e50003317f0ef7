"""How the SQL translator reads a question's words: the normalised text, general filler that
carries no schema meaning, number words, and when a word names a column."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from retrieval.text import stem

if TYPE_CHECKING:  # schema.py asks this module for the words of a column's name
    from retrieval.sql.schema import ColumnInfo

# General English that carries no schema meaning in a record question.
FILLER = frozenset("""
a an the of in on at to for from with by and or is are was were be been being has have had do does did
what which who whom whose when where how there their its it this that these those any all each every
me my we our us you your i show list give tell find get display return please much many so far
total overall ever recorded record records single one value values table data number numbers
took take taken takes spent needed currently still now amount among first assigned then than went go gone
up down out along across over into onto about around within during after before since until ever
include including included includes put puts shows show shown showed appear appears appeared ended end ends
happen happened happens occur occurred affect affected affects involve involved involving belong belonged
got get gets go goes going come came make made give given gave see saw seen often times time whole overall
both also only just very all any some such other same own per across so far yet again too
as owned owns own handled handle handles
hey hi hello could would can will please provide tell know want like need curious m fine just well kindly
level hit hits
""".split())

WORD = re.compile(r"[a-z0-9][a-z0-9_.$-]*")
NUM = r"(\d+|two|three|four|five|six|seven|eight|nine|ten)"  # a count in digits or words
WORD_NUMBERS = {"one": 1, "a": 1, "an": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
                "eight": 8, "nine": 9, "ten": 10}
# Words that name a column by its unit ("cost_usd" is what "dollars" asks for).
UNIT_SYNONYMS = {"usd": ("dollar", "dollars", "usd", "$"), "hours": ("hour", "hours", "time", "duration"), "count": ("number",)}


def normalise_question(question: str) -> str:
    """Lower case, contractions and possessives undone, punctuation to spaces, one space apart."""
    text = question.lower().replace("\u2019", "'")
    text = re.sub(r"\b(what|who|where|when|how|that|it|there)'s\b", r"\1 is", text)
    text = re.sub(r"'s\b|s'(?=\s)", "", text)
    return " ".join(re.sub(r"[?,;:!()]|\.(?=\s|$)", " ", text).split())


def words_in(text: str) -> set[str]:
    return set(WORD.findall(text))


def number_value(token: str) -> int:
    """A count written in digits or as a word ("three")."""
    return int(WORD_NUMBERS.get(token, token))


def root(word: str) -> str:
    """A crude stem for linking verbs and nouns to column names: resolve ~ resolution."""
    for suf in ("ations", "ation", "ions", "ion", "ing", "ed", "es", "ee", "s", "e"):
        if word.endswith(suf) and len(word) - len(suf) >= 3:
            word = word[: -len(suf)]
            break
    return word[:5]


def matches(word: str, col: ColumnInfo) -> bool:
    """Does a question word name the column?"""
    return word in col.words or stem(word) in col.words or (len(word) >= 4 and root(word) in col.roots)


def singular(word: str) -> str:
    """The singular of an English noun by its ending ("expenditures" -> "expenditure",
    "categories" -> "category", "boxes" -> "box", "statuses" -> "status"); other words as
    they are. The stemmer cannot be used for this: it reads "purchases" as "purchas" and
    "purchase" as "purchase"."""
    w = word.lower()
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 4 and w.endswith(("sses", "shes", "ches", "xes", "zes", "uses")):
        return w[:-2]
    if len(w) > 3 and w.endswith("s") and not w.endswith(("ss", "us", "is")):
        return w[:-1]
    return w


def plural(word: str) -> str:
    """The plural of an English noun by its ending ("category" -> "categories")."""
    w = singular(word)
    if len(w) > 2 and w.endswith("y") and w[-2] not in "aeiou":
        return w[:-1] + "ies"
    if w.endswith(("s", "x", "z", "ch", "sh")):
        return w + "es"
    return w + "s"


def noun_forms(word: str) -> set[str]:
    """A noun as a question may write it: singular, plural, and the stem of each."""
    one, many = singular(word), plural(word)
    return {word.lower(), one, many, stem(one), stem(many)}


def value_forms(value: str) -> set[str]:
    """The ways a categorical value may be written in a question ("in_progress", "in progress")."""
    v = value.lower()
    return {v, v.replace("_", " "), v.replace("-", " "), v.replace("_", " ").replace("-", " ")}


def name_words(name: str) -> frozenset[str]:
    """The words that name a column called `name`: its name's parts, their stems and its
    unit's synonyms (`ColumnInfo.words` keeps them per column)."""
    parts = name.lower().split("_")
    words = set(parts) | {stem(p) for p in parts} | {name.lower()}
    for p in parts:
        words.update(UNIT_SYNONYMS.get(p, ()))
    return frozenset(words - {"id", "at", "on"})


def name_roots(words: frozenset[str]) -> frozenset[str]:
    """The roots of a column's words of four letters or more, as `matches` compares them."""
    return frozenset(root(c) for c in words if len(c) >= 4)
