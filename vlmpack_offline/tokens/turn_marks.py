"""One render of a conversation that also tells where each message's turn starts, for templates that allow it.

``spans.assistant_spans`` locates assistant turn ``i`` from two prefix renders (``messages[:i]`` with the
generation prompt, ``messages[:i+1]`` without). Most published templates are one loop over the messages
whose body reads only the current message (and what earlier iterations left in a namespace), followed by
a generation prompt that is the same text every time. For such a template the render of ``messages[:k]``
IS the full render cut where the loop's iteration ``k`` starts, and the generation prompt is that cut
plus a constant ``G``; so every prefix render the exact search asks for is a slice of the one full render.

``MarkedTemplate`` proves that shape from the template's Jinja syntax tree (``streams_messages``), then
compiles the same tree with one extra output at the top of the loop body: a private-use character
(``MARK``) that no template or text writes. One render with it gives the full text (the marks taken
out: they are the only change, written straight to the output, never read back) and each iteration's
start. Where the proof fails (a look-ahead such as ``loop.last`` or ``messages[-1]``, a preamble that
walks every message as Qwen3's ``last_query_index`` does, a generation prompt that depends on the
messages, output after the loop) there is no ``MarkedTemplate`` and the exact search renders prefixes.

The render replays what ``transformers.utils.chat_template_utils.render_jinja_template`` does before
``compiled_template.render`` (``_plain_template_data``, ``_alias_reasoning_fields``) with HF's own
compiled environment (``_compile_jinja_template``: sandbox, ``trim_blocks``, ``raise_exception``, ...),
and ``MarkedTemplate.build`` checks it against ``render_jinja_template`` on probe conversations before
anything trusts it. Those functions come from ``hf_chat.chat_functions`` (transformers' own file, run without
importing transformers where proven to render the template alike).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from jinja2 import nodes

from .hf_chat import chat_functions

# the private steps render_jinja_template takes (transformers 5.24); a release without them: nothing is marked
_STEPS = ("_compile_jinja_template", "_plain_template_data", "_alias_reasoning_fields")

__all__ = ["MARK", "MarkedTemplate", "streams_messages"]

MARK = "\ue002"  # private-use character: written at the start of each loop iteration, then taken out
_MARK_NAME = "vlmpack_turn_mark"
# loop attributes that depend only on the iterations already run (not loop.last, length, revindex, nextitem)
_PAST_ONLY = frozenset({"index", "index0", "first", "previtem", "cycle", "changed", "depth", "depth0"})
_CONSTANT_NODES = (nodes.If, nodes.Output, nodes.TemplateData, nodes.Const, nodes.Name, nodes.Test, nodes.Not,
                   nodes.And, nodes.Or, nodes.Compare, nodes.Operand, nodes.Concat, nodes.CondExpr)  # fmt: skip


@dataclass(frozen=True, slots=True)
class _Steps:
    """``render_jinja_template`` and the private steps it takes, from the module that renders the template."""

    render: object  # render_jinja_template
    compile: object  # _compile_jinja_template
    plain: object  # _plain_template_data
    alias: object  # _alias_reasoning_fields


def _steps(template: str, variables: dict | None = None) -> _Steps | None:
    """The template's render steps (``hf_chat.chat_functions``), or None where the release lacks a private one."""
    chat = chat_functions(template, variables)
    found = [getattr(chat, name, None) for name in _STEPS]
    return None if None in found else _Steps(chat.render_jinja_template, *found)


@dataclass(frozen=True, slots=True)
class _Shape:
    loop: nodes.For  # the one top-level loop over the messages
    skips_first: bool  # it may run over messages[1:] (a system message rendered before it)
    unproven_roles: frozenset[str]  # roles whose own branch of the loop body reads ahead (Qwen3-VL's "tool")


