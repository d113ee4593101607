"""A conversation's marked render from a cached render of its *shape*: its text pasted into the slots it fills.

Most samples of a data set share a handful of shapes (roles, content item types, part names) and differ only
in their text. Where a template can be shown to write each text item (``item['text']``) only verbatim, with
nothing else in the template reading it, the render of a conversation is the render of its shape (every text
replaced by a placeholder) with the placeholders replaced by the texts: the template takes the same branches
(no branch can depend on a text it never reads), so it writes the same literal pieces around them.
``TextSlots`` renders each shape once through ``MarkedTemplate`` (HF's own compiled environment), keeps the
pieces, and pastes the next conversation of that shape into them without running Jinja::

    shape    [user: image img0.jpg, text #0], [assistant: text #1]
    render   <MARK><|im_start|>system...<|im_start|>user\\n<|vision_start|>...<|vision_end|>\\ue0030\\ue004<|im_end|>\\n
             <MARK><|im_start|>assistant\\n\\ue0031\\ue004<|im_end|>\\n
    pieces   ["<|im_start|>system...<|vision_end|>", 0, "<|im_end|>\\n", MARK, "<|im_start|>assistant\\n", 1, ...]

The proof (``verbatim_text``) is on the template's syntax tree: a text item's ``text`` may be written by
``{{ ... }}`` as it is, or meet a test that holds for every string (``is string``, ``is defined``); any other
use (a filter, ``+``, a comparison, ``in``, truthiness, a call, a ``set`` of it, a write inside a block that
captures its output) leaves the template unproven. The messages, their content lists and items may be read
only by constant keys (so a loop cannot reach a text by another name), key tests (``'text' in item``) and
truthiness. Served are conversations whose messages hold only strings and lists of items that hold only
strings (what ``conversation.parse_conversation`` gives); anything else, a text holding ``MARK`` or a
placeholder character, and any shape whose render raises is left to ``MarkedTemplate.render``.
``TextSlots.build`` also checks the pasted render against the marked one on probe conversations.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from jinja2 import nodes

from .turn_marks import MARK, MarkedTemplate, template_tree

__all__ = ["TextSlots", "verbatim_text"]

_OPEN, _CLOSE = "\ue003", "\ue004"  # private-use characters around a placeholder's slot number
_SLOT = re.compile(f"{_OPEN}(\\d+){_CLOSE}")
_FREE = re.compile(f"[{MARK}{_OPEN}{_CLOSE}]")  # a text holding any of these is not served
_TURN = object()  # a piece that marks where the next message's turn starts
_CACHE = 4096  # shapes kept; past it the cache starts again (a data set with more shapes gains little anyway)

# what an expression in the template may hold: the message list, a message, its content, a content item, the
# text of an item, or the truth of one of the first four (``a and b`` returns an operand); None: anything else
_MSGS, _MSG, _CONTENT, _ITEM, _TEXT, _BOOL = "messages", "message", "content", "item", "text", "bool"
_CONTAINERS = frozenset({_MSG, _CONTENT, _ITEM})
# tests whose answer is the same for every string (jinja2/tests.py): a text may meet these
_STRING_TESTS = frozenset({"defined", "undefined", "none", "string", "mapping", "sequence", "iterable", "number",
                           "integer", "float", "boolean", "callable"})  # fmt: skip
_DICT_METHODS = frozenset(name for name in dir(dict) if not name.startswith("_"))
_CAPTURING = (nodes.AssignBlock, nodes.FilterBlock, nodes.Macro, nodes.CallBlock)  # output that is not the output


class _Unproven(Exception):
    """A use of a text (or of what holds one) that the proof does not cover."""


def verbatim_text(template: str) -> bool:
    """Whether ``template`` writes every text item only verbatim and reads it nowhere else (module doc)."""
    tree = template_tree(template)
    if tree is None:
        return False
    try:
        _Proof(tree).check()
    except _Unproven:
        return False
    return True


class _Proof:
    """The walk over a template's tree that ``verbatim_text`` runs: names' kinds to a fixed point, then every
    expression in its context."""

    def __init__(self, tree: nodes.Template) -> None:
        self.tree = tree
        self.names: dict[str, str | None] = {"messages": _MSGS}

    def check(self) -> None:
        for _ in range(8):  # kinds flow through `set` and `for`: repeat until no name changes kind
            before = dict(self.names)
            self._statements(self.tree.body, captured=False)
            if self.names == before:
                return
        raise _Unproven("names kept changing kind")

    def _bind(self, target: nodes.Node, kind: str | None) -> None:
        if isinstance(target, nodes.Name):
            if target.name == "messages" or target.name == "loop":
                raise _Unproven(f"assigns {target.name}")
            old = self.names.get(target.name)
            if kind is not None and old is not None and old != kind:
                raise _Unproven(f"{target.name} holds both a {old} and a {kind}")
            self.names[target.name] = kind if kind is not None else old
        elif kind is not None:  # tuple unpacking of a message, a content list, ...; an attribute of a namespace
            raise _Unproven("unpacks or stores what holds a text")

    def _statements(self, body: Sequence[nodes.Node], *, captured: bool) -> None:
        for node in body:
            self._statement(node, captured=captured)

    def _statement(self, node: nodes.Node, *, captured: bool) -> None:
        if isinstance(node, nodes.Output):
            for child in node.nodes:
                if isinstance(child, nodes.TemplateData):
                    continue
                kind = self._expr(child)
                if kind == _TEXT and captured:
                    raise _Unproven("a text written inside a block whose output is captured")
                if kind not in (None, _TEXT):
                    raise _Unproven(f"writes a {kind}")
        elif isinstance(node, nodes.If):
            self._test(node.test)
            content_is_string = self._content_is_string(node.test)
            if content_is_string is not True:  # a served content is a list: `is string` is False on it
                self._statements(node.body, captured=captured)
            if content_is_string is not False:
                for branch in node.elif_:
                    self._statement(branch, captured=captured)
                self._statements(node.else_, captured=captured)
        elif isinstance(node, nodes.For):
            iterated = self._expr(node.iter)
            item = {None: None, _MSGS: _MSG, _CONTENT: _ITEM}.get(iterated, _TEXT)
            if item == _TEXT:
                raise _Unproven(f"iterates a {iterated}")
            self._bind(node.target, item)
            if node.test is not None:
                self._test(node.test)
            self._statements(node.body, captured=captured)
            self._statements(node.else_, captured=captured)
        elif isinstance(node, nodes.Assign):
            kind = self._expr(node.node)
            if kind == _BOOL:
                raise _Unproven("stores the truth of what holds a text")
            self._bind(node.target, kind)
        elif isinstance(node, _CAPTURING):
            for child in node.iter_child_nodes():
                if isinstance(child, nodes.Expr) and self._expr(child) is not None:
                    raise _Unproven(f"passes what holds a text to a {type(node).__name__}")
            self._statements(node.body, captured=True)
        elif isinstance(node, nodes.Scope | nodes.ScopedEvalContextModifier | nodes.EvalContextModifier):
            self._statements(node.body, captured=captured)
        elif isinstance(node, nodes.ExprStmt):  # {% do ... %}
            if self._expr(node.node) is not None:
                raise _Unproven("calls into what holds a text")
        elif isinstance(node, nodes.Continue | nodes.Break):
            return
        else:  # Include, Import, Extends, Block, With, ...: not walked, so not proven
            raise _Unproven(f"a {type(node).__name__} statement")

    def _content_is_string(self, test: nodes.Expr) -> bool | None:
        """True for a test ``content is string`` on a content list, False for its negation, else None: a served
        conversation's content is always a list (``_shape``), so the branch such a test opens never runs."""
        negated = False
        while isinstance(test, nodes.Not):
            test, negated = test.node, not negated
        if isinstance(test, nodes.Test) and test.name == "string" and not test.args and not test.kwargs \
                and self._expr(test.node) == _CONTENT:  # fmt: skip
            return not negated
        return None

    def _test(self, node: nodes.Expr) -> None:
        """An ``if`` test: a text's truth depends on it (empty or not), a container's only on its shape."""
        if self._expr(node) == _TEXT:
            raise _Unproven("tests a text's truth")

    def _expr(self, node: nodes.Node) -> str | None:
        """The kind of ``node``'s value; raises ``_Unproven`` where it uses a text or its holder otherwise."""
        if isinstance(node, nodes.Name):
            return self.names.get(node.name)
        if isinstance(node, nodes.Getattr | nodes.Getitem):
            return self._member(node)
        if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Getattr) and node.node.attr == "get":
            holder = self._expr(node.node.node)
            if holder in (_MSG, _ITEM):  # message.get('content'), item.get('text', '')
                if node.kwargs or node.dyn_args or node.dyn_kwargs or not 1 <= len(node.args) <= 2 \
                        or not all(isinstance(a, nodes.Const) for a in node.args):  # fmt: skip
                    raise _Unproven("get with a key that is not a constant")
                return self._key(holder, node.args[0].value)
        if isinstance(node, nodes.Test):
            kind = self._expr(node.node)
            if kind is not None and node.name not in _STRING_TESTS:
                raise _Unproven(f"tests a {kind} with {node.name}")
            return self._plain([*node.args, *node.kwargs, node.dyn_args, node.dyn_kwargs])
        if isinstance(node, nodes.Compare) and len(node.ops) == 1 and node.ops[0].op in ("in", "notin") \
                and isinstance(node.expr, nodes.Const) and self._expr(node.ops[0].expr) in (_MSG, _ITEM):  # fmt: skip
            return None  # 'text' in item: a key test on a dict whose keys the shape holds
        if isinstance(node, nodes.Not):
            return _BOOL if self._expr(node.node) in (*_CONTAINERS, _BOOL) else self._plain([node.node])
        if isinstance(node, nodes.And | nodes.Or):
            kinds = {self._expr(node.left), self._expr(node.right)}
            if _TEXT in kinds or _MSGS in kinds:
                raise _Unproven("the truth of a text")
            return _BOOL if kinds - {None} else None
        if isinstance(node, nodes.CondExpr):
            self._test(node.test)
            if self._plain([node.expr1, *([node.expr2] if node.expr2 else [])]) is not None:
                raise _Unproven("a conditional expression's value holds a text")
            return None
        return self._plain(list(node.iter_child_nodes()))

    def _plain(self, children: Sequence[nodes.Node | None]) -> None:
        """None where no child holds a text, a message, a content list or an item; else unproven."""
        for child in children:
            if isinstance(child, nodes.Helper):  # Operand, Keyword, Pair: the expressions they hold
                self._plain(list(child.iter_child_nodes()))
            elif isinstance(child, nodes.Expr) and (kind := self._expr(child)) is not None:
                raise _Unproven(f"uses a {kind} in {child}")
        return None

    def _member(self, node: nodes.Getattr | nodes.Getitem) -> str | None:
        holder = self._expr(node.node)
        if isinstance(node, nodes.Getattr):
            key: object = node.attr
            if isinstance(node.node, nodes.Name) and node.node.name == "loop" and key in ("previtem", "nextitem"):
                raise _Unproven(f"loop.{key}: a message or item by another name")
        elif holder == _MSGS and isinstance(node.arg, nodes.Slice):
            self._plain(list(node.arg.iter_child_nodes()))
            return _MSGS  # messages[1:] (Gemma's loop_messages)
        elif isinstance(node.arg, nodes.Const):
            key = node.arg.value
        else:
            if holder is not None:
                raise _Unproven(f"reads a {holder} by a key that is not a constant")
            return self._plain([node.arg])
        if holder == _BOOL:
            raise _Unproven(f"reads {key!r} of the truth of what holds a text")
        return None if holder is None else self._key(holder, key)

    @staticmethod
    def _key(holder: str, key: object) -> str | None:
        if holder == _MSGS:
            if key == 0:
                return _MSG  # messages[0] (turn_marks proves no other read of messages)
            raise _Unproven(f"messages[{key!r}]")
        if holder == _CONTENT:
            if isinstance(key, int) and not isinstance(key, bool):
                return _ITEM
            raise _Unproven(f"content[{key!r}]")
        if holder == _TEXT:
            raise _Unproven(f"reads {key!r} of a text")
        if isinstance(key, str) and key in _DICT_METHODS:
            raise _Unproven(f"a {holder}'s method {key}")
        if holder == _MSG:
            return _CONTENT if key == "content" else None
        return _TEXT if key == "text" else None  # an item


