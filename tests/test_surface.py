"""The contract between the two files, read from their source: evals_extras.py imports only what
evals.py exports in __all__, and evals.py uses only the five hooks of evals_extras.py."""

import ast
import os
import unittest

import evals

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOOKS = {"OPTIONS", "COMMANDS", "before_run", "around_call", "finish"}


def _tree(name):
    with open(os.path.join(ROOT, name), encoding="utf-8") as handle:
        return ast.parse(handle.read(), name)


class SurfaceTest(unittest.TestCase):
    def test_the_optional_file_imports_only_the_public_surface(self):
        imported = [
            (alias.name, node.lineno)
            for node in ast.walk(_tree("evals_extras.py"))
            if isinstance(node, ast.ImportFrom) and node.module == "evals"
            for alias in node.names
        ]
        self.assertTrue(imported)
        for name, line in imported:
            with self.subTest(name=name, line=line):
                self.assertFalse(name.startswith("_"), "a private name of evals.py")
                self.assertIn(name, evals.__all__)
        plain = [
            node.lineno
            for node in ast.walk(_tree("evals_extras.py"))
            if isinstance(node, ast.Import) and any(a.name == "evals" for a in node.names)
        ]
        self.assertEqual(plain, [], "`import evals` would reach past __all__")

    def test_every_public_name_exists_once(self):
        self.assertEqual(len(evals.__all__), len(set(evals.__all__)))
        for name in evals.__all__:
            self.assertTrue(hasattr(evals, name), name)

    def test_the_core_uses_only_the_hooks_of_the_optional_file(self):
        tree = _tree("evals.py")
        # The names that hold the optional module: the module's own, `plugin` (a parameter),
        # and whatever is assigned the result of _extras(...).
        holders = {"evals_extras", "plugin"}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Assign)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id == "_extras"
            ):
                holders.update(t.id for t in node.targets if isinstance(t, ast.Name))
        used = set()
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute):
                continue
            value = node.value
            if isinstance(value, ast.Name) and value.id in holders:
                used.add(node.attr)
            elif (
                isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
                and value.func.id == "_extras"
            ):
                used.add(node.attr)
        self.assertTrue(used)  # the search finds the hooks the core does call
        self.assertLessEqual(used, HOOKS)


if __name__ == "__main__":
    unittest.main()
