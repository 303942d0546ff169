"""Checks written the way a user writes their own (`{"type": "python", ...}`), for the tests."""


def mentions_order(output, order):
    """Passes when the order number is in the output, with a reason either way."""
    if order in output:
        return True, f"mentions order {order}"
    return False, f"does not mention order {order}"


def is_short(output, limit=10):
    return len(output) <= limit


def broken(output):
    raise ValueError("the check itself is broken")


def not_a_verdict(output):
    return "yes"


class _Unprintable:
    def __str__(self):
        raise RuntimeError("cannot be printed")

    __repr__ = __str__


def unprintable_verdict(output):
    return _Unprintable()


NOT_CALLABLE = 42


def slow(output, seconds=5):
    import time

    time.sleep(seconds)
    return True


def exits(output):
    import sys

    sys.exit(0)


class Failed(BaseException):
    """As pytest's fail() and skip() raise: not an Exception, so `except Exception` lets it by."""


def fails_like_pytest(output):
    raise Failed("the answer is wrong")


def interrupts(output):
    raise KeyboardInterrupt


def takes_its_values(output, values):
    """Passes on the values the case gave, and changes them, as a careless check might."""
    given = list(values)
    values.pop()
    return given == ["a", "b"], f"got {given}"


def moves_away(output, folder):
    import os

    os.chdir(folder)
    return True


def says_a_lot(output):
    return False, "why " * 1_250_000  # 5 MB
