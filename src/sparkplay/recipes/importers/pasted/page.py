"""A page (Markdown or HTML, e.g. NVIDIA's playbooks) read for the engine commands in its code blocks.

Only code is read: Markdown's fenced blocks and HTML's <pre> elements; prose is never executed or trusted. The
shell blocks are read in page order as one session would run them (a variable a block sets is known to the
blocks after it); a YAML block that is a compose file gives its services. Each engine command found is listed,
and the user picks one (`--pick N`) unless there is only one.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

import yaml

from sparkplay.errors import BadInput
from sparkplay.recipes.importers.pasted import compose, launches, shell, systemd_unit
from sparkplay.recipes.importers.pasted.launches import Found

FENCE = re.compile(r"^(?P<indent>[ \t]{0,3})(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$", re.MULTILINE)
SHELL_INFO = (
    "",
    "bash",
    "sh",
    "shell",
    "console",
    "zsh",
    "shell-session",
    "sh-session",
    "terminal",
    "text",
    "plaintext",
    "dockerfile",
    "docker",
)
YAML_INFO = ("yaml", "yml", "compose", "docker-compose")
PROMPT = re.compile(r"^[ \t]*(?:[\w.@-]+(?::[~\w/.-]*)?)?[$#>][ \t]+(?=\S)", re.MULTILINE)
# the prompts a comment never looks like: `$ `, `> `, `user@host:~# ` (a bare `# ` is one only where every line
# of the block has a prompt: elsewhere it starts a comment)
NOT_A_COMMENT = re.compile(r"^[ \t]*(?:(?:[\w.@-]+(?::[~\w/.-]*)?)?[$>]|[\w.@-]+(?::[~\w/.-]*)?#)[ \t]+(?=\S)", re.M)


def is_prose(text: str) -> bool:
    """Markdown with no code block (a changelog, notes): a link or emphasis, and headings or list items."""
    body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))  # not a comment's
    inline = re.search(r"\]\(\S+\)|\*\*\S", body)
    structure = re.search(r"^(#{1,6} \S|\s*[-*] \S)", text, re.MULTILINE)
    return bool(inline and structure)


def is_markdown(text: str) -> bool:
    return any(True for _ in _fenced(text))


def _fenced(text: str) -> list[tuple[str, str]]:
    """(info string, body) of each fenced code block (CommonMark: closed by a fence of the same kind, as long)."""
    blocks: list[tuple[str, str]] = []
    position = 0
    while (opening := FENCE.search(text, position)) is not None:
        fence = opening.group("fence")
        closing = re.compile(rf"^[ \t]{{0,3}}{fence[0]}{{{len(fence)},}}[ \t]*$", re.MULTILINE)
        end = closing.search(text, opening.end())
        body_end = end.start() if end else len(text)
        blocks.append((opening.group("info").strip().split(" ")[0].lower(), text[opening.end() + 1 : body_end]))
        position = end.end() if end else len(text)
    return blocks


# what a reader of a page never sees: elements that are not shown (their content is imported from no page)
UNSHOWN_TAGS = ("template", "script", "style", "noscript", "head", "textarea", "title", "iframe", "object")
_UNSHOWN_STYLE = re.compile(r"(?:^|;)\s*(?:display\s*:\s*none|visibility\s*:\s*hidden)\b", re.IGNORECASE)
VOID = ("area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr")
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)


def unshown(tag: str, attrs: list[tuple[str, str | None]]) -> bool:
    """Whether an element's content is kept from the page's reader: a hiding element, the `hidden` attribute,
    or a style that hides it."""
    found = dict(attrs)
    return tag in UNSHOWN_TAGS or "hidden" in found or bool(_UNSHOWN_STYLE.search(found.get("style") or ""))


class _Pre(HTMLParser):
    """The text of every <pre> element a reader sees, entities decoded, tags inside it (<code>, <span>) dropped;
    nothing inside an element that is not shown (hidden, display:none, <template>, comments: never data)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.depth = 0
        self.blocks: list[tuple[str, str]] = []
        self.current: list[str] = []
        self.info = ""
        self.hiding: tuple[str, int] | None = None  # the element that hides, and how deep its name is nested

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self.hiding is not None:
            if tag == self.hiding[0]:
                self.hiding = (tag, self.hiding[1] + 1)
            return
        if tag not in VOID and unshown(tag, attrs):
            self.hiding = (tag, 1)
            return
        if tag == "pre":
            self.depth += 1
            self.current, self.info = [], ""
        if self.depth and tag in ("pre", "code"):
            classes = " ".join(v or "" for k, v in attrs if k == "class")
            if m := re.search(r"language-([\w-]+)", classes):
                self.info = m.group(1).lower()
        if self.depth and tag == "br":
            self.current.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if self.hiding is not None:
            if tag == self.hiding[0]:
                self.hiding = (tag, self.hiding[1] - 1) if self.hiding[1] > 1 else None
            return
        if tag == "pre" and self.depth:
            self.depth -= 1
            if not self.depth:
                self.blocks.append((self.info, "".join(self.current)))

    def handle_data(self, data: str) -> None:
        if self.depth and self.hiding is None:
            self.current.append(data)


