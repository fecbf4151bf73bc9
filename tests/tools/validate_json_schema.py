#!/usr/bin/env python3
"""tessera tests: the independent JSON Schema validator of the grammar tests.

Usage: validate_json_schema.py CASES.json

CASES.json is a list of {"name", "schema", "documents": [text, ...]}. Every document must parse as
JSON (no duplicate keys, no NaN/Infinity) and validate against its schema with the Python
`jsonschema` package (Draft 2020-12, formats checked where the package can). Prints one line per
failure and a summary; exits 0 only when every document is valid, 1 on invalid documents, 2 when
jsonschema is missing (the test must then fail, not skip).
"""
import json
import sys

try:
    import jsonschema
except ImportError:
    print("python jsonschema is not installed (Debian package python3-jsonschema)")
    sys.exit(2)


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate keys: %r" % keys)
    return dict(pairs)


def reject_constant(name):
    raise ValueError("non-standard JSON constant " + name)


def main():
    cases = json.load(open(sys.argv[1], encoding="utf-8"))
    checked = failed = 0
    for case in cases:
        schema = case["schema"]
        cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        cls.check_schema(schema)
        validator = cls(schema, format_checker=jsonschema.FormatChecker())
        for text in case["documents"]:
            checked += 1
            try:
                doc = json.loads(text, object_pairs_hook=no_duplicates, parse_constant=reject_constant)
            except ValueError as e:
                failed += 1
                print("%s: not JSON (%s): %r" % (case["name"], e, text))
                continue
            errors = sorted(validator.iter_errors(doc), key=lambda e: list(e.path))
            if errors:
                failed += 1
                print("%s: invalid (%s at %s): %r" % (case["name"], errors[0].message, list(errors[0].path), text))
    print("%d documents checked, %d invalid" % (checked, failed))
    sys.exit(1 if failed or checked == 0 else 0)


if __name__ == "__main__":
    main()
