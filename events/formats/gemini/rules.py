"""Gemini's rules for a ``generateContent`` history: every breach in a rendered fragment.

Checked (keys in either spelling, camelCase or snake_case, as the API reads both):

- only ``system_instruction`` and ``contents`` at the top; ``system_instruction`` has text parts;
- ``contents`` is not empty, the first content is the user's, roles are ``user`` / ``model``;
- every content has parts, every part exactly one kind of data, no empty text part (one that
  carries a ``thoughtSignature`` is what Gemini itself returns, so it passes), thought
  signatures base64 (proto bytes);
- ``functionCall`` parts only in model contents (name, ``args`` an object), ``functionResponse``
  parts only in user contents (name, ``response`` an object);
- the model content with function calls is followed by a user content answering every one of
  them: as many ``functionResponse`` parts, the same names, the same ids where the calls have
  ids; no ``functionResponse`` that does not follow calls;
- thought signatures, as Gemini 3 validates them: in the *current turn* only (the contents
  after the last user content with standard content, i.e. not only function responses), the
  first ``functionCall`` part of every model content (each step of the loop) carries a
  ``thoughtSignature``. Earlier turns are not validated by Gemini, so not here either (the
  renderer signs every model content with calls anyway).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Final

from events.formats.gemini.keys import DATA_KEYS, either, is_base64

__all__ = ["violations"]

_DATA: Final = DATA_KEYS  # the parser's: what it accepts is what these rules take


def violations(fragment: Mapping[str, Any]) -> list[str]:
    out: list[str] = []
    extra = sorted(set(fragment) - {"system_instruction", "contents"})
    if extra:
        out.append(f"unknown top-level keys {extra}")
    if "system_instruction" in fragment:
        out.extend(_system(fragment["system_instruction"]))
    contents = fragment.get("contents")
    if not isinstance(contents, list):
        return [*out, "contents: must be a list"]
    if not contents:
        return out  # no question yet (a new or cleared chat): the app's new content goes here
    for i, content in enumerate(contents):
        out.extend(_content(content, f"contents[{i}]"))
    if out:
        return out  # the pairing rules read well-formed contents only
    if contents[0]["role"] != "user":
        out.append("contents[0]: the first content must be the user's")
    out.extend(_pairing(contents))
    out.extend(_signatures(contents))
    return out


def _system(system: Any) -> list[str]:
    if not isinstance(system, Mapping) or not isinstance(system.get("parts"), list) or not system["parts"]:
        return ["system_instruction: must be an object with a non-empty list of parts"]
    return [
        f"system_instruction.parts[{j}]: must be a non-empty text part"
        for j, p in enumerate(system["parts"])
        if not isinstance(p, Mapping) or set(p) != {"text"} or not isinstance(p["text"], str) or not p["text"]
    ]


def _content(content: Any, at: str) -> list[str]:
    if not isinstance(content, Mapping):
        return [f"{at}: must be a Content object"]
    out = []
    role = content.get("role")
    if role not in ("user", "model"):
        out.append(f"{at}.role: {role!r} is not user or model")
    parts = content.get("parts")
    if not isinstance(parts, list) or not parts:
        return [*out, f"{at}.parts: must be a non-empty list"]
    for j, part in enumerate(parts):
        out.extend(_part(part, role, f"{at}.parts[{j}]"))
    return out


def _part(part: Any, role: Any, at: str) -> list[str]:
    if not isinstance(part, Mapping):
        return [f"{at}: must be a Part object"]
    kinds = [k for k in _DATA if either(part, k) is not None]
    if len(kinds) != 1:
        return [f"{at}: a part holds exactly one kind of data, this one {kinds or 'none'}"]
    kind = kinds[0]
    signature = either(part, "thoughtSignature")
    if signature is not None and not is_base64(signature):
        return [f"{at}: thoughtSignature must be base64"]
    if kind == "text":
        text = part["text"]
        if not isinstance(text, str) or (not text and not signature):
            return [f"{at}.text: must be a non-empty string"]
    if kind == "functionCall":
        if role != "model":
            return [f"{at}: a functionCall in a {role} content"]
        return _named(either(part, kind), "args", at, optional=True)
    if kind == "functionResponse":
        if role != "user":
            return [f"{at}: a functionResponse in a {role} content"]
        return _named(either(part, kind), "response", at, optional=False)
    return []


def _named(obj: Any, body: str, at: str, *, optional: bool) -> list[str]:
    if not isinstance(obj, Mapping):
        return [f"{at}: must be an object"]
    out = []
    if not isinstance(obj.get("name"), str) or not obj["name"]:
        out.append(f"{at}: needs the function's name")
    if not (optional and obj.get(body) is None) and not isinstance(obj.get(body), Mapping):
        out.append(f"{at}.{body}: must be an object")
    return out


def _calls(content: Mapping[str, Any], kind: str) -> list[Mapping[str, Any]]:
    return [either(p, kind) for p in content["parts"] if either(p, kind) is not None]


def _pairing(contents: Sequence[Mapping[str, Any]]) -> list[str]:
    out = []
    for i, content in enumerate(contents):
        responses = _calls(content, "functionResponse")
        previous = _calls(contents[i - 1], "functionCall") if i > 0 else []
        if responses and not previous:
            out.append(f"contents[{i}]: function responses that answer no function call")
        calls = _calls(content, "functionCall")
        if not calls:
            continue
        answers = _calls(contents[i + 1], "functionResponse") if i + 1 < len(contents) else []
        if len(answers) != len(calls):
            out.append(f"contents[{i}]: {len(calls)} function calls, {len(answers)} responses in the next content")
        elif Counter(c["name"] for c in calls) != Counter(a["name"] for a in answers):
            out.append(f"contents[{i}]: the next content's responses name other functions than the calls")
        elif Counter(c.get("id") for c in calls if c.get("id")) != Counter(a.get("id") for a in answers if a.get("id")):
            out.append(f"contents[{i}]: the next content's response ids are not the calls' ids")
    return out


def _signatures(contents: Sequence[Mapping[str, Any]]) -> list[str]:
    start = 0
    for i, content in enumerate(contents):
        if content["role"] == "user" and any(either(p, "functionResponse") is None for p in content["parts"]):
            start = i
    out = []
    for i in range(start + 1, len(contents)):
        content = contents[i]
        first = next((p for p in content["parts"] if either(p, "functionCall") is not None), None)
        if content["role"] == "model" and first is not None and not either(first, "thoughtSignature"):
            out.append(f"contents[{i}]: the first functionCall of a step of the current turn has no thoughtSignature")
    return out
