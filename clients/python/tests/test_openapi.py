"""Kept honest: the client against ``schemas/openapi.json``.

Every route the client calls exists with the method and query parameters it sends, and every
typed model has exactly the schema's members, with its types and required set. A schema change
the client does not follow fails here (CI runs it on every change).
"""

from __future__ import annotations

import json
import pathlib
import types
import typing
import unittest
from typing import Any

from cra_client.client import OPERATIONS
from cra_client.models import CHECKED

OPENAPI = pathlib.Path(__file__).resolve().parents[3] / "schemas" / "openapi.json"

_JSON_TYPES = {str: "string", int: "integer", bool: "boolean", float: "number"}


def json_type(annotation: Any) -> Any:
    """The JSON Schema ``type`` (or ``enum``) a model's annotation stands for."""
    if typing.get_origin(annotation) is typing.Literal:
        return {"enum": sorted(typing.get_args(annotation))}
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        members = [json_type(a) for a in typing.get_args(annotation)]
        return sorted(m if isinstance(m, str) else json.dumps(m) for m in members)
    if annotation is type(None):
        return "null"
    if typing.get_origin(annotation) is list:
        return {"array": json_type(typing.get_args(annotation)[0])}
    return _JSON_TYPES[annotation]


def schema_type(schema: dict[str, Any], all_schemas: dict[str, Any]) -> Any:
    if "$ref" in schema:
        return schema_type(all_schemas[schema["$ref"].rsplit("/", 1)[1]], all_schemas)
    if "enum" in schema:
        return {"enum": sorted(schema["enum"])}
    if "oneOf" in schema:
        members = [schema_type(s, all_schemas) for s in schema["oneOf"]]
        return sorted(m if isinstance(m, str) else json.dumps(m) for m in members)
    kind = schema["type"]
    if kind == "array":
        return {"array": schema_type(schema["items"], all_schemas)}
    return sorted(kind) if isinstance(kind, list) else kind


class AgainstTheSchema(unittest.TestCase):
    def setUp(self) -> None:
        self.doc = json.loads(OPENAPI.read_text())

    def test_every_route_the_client_calls_exists(self) -> None:
        for (method, path), params in OPERATIONS.items():
            with self.subTest(route=f"{method} {path}"):
                operation = self.doc["paths"].get(path, {}).get(method.lower())
                self.assertIsNotNone(operation, f"{method} {path} is not in the OpenAPI")
                declared = {p["name"] for p in operation.get("parameters", []) if p["in"] == "query"}
                self.assertLessEqual(set(params), declared)

    def test_every_model_matches_its_schema(self) -> None:
        schemas = self.doc["components"]["schemas"]
        for name, model in CHECKED.items():
            with self.subTest(model=name):
                schema = schemas[name]
                hints = typing.get_type_hints(model)
                self.assertEqual(set(hints), set(schema["properties"]), "members")
                required: frozenset[str] = model.__required_keys__  # type: ignore[attr-defined]
                self.assertEqual(set(required), set(schema.get("required", [])), "required")
                for member, annotation in hints.items():
                    self.assertEqual(
                        json_type(annotation),
                        schema_type(schema["properties"][member], schemas),
                        f"the type of `{member}`",
                    )


if __name__ == "__main__":
    unittest.main()
