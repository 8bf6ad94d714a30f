"""Cyclomatic and cognitive complexity of Python functions, from the AST. No I/O, no MCP."""

from __future__ import annotations

import ast
from dataclasses import asdict, dataclass

METRICS = ("cyclomatic", "cognitive", "loc")


@dataclass
class FunctionMetrics:
    """Metrics of one function or method."""

    name: str
    line: int
    end_line: int
    cyclomatic: int
    cognitive: int
    loc: int


def _cyclomatic(node: ast.AST) -> int:
    """McCabe: 1 + one per decision point (branches, loops, handlers, boolean operands, cases)."""
    score = 1
    for child in _walk_own(node):
        if isinstance(
            child,
            ast.If
            | ast.IfExp
            | ast.For
            | ast.AsyncFor
            | ast.While
            | ast.ExceptHandler
            | ast.Assert,
        ):
            score += 1
        elif isinstance(child, ast.BoolOp):
            score += len(child.values) - 1
        elif isinstance(child, ast.comprehension):
            score += 1 + len(child.ifs)
        elif isinstance(child, ast.match_case):
            score += 1
    return score


def _walk_own(node: ast.AST) -> list[ast.AST]:
    """Descendants of a function, not entering nested functions or classes."""
    out: list[ast.AST] = []
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        out.append(child)
        stack.extend(ast.iter_child_nodes(child))
    return out


class _Cognitive(ast.NodeVisitor):
    """SonarSource cognitive complexity: +1 per break in linear flow, +nesting for nested ones."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.score = 0
        self.nesting = 0

    def _nested(self, node: ast.AST, body: list[list[ast.stmt]]) -> None:
        self.score += 1 + self.nesting
        self.nesting += 1
        for block in body:
            for stmt in block:
                self.visit(stmt)
        self.nesting -= 1

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        self._nested(node, [node.body])
        orelse = node.orelse
        while len(orelse) == 1 and isinstance(orelse[0], ast.If):  # elif: +1, no nesting
            self.score += 1
            self.visit(orelse[0].test)
            self.nesting += 1
            for stmt in orelse[0].body:
                self.visit(stmt)
            self.nesting -= 1
            orelse = orelse[0].orelse
        if orelse:  # else: +1
            self.score += 1
            self.nesting += 1
            for stmt in orelse:
                self.visit(stmt)
            self.nesting -= 1

    def _loop(self, node: ast.For | ast.AsyncFor | ast.While) -> None:
        self._nested(node, [node.body, node.orelse])

    visit_For = visit_AsyncFor = visit_While = _loop

    def _try(self, node: ast.Try | ast.TryStar) -> None:
        for stmt in node.body + node.finalbody + node.orelse:
            self.visit(stmt)
        for handler in node.handlers:
            self._nested(handler, [handler.body])

    def visit_Try(self, node: ast.Try) -> None:
        self._try(node)

    def visit_TryStar(self, node: ast.TryStar) -> None:
        self._try(node)

    def visit_Match(self, node: ast.Match) -> None:
        self._nested(node, [case.body for case in node.cases])

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self.score += 1 + self.nesting
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        self.score += 1  # one per sequence of like operators
        for value in node.values:
            if isinstance(value, ast.BoolOp) and type(value.op) is type(node.op):
                self.generic_visit(value)
            else:
                self.visit(value)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        self.score += 1 + len(node.ifs)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id == self.name:  # recursion
            self.score += 1
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        # Nested functions add to nesting but are measured on their own as well.
        self.nesting += 1
        for stmt in node.body:
            self.visit(stmt)
        self.nesting -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.nesting += 1
        self.visit(node.body)
        self.nesting -= 1


def _cognitive(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    visitor = _Cognitive(node.name)
    for stmt in node.body:
        visitor.visit(stmt)
    return visitor.score


def analyse(source: str, filename: str = "<source>") -> list[FunctionMetrics]:
    """Metrics for every function and method, in source order (qualified as Class.method)."""
    tree = ast.parse(source, filename)
    found: list[FunctionMetrics] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                end = child.end_lineno or child.lineno
                found.append(
                    FunctionMetrics(
                        name,
                        child.lineno,
                        end,
                        _cyclomatic(child),
                        _cognitive(child),
                        end - child.lineno + 1,
                    )
                )
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return sorted(found, key=lambda f: f.line)


def report(
    source: str, filename: str, metrics: list[str], include_functions: bool
) -> dict[str, object]:
    """The `complexity_metrics` result: totals and maxima, and per function when asked."""
    functions = analyse(source, filename)
    chosen = [m for m in METRICS if m in metrics]
    summary: dict[str, object] = {"functions": len(functions), "lines": len(source.splitlines())}
    for metric in chosen:
        values = [getattr(f, metric) for f in functions]
        summary[f"max_{metric}"] = max(values, default=0)
        summary[f"total_{metric}"] = sum(values)
    result: dict[str, object] = {"file": filename, "language": "python", "summary": summary}
    if include_functions:
        result["functions"] = [
            {k: v for k, v in asdict(f).items() if k in ("name", "line", "end_line", *chosen)}
            for f in functions
        ]
    return result
