"""Text blocks of a report: escaping, notes and findings.

A block is HTML. Anything that came from data is escaped; markup a report builds itself is
marked `Html` and goes in as it is, so a helper can take either.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class Html(str):
    """Markup that is already safe (built with `esc`): inserted as it is."""


def esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def markup(value: Any, missing: str = "-") -> str:
    """`value` as HTML: `Html` as it is, None as `missing`, anything else escaped."""
    if value is None:
        return missing
    return value if isinstance(value, Html) else esc(value)


def note(text: Any) -> Html:
    """A side remark (what is missing, what a reader should know before the numbers)."""
    return Html(f'<p class="note">{markup(text)}</p>')


def plural(n: int, word: str) -> str:
    """ "1 thread", "3 threads"."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


@dataclass(frozen=True)
class Finding:
    """One thing a run showed: a short bold headline ("Cache.") and the evidence, computed
    from the run."""

    headline: str
    evidence: Any  # Html or plain text

    def html(self) -> Html:
        head = f"<b>{esc(self.headline)}</b> " if self.headline else ""
        return Html(f"{head}{markup(self.evidence, '')}")


def finding(item: Finding | Any) -> Html:
    """A finding standing alone, in its box."""
    body = item.html() if isinstance(item, Finding) else markup(item, "")
    return Html(f'<p class="finding">{body}</p>')


def findings(items: Sequence[Finding], none: str) -> Html:
    """The findings as a list of boxes, or `none` (why there is nothing to say)."""
    if not items:
        return Html(f'<ul><li class="finding">{esc(none)}</li></ul>')
    rows = "".join(f'<li class="finding">{f.html()}</li>' for f in items)
    return Html(f"<ul>{rows}</ul>")
