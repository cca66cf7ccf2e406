"""The snippets a reader copies from README.md, docs/*.md and the man pages:
configurations (a block with a TOML table header) and tokenctl commands.
test_snippets.py checks each; this module only finds them."""
import glob
import os
import re
import shlex
import tomllib
from dataclasses import dataclass

from conftest import ROOT

COMMAND = re.compile(r"^(?:sudo\s+)?(?:tokenctl\s+[a-z-]|tokend\s+-)")
# git's credential helper, as git config names it: `!tokenctl git-credential`.
HELPER = re.compile(r"""['"]!(tokenctl [^'"]*)['"]""")
TABLE = re.compile(r"^\[\[?[a-z][\w.\-\"/:]*\]\]?\s*(#.*)?$")


@dataclass
class Snippet:
    where: str
    text: str

    def __repr__(self):
        return self.where


def documents():
    names = ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    return [(n, open(os.path.join(ROOT, n)).read()) for n in names]


def manuals():
    return [(os.path.relpath(p, ROOT), open(p).read()) for p in sorted(glob.glob(os.path.join(ROOT, "man", "*.[0-9]")))]


def markdown_blocks(name, text):
    """Indented (4 spaces) and fenced code blocks, as (line number, lines)."""
    lines, blocks, i = text.split("\n"), [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            start, i = i + 1, i + 1
            while i < len(lines) and not lines[i].startswith("```"):
                i += 1
            blocks.append((start + 1, lines[start:i]))
        elif lines[i].startswith("    ") and (i == 0 or not lines[i - 1].strip()):
            start = i
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                i += 1
            blocks.append((start + 1, [l[4:] for l in lines[start:i]]))
            continue
        i += 1
    return blocks


def manual_blocks(name, text):
    """`.Dl` lines and `.Bd -literal` blocks, with mdoc's quoting undone."""
    def plain(line):
        line = line.replace("\\(dq", '"').replace("\\e", "\\").replace("\\&", "")
        return re.sub(r"\s*\bQc\b", '"', re.sub(r"\bQo\s+", '"', line))
    lines, blocks, i = text.split("\n"), [], 0
    while i < len(lines):
        if lines[i].startswith(".Dl "):
            blocks.append((i + 1, [plain(lines[i][4:])]))
        elif lines[i].startswith(".Bd -literal"):
            start, i = i + 1, i + 1
            while i < len(lines) and not lines[i].startswith(".Ed"):
                i += 1
            blocks.append((start + 1, [plain(l) for l in lines[start:i]]))
        i += 1
    return blocks


def paragraphs(number, lines):
    """A block's paragraphs (split at blank lines), each with its first line's number."""
    found, current, first = [], [], number
    for offset, line in enumerate(lines + [""]):
        if line.strip():
            if not current:
                first = number + offset
            current.append(line)
        elif current:
            found.append((first, current))
            current = []
    return found


def all_blocks():
    for name, text in documents():
        for number, lines in markdown_blocks(name, text):
            yield name, number, lines
    for name, text in manuals():
        for number, lines in manual_blocks(name, text):
            yield name, number, lines


def configs():
    """Every paragraph that opens with a TOML table: a configuration. One whose
    first comment says it adds to the one "above" is merged into that one."""
    found, last = [], {}
    for name, number, lines in all_blocks():
        for first, paragraph in paragraphs(number, lines):
            body = [l for l in paragraph if not l.lstrip().startswith("#")]
            if not body or not TABLE.match(body[0].strip()):
                continue
            text = "\n".join(paragraph) + "\n"
            if any("as above" in l for l in paragraph if l.lstrip().startswith("#")):
                text = merged(last[name], text)
            last[name] = text
            found.append(Snippet(f"{name}:{first}", text))
    return found


def commands():
    """Every line of a code block that runs tokenctl or tokend, as argv (what a
    shell would pass: up to a redirection, pipe or comment)."""
    found = []
    for name, number, lines in all_blocks():
        for offset, line in enumerate(lines):
            helper = HELPER.search(line)
            if helper:
                # git passes the operation
                found.append(Snippet(f"{name}:{number + offset}", helper.group(1) + " get"))
            if not COMMAND.match(line.strip()):
                continue
            words = []
            lexer = shlex.shlex(line.strip(), posix=True, punctuation_chars=";&|<>")
            lexer.whitespace_split = True
            for word in lexer:
                if word in {";", "&", "&&", "|", "||", "<", ">", ">>", "2>"}:
                    break
                words.append(word)
            if words[0] == "sudo":
                words = words[1:]
            found.append(Snippet(f"{name}:{number + offset}", shlex.join(words)))
    return found


def merged(base, addition):
    """`addition`'s keys set over `base`'s, as TOML text."""
    table = tomllib.loads(base)
    deep_update(table, tomllib.loads(addition))
    return dump(table)


def deep_update(target, source):
    for key, value in source.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            deep_update(target[key], value)
        else:
            target[key] = value


def dump(table, prefix=()):
    scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in table.items() if isinstance(v, dict)}
    out = []
    if prefix and scalars:
        out.append("[" + ".".join(key(p) for p in prefix) + "]")
    out += [f"{key(k)} = {value(v)}" for k, v in scalars.items()]
    for k, v in tables.items():
        out.append(dump(v, prefix + (k,)))
    return "\n".join(out) + "\n"


def key(name):
    return name if re.fullmatch(r"[A-Za-z0-9_-]+", name) else '"' + name + '"'


def value(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, list):
        return "[" + ", ".join(value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{key(k)} = {value(x)}" for k, x in v.items()) + " }"
    raise TypeError(v)
