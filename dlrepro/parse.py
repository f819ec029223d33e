"""Command-line values, checked once for every task: a bad one is a
one-line UserError naming its flag."""
import math

from dlrepro.errors import UserError


def count(value, flag, minimum=1, maximum=None):
    """An integer >= minimum (and <= maximum) from a flag's text (or an
    int)."""
    try:
        if isinstance(value, bool):
            raise ValueError
        number = int(str(value).strip())
    except (TypeError, ValueError):
        raise UserError(f"{flag} must be an integer >= {minimum}, got {value!r}")
    if number < minimum:
        raise UserError(f"{flag} must be an integer >= {minimum}, got {number}")
    if maximum is not None and number > maximum:
        raise UserError(f"{flag} must be at most {maximum}, got {number}")
    return number


def optional_count(value, flag, minimum=1, maximum=None):
    return None if value is None else count(value, flag, minimum, maximum)


def counts(values, flag):
    """Integers >= 1 from a repeatable flag whose values may also be
    comma-separated ("1,2" "4"), in order, without repeats."""
    if isinstance(values, (str, int)):
        values = [values]
    found = []
    for value in values or ():
        for part in str(value).split(","):
            found.append(count(part, flag))
    return tuple(dict.fromkeys(found))


def number(value, flag):
    """A positive, finite float (an infinite threshold would turn off
    whatever it gates)."""
    try:
        result = float(value)
    except (TypeError, ValueError):
        raise UserError(f"{flag} must be a number, got {value!r}")
    if not math.isfinite(result):
        raise UserError(f"{flag} must be a finite number, got {value!r}")
    if not result > 0:
        raise UserError(f"{flag} must be positive, got {value!r}")
    return result
