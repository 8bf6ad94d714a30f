"""How a call's arguments are shown to a person: the question of an `ask` rule (terminal,
elicitation) and what an approver reads (`bundlectl approvals show`) — long values cut, control
characters escaped, the values of secret variables as their `${NAME}`, secret-shaped values
hidden (privacy tokens arrive as tokens and stay so)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from functools import cached_property
from typing import Any

from bundlectl.config.secretscan import secret_kind, secret_variables
from bundlectl.output import visible
from bundlectl.policy.rules import Decision
from bundlectl.resolve.resolved import Resolution

SHOWN_VALUE = 120  # characters of one argument's value a question shows
SHOWN_KEYS = 20  # undeclared arguments a question lists (every declared one is shown)
SHOWN_UNKNOWN = 100  # arguments a question lists when the tool's schema is not known


class Shown:
    """The arguments of one loaded config's calls, as a person sees them."""

    def __init__(self, resolution: Resolution) -> None:
        self.resolution = resolution

    def question(
        self,
        decision: Decision,
        arguments: Mapping[str, Any],
        schema: Mapping[str, Any] | None = None,
    ) -> str:
        """What a person confirming an `ask` rule reads: the agent, the tool, the rule, and the
        arguments — every one the tool's input schema declares first (`schema`: the live one,
        else the declared catalog's), then the undeclared ones, counted, so filler arguments
        cannot push the one that matters out of sight. Long values are cut, the values of
        secret variables shown as their `${NAME}`, secret-shaped values hidden (privacy tokens
        arrive as tokens and stay so)."""
        rule = decision.rule
        where = f" ({rule.label}, {rule.origin})" if rule is not None else ""
        head = f"agent {decision.agent!r} wants to call {decision.qualified}{where}"
        if not arguments:
            return head + " with no arguments."
        if schema is None:
            schema = self.resolution.catalog.input_schema(decision.server, decision.tool)
        declared = (schema or {}).get("properties")
        lines: list[str] = []
        if isinstance(declared, Mapping):
            known = [key for key in declared if key in arguments]
            others = [key for key in arguments if key not in declared]
            lines += [self._line(key, arguments[key]) for key in known]
            if others:
                lines.append(
                    f"  and {len(others)} argument(s) the tool does not declare"
                    + (":" if len(others) <= SHOWN_KEYS else f", the first {SHOWN_KEYS}:")
                )
                lines += [self._line(key, arguments[key]) for key in others[:SHOWN_KEYS]]
        else:
            keys = list(arguments)
            if len(keys) > SHOWN_UNKNOWN:
                head += f" ({len(keys)} arguments, the first {SHOWN_UNKNOWN} shown)"
            lines += [self._line(key, arguments[key]) for key in keys[:SHOWN_UNKNOWN]]
        return head + " with:\n" + "\n".join(lines)

    def redacted(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments as an approver sees them in full (`bundlectl approvals show`): every
        value, with the values of secret variables as their `${NAME}` and secret-shaped values
        hidden, as in `question` (privacy tokens arrive as tokens and stay so)."""

        def shown(key: str, value: Any) -> Any:
            if isinstance(value, Mapping):
                return {str(k): shown(str(k), v) for k, v in value.items()}
            if isinstance(value, list):
                return [shown(key, item) for item in value]
            if not isinstance(value, str):
                return value
            for name, secret in self.secrets.items():
                value = value.replace(secret, "${" + name + "}")
            kind = secret_kind(key, value)
            return f"<{kind}, not shown>" if kind is not None else value

        return {str(key): shown(str(key), value) for key, value in arguments.items()}

    def _line(self, key: Any, value: Any) -> str:
        return f"  {visible(str(key), SHOWN_VALUE)}: {self._shown(str(key), value)}"

    def _shown(self, key: str, value: Any) -> str:
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        for name, secret in self.secrets.items():
            text = text.replace(secret, "${" + name + "}")
        kind = secret_kind(key, text)
        if kind is not None:
            return f"<{kind}, not shown>"
        shown = json.dumps(text, ensure_ascii=False) if isinstance(value, str) else text
        return visible(shown, SHOWN_VALUE, size=len(text))

    @cached_property
    def secrets(self) -> dict[str, str]:
        """The values, in this environment, of the variables the servers take secrets from."""
        merged = self.resolution.merged
        secret_inputs = {need.name for need in merged.env if need.spec.secret}
        names = secret_variables(
            [
                pair
                for s in merged.servers.values()
                for pair in [*s.spec.env.items(), *s.spec.headers.items()]
            ],
            secret_inputs,
        )
        values = {name: os.environ.get(name, "") for name in sorted(names)}
        return {name: value for name, value in values.items() if len(value) >= 6}
