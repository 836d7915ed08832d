"""The YAML front matter of a SKILL.md: the few scalar keys a skill declares (``name``,
``description``), read without a YAML library: ``key: value`` lines, quoted values, and ``>``/``|``
block scalars. Anything else in the front matter is ignored."""

from __future__ import annotations

FENCE = "---"


def split_front_matter(text: str) -> tuple[dict[str, str], str]:
    """(front matter keys, body). A file without front matter has no keys and is all body."""
    lines = text.replace("\r\n", "\n").split("\n")
    if not lines or lines[0].strip() != FENCE:
        return {}, text
    for end in range(1, len(lines)):
        if lines[end].strip() == FENCE:
            return _parse(lines[1:end]), "\n".join(lines[end + 1 :]).lstrip("\n")
    return {}, text


def _parse(lines: list[str]) -> dict[str, str]:
    values: dict[str, str] = {}
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if not line.strip() or line.startswith((" ", "\t", "#")) or ":" not in line:
            continue
        key, _, raw = line.partition(":")
        raw = raw.strip()
        if raw[:1] in (">", "|"):
            block: list[str] = []
            while index < len(lines) and (not lines[index].strip() or lines[index][:1] in (" ", "\t")):
                block.append(lines[index].strip())
                index += 1
            joiner = "\n" if raw[0] == "|" else " "
            values[key.strip()] = joiner.join(part for part in block if part or joiner == "\n").strip()
        else:
            values[key.strip()] = _unquote(raw)
    return values


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in ("'", '"'):
        inner = value[1:-1]
        return inner.replace("''", "'") if value[0] == "'" else inner.replace('\\"', '"')
    return value.split(" #", 1)[0].strip()
