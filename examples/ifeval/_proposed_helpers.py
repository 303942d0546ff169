"""Stdlib stand-ins for punkt sentence splitting and langdetect.

Staging copy of the bodies of evals._split_sentences and
evals._detect_language (with their data tables), kept here until they are
moved into evals.py.
"""

import re
import unicodedata
from typing import Dict, List

# -- sentences ---------------------------------------------------------------
# A small re-implementation of the decisions the pre-trained English punkt
# model makes: a candidate boundary is ".", "?" or "!" followed by whitespace
# and another token (or by closing punctuation); "?" and "!" always end a
# sentence; a period ends one unless it closes a known abbreviation, an
# initial or a number that the next word does not look like it starts a
# sentence after.  Newlines alone never end a sentence.

_SENT_CANDIDATE = re.compile(
    r"""\S*[.?!](?=(?P<after>[?!)";}\]*:@'({\[]|\s+(?P<next>\S+)))""")
_SENT_NONWORD_TAIL = re.compile(r"""[^?!)";}\]*:@'({\[]*$""")
_SENT_NOT_WORD_START = "(\"`{[:;&#*@)}]-,"
_SENT_REALIGN = re.compile(r"""["')\]}]+?(?:\s+|(?=--)|$)""")
_SENT_NUMBER = re.compile(r"-?[.,]?\d[\d,.\-]*\.?")
_SENT_INITIAL = re.compile(r"[^\W\d]\.")
# Abbreviations (lower case, final period removed) after which punkt does not
# break before a lower-case or unfamiliar word.
_SENT_ABBREVIATIONS = frozenset("""
    mr mrs ms dr prof st jr sr co corp inc ltd no vs etc e.g i.e u.s u.k u.n
    a.m p.m jan feb mar apr jun jul aug sep sept oct nov dec mt ft gen gov sen
    rep lt col capt sgt rev fig approx dept est vol pp al cf""".split())
# Capitalised words that punkt's orthographic evidence treats as sentence
# starters after an abbreviation or an initial.
_SENT_STARTERS = frozenset("""
    a an the this that these those it its he she they we i you there here
    in on at for with as if but and or so also then however after before
    when while what why how where who my our your his her their some many
    most all each one no not yes""".split())


def _split_sentences(text: str) -> List[str]:
    """Split text into sentences, approximating nltk's English punkt model."""
    bounds = [0]
    for match in _SENT_CANDIDATE.finditer(text):
        if _sentence_ends_here(match.group(), match.group("next")):
            nxt = match.start("next") if match.group("next") else match.end()
            bounds.append(nxt)
    end = len(text.rstrip())
    pieces = []
    carry = 0
    for i, start in enumerate(bounds):
        stop = bounds[i + 1] if i + 1 < len(bounds) else end
        start += carry
        carry = 0
        if i + 1 < len(bounds):
            # closing quotes/brackets right after the boundary belong to it
            m = _SENT_REALIGN.match(text, bounds[i + 1], end)
            if m:
                stop = bounds[i + 1] + len(m.group().rstrip())
                carry = m.end() - bounds[i + 1]
        piece = text[start:stop]
        if piece:
            pieces.append(piece.strip())
    return [p for p in pieces if p]


def _sentence_ends_here(word: str, nxt) -> bool:
    if word[-1] in "?!":
        return True
    token = _SENT_NONWORD_TAIL.search(word).group()
    if token in ("", ".") or re.search(r"\.\.+$", token):
        if token in ("", "."):
            return True
        # ellipsis: a boundary only before a capitalised word
        return bool(nxt) and nxt[0].isupper()
    if nxt is None:  # followed by closing punctuation
        return True
    first = nxt[0]
    lower_next = first.islower()
    upper_next = first.isupper()
    if first in _SENT_NOT_WORD_START:
        lower_next = upper_next = False
    next_word = re.sub(r"\W+$", "", nxt).lower()
    typ = token[:-1].lower()
    if typ in _SENT_ABBREVIATIONS or typ.split("-")[-1] in _SENT_ABBREVIATIONS:
        return upper_next and next_word in _SENT_STARTERS
    if _SENT_INITIAL.fullmatch(token):
        if lower_next or nxt[0] in ";:,.!?":
            return False
        if upper_next:
            return next_word in _SENT_STARTERS
        return True
    if _SENT_NUMBER.fullmatch(token):
        return not (lower_next or nxt[0] in ";:,.!?")
    return True


# -- language ----------------------------------------------------------------
# Unicode script decides most languages outright; Latin and Cyrillic text is
# scored against short stopword lists (plus a few telltale letters).

