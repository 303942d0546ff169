#!/usr/bin/env python3
r"""Accuracy of evals' language detector, per language, on text nobody here wrote.

Usage:
    python examples/language/accuracy.py [--source translations|lorem] [--samples 40]
        [--seed 1] [--evals [LABEL=]PATH ...] [--langdetect] [--misses N]

    # before and after a change, with langdetect for comparison:
    git show HEAD:evals_extras.py > /tmp/evals_extras_before.py
    python examples/language/accuracy.py --evals before=/tmp/evals_extras_before.py \
        --evals after=evals_extras.py --langdetect

The text comes from test-only packages (not needed by evals.py itself):

    pip install django==5.2.19 faker==40.54.0 babel==2.18.0 langdetect==1.0.9

- translations (default): the messages Django's translators wrote for Django and its contrib
  apps (django/**/locale/LANG/LC_MESSAGES/django.mo); English is the messages' source text.
  Gujarati, which Django does not ship, comes from CLDR's names of territories, languages
  and scripts in Gujarati (Babel's locale data).
- lorem: Faker's per-locale lorem word lists, for the locales that have one (words drawn at
  random: real words without grammar, so few stop words).

A sample is random messages (seeded) of at least 3 words each, with placeholders and markup
removed, joined until it holds 15-30 words (Japanese, Chinese and Thai, written without
spaces: 40-80 characters). --evals measures one or more copies of evals.py side by side;
--langdetect adds langdetect's accuracy on the same samples for comparison.

Standard library only, apart from the packages above.
"""

import argparse
import functools
import gettext
import importlib.util
import random
import re
import sys
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

# IFEval's LANGUAGE_CODES (instruction_following_eval/instructions_util.py), then the other
# languages evals detects.
IFEVAL_LANGUAGES = ("en es pt ar hi fr ru de ja it bn uk th ur ta te bg ko pl he fa vi ne sw "
                    "kn mr gu pa ml fi").split()
OTHER_LANGUAGES = "nl sv el zh".split()
LANGUAGES = IFEVAL_LANGUAGES + OTHER_LANGUAGES
UNSPACED = {"ja", "zh", "th"}
DJANGO_LOCALES = {"zh": ("zh_Hans", "zh_Hant"), "pt": ("pt", "pt_BR")}
FAKER_LOCALES = {
    "ar": "ar_AA", "bn": "bn_BD", "de": "de_DE", "el": "el_GR", "en": "en_US", "es": "es_ES",
    "fa": "fa_IR", "fr": "fr_FR", "he": "he_IL", "it": "it_IT", "ja": "ja_JP", "nl": "nl_NL",
    "pl": "pl_PL", "ru": "ru_RU", "th": "th_TH", "uk": "uk_UA", "vi": "vi_VN", "zh": "zh_CN",
}
_MARKUP = re.compile(r"%\([^)]*\)[-+ #0-9.]*[a-zA-Z]|%[-+ #0-9.]*[sdifr]|\{[^{}]*\}|<[^<>]*>"
                     r"|&\w+;")


def packages_missing(source="translations"):
    """Names of the test-only packages `source` needs that are not installed."""
    needed = ("django", "babel") if source == "translations" else ("faker",)
    return [name for name in needed if importlib.util.find_spec(name) is None]


def _clean(message):
    return " ".join(_MARKUP.sub(" ", message).split())


def _long_enough(message, language):
    if language in UNSPACED:
        return sum(char.isalpha() for char in message) >= 6
    return len(message.split()) >= 3


@functools.lru_cache(maxsize=None)
def _django_catalogs():
    """{locale: [(source text, translation), ...]} from every django.mo Django ships."""
    import django
    catalogs = {}
    for path in sorted(Path(django.__file__).resolve().parent.glob("**/django.mo")):
        with open(path, "rb") as handle:
            catalog = gettext.GNUTranslations(handle)._catalog
        pairs = catalogs.setdefault(path.parent.parent.name, [])
        for key, text in catalog.items():
            original = (key if isinstance(key, str) else key[0]).split("\x04")[-1]
            if original and text and text != original:
                pairs.append((original, text))
    return catalogs


def _django_messages(language):
    if language == "en":  # the source text of the French translation
        return {original for original, _ in _django_catalogs()["fr"]}
    locales = DJANGO_LOCALES.get(language, (language,))
    return {text for locale in locales for _, text in _django_catalogs().get(locale, ())}


def _cldr_messages(language):
    from babel import Locale
    locale = Locale.parse(language)
    names = list(locale.territories.values()) + list(locale.languages.values())
    names += list(locale.scripts.values())
    # Names are short: three at a time make one "message".
    return {" ".join(names[i:i + 3]) for i in range(0, len(names) - 2, 3)}


