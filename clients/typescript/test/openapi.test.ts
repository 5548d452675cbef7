/**
 * Kept honest: the client against `schemas/openapi.json`. Every route the client calls exists
 * with the method and query parameters it sends; every interface in `CHECKED` has exactly its
 * schema's members, with their types and which are required, read from `src/models.ts` by the
 * TypeScript compiler. A schema change the client does not follow fails here.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import ts from "typescript";

import { CHECKED, OPERATIONS } from "@cra/client";
import { REPO_ROOT } from "./server.js";

type Schema = Record<string, any>;
const doc: Schema = JSON.parse(readFileSync(join(REPO_ROOT, "schemas", "openapi.json"), "utf8"));
const schemas: Record<string, Schema> = doc["components"]["schemas"];

test("every route the client calls exists, with its query parameters", () => {
  for (const [method, path, params] of OPERATIONS) {
    const operation = doc["paths"][path]?.[method.toLowerCase()];
    assert.ok(operation, `${method} ${path} is not in the OpenAPI`);
    const declared = new Set((operation.parameters ?? []).filter((p: Schema) => p["in"] === "query").map((p: Schema) => p["name"]));
    for (const param of params) assert.ok(declared.has(param), `${method} ${path} takes no ?${param}`);
  }
});

test("every checked model has its schema's members, types and required set", () => {
  const file = join(REPO_ROOT, "clients", "typescript", "src", "models.ts");
  const source = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.ES2022, true);
  const interfaces = new Map<string, ts.InterfaceDeclaration>();
  source.forEachChild((node) => {
    if (ts.isInterfaceDeclaration(node)) interfaces.set(node.name.text, node);
  });
  for (const name of CHECKED) {
    const model = interfaces.get(name);
    const schema = schemas[name];
    assert.ok(model && schema, `${name}: an interface and a schema`);
    const members = model.members.filter(ts.isPropertySignature);
    const memberName = (m: ts.PropertySignature): string => m.name.getText(source);
    assert.deepEqual(members.map(memberName).sort(), Object.keys(schema["properties"]).sort(), `${name}: members`);
    const required = members.filter((m) => !m.questionToken).map(memberName).sort();
    assert.deepEqual(required, [...(schema["required"] ?? [])].sort(), `${name}: required`);
    for (const member of members) {
      const expected = schemaType(schema["properties"][memberName(member)]);
      assert.deepEqual(tsType(member.type as ts.TypeNode, source), expected, `${name}.${memberName(member)}: type`);
    }
  }
});

/** The JSON types (or enum) a TypeScript type stands for; `number` stands for both numbers. */
function tsType(node: ts.TypeNode, source: ts.SourceFile): string[] {
  if (ts.isUnionTypeNode(node)) return [...new Set(node.types.flatMap((t) => tsType(t, source)))].sort();
  if (ts.isLiteralTypeNode(node)) {
    return node.literal.kind === ts.SyntaxKind.NullKeyword ? ["null"] : [`enum:${node.literal.getText(source).slice(1, -1)}`];
  }
  if (ts.isArrayTypeNode(node)) return ["array"];
  const text = node.getText(source);
  return text === "number" ? ["number"] : [text];
}

function schemaType(schema: Schema): string[] {
  if (schema["$ref"]) return schemaType(schemas[String(schema["$ref"]).split("/").pop() as string] as Schema);
  if (schema["enum"]) return (schema["enum"] as string[]).map((e) => `enum:${e}`).sort();
  const kinds: string[] = Array.isArray(schema["type"]) ? schema["type"] : [schema["type"]];
  return [...new Set(kinds.map((k) => (k === "integer" ? "number" : k)))].sort();
}