def streams_messages(template: str) -> bool:
    """Whether every prefix render of ``template`` is a cut of its full render plus a constant generation prompt."""
    steps = _steps(template)
    if steps is None:
        return False
    try:
        env = steps.compile(template).environment
        return _shape(env.parse(template)) is not None
    except Exception:  # noqa: BLE001 - a template Jinja cannot parse is not proven
        return False


def _walk(node: nodes.Node, parent: nodes.Node | None = None) -> Iterator[tuple[nodes.Node, nodes.Node | None]]:
    yield node, parent
    for child in node.iter_child_nodes():
        yield from _walk(child, node)


def _is_first_message(node: nodes.Node, parent: nodes.Node | None) -> bool:
    """``messages[0]``: the same in every prefix that has a message."""
    return (isinstance(parent, nodes.Getitem) and parent.node is node and isinstance(parent.arg, nodes.Const)
            and parent.arg.value == 0)  # fmt: skip


def _is_rest(value: nodes.Node) -> bool:
    """``messages[1:]``."""
    return (isinstance(value, nodes.Getitem) and isinstance(value.node, nodes.Name) and value.node.name == "messages"
            and isinstance(value.arg, nodes.Slice) and isinstance(value.arg.start, nodes.Const)
            and value.arg.start.value == 1 and value.arg.stop is None and value.arg.step is None)  # fmt: skip


def _shape(tree: nodes.Template) -> _Shape | None:
    """The loop of a template proven to stream its messages (the module doc), else None."""
    stored = {n.name for n, _ in _walk(tree) if isinstance(n, nodes.Name) and n.ctx in ("store", "param")}
    stored |= {n.name for n, _ in _walk(tree) if isinstance(n, nodes.Macro)}
    if stored & {"messages", "add_generation_prompt", _MARK_NAME}:
        return None
    # aliases: names set only to messages or messages[1:] (Gemma's loop_messages)
    aliases: dict[str, bool] = {}
    for node, _ in _walk(tree):
        if isinstance(node, nodes.Assign) and isinstance(node.target, nodes.Name):
            value = node.node
            if isinstance(value, nodes.Name) and value.name == "messages":
                aliases[node.target.name] = aliases.get(node.target.name, False)
            elif _is_rest(value):
                aliases[node.target.name] = True
    for node, _ in _walk(tree):  # an alias assigned anything else is no alias
        if isinstance(node, nodes.Assign) and isinstance(node.target, nodes.Name) and node.target.name in aliases:
            value = node.node
            if not (isinstance(value, nodes.Name) and value.name == "messages") and not _is_rest(value):
                return None
        elif isinstance(node, (nodes.AssignBlock, nodes.For)) and isinstance(getattr(node, "target", None), nodes.Name) \
                and node.target.name in aliases:  # fmt: skip
            return None
    loops = [n for n in tree.body if isinstance(n, nodes.For) and isinstance(n.iter, nodes.Name)
             and (n.iter.name == "messages" or n.iter.name in aliases)]  # fmt: skip
    if len(loops) != 1:
        return None
    loop = loops[0]
    if loop.test is not None or loop.else_ or loop.recursive or not isinstance(loop.target, nodes.Name):
        return None
    trailing = tree.body[tree.body.index(loop) + 1 :]
    if not all(_constant_prompt(node, stored) for node in trailing):
        return None
    guarded = _role_branches(loop)
    alias_values = {id(n.node) for n, _ in _walk(tree) if isinstance(n, nodes.Assign)
                    and isinstance(n.target, nodes.Name) and n.target.name in aliases}  # fmt: skip
    unproven = set()  # the reads that break the proof: each must sit in a role branch, whose role then is unproven
    for node, parent in _walk(tree):
        if isinstance(node, nodes.Name) and node.ctx == "load":
            if node.name == "messages" and not (_is_first_message(node, parent) or node is loop.iter
                                                or id(node) in alias_values or id(parent) in alias_values):  # fmt: skip
                unproven.add(id(node))
            if node.name in aliases and node is not loop.iter:
                unproven.add(id(node))
            if node.name == "add_generation_prompt" and not any(t.test is node for t in trailing):
                return None
    unproven |= _reads_ahead(loop.body)
    if not unproven <= guarded.keys():
        return None
    return _Shape(loop=loop, skips_first=any(aliases.values()) and loop.iter.name != "messages",
                  unproven_roles=frozenset(guarded[i] for i in unproven))  # fmt: skip


