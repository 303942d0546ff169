"""The language detector behind the `language` check: the codes it can return, and its
accuracy per language on text nobody here wrote (examples/language/accuracy.py).

The accuracy tests need test-only packages (pinned in .ci/run) and are skipped without them:
    pip install django==5.2.19 faker==40.54.0 babel==2.18.0
"""

import importlib.util
import json
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

import evals
import evals_extras

REPO_ROOT = Path(__file__).resolve().parents[1]


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return sys.modules[name]


accuracy = _load("examples/language/accuracy.py", "language_accuracy")
import_ifeval = _load("examples/ifeval/import_ifeval.py", "import_ifeval")

# Measured with the pinned packages (40 samples per language, seed 1): every language at 97.5%
# or more on translations, 99.9% overall (seeds 1-10: no language under 97.5%); on Faker's lorem
# word lists (no grammar, few stop words) 97.1% overall, Italian lowest at 72.5%.
FLOOR = 0.90
OVERALL_FLOOR = {"translations": 0.99, "lorem": 0.95}


class DetectableTest(unittest.TestCase):

    def test_every_ifeval_language_and_the_others(self):
        self.assertEqual(list(evals_extras._DETECTABLE), sorted(evals_extras._DETECTABLE))
        self.assertEqual(set(evals_extras._DETECTABLE), set(accuracy.LANGUAGES))

    def test_check_accepts_every_detectable_code(self):
        for code in evals_extras._DETECTABLE:
            with self.subTest(code):
                self.assertEqual(evals.validate_check({"type": "language", "code": code}), [])

    def test_ifeval_prompts_in_shared_scripts_import(self):
        rows = [{"key": n, "prompt": "Answer in %s." % code,
                 "instruction_id_list": ["language:response_language"],
                 "kwargs": [{"language": code}]}
                for n, code in enumerate(("mr", "fa", "ne", "sw", "ur"))]
        with tempfile.TemporaryDirectory() as tmp:
            src, out = Path(tmp) / "input_data.jsonl", Path(tmp) / "cases.jsonl"
            src.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
            with mock.patch("sys.stderr"):
                self.assertEqual(import_ifeval.main([str(src), "--cases", str(out)]), 0)
            cases = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        self.assertEqual(len(cases), 5)
        for case in cases:
            with self.subTest(case["id"]):
                self.assertEqual(evals.validate_check(case["checks"][0]), [])

    def test_ifeval_language_evals_cannot_detect_is_reported(self):
        row = {"key": 5, "prompt": "Answer in Tagalog.",
               "instruction_id_list": ["language:response_language"],
               "kwargs": [{"language": "tl"}]}
        case, problems = import_ifeval.prompt_to_case(row)
        self.assertIsNone(case)
        self.assertEqual(len(problems), 1)
        self.assertIn("must be an ISO 639-1 code", problems[0])

    def test_a_few_english_words_in_a_script_with_vowel_signs(self):
        # Mostly Devanagari, Bengali or Tamil, as langdetect (IFEval's reference) also says: the
        # vowel signs are written text of that script, not left out of its count.
        samples = {
            "hi": "हमने मास्को में सम्मेलन में machine learning और deep learning पर चर्चा की, और "
                  "तय किया कि project के लिए और data चाहिए।",
            "bn": "আমরা সম্মেলনে machine learning এবং deep learning নিয়ে আলোচনা করেছি এবং "
                  "project এর জন্য আরও data দরকার।",
            "ta": "நாங்கள் மாநாட்டில் machine learning மற்றும் deep learning பற்றி பேசினோம், "
                  "project க்கு மேலும் data தேவை.",
            "ru": "Мы обсуждали machine learning и deep learning на конференции в Москве и "
                  "решили, что для project нужно больше data.",
        }
        for code, text in samples.items():
            with self.subTest(code):
                self.assertEqual(evals_extras._detect_language(text), code)
                self.assertTrue(evals.run_check({"type": "language", "code": code}, text).passed)
        # Mostly English with a few words of another script stays English.
        self.assertEqual(evals_extras._detect_language(
            "The word for water in Hindi is पानी and in Tamil it is தண்ணீர், easy to learn."),
            "en")

    def test_accuracy_script_finds_the_detector_beside_evals_py(self):
        # It lives in evals_extras.py since 0.2.0; the script looked for it in evals.py only.
        for name in ("evals.py", "evals_extras.py"):
            with self.subTest(name):
                detect = accuracy.load_detector(REPO_ROOT / name)
                self.assertEqual(detect("Это очень хорошо, и мы это знаем."), "ru")

    def test_no_evidence_in_a_shared_script_gives_the_next_script(self):
        detect = evals_extras._detect_language
        self.assertEqual(detect("“ ” は無効な形式の値です。 YYYY-MM-DD HH:MM[:ss[.uuuuuu]]"), "ja")
        self.assertEqual(detect("如果您使用的是 标签或包含“Referrer-Policy: no-referrer”的HTTP"), "zh")
        self.assertEqual(detect("etchings"), "und")
        self.assertEqual(detect(""), "und")


@unittest.skipUnless(not accuracy.packages_missing("translations")
                     and not accuracy.packages_missing("lorem"),
                     "test-only packages not installed: pip install django==5.2.19 "
                     "faker==40.54.0 babel==2.18.0 (see .ci/run)")
class AccuracyTest(unittest.TestCase):

    def check_source(self, source):
        result = accuracy.measure(evals_extras._detect_language, source, count=40, seed=1)
        correct = sum(c for c, _, _, _ in result.values())
        total = sum(t for _, t, _, _ in result.values())
        self.assertGreaterEqual(correct / total, OVERALL_FLOOR[source])
        return result

    def test_each_language_on_translations(self):
        result = self.check_source("translations")
        self.assertEqual(set(result), set(accuracy.LANGUAGES))
        for language, (correct, total, wrong, misses) in result.items():
            with self.subTest(language):
                self.assertGreaterEqual(correct / total, FLOOR,
                                        "%s: wrong answers %s, e.g. %r" % (
                                            language, dict(wrong), misses[:1]))

    def test_lorem_word_lists(self):
        self.check_source("lorem")


if __name__ == "__main__":
    unittest.main()
