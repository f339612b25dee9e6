#!/usr/bin/env python3
"""The code-size limits of the workspace's Rust sources, checked.

    python3 scripts/check_limits.py              # check crates/*/src (after the self-test)
    python3 scripts/check_limits.py --self-test  # only check the lexer on tricky snippets

Two limits hold for hand-written, non-test code under crates/*/src:

* a file has at most 900 lines (for a file with an inline `#[cfg(test)]` item, such as a
  `mod tests { ... }`, the lines outside that item);
* a function (`fn` item: free function, method, nested function) spans at most 150 lines,
  from the line of its `fn` keyword to the line of its closing brace. A nested function's
  lines count for its parent too.

Test code is left out: files named `tests.rs` or `*_tests.rs`, files under a `tests/`
folder, items marked `#[cfg(test)]` (and the files their `mod NAME;` declarations load), and
crates/*/tests, benches/ and fuzz/ (outside crates/*/src, so never scanned).

Generated code may be exempted by naming its file in scripts/check_limits.allow (one path a
line, relative to the repository root; `#` starts a comment). A listed file must say
`@generated` in its first lines; hand-written code gets no exemption.

Exit status 0 when every limit holds, 1 otherwise, with one line per excess:
`path:line name: N lines (limit M)`.
"""
import argparse
import re
import sys
from pathlib import Path

FILE_LIMIT = 900
FN_LIMIT = 150
ROOT = Path(__file__).resolve().parent.parent
ALLOWLIST = ROOT / "scripts" / "check_limits.allow"

IDENT_START = re.compile(r"[A-Za-z_\u0080-\U0010ffff]")
IDENT_CHAR = re.compile(r"[A-Za-z0-9_\u0080-\U0010ffff]")
RAW_STRING = re.compile(r'(?:b|c)?r(#*)"')


class Token:
    """A lexed token: `kind` is "ident", "punct" or "lit"; literals keep no text."""

    __slots__ = ("kind", "text", "line")

    def __init__(self, kind, text, line):
        self.kind = kind
        self.text = text
        self.line = line

    def __repr__(self):
        return f"{self.kind}:{self.text!r}@{self.line}"


class LexError(Exception):
    pass


def lex(src):
    """Rust tokens of `src`, without comments; string, char and number literals become
    "lit" tokens, so that braces inside them are never seen."""
    tokens = []
    i, n, line = 0, len(src), 1

    def skip_to(j):
        nonlocal i, line
        line += src.count("\n", i, j)
        i = j

    while i < n:
        c = src[i]
        if c == "\n":
            line += 1
            i += 1
        elif c.isspace():
            i += 1
        elif src.startswith("//", i):
            j = src.find("\n", i)
            skip_to(n if j < 0 else j)
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while depth:
                if j >= n:
                    raise LexError(f"line {line}: unterminated block comment")
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            skip_to(j)
        elif c in "brc" and (m := RAW_STRING.match(src, i)):
            start = line
            close = '"' + m.group(1)
            j = src.find(close, m.end())
            if j < 0:
                raise LexError(f"line {line}: unterminated raw string")
            skip_to(j + len(close))
            tokens.append(Token("lit", "", start))
        elif c == '"' or (c in "bc" and src.startswith('"', i + 1)):
            start = line
            j = i + (1 if c == '"' else 2)
            while True:
                if j >= n:
                    raise LexError(f"line {start}: unterminated string")
                if src[j] == "\\":
                    j += 2
                elif src[j] == '"':
                    break
                else:
                    j += 1
            skip_to(j + 1)
            tokens.append(Token("lit", "", start))
        elif c == "'" or (c == "b" and src.startswith("'", i + 1)):
            j = i + (1 if c == "'" else 2)
            if j < n and src[j] == "\\":
                # an escaped char literal: '\n', '\'', '\u{7b}'
                k = src.find("'", j + 2)
                if k < 0:
                    raise LexError(f"line {line}: unterminated char literal")
                skip_to(k + 1)
                tokens.append(Token("lit", "", line))
            elif j + 1 < n and src[j + 1] == "'" and src[j] != "\n":
                skip_to(j + 2)  # a plain char literal: 'x', '{', '"'
                tokens.append(Token("lit", "", line))
            else:
                # a lifetime or a loop label: 'a, 'static, '_
                k = j
                while k < n and IDENT_CHAR.match(src[k]):
                    k += 1
                tokens.append(Token("lit", src[i:k], line))
                i = k
        elif c == "r" and src.startswith("r#", i) and i + 2 < n and IDENT_START.match(src[i + 2]):
            # a raw identifier (r#fn is a name, not the keyword)
            k = i + 2
            while k < n and IDENT_CHAR.match(src[k]):
                k += 1
            tokens.append(Token("ident", src[i:k], line))
            i = k
        elif IDENT_START.match(c):
            k = i + 1
            while k < n and IDENT_CHAR.match(src[k]):
                k += 1
            tokens.append(Token("ident", src[i:k], line))
            i = k
        elif c.isdigit():
            k = i + 1
            while k < n and (
                IDENT_CHAR.match(src[k])
                or (src[k] == "." and k + 1 < n and src[k + 1].isdigit())
            ):
                k += 1
            tokens.append(Token("lit", src[i:k], line))
            i = k
        else:
            tokens.append(Token("punct", c, line))
            i += 1
    return tokens