def _role_branches(loop: nodes.For) -> dict[int, str]:
    """The role ``r`` of the ``{% if message.role == 'r' %}`` branch of the loop body each node sits in: a
    conversation with no message of that role never runs the node, so it needs no proof there."""
    guarded: dict[int, str] = {}
    for node, _ in _walk(loop):
        if isinstance(node, nodes.If) and (role := _role_test(node.test, loop.target.name)) is not None:
            for child in node.body:
                guarded.update((id(inner), role) for inner, _ in _walk(child) if id(inner) not in guarded)
    return guarded


def _role_test(test: nodes.Node, target: str) -> str | None:
    """``r`` of a test ``message.role == 'r'`` (or ``message['role'] == 'r'``) on the loop's message, else None."""
    if not (isinstance(test, nodes.Compare) and len(test.ops) == 1 and test.ops[0].op == "eq"
            and isinstance(test.ops[0].expr, nodes.Const) and isinstance(test.ops[0].expr.value, str)):  # fmt: skip
        return None
    subject = test.expr
    named = (isinstance(subject, nodes.Getattr) and subject.attr == "role") or (
        isinstance(subject, nodes.Getitem) and isinstance(subject.arg, nodes.Const) and subject.arg.value == "role")
    if not named or not (isinstance(subject.node, nodes.Name) and subject.node.name == target):
        return None
    return test.ops[0].expr.value


def _constant_prompt(node: nodes.Node, stored: set[str]) -> bool:
    """``{% if add_generation_prompt %}...{% endif %}`` writing the same text whatever the messages."""
    if not (isinstance(node, nodes.If) and isinstance(node.test, nodes.Name) and node.test.name == "add_generation_prompt"
            and not node.elif_ and not node.else_):  # fmt: skip
        return False
    for child in node.body:
        for inner, _ in _walk(child):
            if not isinstance(inner, _CONSTANT_NODES):
                return False
            if isinstance(inner, nodes.Name) and (inner.ctx != "load" or inner.name in stored or inner.name == "messages"):
                return False
    return True


def _reads_ahead(body: Sequence[nodes.Node]) -> set[int]:
    """The nodes of the loop body that read ``loop`` for more than the iterations so far decide
    (``loop.last``, ``loop.length``, ...) or break out of it."""
    found = set()
    for statement in body:
        for node, parent in _walk_own_loop(statement):
            if isinstance(node, nodes.Break) or (isinstance(node, nodes.Name) and node.name == "loop" and not (
                    isinstance(parent, nodes.Getattr) and parent.node is node and parent.attr in _PAST_ONLY)):  # fmt: skip
                found.add(id(node))
    return found


def _walk_own_loop(node: nodes.Node, parent: nodes.Node | None = None):
    """``_walk`` that does not enter the body of a nested loop (its ``loop`` and ``break`` are its own)."""
    yield node, parent
    if isinstance(node, nodes.For):
        children = [node.target, node.iter, *([node.test] if node.test else [])]
    else:
        children = list(node.iter_child_nodes())
    for child in children:
        yield from _walk_own_loop(child, node)


