"""One-line versions of jsonargparse's multi-line error messages (pure text; no imports).

jsonargparse reports a bad value as a block such as::

    Parser key "trainer.max_epochs":
      Does not validate against any of the Union subtypes
      Subtypes: [<class 'int'>, <class 'NoneType'>]
      Errors:
        - Expected a <class 'int'>
        - Expected a <class 'NoneType'>
      Given value type: <class 'str'>
      Given value: abc

:func:`condense` turns it into ``--trainer.max_epochs: expected int, got 'abc'``.
"""

from __future__ import annotations

import re

__all__ = ["condense"]

_KEY = re.compile(r'Parser key "([^"]+)":')
_GIVEN = re.compile(r"^\s*Given value: (.*)$", re.M)
_NESTED = re.compile(r"^NestedArg\(key='[^']*', val='(.*)'\)$")
_EXPECTED = re.compile(r"Expected a <class '([\w.]+)'>")
_NOT_OF_TYPE = re.compile(r"^Not of type \w+: ")  # a registry-checked name type's own message
_CLASS_PROBLEM = re.compile(r"Problem with given class_path '([^']+)':\s*\n\s*(.+)")
_NOISE = (
    "Does not validate against any of the",
    "Subtypes:",
    "Errors:",
    "Given value type:",
    "Given value:",
)


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def condense(message: str) -> str:
    """One line naming the option and the problem (the first informative line as a fallback).

    Example:
        >>> condense('Parser key "data.count":\\n  Errors:\\n    - Expected a <class \\'int\\'>'
        ...          '\\n    - Expected a <class \\'NoneType\\'>\\n  Given value: 1.5')
        "--data.count: expected int, got '1.5'"
    """
    message = message.strip()
    key_match = _KEY.search(message)
    key = f"--{key_match.group(1)}" if key_match else None
    body = message[key_match.end():] if key_match else message
    # ``NestedArg(key='hidden', val='x')`` is how jsonargparse shows a class argument's value
    given = [_NESTED.sub(r"\1", value) for value in _GIVEN.findall(body)]
    problem = _CLASS_PROBLEM.search(body)
    nested = body[problem.start(2):] if problem else ""
    if problem and key and _KEY.match(nested.strip()):
        # a bad value of one of the class's own arguments:
        # ``--model.init_args.hidden: expected int, got 'x' (class 'my_pkg.MyModel')``
        inner = condense(nested)
        name, _, detail = inner.partition(": ")
        return _short(f"{key}.init_args.{name[2:]}: {detail} (class {problem.group(1)!r})")
    if problem:
        detail = f"class {problem.group(1)!r}: {problem.group(2).strip()}"
    else:
        expected = [t for t in _EXPECTED.findall(body) if t != "NoneType"]
        if expected:
            detail = f"expected {' or '.join(dict.fromkeys(expected))}"
            if given:
                detail += f", got {given[-1].strip()!r}"
        else:
            lines = [
                line.strip(" -\t")
                for line in body.splitlines()
                if line.strip(" -\t") and not line.strip(" -\t").startswith(_NOISE)
            ]
            detail = lines[0] if lines else (f"invalid value {given[-1]!r}" if given else message)
            detail = _NOT_OF_TYPE.sub("", detail)
    return _short(f"{key}: {detail}" if key else detail)