def _shape(messages: Sequence[dict]) -> tuple[tuple, list[str]] | None:
    """A conversation's shape (hashable: its messages with every item's text left out) and its texts in order;
    None where a message holds anything but strings and lists of items of strings."""
    shape, texts = [], []
    for message in messages:
        if type(message) is not dict:
            return None
        fields = []
        for name, value in message.items():
            if type(name) is not str:
                return None
            if type(value) is str and name != "content":  # content is a list: the proof leans on it
                fields.append((name, value))
            elif name == "content" and type(value) is list:
                items = []
                for item in value:
                    if type(item) is not dict:
                        return None
                    entries = []
                    for key, field in item.items():
                        if type(key) is not str or type(field) is not str:
                            return None
                        if key == "text":
                            entries.append((key, None))
                            texts.append(field)
                        else:
                            entries.append((key, field))
                    items.append(tuple(entries))
                fields.append((name, tuple(items)))
            else:
                return None
        shape.append(tuple(fields))
    return tuple(shape), texts


def _placeheld(shape: tuple) -> list[dict]:
    """The conversation of ``shape`` with text ``i`` written as its placeholder."""
    slots = iter(range(1 << 30))
    return [{name: [{key: f"{_OPEN}{next(slots)}{_CLOSE}" if key == "text" else field for key, field in item}
                    for item in value] if name == "content" and isinstance(value, tuple) else value
             for name, value in message} for message in shape]  # fmt: skip


