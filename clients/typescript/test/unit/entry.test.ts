import { test } from "node:test";
import assert from "node:assert/strict";
import { parseEntry, EntryError, parseUuid, type Entry } from "../../src/entry.js";
import { golden } from "./golden.js";

type Value = string | { hex: string };

interface Case {
  name: string;
  stream_topic: string;
  stream_id: string;
  fields: Array<[string, Value]>;
  expect?: Record<string, unknown> & { cloudevent: Record<string, unknown> | null };
  error?: { code: string; field: string; message: string; message_prefix: string; attribute?: string };
}

const data = golden<{ error_codes: Record<string, string>; cases: Case[] }>("entries");

function fields(c: Case): Array<[string, string | Uint8Array]> {
  return c.fields.map(([k, v]) => [k, typeof v === "string" ? v : Buffer.from(v.hex, "hex")]);
}

/** The parsed entry in the golden data's form. */
function shape(e: Entry): Record<string, unknown> {
  const headers = e.headers as Record<string, unknown> | null;
  const tp = typeof headers === "object" && headers !== null && !Array.isArray(headers) ? headers.traceparent : undefined;
  let cloudevent: Record<string, unknown> | null = null;
  if (e.cloudevent) {
    const a = e.cloudevent;
    cloudevent = {
      specversion: a.specversion,
      id: a.id,
      source: a.source,
      type: a.type,
      datacontenttype: a.datacontenttype ?? null,
      subject: a.subject ?? null,
      partitionkey: a.partitionkey ?? null,
      traceparent: a.traceparent ?? null,
      tracestate: a.tracestate ?? null,
      extensions: a.extensions,
    };
  }
  return {
    id: e.id,
    topic: e.topic,
    key: e.key,
    payload: e.payload,
    headers: e.headers,
    created_at: e.createdAtText,
    traceparent: typeof tp === "string" ? tp : null,
    cloudevent,
  };
}

test("golden entries parse to what the protocol says", () => {
  let parsed = 0;
  for (const c of data.cases.filter((c) => c.expect)) {
    const e = parseEntry(fields(c), { streamId: c.stream_id, topic: c.stream_topic });
    assert.equal(e.streamId, c.stream_id, c.name);
    const expect = { ...c.expect };
    if (expect.cloudevent !== null) expect.cloudevent = { ...expect.cloudevent };
    assert.deepEqual(shape(e), expect, c.name);
    parsed++;
  }
  assert.ok(parsed > 15);
});

test("golden malformed entries give their error code, field, attribute and message", () => {
  let failed = 0;
  for (const c of data.cases.filter((c) => c.error)) {
    const want = c.error as NonNullable<Case["error"]>;
    assert.ok(want.code in data.error_codes, `${c.name}: a documented code`);
    assert.throws(
      () => parseEntry(fields(c), { streamId: c.stream_id, topic: c.stream_topic }),
      (e: unknown) => {
        assert.ok(e instanceof EntryError, c.name);
        assert.equal(e.code, want.code, c.name);
        assert.equal(e.field, want.field, c.name);
        assert.equal(e.attribute, want.attribute, c.name);
        assert.ok(e.message.startsWith(want.message_prefix), `${c.name}: ${e.message}`);
        return true;
      },
      c.name,
    );
    failed++;
  }
  assert.ok(failed > 20);
});

test("uuids in every form the Rust crate reads", () => {
  const want = "6f0c1c52-4c8b-4a53-9a0e-2f3c1a1b2c3d";
  for (const form of [want, want.toUpperCase(), want.replaceAll("-", ""), `{${want}}`, `urn:uuid:${want}`]) {
    assert.equal(parseUuid(form), want, form);
  }
  for (const bad of ["", "6f0c1c52", `${want}0`, "6f0c1c52-4c8b-4a53-9a0e-2f3c1a1b2c3g"]) assert.equal(parseUuid(bad), null, bad);
});
