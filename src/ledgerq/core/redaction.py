"""Secret masking, one rule for every place text leaves the process: log lines, job errors and
tracebacks (as recorded and as shown by the API, the dashboard and ``ledgerq job show``),
settings and URLs in error messages.

What is masked: the password of ``scheme://user:password@host``, the value of ``password=``,
``token=``, ``api_key=`` and similar ``name=value`` or ``"name": "value"`` pairs in free text,
and the whole value of a mapping key whose name looks secret. The rest of the text stays, so
an error keeps saying what went wrong and where.
"""

from __future__ import annotations

import functools
import re
from typing import Any

MASK = "***"

#: Mapping keys (argument names, log fields) whose values are never shown.
SECRET_NAME = re.compile(r"pass|secret|token|api_?key|auth|credential|private|cookie", re.I)
#: ``scheme://user:password@host`` anywhere in a string; ``redis://:password@host`` too.
URL_PASSWORD = re.compile(r"(\b[A-Za-z][\w+.-]*://[^:/@\s]*:)[^@\s]+@")
#: ``password=value`` (query strings, DSNs, messages) or ``"password": "value"`` (JSON,
#: reprs): a name ending in a secret-looking word, then ``=``, or a quoted name then ``:``.
_SECRET_WORD = (
    r"[\w.-]*(?:pass|passwd|password|passphrase|pwd|secret|token|api[_-]?key|access[_-]?key"
    r"|private[_-]?key|credentials?|auth)"
)
KEY_VALUE = re.compile(
    rf"""(?ix)
    (?: \b({_SECRET_WORD}) (\s*=\s*) ["']?            # name=value
      | (["']{_SECRET_WORD}["']) (\s*:\s*) ["']?      # "name": "value"
    )
    ([^\s"'&;,)}}\]]+)
    """
)


def _mask_pair(match: re.Match[str]) -> str:
    name = match.group(1) or match.group(3)
    separator = match.group(2) or match.group(4)
    quote_and_value = match.group(0)[len(name) + len(separator) :]
    quote = quote_and_value[: len(quote_and_value) - len(match.group(5))]
    return f"{name}{separator}{quote}{MASK}"


def mask_text(text: str) -> str:
    """``text`` with URL passwords and ``name=value`` secrets replaced by ``***``."""
    if not text or ("=" not in text and ":" not in text):
        return text  # every pattern needs one of them: spare the regexes (a log line's hot path)
    return KEY_VALUE.sub(_mask_pair, URL_PASSWORD.sub(rf"\g<1>{MASK}@", text))


def mask_url(url: str) -> str:
    """``url`` fit for an error message or a settings listing: its password masked, and even
    when it is malformed (``postgresql//app:pw@host``) everything before its last ``@``, so a
    typo in a URL never prints its password."""
    masked = mask_text(url)
    if "@" not in masked.replace(f"{MASK}@", ""):
        return masked
    scheme = re.match(r"[A-Za-z][\w+.-]*:?/*", url)
    return f"{scheme.group(0) if scheme else ''}{MASK}@{url.rpartition('@')[2]}"


def is_secret_name(key: object) -> bool:
    """Whether a mapping key (argument name, log field) names a secret."""
    return isinstance(key, str) and _secret_name(key)


@functools.lru_cache(maxsize=1024)
def _secret_name(key: str) -> bool:
    # Log fields and argument names come from a small set: look each up once.
    return bool(SECRET_NAME.search(key))


def mask_value(value: Any) -> Any:
    """A copy of ``value`` (JSON-like data) with secret-named keys' values replaced by ``***``
    and every string passed through ``mask_text``."""
    if isinstance(value, str):
        return mask_text(value)
    if isinstance(value, dict):
        return {k: MASK if is_secret_name(k) else mask_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [mask_value(v) for v in value]
    return value
