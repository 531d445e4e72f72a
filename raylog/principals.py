"""Principals of Kafka connections: who a TLS client certificate stands for.

A client that showed a certificate is ``User:<its subject>``, the subject written as Java's
``X500Principal.getName()`` writes it (RFC 2253: ``CN=alice,OU=eng,O=acme``), rewritten by
Kafka's ``ssl.principal.mapping.rules`` (:class:`PrincipalMapper`); one that showed none is
``User:ANONYMOUS``. Plain Python: the settings check the rules with it, the listeners name
their connections' principals with it.
"""

from __future__ import annotations

import re

from raylog.errors import InvalidConfigError

#: The principal of a client that showed no certificate (Kafka's KafkaPrincipal.ANONYMOUS).
ANONYMOUS = "User:ANONYMOUS"
#: RFC 2253's names of the attribute types Python's ``getpeercert()`` spells out; other types
#: keep the name Python gives them.
_SHORT_NAMES = {
    "commonName": "CN",
    "countryName": "C",
    "localityName": "L",
    "stateOrProvinceName": "ST",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "streetAddress": "STREET",
    "domainComponent": "DC",
    "userId": "UID",
}
#: One rule of ``ssl.principal.mapping.rules``: DEFAULT, or RULE:pattern/replacement/[LU].
_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?))\s*(?:,|$)")


def subject_name(peercert: dict) -> str:
    """The subject of a certificate as ``ssl.SSLSocket.getpeercert()`` gives it, written as
    RFC 2253 (most specific first: ``CN=alice,OU=eng,O=acme``)."""
    rdns = []
    for rdn in reversed(peercert.get("subject", ())):
        rdns.append("+".join(f"{_SHORT_NAMES.get(kind, kind)}={_escaped(value)}" for kind, value in rdn))
    return ",".join(rdns)


def _escaped(value: str) -> str:
    out = re.sub(r'([,+"\\<>;])', r"\\\1", value)
    if out.startswith(("#", " ")):
        out = "\\" + out
    if out.endswith(" ") and not out.endswith("\\ "):
        out = out[:-1] + "\\ "
    return out


class PrincipalMapper:
    """Kafka's ``ssl.principal.mapping.rules``: comma-separated rules tried in order, the first
    whose pattern matches the whole subject gives the name; ``RULE:pattern/replacement/`` (Java
    regular expressions as far as Python's agree; ``$1`` refers to a group), an optional ``L`` or
    ``U`` lower- or upper-casing the result; ``DEFAULT`` keeps the subject as it is. No rule
    matching keeps it as well.

    Raises:
        InvalidConfigError: rules that do not parse, or a pattern that does not compile.
    """

    def __init__(self, rules: str = "DEFAULT"):
        self._rules: list[tuple[re.Pattern, str, str] | None] = []
        position = 0
        text = rules.strip()
        while position < len(text):
            match = _RULE.match(text, position)
            if match is None or match.end() == position:
                raise InvalidConfigError(f"ssl.principal.mapping.rules: cannot read the rules from {text[position:]!r}")
            position = match.end()
            self._rules.append(None if match.group(1) else _rule(match.group(2), match.group(3), match.group(4)))

    def principal(self, peercert: dict | None) -> str:
        """The principal of a client that showed ``peercert`` (None or empty: none)."""
        if not peercert or not peercert.get("subject"):
            return ANONYMOUS
        return "User:" + self.name(subject_name(peercert))

    def name(self, subject: str) -> str:
        """The short name of ``subject`` (an RFC 2253 distinguished name) under the rules."""
        for rule in self._rules:
            if rule is None:
                return subject
            pattern, replacement, case = rule
            if pattern.fullmatch(subject):
                name = pattern.sub(replacement, subject, count=1)
                return name.lower() if case == "L" else name.upper() if case == "U" else name
        return subject


def _rule(pattern: str, replacement: str, case: str) -> tuple[re.Pattern, str, str]:
    try:
        compiled = re.compile(pattern.replace("\\/", "/"))
    except re.error as exc:
        raise InvalidConfigError(f"ssl.principal.mapping.rules: pattern {pattern!r} does not compile: {exc}") from None
    python_replacement = re.sub(r"\$(\d+)", r"\\g<\1>", replacement.replace("\\/", "/"))
    return compiled, python_replacement, case
