#!/usr/bin/python3
"""Turns cel-spec's simple conformance tests into signet's own case table.

cel-spec (github.com/google/cel-spec) keeps its conformance tests as
protobuf text files, tests/simple/testdata/*.textproto (SimpleTestFile in
proto/cel/expr/conformance/test/simple.proto). This script reads those
files with a small text-format reader of its own and writes two tables:

  cases.tsv     one case per line: id, mode, expr, expected
                  id        file/section/name
                  mode      checked, or unchecked (the test disables the
                            type checker)
                  expr      the CEL expression
                  expected  the expected value written as a CEL literal
                            expression (3u, -0.0, double("NaN"), b"\\x00",
                            [1, "a"], {1: 2}, int for a type value), or
                            the word error
  excluded.tsv  id and the reason a case is not in cases.tsv: it needs
                variable bindings, a type environment, a container,
                protobuf messages, timestamps or durations, or another
                feature out of sg_cel's scope (cel/sg_cel.h).

Fields are separated by tabs and escaped as PostgreSQL's COPY text format
does: backslash, tab, newline and carriage return as \\\\, \\t, \\n, \\r, other
control characters (NUL among them) as \\xHH.
Lines starting with # are comments.

Regenerate (the cel-spec commit is recorded in the tables' header):

  git clone https://github.com/google/cel-spec /tmp/cel-spec
  tests/cel/conformance/convert.py --git-dir /tmp/cel-spec/.git --rev HEAD \\
      --out tests/cel/conformance

or with a checkout's testdata folder: convert.py --dir DIR --out DIR.
The facts (expressions and expected values) are cel-spec's; the tables are
data for tests/cel/test_conformance.c, not code.
"""
import argparse
import math
import re
import struct
import subprocess
import sys

FILES = ["basic", "comparisons", "conversions", "integer_math", "fp_math", "lists", "logic", "macros",
         "macros2", "parse", "plumbing", "string", "string_ext"]

# ---- a protobuf text-format reader ----


class Msg:
    """A message: its fields in order, repeated ones as repeated entries."""

    def __init__(self):
        self.fields = []

    def get(self, name, default=None):
        for k, v in self.fields:
            if k == name:
                return v
        return default

    def all(self, name):
        return [v for k, v in self.fields if k == name]

    def has(self, name):
        return any(k == name for k, _ in self.fields)


ESC = {"a": 7, "b": 8, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11, "\\": 92, "'": 39, '"': 34, "?": 63}


class Reader:
    def __init__(self, text):
        self.s = text.encode("utf-8")
        self.i = 0

    def ws(self):
        while self.i < len(self.s):
            c = self.s[self.i:self.i + 1]
            if c in b" \t\r\n":
                self.i += 1
            elif c == b"#":
                while self.i < len(self.s) and self.s[self.i:self.i + 1] != b"\n":
                    self.i += 1
            else:
                break

    def peek(self):
        self.ws()
        return self.s[self.i:self.i + 1]

    def string(self):
        """Adjacent quoted strings, concatenated, as bytes."""
        out = bytearray()
        while self.peek() in (b'"', b"'"):
            q = self.s[self.i]
            self.i += 1
            while self.s[self.i] != q:
                c = self.s[self.i]
                if c != 92:
                    out.append(c)
                    self.i += 1
                    continue
                e = chr(self.s[self.i + 1])
                self.i += 2
                if e in ESC:
                    out.append(ESC[e])
                elif e in "01234567":
                    j = self.i - 1
                    k = j
                    while k < j + 3 and chr(self.s[k]) in "01234567":
                        k += 1
                    out.append(int(self.s[j:k], 8) & 0xFF)
                    self.i = k
                elif e in "xX":
                    j = self.i
                    k = j
                    while k < j + 2 and chr(self.s[k]) in "0123456789abcdefABCDEF":
                        k += 1
                    out.append(int(self.s[j:k], 16))
                    self.i = k
                elif e == "u":
                    out += chr(int(self.s[self.i:self.i + 4], 16)).encode("utf-8", "surrogatepass")
                    self.i += 4
                elif e == "U":
                    out += chr(int(self.s[self.i:self.i + 8], 16)).encode("utf-8", "surrogatepass")
                    self.i += 8
                else:
                    raise ValueError("bad escape \\%s at %d" % (e, self.i))
            self.i += 1
        return bytes(out)

    def scalar(self):
        if self.peek() in (b'"', b"'"):
            return ("str", self.string())
        m = re.compile(rb"[-+]?[A-Za-z0-9_.+-]+").match(self.s, self.i)
        if not m:
            raise ValueError("bad scalar at %d" % self.i)
        self.i = m.end()
        return ("tok", m.group(0).decode())

    def message(self, end):
        msg = Msg()
        while True:
            c = self.peek()
            if c == end or c == b"":
                self.i += len(c)
                return msg
            if c in (b",", b";"):
                self.i += 1
                continue
            m = re.compile(rb"\[?[A-Za-z_][A-Za-z0-9_./]*\]?").match(self.s, self.i)
            if not m:
                raise ValueError("bad field at %d: %r" % (self.i, self.s[self.i:self.i + 30]))
            name = m.group(0).decode()
            self.i = m.end()
            if self.peek() == b":":
                self.i += 1
            c = self.peek()
            if c in (b"{", b"<"):
                self.i += 1
                msg.fields.append((name, self.message(b"}" if c == b"{" else b">")))
            elif c == b"[":
                self.i += 1
                while self.peek() != b"]":
                    if self.peek() == b",":
                        self.i += 1
                        continue
                    if self.peek() in (b"{", b"<"):
                        o = self.peek()
                        self.i += 1
                        msg.fields.append((name, self.message(b"}" if o == b"{" else b">")))
                    else:
                        msg.fields.append((name, self.scalar()))
                self.i += 1
            else:
                msg.fields.append((name, self.scalar()))


