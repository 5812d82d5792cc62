import { test } from "node:test";
import assert from "node:assert/strict";
import { parseEntry, EntryError, entryToJSON, parseUuid } from "../../src/entry.js";

const good: Array<[string, string]> = [
  ["id", "6f0c1c52-4c8b-4a53-9a0e-2f3c1a1b2c3d"],
  ["topic", "order.created"],
  ["payload", '{"order_id":42}'],
  ["headers", '{"trace":"t1"}'],
  ["created_at", "2026-12-02T13:57:01.123456Z"],
  ["key", "order-42"],
];

function fails(fields: Array<[string, string | Uint8Array]>, code: string, message: string, topic?: string): void {
  assert.throws(
    () => parseEntry(fields, { streamId: "1-0", topic }),
    (e: unknown) => e instanceof EntryError && e.code === code && e.message === message,
  );
}

test("parses a relay entry", () => {
  const e = parseEntry(good, { streamId: "1-0" });
  assert.deepEqual(entryToJSON(e), {
    stream_id: "1-0",
    id: "6f0c1c52-4c8b-4a53-9a0e-2f3c1a1b2c3d",
    topic: "order.created",
    key: "order-42",
    payload: { order_id: 42 },
    headers: { trace: "t1" },
    created_at: "2026-12-02T13:57:01.123456Z",
  });
  assert.equal(e.deliveries, 1);
  assert.equal(e.createdAt.toISOString(), "2026-12-02T13:57:01.123Z");
});

test("malformed entries name the field", () => {
  const without = (name: string) => good.filter(([k]) => k !== name);
  const with_ = (name: string, v: string | Uint8Array) => good.map(([k, x]) => [k, k === name ? v : x] as [string, string | Uint8Array]);
  fails(without("id"), "missing", "field `id` is missing");
  fails(without("payload"), "missing", "field `payload` is missing");
  fails(with_("id", "nope"), "id", "field `id` is not a uuid: nope");
  fails(with_("created_at", "yesterday"), "created_at", "field `created_at` is not an RFC 3339 time: yesterday");
  fails(with_("topic", Uint8Array.from([0xff, 0xfe])), "not_text", "field `topic` is not UTF-8 text");
  assert.throws(() => parseEntry(with_("payload", "{"), { streamId: "1-0" }), (e: unknown) => e instanceof EntryError && e.code === "json" && e.field === "payload");
});

test("uuids in every form the Rust crate reads", () => {
  const want = "6f0c1c52-4c8b-4a53-9a0e-2f3c1a1b2c3d";
  for (const form of [want, want.toUpperCase(), want.replaceAll("-", ""), `{${want}}`, `urn:uuid:${want}`]) {
    assert.equal(parseUuid(form), want, form);
  }
  for (const bad of ["", "6f0c1c52", `${want}0`, "6f0c1c52-4c8b-4a53-9a0e-2f3c1a1b2c3g"]) assert.equal(parseUuid(bad), null, bad);
});

test("a CloudEvents entry reads like any other", () => {
  const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  const event = {
    specversion: "1.0",
    id: "6f0c1c52-4c8b-4a53-9a0e-2f3c1a1b2c3d",
    source: "/outbox-relay",
    type: "com.shop.order.created",
    time: "2026-12-02T13:57:01.123456Z",
    datacontenttype: "application/json",
    data: { order_id: 42 },
    partitionkey: "order-42",
    traceparent: tp,
    x: 1,
  };
  const e = parseEntry([["id", event.id], ["cloudevent", JSON.stringify(event)]], { streamId: "1-0", topic: "order.created" });
  assert.equal(e.topic, "order.created");
  assert.equal(e.key, "order-42");
  assert.deepEqual(e.payload, { order_id: 42 });
  assert.deepEqual(e.headers, { type: "com.shop.order.created", traceparent: tp });
  assert.deepEqual(e.cloudevent?.extensions, { x: 1 });
  fails([["id", event.id], ["cloudevent", JSON.stringify(event)]], "missing", "field `topic` is missing");
  const other = { ...event, id: "00000000-0000-0000-0000-000000000000" };
  fails([["id", event.id], ["cloudevent", JSON.stringify(other)]], "cloudevent_id",
    'field `cloudevent`: its id "00000000-0000-0000-0000-000000000000" is not the entry\'s id 6f0c1c52-4c8b-4a53-9a0e-2f3c1a1b2c3d', "t");
  fails([["id", event.id], ["cloudevent", JSON.stringify({ ...event, specversion: "0.3" })]], "cloudevent",
    'field `cloudevent`: specversion "0.3" is not 1.0', "t");
  const { time: _time, ...untimed } = event;
  fails([["id", event.id], ["cloudevent", JSON.stringify(untimed)]], "cloudevent", "field `cloudevent`: attribute `time` is missing", "t");
});