OPEN = {"(": ")", "[": "]", "{": "}"}
CLOSE = {")", "]", "}"}


def matching(tokens, i):
    """Index of the bracket closing the one at `i`."""
    depth = 0
    for j in range(i, len(tokens)):
        t = tokens[j]
        if t.kind != "punct":
            continue
        if t.text in OPEN:
            depth += 1
        elif t.text in CLOSE:
            depth -= 1
            if depth == 0:
                return j
    raise LexError(f"line {tokens[i].line}: unbalanced {tokens[i].text!r}")


def item_end(tokens, i):
    """Index of the last token of the item starting at `i`: its first `;` or the close of its
    first `{ ... }` outside parentheses and brackets."""
    j = i
    while j < len(tokens):
        t = tokens[j]
        if t.kind == "punct":
            if t.text == ";":
                return j
            if t.text == "{":
                return matching(tokens, j)
            if t.text in "([":
                j = matching(tokens, j)
        j += 1
    return len(tokens) - 1


def is_cfg_test(attr_tokens):
    """Whether an attribute's tokens (between `[` and `]`) are `cfg(test)` or
    `cfg(all(test, ...))`."""
    text = "".join(t.text for t in attr_tokens)
    return text == "cfg(test)" or text.startswith("cfg(all(test,")


def analyse(src):
    """(functions, test spans, whole-file test, test module names) of a Rust source:
    functions as (name, first line, last line), test spans as (first line, last line) of
    the `#[cfg(test)]` items, test modules as (NAME, line of its `#[path]` attribute or
    None) for each `#[cfg(test)] mod NAME;`."""
    tokens = lex(src)
    functions, test_spans, test_mods = [], [], []
    whole_file_test = False
    i = 0
    pending_test_line = None  # line of a #[cfg(test)] awaiting its item
    pending_path = None
    while i < len(tokens):
        t = tokens[i]
        if t.kind == "punct" and t.text == "#":
            inner = i + 1 < len(tokens) and tokens[i + 1].text == "!"
            k = i + 2 if inner else i + 1
            if k < len(tokens) and tokens[k].text == "[":
                end = matching(tokens, k)
                attr = tokens[k + 1 : end]
                if is_cfg_test(attr):
                    if inner:
                        whole_file_test = True
                    elif pending_test_line is None:
                        pending_test_line = t.line
                if attr and attr[0].text == "path" and not inner:
                    pending_path = t.line
                i = end + 1
                continue
        if pending_test_line is not None:
            end = item_end(tokens, i)
            test_spans.append((pending_test_line, tokens[end].line))
            words = [x.text for x in tokens[i:end]]
            if tokens[end].text == ";" and "mod" in words:
                name = words[words.index("mod") + 1]
                test_mods.append((name, pending_path))
            pending_test_line = pending_path = None
            i = end + 1
            continue
        pending_path = None
        if (
            t.kind == "ident"
            and t.text == "fn"
            and i + 1 < len(tokens)
            and tokens[i + 1].kind == "ident"
        ):
            end = item_end(tokens, i)
            if tokens[end].text == "}":
                functions.append((tokens[i + 1].text, t.line, tokens[end].line))
            i += 2
            continue
        i += 1
    return functions, test_spans, whole_file_test, test_mods


def line_count(src):
    return len(src.splitlines())


def uncovered_lines(total, spans):
    covered = set()
    for a, b in spans:
        covered.update(range(a, b + 1))
    return total - len(covered)


PATH_ATTR = re.compile(r'#\[\s*path\s*=\s*"([^"]+)"\s*\]')


def test_module_files(path, src, mods):
    """The files the `#[cfg(test)] mod NAME;` declarations of `path` load."""
    lines = src.splitlines()
    here = path.parent
    if path.name not in ("mod.rs", "lib.rs", "main.rs"):
        child_dir = here / path.stem
    else:
        child_dir = here
    files = []
    for name, path_line in mods:
        if path_line is not None:
            # literals keep no text: the path is read from the attribute's line
            found = PATH_ATTR.search(lines[path_line - 1])
            if found:
                files.append((here / found.group(1)).resolve())
            continue
        files.append((child_dir / f"{name}.rs").resolve())
        files.append((child_dir / name / "mod.rs").resolve())
    return files


def read_allowlist():
    allowed = set()
    if ALLOWLIST.exists():
        for raw in ALLOWLIST.read_text().splitlines():
            entry = raw.split("#", 1)[0].strip()
            if entry:
                allowed.add(entry)
    return allowed