# ---- expected values as CEL literals ----


class Skip(Exception):
    pass


TYPES = {"int", "uint", "double", "bool", "string", "bytes", "null_type", "list", "map", "type"}


def cel_string(b):
    s = b.decode("utf-8")
    out = []
    for ch in s:
        o = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif o < 0x20 or o == 0x7F:
            out.append("\\u%04x" % o)
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def cel_bytes(b):
    out = []
    for o in b:
        if o in (0x22, 0x5C):
            out.append("\\" + chr(o))
        elif 0x20 <= o < 0x7F:
            out.append(chr(o))
        else:
            out.append("\\x%02x" % o)
    return 'b"' + "".join(out) + '"'


def number(tok):
    return tok[1] if tok[0] == "tok" else tok[1].decode()


def cel_double(tok):
    t = number(tok).lower()
    if t in ("nan", "-nan"):
        return 'double("NaN")'
    if t in ("inf", "infinity", "+inf"):
        return 'double("Infinity")'
    if t in ("-inf", "-infinity"):
        return 'double("-Infinity")'
    d = float(t)
    if d == 0:
        return "-0.0" if math.copysign(1, d) < 0 else "0.0"
    r = repr(d)
    if "e" not in r and "." not in r:
        r += ".0"
    if r.startswith("-"):
        return r
    return r


def cel_value(v):
    """A cel.expr.Value message as a CEL literal expression."""
    if not isinstance(v, Msg):
        raise Skip("a value the converter does not read")
    for name, x in v.fields:
        if name == "null_value":
            return "null"
        if name == "bool_value":
            return "true" if number(x) == "true" else "false"
        if name == "int64_value":
            return str(int(number(x)))
        if name == "uint64_value":
            return "%du" % int(number(x))
        if name == "double_value":
            return cel_double(x)
        if name == "string_value":
            return cel_string(x[1])
        if name == "bytes_value":
            return cel_bytes(x[1])
        if name == "list_value":
            return "[" + ", ".join(cel_value(e) for e in x.all("values")) + "]"
        if name == "map_value":
            ents = []
            for e in x.all("entries"):
                ents.append(cel_value(e.get("key")) + ": " + cel_value(e.get("value")))
            return "{" + ", ".join(ents) + "}"
        if name == "type_value":
            t = x[1].decode()
            if t not in TYPES:
                raise Skip("type value of a type out of scope (%s)" % t)
            return t
        if name in ("object_value", "enum_value"):
            raise Skip("protobuf messages")
    # An empty Value message: cel-spec's tests use it for no value kinds.
    raise Skip("empty expected value")


