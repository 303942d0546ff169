"""IFEval example: importer mapping and agreement with the reference verdicts."""

import importlib.util
import json
import sys
import tempfile
import unittest
from unittest import mock
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_DIR = REPO_ROOT / "examples" / "ifeval"
DATA_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "ifeval"

if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

import evals  # noqa: E402
import evals_extras  # noqa: E402


def _load(name):
    spec = importlib.util.spec_from_file_location(name, EXAMPLE_DIR / (name + ".py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return sys.modules[name]


import_ifeval = _load("import_ifeval")
agreement = _load("agreement")


def _check(instruction_id, **kwargs):
    check = import_ifeval.instruction_to_check(instruction_id, kwargs)
    problems = evals.validate_check(check)
    if problems:
        raise AssertionError("%s -> %r is invalid: %s" % (instruction_id, check, problems))
    return check


def _passes(check, output):
    return evals.run_check(check, output).passed


class ImporterMappingTest(unittest.TestCase):

    def test_relations_become_inclusive_bounds(self):
        less = _check("length_constraints:number_words", relation="less than", num_words=5)
        self.assertEqual((less.get("min"), less["max"]), (None, 4))
        self.assertTrue(_passes(less, "one two three four"))
        self.assertFalse(_passes(less, "one two three four five"))
        least = _check("keywords:frequency", keyword="cat", frequency=2, relation="at least")
        self.assertEqual((least["min"], least.get("max")), (2, None))
        self.assertTrue(_passes(least, "Cat and cat"))
        self.assertFalse(_passes(least, "one cat"))

    def test_every_mapping_is_a_generic_check(self):
        kwargs = {
            "detectable_format:number_highlighted_sections": {"num_highlights": 2},
            "length_constraints:number_words": {"relation": "at least", "num_words": 3},
            "combination:repeat_prompt": {"prompt_to_repeat": "Say hi."},
            "keywords:existence": {"keywords": ["a"]},
            "keywords:forbidden_words": {"forbidden_words": ["a"]},
            "keywords:frequency": {"keyword": "a", "frequency": 1, "relation": "at least"},
            "keywords:letter_frequency": {"letter": "a", "let_frequency": 1,
                                          "let_relation": "less than"},
            "change_case:capital_word_frequency": {"capital_frequency": 1,
                                                   "capital_relation": "at least"},
            "language:response_language": {"language": "de"},
            "length_constraints:number_sentences": {"num_sentences": 2, "relation": "less than"},
            "detectable_content:number_placeholders": {"num_placeholders": 1},
            "detectable_content:postscript": {"postscript_marker": "P.S."},
            "detectable_format:number_bullet_lists": {"num_bullets": 2},
            "detectable_format:multiple_sections": {"section_spliter": "Section",
                                                    "num_sections": 2},
            "length_constraints:nth_paragraph_first_word": {"num_paragraphs": 2,
                                                            "nth_paragraph": 2,
                                                            "first_word": "so"},
            "length_constraints:number_paragraphs": {"num_paragraphs": 2},
            "startend:end_checker": {"end_phrase": "Bye."},
        }
        for instruction_id in import_ifeval.MAPPERS:
            with self.subTest(instruction_id):
                check = _check(instruction_id, **kwargs.get(instruction_id, {}))
                self.assertIn(check["type"], evals.CHECKS)

    def test_one_check_per_instruction_in_order(self):
        row = {"key": 7, "prompt": "Write it.",
               "instruction_id_list": ["punctuation:no_comma", "startend:quotation"],
               "kwargs": [{}, {}]}
        case, problems = import_ifeval.prompt_to_case(row)
        self.assertEqual(problems, [])
        self.assertEqual(case["id"], "ifeval-7")
        self.assertEqual(case["tags"], ["ifeval"])
        self.assertEqual([c["type"] for c in case["checks"]], ["not_contains", "regex"])

    def test_unsupported_instruction_is_reported_not_dropped(self):
        row = {"key": 9, "prompt": "p", "instruction_id_list": ["punctuation:no_comma", "x:new"],
               "kwargs": [{}, {}]}
        case, problems = import_ifeval.prompt_to_case(row)
        self.assertIsNone(case)
        self.assertEqual(len(problems), 1)
        self.assertIn("x:new", problems[0])
        with tempfile.TemporaryDirectory() as tmp:
            src = Path(tmp) / "in.jsonl"
            src.write_text(json.dumps(row) + "\n", encoding="utf-8")
            out = Path(tmp) / "cases.jsonl"
            with mock.patch("sys.stderr"):
                status = import_ifeval.main([str(src), "--cases", str(out)])
            self.assertEqual(status, 1)

    def test_nth_paragraph_first_word(self):
        check = _check("length_constraints:nth_paragraph_first_word",
                       num_paragraphs=3, nth_paragraph=2, first_word="jasper")
        self.assertTrue(_passes(check, "One.\n\n\"Jasper, come.\"\n\nThree."))
        self.assertFalse(_passes(check, "One.\n\nJaspers came.\n\nThree."))   # another word
        self.assertFalse(_passes(check, "One.\n\nJasper came."))              # 2 paragraphs
        self.assertFalse(_passes(check, "One.\n\nTwo.\n\nJasper came."))      # wrong paragraph

    def test_text_markers(self):
        title = _check("detectable_format:title")
        self.assertTrue(_passes(title, "<<A Poem>>\nroses"))
        self.assertFalse(_passes(title, "<< >> and <<\n>>"))
        highlights = _check("detectable_format:number_highlighted_sections", num_highlights=2)
        self.assertTrue(_passes(highlights, "*one* and **two**"))
        self.assertFalse(_passes(highlights, "*one* and ** **"))
        quoted = _check("startend:quotation")
        self.assertTrue(_passes(quoted, ' "Hello,\nworld" \n'))
        self.assertFalse(_passes(quoted, '"Hello" world'))
        pps = _check("detectable_content:postscript", postscript_marker="P.P.S")
        self.assertTrue(_passes(pps, "Bye.\n\np.p.s. one more"))
        self.assertFalse(_passes(pps, "Bye.\n\nP.S. one more"))


class StdlibStandInTest(unittest.TestCase):
    """The punkt and langdetect stand-ins the five non-textual types rely on."""

    def test_sentences_like_punkt(self):
        split = evals_extras._split_sentences
        self.assertEqual(len(split("Mr. Smith went to Washington. He stayed 3.5 days.")), 2)
        self.assertEqual(len(split('She asked "why?" and left. Then, e.g. at noon, he came.')), 3)
        self.assertEqual(len(split("A heading\n\nwith no period, then text.")), 1)
        self.assertEqual(len(split("Wait... What now?! Go.")), 3)
        self.assertEqual(split("  "), [])

    def test_languages_of_the_data(self):
        samples = {
            "en": "THE WEATHER IS NICE AND WE ARE GOING TO THE PARK",
            "de": "Das ist nicht gut, und ich weiß es auch.",
            "pt": "Isso não é para você, e o que é isso?",
            "fi": "Tämä on hyvä ja se on myös totta.",
            "vi": "Tôi không biết điều đó là gì.",
            "ru": "Это очень хорошо, и мы это знаем.",
            "bg": "Това е много добре и ние го знаем, че ще дойде.",
            "hi": "भारत एक विशाल देश है।",
            "bn": "আমি বাংলায় গান গাই।",
            "gu": "હું ગુજરાતી બોલું છું.",
            "pa": "ਮੈਂ ਪੰਜਾਬੀ ਬੋਲਦਾ ਹਾਂ।",
            "kn": "ನಾನು ಕನ್ನಡ ಮಾತನಾಡುತ್ತೇನೆ.",
        }
        for code, text in samples.items():
            with self.subTest(code):
                self.assertEqual(evals_extras._detect_language(text), code)
        self.assertEqual(evals_extras._detect_language("12345 !!"), "und")


class AgreementTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        if not (DATA_DIR / "reference_strict.jsonl").is_file():
            raise unittest.SkipTest("IFEval data not found at %s" % DATA_DIR)
        cls.result = agreement.measure(DATA_DIR)

    def test_every_instruction_is_scored(self):
        self.assertEqual(self.result["prompts"], 242)
        self.assertEqual(self.result["all"]["n"], 381)
        self.assertEqual(len(self.result["per_type"]), 25)

    def test_thresholds(self):
        self.assertEqual(agreement.passes_thresholds(self.result), [],
                         agreement.format_report(self.result, verbose=True))

    def test_reference_prompt_level_figure(self):
        self.assertEqual(self.result["prompt_reference"]["passed"], 183)


class SmallModelAgreementTest(unittest.TestCase):
    """SmolLM2-135M's answers: short, messy and often off-format, unlike GPT-4's."""

    def test_every_textual_verdict_agrees(self):
        if not (DATA_DIR / "smollm2" / "reference_strict.jsonl").is_file():
            self.skipTest("IFEval smollm2 data not found at %s" % DATA_DIR)
        result = agreement.measure(DATA_DIR / "smollm2")
        self.assertEqual((result["prompts"], result["textual"]["n"]), (230, 300))
        self.assertEqual(agreement.passes_thresholds(result), [],
                         agreement.format_report(result, verbose=True))
        self.assertEqual(result["prompt_reference"]["passed"], 36)


if __name__ == "__main__":
    unittest.main()
