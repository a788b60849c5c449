"""sparkrun's command templates filled in, by the rules of the tool that owns each `recipe_version`.

Version 1 is eugr's own format (run-recipe.py): the template is Python's
`str.format`, where `{{` and `}}` are literal braces; a version 1 template
str.format cannot fill (single-brace JSON) is one written for sparkrun, which
runs version 1 recipes too, and is filled by sparkrun's rule. Versions 2-4 are
sparkrun's (core/recipe.py `render_command`, utils/text.py `render_template`,
read for this): every brace that is not part of a `{key}` span (no brace
inside) is hidden first, so a placeholder nested in a JSON flag still
resolves; a template holding `{{` is in the doubled-brace convention, whose
`{{` and `}}` each become one literal brace (sparkrun reads the convention off
the template, whatever its version); then vpd's arg_substitute replaces each
`{key}` the values hold, again until nothing changes; any other `{...}` (JSON,
shell) is left as it is. A default value holding `{{` has its doubled braces
collapsed the same way. A placeholder that names nothing is a hole in the
command: refused, named.
"""

from __future__ import annotations

import re
import string
from typing import Any

from sparkplay.errors import BadInput
from sparkplay.recipes import cmdline

# sparkrun reads every version the same way but version 1, eugr's own format (run-recipe.py), whose command
# template is Python's str.format: `{{` and `}}` are literal braces there. Versions 2-4 are sparkrun's; a later
# one sparkrun reads as version 2 too (core/recipe.py: only "1" differs), and so does sparkplay, saying so.
VERSIONS = ("1", "2", "3", "4")

# sparkrun's placeholder span: braces with no brace inside (a JSON object's own braces never match one)
SPAN = re.compile(r"\{[^{}]*\}")
# hidden braces while placeholders are filled (YAML forbids these characters in a recipe's text)
LEFT, RIGHT = "\x00", "\x01"
# sparkrun's bound on substitution passes: a deeper chain is a loop
PASSES = 10

# a placeholder that names nothing is a hole in the command: a key-like name (hyphens and dots too)
HOLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*\Z")


def collapse_escapes(value: Any) -> Any:
    """A default value in the doubled-brace convention (it holds `{{`) with its `{{`/`}}` made single."""
    if isinstance(value, str) and "{{" in value:
        return value.replace("{{", "{").replace("}}", "}")
    return value


def _mask(text: str, escapes: bool) -> str:
    """Every brace but a `{key}` span's hidden; with `escapes`, `{{` and `}}` hide as one brace each."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "{}" and text.startswith(ch * 2, i):
            hidden = LEFT if ch == "{" else RIGHT
            out.append(hidden if escapes else hidden * 2)
            i += 2
            continue
        if ch == "{" and (span := SPAN.match(text, i)):
            out.append(span.group())
            i = span.end()
            continue
        out.append(LEFT if ch == "{" else RIGHT if ch == "}" else ch)
        i += 1
    return "".join(out)


def expand(template: str, values: dict[str, Any], where: str, version: str = "2") -> str:
    """The command template filled from `values` by the rules of the tool that owns the version.

    Version 1 (eugr's run-recipe.py): Python's str.format, once. Versions 2-4
    (sparkrun): the module's rule above. Either way a key-like placeholder
    nothing defines is an error naming it: a command with a hole in it cannot
    be run.
    """
    if version == "1" and reads_as(template) == "eugr":
        return _str_format(template, values, where)
    text = _mask(template, escapes="{{" in template)
    for _ in range(PASSES):
        holes = sorted(
            {
                k
                for m in SPAN.finditer(text)
                if HOLE.match(k := m.group(0).strip("{}"))
                and values.get(k) is None
                and not text[: m.start()].endswith("$")
            }
        )  # ${VAR}: the shell's
        if holes:
            raise _hole(holes[0], where)
        # vpd's arg_substitute: the shortest {...}, its key with the braces stripped; a value or left as it was
        expanded = re.sub(
            r"\{(.*?)\}",
            lambda m: str(values[k]) if values.get(k := m.group(0).strip("{}")) is not None else m.group(0),
            text,
        )
        if expanded == text:
            return text.replace(LEFT, "{").replace(RIGHT, "}")
        text = expanded
    raise BadInput(f"{where}: the command's placeholders refer to each other in a loop", "fix the defaults")


def reads_as(template: str) -> str:
    """Whose rule fills a version 1 template: eugr's runner's str.format, or sparkrun's where str.format cannot
    parse it or a field is not a plain name (single-brace JSON: eugr's runner fails on it, sparkrun, which runs
    version 1 recipes from its registries too, fills it)."""
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError:
        return "sparkrun"
    return "eugr" if all(HOLE.match(f) and "." not in f for f in fields) else "sparkrun"


def _hole(name: str, where: str) -> BadInput:
    return BadInput(
        f"{where}: the command uses {{{name}}}, which defaults does not define", f"add {name} to the recipe's defaults"
    )


def _str_format(template: str, values: dict[str, Any], where: str) -> str:
    """Python's str.format over plain names only (no attribute or index lookups from a downloaded file)."""
    out: list[str] = []
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:  # a single brace: str.format refuses it, so eugr's runner does too
        raise BadInput(
            f"{where}: the command template is not valid for str.format ({exc})", "write literal braces as {{ and }}"
        ) from None
    for literal, field_name, spec, conversion in parsed:
        out.append(literal)
        if field_name is None:
            continue
        if not HOLE.match(field_name) or "." in field_name:
            raise BadInput(
                f"{where}: the command's placeholder {{{field_name}}} is not a plain name",
                "use {name} with a name from defaults",
            )
        if field_name not in values:
            raise _hole(field_name, where)
        value = values[field_name]
        value = repr(value) if conversion == "r" else ascii(value) if conversion == "a" else value
        out.append(format(value, spec or ""))
    return "".join(out)


# a backslash, then blanks, then the line's end: bash reads an escaped blank and ends the command there;
# sparkrun repairs it to a line continuation before it runs the command (utils/text.py), and so does this
BROKEN_CONTINUATION = re.compile(r"\\[ \t]+\n")


def _starts_an_engine(statement: str) -> bool:
    try:
        cmdline.parse(statement)
    except BadInput:
        return False
    return True


def parse_command(text: str, where: str, scripts: bool) -> tuple[cmdline.Command, list[str]]:
    """The engine command line the template renders to, with what it exports first as its environment, and
    the simple commands it runs before the engine (with `scripts`: a container to run them in); anything
    else a shell would do is refused, not half-read."""
    text = BROKEN_CONTINUATION.sub("\\\n", text)
    try:
        exported, line, script = cmdline.split_preamble(text, scripts)
        if any(_starts_an_engine(statement) for statement in script):  # the engine is not the last command
            raise cmdline.script_error(f"{line!r} runs after the engine")
        parsed = cmdline.parse(line)
    except BadInput as exc:
        raise BadInput(f"{where}: {exc.problem}", exc.fix) from None
    parsed.env = {**exported, **parsed.env}
    return parsed, script