SCOPE = [
    (re.compile(r"\b(timestamp|duration)\s*\(|google\.protobuf\.(Timestamp|Duration)"), "timestamps/durations"),
    (re.compile(r"google\.protobuf|TestAllTypes|NestedTestAllTypes|cel\.expr\.conformance|proto2|proto3"),
     "protobuf messages"),
    (re.compile(r"\boptional\.|\.\?|\[\?|\?\s*\.|\{\s*\?"), "optional values"),
    (re.compile(r"\bcel\.(bind|block|index)|\bmath\.|\bsets\.|\bbase64\.|\bnet\."), "another extension"),
    (re.compile(r"\b[A-Za-z_][A-Za-z0-9_.]*\s*\{"), "message construction"),
]


def exclusion(t, expr):
    if t.all("bindings"):
        return "needs variable bindings"
    if t.all("type_env"):
        return "needs a type environment"
    if t.has("container") and t.get("container")[1]:
        return "needs a container"
    if t.has("disable_macros"):
        return "macros disabled"
    if t.has("check_only"):
        return "check only (no evaluation)"
    if t.has("unknown") or t.has("any_unknowns"):
        return "unknown values"
    if t.has("locale"):
        return "locale"
    for rx, why in SCOPE:
        if rx.search(expr):
            # A map literal with a string key is not a message construction.
            if why == "message construction" and not re.search(r"\b[A-Z][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*\s*\{", expr):
                continue
            return why
    return None


def expected(t):
    if t.has("eval_error") or t.has("any_eval_errors"):
        return "error"
    if t.has("typed_result"):
        return cel_value(t.get("typed_result").get("result"))
    if t.has("value"):
        return cel_value(t.get("value"))
    return "true"


def esc(s):
    out = []
    for ch in s:
        if ch == "\\":
            out.append("\\\\")
        elif ch in "\t\n\r":
            out.append({"\t": "\\t", "\n": "\\n", "\r": "\\r"}[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append("\\x%02x" % ord(ch))
        else:
            out.append(ch)
    return "".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", help="cel-spec's tests/simple/testdata folder")
    ap.add_argument("--git-dir", help="a cel-spec git directory (read with git show)")
    ap.add_argument("--rev", default="HEAD")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    origin = "cel-spec"
    if a.git_dir:
        rev = subprocess.run(["git", "--git-dir", a.git_dir, "rev-parse", a.rev], check=True,
                             capture_output=True, text=True).stdout.strip()
        origin = "cel-spec commit %s" % rev

    def read(name):
        if a.git_dir:
            return subprocess.run(["git", "--git-dir", a.git_dir, "show",
                                   "%s:tests/simple/testdata/%s.textproto" % (a.rev, name)],
                                  check=True, capture_output=True).stdout.decode("utf-8")
        with open("%s/%s.textproto" % (a.dir, name), encoding="utf-8") as f:
            return f.read()

    cases, excluded = [], []
    for name in FILES:
        f = Reader(read(name)).message(b"")
        for sec in f.all("section"):
            for t in sec.all("test"):
                tid = "%s/%s/%s" % (name, sec.get("name")[1].decode(), t.get("name")[1].decode())
                expr = t.get("expr")[1].decode("utf-8")
                why = exclusion(t, expr)
                if not why:
                    try:
                        want = expected(t)
                    except Skip as e:
                        why = str(e)
                if why:
                    excluded.append((tid, why))
                    continue
                mode = "unchecked" if t.has("disable_check") else "checked"
                cases.append((tid, mode, expr, want))
    head = "# Generated by tests/cel/conformance/convert.py from %s; do not edit.\n" % origin
    with open("%s/cases.tsv" % a.out, "w", encoding="utf-8") as f:
        f.write(head + "# id\tmode\texpr\texpected\n")
        for c in cases:
            f.write("\t".join(esc(x) for x in c) + "\n")
    with open("%s/excluded.tsv" % a.out, "w", encoding="utf-8") as f:
        f.write(head + "# id\treason\n")
        for c in excluded:
            f.write("\t".join(esc(x) for x in c) + "\n")
    reasons = {}
    for _, why in excluded:
        reasons[why] = reasons.get(why, 0) + 1
    print("%d cases, %d excluded" % (len(cases), len(excluded)), file=sys.stderr)
    for why, n in sorted(reasons.items(), key=lambda x: -x[1]):
        print("  %4d %s" % (n, why), file=sys.stderr)


if __name__ == "__main__":
    main()