class MarkedTemplate:
    """A streaming template compiled with ``MARK`` written at the start of each message's iteration."""

    __slots__ = ("_compiled", "_kwargs", "_steps", "skips_first", "unproven_roles", "generation")

    def __init__(self, compiled, kwargs: dict, shape: _Shape, generation: str, steps: _Steps) -> None:
        self._compiled = compiled
        self._kwargs = kwargs
        self._steps = steps
        self.skips_first = shape.skips_first  # the loop may start at messages[1]
        self.unproven_roles = shape.unproven_roles  # a conversation with a message of one of these is not served
        self.generation = generation  # the constant generation prompt G

    @classmethod
    def build(cls, template: str, kwargs: dict, probes: Sequence[Sequence[dict]]) -> MarkedTemplate | None:
        """The marked template, or None where the template is not proven to stream, or a probe conversation
        renders differently from ``render_jinja_template`` (marks out) or cannot find its generation prompt."""
        steps = _steps(template, kwargs)
        if steps is None:
            return None
        render_jinja_template = steps.render
        try:
            env = steps.compile(template).environment
            tree = env.parse(template)
            shape = _shape(tree)
            if shape is None:
                return None
            shape.loop.body.insert(0, nodes.Output([nodes.Name(_MARK_NAME, "load")]))
            plain = steps.plain(dict(kwargs))
            if any(MARK in repr(value) or "\\ue002" in repr(value) for value in plain.values()):
                return None
            marked = cls(env.from_string(tree), plain, shape, "", steps)
            first = [probes[0][0]]
            with_prompt, without = (render_jinja_template(conversations=[first], chat_template=template,
                                                          add_generation_prompt=g, **kwargs)[0][0] for g in (True, False))  # fmt: skip
            if not with_prompt.startswith(without):
                return None
            marked = cls(marked._compiled, plain, shape, with_prompt[len(without) :], steps)
            for probe in probes:
                expected = render_jinja_template(conversations=[list(probe)], chat_template=template, **kwargs)[0][0]
                found = marked.render(probe)
                if found is None or found[0] != expected:
                    return None
            return marked
        except Exception:  # noqa: BLE001 - a template that fails on the probes is left to the exact search
            return None

    def render(self, messages: Sequence[dict]) -> tuple[str, list[int]] | None:
        """The full render and where each message's turn starts in it (``len(render(messages[:k]))`` at index
        k, for k from ``skips`` on; None where a message cannot be placed); raises what Jinja raises."""
        text = self.render_marked(messages)
        if text is None:
            return None
        parts = text.split(MARK)  # one per iteration, and any the data held: then too many, and None
        at, found = 0, []
        for part in parts[:-1]:
            at += len(part)
            found.append(at)
        starts = self.starts(len(messages), found)
        return None if starts is None else ("".join(parts), starts)

    def render_marked(self, messages: Sequence[dict]) -> str | None:
        """The render with ``MARK`` at the start of each iteration, or None where the conversation is not served
        (a role of ``unproven_roles``, a message that is no dict, a ``MARK`` that could stand for a skipped one)."""
        if self.unproven_roles and any(m.get("role") in self.unproven_roles for m in messages):
            return None
        chat = self._steps.plain(list(messages))
        if not all(isinstance(m, dict) for m in chat):
            return None  # render_jinja_template raises on a non-dict message
        if self.skips_first and "\\ue002" in repr(chat):  # a MARK in the data could stand for the skipped one
            return None
        chat = self._steps.alias(chat)
        return self._compiled.render(messages=chat, tools=None, documents=None, add_generation_prompt=False,
                                     **self._kwargs, **{_MARK_NAME: MARK})  # fmt: skip

    def starts(self, n_messages: int, found: list[int]) -> list[int] | None:
        """Each message's turn start from the marks ``found`` (text before each, marks out): a skipped first
        message starts at 0; None where the marks do not match the messages (a ``MARK`` in the data)."""
        skipped = n_messages - len(found)
        if skipped not in ((0, 1) if self.skips_first else (0,)):
            return None
        return [0] * skipped + found


def template_tree(template: str) -> nodes.Template | None:
    """``template`` parsed by HF's own chat-template environment, or None where it cannot be."""
    steps = _steps(template)
    if steps is None:
        return None
    try:
        return steps.compile(template).environment.parse(template)
    except Exception:  # noqa: BLE001 - a template Jinja cannot parse is proven nothing
        return None
