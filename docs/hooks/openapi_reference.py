"""mkdocs hook: the HTTP API page's reference, generated from the app's own OpenAPI schema at
build time, so the page cannot drift from the routes (``<!-- openapi-reference -->`` marks where)."""

from __future__ import annotations

from typing import Any

MARKER = "<!-- openapi-reference -->"


def on_page_markdown(markdown: str, **_: Any) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, reference(schema()))


def schema() -> dict[str, Any]:
    from query_api.http import ApiDeps, HttpSettings, create_app  # noqa: PLC0415 - only when the page is built
    from query_api.live import QueryService  # noqa: PLC0415
    from query_api.metrics import Metrics  # noqa: PLC0415

    none: Any = None  # the routes use their dependencies per request: the schema needs none
    queries = QueryService(log=none, reads=none, metrics=Metrics())
    deps = ApiDeps(queries=queries, producer=none, http=HttpSettings(tokens={}), readiness=none)
    return create_app(deps).openapi()


def reference(spec: dict[str, Any]) -> str:
    out: list[str] = []
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            out += [f"### `{method.upper()} {path}`", ""]
            if op.get("description"):
                out += [op["description"].strip(), ""]
            params = op.get("parameters", [])
            if params:
                out += ["| parameter | in | required | type |", "|---|---|---|---|"]
                out += [
                    f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'} | "
                    f"{_type(p.get('schema', {}))} |"
                    for p in params
                ]
                out.append("")
            codes = ", ".join(f"{code} {r.get('description', '')}".strip() for code, r in op["responses"].items())
            out += [f"Answers: {codes}.", ""]
    return "\n".join(out)


def _type(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return " \\| ".join(f"`{v}`" for v in schema["enum"])
    if "anyOf" in schema:
        return " \\| ".join(_type(s) for s in schema["anyOf"] if s.get("type") != "null")
    bounds = [f"{k} {schema[k]}" for k in ("minimum", "exclusiveMinimum", "maximum", "maxLength") if k in schema]
    return str(schema.get("type", "any")) + (f" ({', '.join(bounds)})" if bounds else "")