_LANG_SCRIPTS = (  # (first code point, last code point, language or script)
    (0x0900, 0x097F, "hi"), (0x0980, 0x09FF, "bn"), (0x0A00, 0x0A7F, "pa"),
    (0x0A80, 0x0AFF, "gu"), (0x0B00, 0x0B7F, "or"), (0x0B80, 0x0BFF, "ta"),
    (0x0C00, 0x0C7F, "te"), (0x0C80, 0x0CFF, "kn"), (0x0D00, 0x0D7F, "ml"),
    (0x0D80, 0x0DFF, "si"), (0x0E00, 0x0E7F, "th"), (0x0590, 0x05FF, "he"),
    (0x0600, 0x06FF, "ar"), (0x0370, 0x03FF, "el"), (0x10A0, 0x10FF, "ka"),
    (0x0530, 0x058F, "hy"), (0x1100, 0x11FF, "ko"), (0xAC00, 0xD7AF, "ko"),
    (0x3040, 0x30FF, "ja"), (0x4E00, 0x9FFF, "zh"), (0x0400, 0x04FF, "Cyrl"),
)
_LANG_STOPWORDS = {
    "en": "the and of to in is that it for you with as on are this be was have not",
    "de": "der die und das ist nicht ich sie es zu den mit ein eine auf für von sich auch",
    "fr": "le la les et des est une un du pas que en pour dans qui sur au avec",
    "es": "el la de que y los las en un una por con para es del se no como",
    "pt": "o a de que e os as em um uma do da não para com é por se dos das",
    "it": "il la di che e un una per non con del della sono è gli le si anche",
    "nl": "de het een en van is dat niet ik op te zijn met voor er maar",
    "fi": "ja on ei se että hän oli ovat mutta kuin tai myös tämä niin mitä voi",
    "sv": "och att det som är en på för med inte av jag till har den",
    "pl": "i w nie na że się z do to jest jak co ale po tak dla",
    "vi": "và của là có không được cho những các một trong người với này",
    "ru": "и в не на что с по это как для он из а то но мы вы они так",
    "bg": "и на за да се е са от не с че в по ще това как като той тя",
    "uk": "і в не на що з це як для він та але ми ви вони також",
}
_LANG_WORDS = {code: frozenset(words.split()) for code, words in _LANG_STOPWORDS.items()}
_LANG_LETTERS = {  # letters that point at one language within its script
    "vi": "ăâđêôơưạảấầẩẫậắằẳẵặẹẻẽếềểễệỉịọỏốồổỗộớờởỡợụủứừửữựỳỵỷỹ",
    "de": "äöüß", "fi": "äö", "pt": "ãõç", "es": "ñ", "pl": "ąęłńśźż",
    "ru": "ыэё", "uk": "іїєґ", "bg": "ъ",
}


def _detect_language(text: str) -> str:
    """Best-guess ISO 639-1 code of text (stand-in for langdetect)."""
    counts: Dict[str, int] = {}
    latin = 0
    for ch in text:
        if not ch.isalpha():
            continue
        cp = ord(ch)
        if cp < 0x0250:
            latin += 1
            continue
        if 0x1E00 <= cp <= 0x1EFF:  # Latin extended additional (Vietnamese)
            latin += 1
            continue
        for lo, hi, name in _LANG_SCRIPTS:
            if lo <= cp <= hi:
                counts[name] = counts.get(name, 0) + 1
                break
    counts["Latn"] = latin
    script = max(counts, key=counts.get)
    if counts[script] == 0:
        return "en"
    if script == "zh" and counts.get("ja"):
        script = "ja"
    if script not in ("Latn", "Cyrl"):
        return script
    candidates = ("ru", "bg", "uk") if script == "Cyrl" else (
        "en", "de", "fr", "es", "pt", "it", "nl", "fi", "sv", "pl", "vi")
    lowered = text.casefold()
    words = re.findall(r"[^\W\d_]+", lowered)
    scores = {code: 0.0 for code in candidates}
    for word in words:
        for code in candidates:
            if word in _LANG_WORDS[code]:
                scores[code] += 1
    letters = max(1, sum(1 for ch in lowered if ch.isalpha()))
    for code in candidates:
        hint = _LANG_LETTERS.get(code)
        if hint:
            n = sum(lowered.count(ch) for ch in hint)
            scores[code] += 20.0 * n / letters * max(1, len(words)) / 4
    best = max(candidates, key=lambda code: scores[code])
    if scores[best] == 0:
        return "ru" if script == "Cyrl" else "en"
    return best
