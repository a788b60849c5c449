"""The shell reader proper (pasted/shell.py is its entry): tokens to statements, as bash would run them and
without running anything. Words gather until an operator ends a command; assignments apply in order; a
function's body is read where the text calls it, a sourced file where it is sourced, a case on a settled word
takes its branch; what depends on the machine (a condition it cannot settle, a loop) is read straight through,
and the import says so."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from sparkplay.errors import BadInput
from sparkplay.recipes.importers.pasted import shell_eval as ev
from sparkplay.recipes.importers.pasted.shell_eval import CONTROL, Case, If, block, glob_escape, matches, test
from sparkplay.recipes.importers.pasted.shell_vars import ASSIGN, Variables, assign, assigned
from sparkplay.recipes.importers.pasted.shell_words import REDIRECTS, UNKNOWN, Word, lex

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BLOCK_OPEN = {"case": "esac"}
MAX_TEXT = 1 << 20
MAX_CALLS = 8  # functions called inside functions: deeper than this is not read
MAX_STEPS = 200_000  # tokens read in all, each loop's pass and each call counted


@dataclass
class Statement:
    """One simple command: its words expanded, the line it starts on, and what the text did around it."""

    words: list[str]
    line: int
    background: bool = False
    redirected: bool = False
    piped: bool = False
    depth: int = 0  # inside if/while/for bodies


@dataclass
class Script:
    statements: list[Statement]
    control_flow: bool  # if/while/for read straight through, function bodies and unsettled cases skipped
    variables: Variables
    branches: list[str] = field(default_factory=list)  # the cases, functions and sources it read, said
    arguments: list[str] | None = None  # the arguments it was read as run with (None: none)

    def said(self) -> list[str]:
        """How the text was read, for the import's notes."""
        notes = list(dict.fromkeys(self.branches))
        if self.arguments is not None:
            notes.append(f"read as run with the arguments {shlex.join(self.arguments)}")
        elif self.variables.without_arguments:
            notes.append(f"read as run with no arguments: {', '.join(dict.fromkeys(self.variables.without_arguments))}")
        if self.control_flow:
            notes.append(
                "the text has if/while/for/case or functions: sparkplay read its statements in order, without "
                "running its conditions or loops"
            )
        return notes


def tokens(text: str) -> list[tuple[str, Word | str, int]]:
    if len(text) > MAX_TEXT:
        raise BadInput("the text is larger than 1 MiB", "a command or script is small; check the input")
    return list(lex(text.replace("\r\n", "\n")))  # a file saved on Windows: its line ends are the same lines