class TextSlots:
    """``MarkedTemplate.render`` for a template proven to write texts verbatim, from one render per shape."""

    __slots__ = ("_marked", "_pieces")

    def __init__(self, marked: MarkedTemplate) -> None:
        self._marked = marked
        self._pieces: dict[tuple, list | None] = {}  # shape -> its pieces (str, a text's index, _TURN); None: not served

    @property
    def shapes(self) -> int:
        """How many shapes' pieces are kept."""
        return len(self._pieces)

    @classmethod
    def build(cls, marked: MarkedTemplate, template: str, probes: Sequence[Sequence[dict]]) -> TextSlots | None:
        """The slots, or None where the template is not proven (``verbatim_text``) or a probe renders otherwise."""
        if not verbatim_text(template):
            return None
        slots = cls(marked)
        for probe in probes:
            found = slots.render(probe)
            if found is not None and found != marked.render(probe):
                return None
        return slots

    def render(self, messages: Sequence[dict]) -> tuple[str, list[int]] | None:
        """``MarkedTemplate.render(messages)``, pasted into its shape's pieces where it has them; else rendered."""
        found = _shape(messages)
        if found is None:
            return self._marked.render(messages)
        shape, texts = found
        if any(_FREE.search(text) for text in texts):
            return self._marked.render(messages)
        pieces = self._pieces.get(shape, False)
        if pieces is False:
            pieces = self._cut(shape, len(texts))
            if len(self._pieces) >= _CACHE:
                self._pieces.clear()
            self._pieces[shape] = pieces
        if pieces is None:
            return self._marked.render(messages)
        out: list[str] = []
        starts: list[int] = []
        at = 0
        for piece in pieces:
            if piece is _TURN:
                starts.append(at)
                continue
            text = texts[piece] if type(piece) is int else piece
            out.append(text)
            at += len(text)
        return "".join(out), self._marked.starts(len(messages), starts)

    def _cut(self, shape: tuple, n_texts: int) -> list | None:
        """The pieces of ``shape``'s marked render, or None where it raises, or holds a placeholder's characters
        anywhere but in a whole placeholder, or writes a text other than once in order (then: rendered each time)."""
        try:
            raw = self._marked.render_marked(_placeheld(shape))
        except Exception:  # noqa: BLE001 - the render of the real conversation raises it again, where it is reported
            return None
        if raw is None:
            return None
        pieces: list = []
        at = 0
        for match in _SLOT.finditer(raw):
            pieces.extend(_split_marks(raw[at : match.start()]))
            pieces.append(int(match.group(1)))
            at = match.end()
        pieces.extend(_split_marks(raw[at:]))
        if any(_OPEN in p or _CLOSE in p for p in pieces if isinstance(p, str)):
            return None
        if [p for p in pieces if type(p) is int] != list(range(n_texts)):
            return None  # a text written twice or left out: verbatim still, but kept simple
        return pieces


def _split_marks(text: str) -> list:
    """``text`` as its pieces between marks, each mark a ``_TURN``."""
    out: list = []
    for index, part in enumerate(text.split(MARK)):
        if index:
            out.append(_TURN)
        if part:
            out.append(part)
    return out