def is_test_file(rel):
    parts = rel.parts
    return rel.name == "tests.rs" or rel.name.endswith("_tests.rs") or "tests" in parts[:-1]


def check(root):
    """Excess lines as (path, line, name, length, limit), and problems of the allowlist."""
    sources = sorted(root.glob("crates/*/src/**/*.rs"))
    allowed = read_allowlist()
    problems = []
    for entry in sorted(allowed):
        p = root / entry
        if not p.is_file():
            problems.append(f"{ALLOWLIST.name}: {entry} is not a file")
        elif "@generated" not in "\n".join(p.read_text().splitlines()[:5]):
            problems.append(f"{ALLOWLIST.name}: {entry} does not say @generated; only generated code is exempt")
    parsed, test_files = {}, set()
    for path in sources:
        rel = path.relative_to(root)
        if is_test_file(rel):
            continue
        src = path.read_text()
        try:
            result = analyse(src)
        except LexError as e:
            problems.append(f"{rel}: cannot lex: {e}")
            continue
        parsed[path] = (src, result)
        test_files.update(test_module_files(path, src, result[3]))
    excess = []
    for path, (src, (functions, spans, whole, _)) in parsed.items():
        rel = path.relative_to(root)
        if whole or path.resolve() in test_files or rel.as_posix() in allowed:
            continue
        lines = uncovered_lines(line_count(src), spans)
        if lines > FILE_LIMIT:
            excess.append((rel.as_posix(), 1, "(file)", lines, FILE_LIMIT))
        for name, first, last in functions:
            if any(a <= first <= b for a, b in spans):
                continue
            length = last - first + 1
            if length > FN_LIMIT:
                excess.append((rel.as_posix(), first, name, length, FN_LIMIT))
    return excess, problems


def self_test(quiet=False):
    def fns(src):
        return {name: last - first + 1 for name, first, last in analyse(src)[0]}

    # braces in strings, raw strings, byte strings, char literals; lifetimes; comments
    src = '\n'.join([
        "fn a<'x>(s: &'x str) -> &'x str {",  # 1
        '    let _ = "}}} \\" }";',
        '    let _ = r#"}"# ; let _ = r##"a "# }"##;',
        "    let _ = '{'; let _ = '\\''; let _ = b'}'; let _ = '\\u{7d}';",
        "    // }",
        "    /* } /* nested } */ } */",
        "    'outer: loop { break 'outer; }",
        "    let _ = br\"}\"; let _ = b\"}\"; let r#fn = 1;",
        "    s",
        "}",  # 10
        "fn b() {}",
    ])
    assert fns(src) == {"a": 10, "b": 1}, fns(src)

    # nested functions count on their own and for their parent; fn pointers and trait
    # declarations without a body are no functions
    src = "\n".join([
        "trait T { fn decl(&self) -> [u8; 2]; }",
        "fn outer(f: fn(u8) -> u8) {",
        "    fn inner() {",
        "    }",
        "}",
    ])
    assert fns(src) == {"outer": 4, "inner": 2}, fns(src)

    # #[cfg(test)] items are test code: their lines and functions are left out
    src = "\n".join([
        "fn keep() {}",
        "#[cfg(test)]",
        "mod tests {",
        "    fn left_out() { let _ = \"}\"; }",
        "}",
        "#[cfg(test)]",
        '#[path = "x_tests.rs"]',
        "mod other;",
        "#[cfg(all(test, feature = \"f\"))]",
        "fn also_left_out() {}",
    ])
    functions, spans, whole, mods = analyse(src)
    assert spans == [(2, 5), (6, 8), (9, 10)], spans
    assert uncovered_lines(line_count(src), spans) == 1
    assert mods == [("other", 7)], mods
    kept = [f for f in functions if not any(a <= f[1] <= b for a, b in spans)]
    assert [f[0] for f in kept] == ["keep"], kept
    assert analyse("#![cfg(test)]\nfn x() {}\n")[2]

    # a function's length runs from its `fn` line to its closing brace
    body = "\n".join(["    let _ = 1;"] * 149)
    assert fns(f"fn f() {{\n{body}\n}}") == {"f": 151}
    if not quiet:
        print("check_limits self-test: ok")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--self-test", action="store_true", help="check the lexer and exit")
    parser.add_argument("--root", type=Path, default=ROOT, help="repository root")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return 0
    self_test(quiet=True)  # the lexer first: a check is only as good as it
    excess, problems = check(args.root.resolve())
    for p in problems:
        print(p, file=sys.stderr)
    if excess:
        print(f"code-size limits exceeded ({FILE_LIMIT} lines a file, {FN_LIMIT} a function):")
        for rel, line, name, length, limit in sorted(excess):
            print(f"  {rel}:{line} {name}: {length} lines (limit {limit})")
    return 1 if excess or problems else 0


if __name__ == "__main__":
    sys.exit(main())