class Reader:
    """Tokens to statements: words gather until an operator ends the command; blocks that run only when
    called (functions) or depend on a condition are skipped or marked; assignments are kept as they come."""

    def __init__(self, variables: Variables, load: Callable[[str], tuple[str, str] | None] | None) -> None:
        self.variables = variables
        self.load = load
        self.statements: list[Statement] = []
        self.control = False  # the text has conditions, loops or functions: not one straight line
        self.words: list[Word] = []
        self.skip_until: list[str] = []  # the words that close the blocks being skipped
        self.depth = 0  # how many conditions or loops a statement sits in
        self.start_line = 1
        self.redirected = self.piped = False
        self.cases: list[Case] = []
        self.branches: list[str] = []
        self.functions: dict[str, list[tuple[str, Word | str, int]]] = {}
        self.calls = 0  # how many function bodies are being read inside each other (bounded)
        self.ifs: list[If] = []
        self.status: bool | None = None  # the last command's, where it follows from the text (a settled test)
        self.skip_next = False  # the && or || after it decided the next command does not run
        self.tests: list[str] = []  # the settled tests followed, said
        self.steps = 0  # tokens read, loops and calls and sources counted in: bounded

    def read(self, items: list[tuple[str, Word | str, int]]) -> Script:
        self._feed(items)
        self.piped = False
        self.end("\n")
        tested = [f"its tests on values it sets were followed: {'; '.join(self.tests[:4])}"] if self.tests else []
        return Script(self.statements, self.control, self.variables, self.branches + tested)

    def _feed(self, items: list[tuple[str, Word | str, int]]) -> None:
        after_redirect = False
        at = 0
        while at < len(items):
            _, item, line = items[at]
            at += 1
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise BadInput(
                    f"the text takes more than {MAX_STEPS} words to read (loops and calls inside each other)",
                    "give the engine's command line as it runs",
                )
            if self.cases and not self.skip_until and self._case(item):
                continue
            if not self.skip_until and (after := self._definition(items, at - 1)) is not None:
                at = after  # name() { ... }: its body is read where the text calls it
                continue
            if not self.skip_until and (after := self._for(items, at - 1)) is not None:
                at = after  # for NAME in a settled list: its body read once for each
                continue
            if item == "(" and len(self.words) == 1 and at < len(items) and items[at][1] == ")":
                self.words = []  # a function of another form (a subshell body): never read
                self.skip_until.append("}")
                self.control = True
                continue
            if isinstance(item, Word):
                if after_redirect:
                    after_redirect = False
                    continue
                if not self.words:
                    self.start_line = line
                self.words.append(item)
                if len(self.words) == 3 and self.words[0].raw() == "case" and item.raw() == "in":
                    self.end("\n")  # `case WORD in pattern) ...` on one line: the patterns follow
                continue
            if item in REDIRECTS:
                self.redirected = True
                after_redirect = item != "<<"  # a here-document's delimiter was read with it
                continue
            if item in ("(", ")", ";;"):
                self.end(";")
                continue
            self.piped = item in ("|", "|&")
            self.end(item)

    def active(self) -> bool:
        """Whether a command here runs: every if around it is in a branch that runs (or read straight)."""
        return all(frame.state in ("run", "straight") for frame in self.ifs)

    def _for(self, items: list[tuple[str, Word | str, int]], at: int) -> int | None:
        """At `for NAME in WORDS; do BODY; done` whose words are settled (at most 64): the body read once for
        each, NAME set to it, and the index after `done`; else None (the loop is read once, straight)."""
        item = items[at][1]
        keywords = all(w.raw() in CONTROL for w in self.words)
        if not (isinstance(item, Word) and item.raw() == "for" and keywords and self.active()):
            return None
        heads = [t[1] for t in items[at + 1 : at + 3]]
        if len(heads) < 2 or not isinstance(heads[0], Word) or not isinstance(heads[1], Word) or heads[1].raw() != "in":
            return None
        name, i, listed = heads[0].raw(), at + 3, []
        while i < len(items) and isinstance(word := items[i][1], Word):
            listed.append(word)
            i += 1
        globbed = any(not p.quoted and re.search(r"[*?\[]", p.text) for w in listed for p in w.pieces)
        values = [v for word in listed for v in self.variables.expand(word)]
        while i < len(items) and items[i][1] in (";", "\n"):
            i += 1
        body = block(items, i, "do", "done")
        unsettled = globbed or len(values) > 64 or any(UNKNOWN in v for v in values)  # a glob: the machine's files
        if body is None or unsettled or not _NAME.fullmatch(name):
            return None
        self.end("\n")  # the keywords before it (`then for ...`)
        for value in values:
            self.variables.scalars[name] = value
            self._feed(items[i + 1 : body])
            self.end("\n")
        self.branches.append(f"its loop over {shlex.join(values)[:60] or 'nothing'} read once for each")
        return body + 1

    def _definition(self, items: list[tuple[str, Word | str, int]], at: int) -> int | None:
        """At `name() {`, `function name {` or `function name() {`: the body kept under its name, and the index
        after its closing `}`; else None."""
        item = items[at][1]
        if item == "(" and len(self.words) == 1 and at + 1 < len(items) and items[at + 1][1] == ")":
            name, i = self.words[0].raw(), at + 2
        elif isinstance(item, Word) and item.raw() == "function" and not self.words and at + 1 < len(items):
            name, i = str(items[at + 1][1].raw()) if isinstance(items[at + 1][1], Word) else "", at + 2
            i += 2 if items[i : i + 2] and [t[1] for t in items[i : i + 2]] == ["(", ")"] else 0
        else:
            return None
        while i < len(items) and items[i][1] == "\n":
            i += 1
        close = block(items, i, "{", "}") if name else None
        if close is None:
            return None
        self.functions[name], self.words = items[i + 1 : close], []
        return close + 1

    def _source(self, path: str, arguments: list[str]) -> bool:
        """`source FILE` of a file the origin may read: its text read here, as bash runs it in this shell."""
        load = self.load if self.calls < MAX_CALLS else None
        full, loaded = ev.places(self.variables.cwd, self.variables.script, path, load)
        if loaded is None:
            return False
        text, named = loaded
        sources = self.variables.arrays.get("BASH_SOURCE", [])
        saved = (self.words, self.start_line, self.redirected, self.piped, self.variables.positional, sources)
        self.words, self.redirected, self.piped = [], False, False
        self.variables.positional = arguments or self.variables.positional
        self.variables.arrays["BASH_SOURCE"] = [full, *sources]
        self.calls += 1
        self._feed(tokens(text))
        self.end("\n")
        self.calls -= 1
        self.words, self.start_line, self.redirected, self.piped, self.variables.positional, sources = saved
        self.variables.arrays["BASH_SOURCE"] = sources
        self.branches.append(f"read {named} where the text sources it")
        return True

    def _call(self, name: str, arguments: list[str]) -> None:
        """A function the text defined, called: its body read here, its $1... the call's arguments."""
        saved = (self.words, self.start_line, self.redirected, self.piped, self.variables.positional)
        self.words, self.redirected, self.piped, self.variables.positional = [], False, False, arguments
        self.calls += 1
        self._feed(self.functions[name])
        self.end("\n")
        self.calls -= 1
        self.words, self.start_line, self.redirected, self.piped, self.variables.positional = saved
        said = f"the function {name} read where the text calls it"
        self.branches += [said] if said not in self.branches else []

    def _case(self, item: Word | str) -> bool:
        """A token of a settled case's patterns or skipped body, consumed; in a body that runs, its `;;` ends it
        (the tokens between are read as any other)."""
        case = self.cases[-1]
        if case.phase == "run":
            if item in (";;", ";&", ";;&"):
                self.end(";")
                case.phase, case.patterns = "patterns", [""]
                return True
            return False
        starts, case.at_start = case.at_start, not isinstance(item, Word)
        if isinstance(item, Word) and starts and item.raw() == "esac":
            if case.nested:
                case.nested -= 1
            elif case.phase == "patterns" or case.phase == "skip":
                self.cases.pop()
            return True
        if case.phase == "skip":
            case.nested += isinstance(item, Word) and starts and item.raw() == "case"
            if item in (";;", ";&", ";;&") and not case.nested:
                case.phase, case.patterns = "patterns", [""]
            return True
        if isinstance(item, Word):  # a quoted part matches itself; an unquoted one is a glob
            case.patterns[-1] += "".join(
                glob_escape(self.variables.text(Word([p]))) if p.quoted else self.variables.text(Word([p]))
                for p in item.pieces
            )
        elif item == "|":
            case.patterns.append("")
        elif item == ")":
            hit = next((p for p in case.patterns if matches(case.subject, p)), None)
            case.phase = "run" if hit is not None and not case.taken else "skip"
            if case.phase == "run":
                case.taken, case.at_start = True, True
                self.branches.append(f"its case on {case.subject!r} took the branch {'|'.join(case.patterns)})")
        return True

    def end(self, op: str) -> None:
        """The command gathered so far ends at `op`: a block's opening or closing word, or a statement."""
        if self.words:
            first = self.words[0].raw()
            if self.skip_until:
                if first == self.skip_until[-1]:
                    self.skip_until.pop()
                elif first in _BLOCK_OPEN:  # a case in a skipped block: its esac is its own
                    self.skip_until.append(_BLOCK_OPEN[first])
            elif first == "esac" and self.cases:  # a running branch's case ends without a `;;`
                self.cases.pop()
            elif first == "case" and (case := self._settled_case()) is not None:
                self.cases.append(case)
            elif first in _BLOCK_OPEN:
                self.skip_until.append(_BLOCK_OPEN[first])
                self.control = True
            elif first == "function":
                self.skip_until.append("}")
                self.control = True
            else:
                self.statement(self.words, op, self.start_line)
        self.words, self.redirected = [], False

    def _settled_case(self) -> Case | None:
        """`case WORD in`, its word known (a script's `${1:-preset}`): matched; else None (skipped)."""
        if len(self.words) != 3 or self.words[2].raw() != "in":
            return None
        subject = self.variables.text(self.words[1])
        return None if UNKNOWN in subject else Case(subject)

    def statement(self, ws: list[Word], op: str, line: int) -> None:
        skipped, self.skip_next = self.skip_next, False
        condition = False
        while ws and ws[0].raw() in CONTROL and ws[0].raw() not in ("!", "[["):
            keyword = ws.pop(0).raw()
            if keyword in ("if", "elif", "then", "else", "fi"):
                condition = self._branch(keyword) or (condition and keyword not in ("then", "else", "fi"))
                continue
            self.control = True
            if keyword in ("while", "until", "for"):
                self.depth += 1
                return  # a loop head (one the reader could not run): run nothing from it
            if keyword == "done":
                self.depth = max(0, self.depth - 1)
        if skipped or not ws:
            self._chain(op)
            return
        if condition or (self.ifs and self.ifs[-1].state == "cond"):  # a condition: its status, nothing run
            if self.active() or self.ifs[-1].state == "cond":
                self._tested([text for word in ws for text in self.variables.expand(word)])
            self._chain(op)
            return
        if not self.active():
            return
        self.status = True  # an assignment alone succeeds; any other command is unknown until it is tested
        self._run(ws, op, line)
        self._chain(op)

    def _branch(self, keyword: str) -> bool:
        """An if's keyword: its frame moves on; True where a condition follows (if, elif)."""
        if keyword == "if":
            self.depth += 1
            self.ifs.append(If("cond" if self.active() else "done"))
            return True
        if not self.ifs:
            return False
        frame = self.ifs[-1]
        if keyword == "fi":
            self.ifs.pop()
            self.depth = max(0, self.depth - 1)
        elif keyword == "then" and frame.state == "cond":
            decided = None if frame.straight else self.status
            frame.state = "straight" if decided is None else ("run" if decided else "skip")
            self.control = self.control or decided is None
        elif keyword == "elif":
            frame.state, frame.straight = (
                ("cond", True)
                if frame.state == "straight"
                else (("cond", False) if frame.state == "skip" else ("done", False))
            )
            return frame.state == "cond"
        elif keyword == "else":
            frame.state = {"skip": "run", "straight": "straight"}.get(frame.state, "done")
        return False

    def _tested(self, words: list[str]) -> None:
        self.status = test(words)
        if self.status is not None and words[-1] not in ("true", "false", ":"):  # `true` alone: nothing to say
            said = f"{' '.join(words)[:50]} is {str(self.status).lower()}"
            self.tests += [said] if said not in self.tests else []

    def _chain(self, op: str) -> None:
        """`A && B` runs B where A succeeded, `A || B` where it failed: decided where A's status is known."""
        self.skip_next = (op == "&&" and self.status is False) or (op == "||" and self.status is True)
        if op not in ("&&", "||"):
            self.status = None if op == "|" else self.status

    def _run(self, ws: list[Word], op: str, line: int) -> None:
        """A command that runs: its assignments kept, or its words as a statement."""
        assignments = []
        while ws and ASSIGN.match(ws[0].raw()):
            assignments.append(ws.pop(0))
        if not ws:
            for word in assignments:
                assign(self.variables, word)
            return
        variables = self.variables
        prefix = [f"{w.raw().split('=', 1)[0].rstrip('+')}={assigned(variables, w)}" for w in assignments]
        expanded = [text for word in ws for text in variables.expand(word)]
        if expanded and expanded[0] in ("export", "readonly", "declare", "local", "typeset"):
            for word in ws[1:]:
                if ASSIGN.match(word.raw()):
                    assign(variables, word)
            self.statements.append(Statement(expanded, line, depth=self.depth))
            return
        if expanded and expanded[0] in self.functions and not prefix and self.calls < MAX_CALLS:
            self._call(expanded[0], expanded[1:])
            return
        if expanded[:1] == ["cd"]:  # where a relative path leads from here, while the text says it
            self.variables.cwd = ev.resolved(self.variables.cwd, expanded[1]) if len(expanded) == 2 else None
        if expanded[:1] in (["source"], ["."]) and len(expanded) > 1 and self._source(expanded[1], expanded[2:]):
            return
        if expanded[expanded[:1] == ["!"] :][:1] in (["["], ["[["], ["test"], ["true"], ["false"], [":"]):
            self._tested(expanded)
        else:
            self.status = None
        argv = [*prefix, *expanded]
        self.statements.append(Statement(argv, line, op == "&", self.redirected, self.piped, self.depth))