def blocks(text: str, html: bool) -> list[tuple[str, str]]:
    if html:
        parser = _Pre()
        parser.feed(text)
        parser.close()
        return parser.blocks
    # a fence inside an HTML comment is no code block (CommonMark: the comment runs to `-->`), nor is one
    # inside a hiding element a Markdown page carries as raw HTML
    return _fenced(_shown_markdown(text))


def _shown_markdown(text: str) -> str:
    """A Markdown page less its HTML comments and the content of its raw HTML elements that are not shown."""
    text = _COMMENT.sub("", text)
    out, position = [], 0
    opening = re.compile(r"<([A-Za-z][A-Za-z0-9-]*)(\s[^<>]*)?>")
    while (match := opening.search(text, position)) is not None:
        tag = match.group(1).lower()
        attrs = [
            (m.group(1).lower(), m.group(2) or m.group(3) or m.group(4) or "")
            for m in re.finditer(r'([A-Za-z-]+)(?:\s*=\s*(?:"([^"]*)"|\'([^\']*)\'|([^\s>]+)))?', match.group(2) or "")
        ]
        if tag in VOID or not unshown(tag, attrs):
            out.append(text[position : match.end()])
            position = match.end()
            continue
        close = re.compile(rf"<(/?){re.escape(tag)}\b[^>]*>", re.IGNORECASE)
        depth, cursor = 1, match.end()
        while depth and (found := close.search(text, cursor)) is not None:
            depth += -1 if found.group(1) else 1
            cursor = found.end()
        out.append(text[position : match.start()])
        position = cursor if not depth else len(text)
    out.append(text[position:])
    return "".join(out)


def _console(body: str) -> str | None:
    """A block's shell text: a console's prompts (`$ `, `# `, `user@host:~$ `) taken off, except in a script
    (a `#!` first line: its `# ` lines are comments) or a block with lines that have none (there a bare `# `
    starts a comment), and kept where taking them off leaves no shell text; None when neither reads."""
    lines = [line for line in body.splitlines() if line.strip()]
    prompts = PROMPT if all(PROMPT.match(line) for line in lines) else NOT_A_COMMENT
    tries = [body] if body.lstrip().startswith("#!") else [prompts.sub("", body), body]
    for text in tries:
        try:
            shell.read(text)
        except BadInput:
            continue
        return text
    return None


def find(text: str, html: bool, where: str) -> Found:
    """Every engine command in the page's code blocks, in page order."""
    found = Found()
    variables: dict[str, str] = {}
    unread = 0
    launching: list[str] = []  # the kind of each block that held a launch
    for number, (info, body) in enumerate(blocks(text, html), 1):
        at = f"code block {number}"
        if info in YAML_INFO or (info == "" and re.search(r"^services:\s*$", body, re.MULTILINE)):
            try:
                data = yaml.safe_load(body)
            except yaml.YAMLError:
                data = None
            if compose.is_compose(data):
                inner = compose.find(data, where)
                for launch in inner.launches:
                    launch.where = f"{at}, {launch.where}"
                launching += ["compose"] if inner.launches else []
                found.launches += inner.launches
                found.ignored += inner.ignored
                continue
        if systemd_unit.is_unit(body):  # a unit file's text (an ini block, say): its ExecStart= lines
            inner = systemd_unit.find(body, where)
            for launch in inner.launches:
                launch.where = f"{at}, {launch.where}"
            launching += ["unit"] if inner.launches else []
            found.launches += inner.launches
            continue
        if info not in SHELL_INFO:
            continue
        body = _console(body.replace("\u00a0", " "))  # a rendered page's no-break spaces are blanks
        if body is None:  # no shell text (output, a fragment): the session is left as it was
            unread += 1
            continue
        count = len(found.launches)
        try:
            _, known = launches.find(body, f"{at}, line", variables, into=found)
        except BadInput as exc:
            found.elsewhere.append(f"{at}: {exc.problem}")
            continue
        variables = dict(known.scalars)
        launching += ["shell"] if len(found.launches) > count else []
    # a page whose launches are one compose block's services imports them all, as that file would
    found.together = launching == ["compose"]
    if unread and not found.launches:
        found.elsewhere.append(f"{unread} code block(s) of the page are not shell text sparkplay can read")
    return found
