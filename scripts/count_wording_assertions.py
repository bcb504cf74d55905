#!/usr/bin/env python3
"""Counts the test assertions that pin a message's wording: per file, and their share of all.

An assertion is one `assert!`, `assert_eq!` or `assert_ne!` call under `tests/`, or one call of
the tests' helpers that check a message for phrases (`assert_mentions` and its kin), its body
read over as many lines as it takes, without its own failure message. It pins wording when what
it checks holds a string literal with two words in a row (a phrase, not a file name, an option or
a number): it would fail if a message were reworded while the behaviour stayed the same.
A check whose phrases come from a table counts once, where it asserts; one whose phrase is bound to
a variable first is not seen (raw strings are read as plain ones), so the share is a lower bound.

    python3 scripts/count_wording_assertions.py [tests]
"""
import pathlib
import re
import sys

CALL = re.compile(r"\b(assert(?:_eq|_ne)?!|assert_mentions|assert_refused|expect_error|refused_untouched)\s*\(")
# The tests' own helpers that check that a message holds each of the phrases they are given.
MESSAGE_HELPERS = {"assert_mentions", "assert_refused", "expect_error", "refused_untouched"}
LITERAL = re.compile(r'"((?:[^"\\]|\\.)*)"')


def arguments(text, start):
    """The top-level, comma-separated arguments of the call whose `(` ends at `start`."""
    args, depth, i, begin = [], 1, start, start
    while i < len(text) and depth:
        c = text[i]
        if c == '"':
            i += 1
            while i < len(text) and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if not depth:
                args.append(text[begin:i])
        elif c == "," and depth == 1:
            args.append(text[begin:i])
            begin = i + 1
        i += 1
    return args


def pins_wording(checked):
    for literal in LITERAL.findall(checked):
        if re.search(r"[A-Za-z]{2,}[ ,;:'`]+[A-Za-z]{2,}", literal):
            return True
    return False


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "tests")
    total, wording, per_file = 0, 0, {}
    for path in sorted(root.rglob("*.rs")):
        text = path.read_text()
        for call in CALL.finditer(text):
            args = arguments(text, call.end())
            name = call.group(1)
            if text[max(0, call.start() - 3) : call.start()] == "fn ":
                continue  # the helper's own definition
            total += 1
            # A helper's arguments are all checked, but for the label of what is checked that the
            # programs' `assert_refused(output, parts, what)` takes last (its failure message); an
            # assertion's last argument may be its own message.
            if name in MESSAGE_HELPERS:
                checked = args[:2] if name == "assert_refused" and len(args) == 3 else args
            else:
                checked = args[: 1 if name == "assert!" else 2]
            wording_here = pins_wording(",".join(checked))
            if wording_here:
                wording += 1
                per_file[str(path)] = per_file.get(str(path), 0) + 1
    for name, count in sorted(per_file.items(), key=lambda item: -item[1]):
        print(f"{count:4} {name}")
    share = 100 * wording / total if total else 0
    print(f"wording assertions: {wording} of {total} ({share:.0f}%)")


main()
