"""Connection strings in messages and records: every password masked.

ragbench writes a ``dsn=`` into records (``info.index.params.dsn``) and into
error messages; both go through :func:`redact` first, and a driver's error
text through :func:`redact_message`, which also masks any piece of a
password that libpq quoted back in another form.
"""

from __future__ import annotations

import re

__all__ = ["redact", "redact_message"]

# a URL's user and password: the user ends at the first ":", the password at the LAST "@"
# (an unencoded password may hold "@", ":", "/" or blanks; cutting too much beats leaking)
_URL_PASSWORD = re.compile(r"(://[^:/@\s]*:).*@", re.DOTALL)
# a libpq keyword=value password (password, sslpassword): a single-quoted value with
# backslash escapes (up to the closing quote, or the end when there is none), or a bare
# value (up to the next unescaped blank)
_KEYWORD_PASSWORD = re.compile(
    r"(\b\w*password\s*=\s*)(?:'(?:[^'\\]|\\.)*(?:'|\\?$)|(?:\\.|[^\s\\])+\\?)",
    re.IGNORECASE | re.DOTALL,
)


def redact(dsn: str) -> str:
    """A DSN for messages: every password replaced by ``***``, whole.

    Covers a URL (``postgresql://user:p@ss w@host/db``: ``user:***@host/db``)
    and libpq keyword/value strings (``password='a b\\' c'``, bare
    ``password=x``, ``sslpassword=...``, and ``?password=`` in a URL's query).
    """
    dsn = _URL_PASSWORD.sub(r"\1***@", dsn)
    return _KEYWORD_PASSWORD.sub(r"\1***", dsn)


_PIECE = 4  # characters in a row of a password that a message may not show


def redact_message(text: str, dsn: str | None) -> str:
    """``text`` (a driver's error) with the DSN's passwords, and any 4 characters of one, as ``***``.

    libpq reads an unencoded ``@`` in a URL password as the end of it and
    names the rest as the host (``host 'ss@Secret@127.0.0.1'``), so a whole
    match is not enough: every run of 4 or more characters found in a
    password is masked.
    """
    text = redact(text)
    if not dsn:
        return text
    for secret in _passwords(dsn):
        text = _mask(text, secret)
    return text


def _passwords(dsn: str) -> list[str]:
    """The passwords a DSN holds: as written, and unescaped (libpq's quoted values)."""
    found = [m.group(0)[len(m.group(1)) : -1] for m in _URL_PASSWORD.finditer(dsn)]
    for m in _KEYWORD_PASSWORD.finditer(dsn):
        value = m.group(0)[len(m.group(1)) :]
        found.append(value)
        found.append(re.sub(r"\\(.)", r"\1", value.strip("'"), flags=re.DOTALL))
    return [f for f in found if len(f) >= _PIECE]


def _mask(text: str, secret: str) -> str:
    """``text`` with every run of at least :data:`_PIECE` characters found in ``secret`` as ``***``."""
    out, i = [], 0
    while i < len(text):
        n = _PIECE
        while i + n <= len(text) and text[i : i + n] in secret:
            n += 1
        if n > _PIECE:  # text[i : i + n - 1] is the longest run here found in the secret
            out.append("***")
            i += n - 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)