def messages(language, source="translations"):
    """The sorted, cleaned messages of `language` (ISO 639-1) that samples are drawn from."""
    if source == "lorem":
        from faker import Faker
        words = Faker(FAKER_LOCALES[language]).get_words_list()
        return sorted(set(words))
    raw = _cldr_messages(language) if language == "gu" else _django_messages(language)
    return sorted({c for c in map(_clean, raw) if _long_enough(c, language)})


def samples(language, source="translations", count=40, seed=1):
    """`count` texts of `language`, reproducible for a given seed."""
    pool = messages(language, source)
    rng = random.Random("%s-%s-%d" % (source, language, seed))
    unspaced = language in UNSPACED
    out = []
    for _ in range(count):
        target = rng.randint(40, 80) if unspaced else rng.randint(15, 30)
        joiner = "" if unspaced and source == "lorem" else " "
        parts, size = [], 0
        for message in rng.sample(pool, len(pool)):
            parts.append(message)
            size += len(message) if unspaced else len(message.split())
            if size >= target:
                break
        text = joiner.join(parts)
        out.append(text[:target] if unspaced else " ".join(text.split()[:target]))
    return out


def languages(source="translations"):
    return list(LANGUAGES) if source == "translations" else \
        [lang for lang in LANGUAGES if lang in FAKER_LOCALES]


def measure(detect, source="translations", count=40, seed=1):
    """{language: (correct, total, Counter of wrong answers, [missed texts])}."""
    result = {}
    for language in languages(source):
        texts = samples(language, source, count, seed)
        answers = [detect(text) for text in texts]
        wrong = Counter(a for a in answers if a != language)
        misses = [t for t, a in zip(texts, answers) if a != language]
        result[language] = (len(texts) - sum(wrong.values()), len(texts), wrong, misses)
    return result


def load_detector(path):
    """_detect_language of the copy at `path`: an evals_extras.py, or an evals.py that has it
    (up to 0.1.x) or else the evals_extras.py beside it (where it lives since 0.2.0)."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))  # evals_extras.py imports the core as `evals`
    for candidate in (path, path.with_name("evals_extras.py")):
        spec = importlib.util.spec_from_file_location("evals_measured", candidate)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if hasattr(module, "_detect_language"):
            return module._detect_language
    raise SystemExit("%s: no _detect_language there or in evals_extras.py beside it" % path)


def _langdetect():
    from langdetect import DetectorFactory, detect
    from langdetect.lang_detect_exception import LangDetectException
    DetectorFactory.seed = 0

    def run(text):
        try:
            code = detect(text)
        except LangDetectException:
            return "und"
        return code.split("-")[0]
    return run


def _labelled(value):
    label, sep, path = value.rpartition("=")
    return (label if sep else Path(path).name, Path(path))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", choices=("translations", "lorem"), default="translations")
    parser.add_argument("--samples", type=int, default=40, help="samples per language")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--evals", type=_labelled, action="append", metavar="[LABEL=]PATH",
                        help="an evals.py or evals_extras.py to measure, repeatable (default: "
                             "this repository's); the wrong answers shown are the last one's")
    parser.add_argument("--langdetect", action="store_true",
                        help="also measure langdetect on the same samples")
    parser.add_argument("--misses", type=int, default=0, metavar="N",
                        help="print up to N missed samples per language")
    args = parser.parse_args(argv)
    missing = packages_missing(args.source) + \
        (["langdetect"] if args.langdetect and not importlib.util.find_spec("langdetect") else [])
    if missing:
        parser.error("install the test-only packages first: pip install " + " ".join(missing))
    copies = args.evals or [("evals", REPO_ROOT / "evals.py")]
    columns = [(label, measure(load_detector(path), args.source, args.samples,
                               args.seed)) for label, path in copies]
    if args.langdetect:
        columns.append(("langdetect", measure(_langdetect(), args.source, args.samples,
                                              args.seed)))
    last = columns[len(copies) - 1][1]
    print("| language | samples | %s | wrong answers (%s) |"
          % (" | ".join(label for label, _ in columns), copies[-1][0]))
    print("| --- | ---: | %s | --- |" % " | ".join("---:" for _ in columns))
    for language, (_, total, wrong, misses) in last.items():
        flag = "" if language in IFEVAL_LANGUAGES else " (not in IFEval)"
        rates = " | ".join("%.1f%%" % (100.0 * result[language][0] / total)
                           for _, result in columns)
        wrongs = ", ".join("%s x%d" % pair for pair in wrong.most_common(3))
        print("| %s%s | %d | %s | %s |" % (language, flag, total, rates, wrongs))
        for text in misses[:args.misses]:
            print("    missed: %.150s" % text)
    total = sum(entry[1] for entry in last.values())
    rates = " | ".join("**%.1f%%**" % (100.0 * sum(e[0] for e in result.values()) / total)
                       for _, result in columns)
    print("| **all** | %d | %s | |" % (total, rates))
    return 0


if __name__ == "__main__":
    sys.exit(main())
