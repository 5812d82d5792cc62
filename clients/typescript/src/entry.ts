/**
 * The stream entry (docs/protocol.md, "Entries"): the fields the relay writes (`id`, `topic`,
 * `payload`, `headers`, `created_at`, `key`), or the CloudEvents envelope (`id` and
 * `cloudevent`), parsed into one {@link Entry}. Parsing never throws anything but an
 * {@link EntryError} naming the field, so the consumer dead-letters a malformed entry with
 * the reason instead of stopping on it. The error texts are the Rust library's.
 */

import { parseRfc3339 } from "./time.js";

/** The field names the relay writes. */
export const FIELDS = {
  id: "id",
  topic: "topic",
  payload: "payload",
  headers: "headers",
  createdAt: "created_at",
  key: "key",
  cloudevent: "cloudevent",
} as const;

const KNOWN: ReadonlySet<string> = new Set(Object.values(FIELDS));

/** A consumer's hold on one partition: the partition and its fencing epoch. */
export interface Lease {
  partition: number;
  epoch: number;
}

/** A CloudEvent's context attributes, for an entry of the CloudEvents envelope. */
export interface CloudEvent {
  specversion: string;
  id: string;
  source: string;
  type: string;
  /** `time`, normalized to UTC with microseconds. */
  time?: string;
  datacontenttype?: string;
  subject?: string;
  partitionkey?: string;
  traceparent?: string;
  tracestate?: string;
  /** Every other extension attribute. */
  extensions: Record<string, unknown>;
}

/** An event read from its topic's stream. */
export interface Entry {
  /** The Redis stream entry id (`1764683821123-0`), what XACK takes. */
  streamId: string;
  /** The stream the entry was read from (a partition's, on a partitioned topic). */
  stream: string;
  /** The event's uuid (lowercase, hyphenated): deduplicate on it. */
  id: string;
  topic: string;
  /** The partition key; `null` when the event has none. */
  key: string | null;
  /** The payload, parsed from its JSON text. */
  payload: unknown;
  /** The headers, parsed from their JSON text. */
  headers: unknown;
  /** When the producer wrote the event (milliseconds; see `createdAtText`). */
  createdAt: Date;
  /** `created_at` in UTC with microseconds (`2026-12-02T13:57:01.123456Z`). */
  createdAtText: string;
  /** This delivery's number in the group (1 the first time). */
  deliveries: number;
  /** The consumer group it was delivered to; empty outside a group. */
  group: string;
  /** The lease under which this consumer handles it, on a divided partition; else `null`. */
  lease: Lease | null;
  /** The CloudEvents attributes of an entry of that envelope; else `null`. */
  cloudevent: CloudEvent | null;
}

/** Why a field is not what the relay writes: the code names the case. */
export type EntryErrorCode =
  | "missing_field"
  | "not_text"
  | "bad_id"
  | "bad_json"
  | "bad_created_at"
  | "cloudevent_not_json"
  | "cloudevent_missing_attribute"
  | "cloudevent_bad_specversion"
  | "cloudevent_bad_time"
  | "cloudevent_binary_data"
  | "cloudevent_id_mismatch";

/** Why a stream entry is not a well-formed outbox event. */
export class EntryError extends Error {
  override readonly name = "EntryError";
  constructor(
    readonly code: EntryErrorCode,
    /** The field at fault. */
    readonly field: string,
    message: string,
    /** The CloudEvents attribute at fault, for some `cloudevent_*` codes. */
    readonly attribute?: string,
  ) {
    super(message);
  }
}

/** A field value as Redis returned it: text, or bytes (checked to be UTF-8). */
export type FieldValue = string | Uint8Array;

const utf8 = new TextDecoder("utf-8", { fatal: true });

/** A field value as text, `null` when it is not UTF-8. */
export function fieldText(value: FieldValue): string | null {
  if (typeof value === "string") return value;
  try {
    return utf8.decode(value);
  } catch {
    return null;
  }
}

const HEX = /^[0-9a-fA-F]{32}$/;

/** Parses a uuid as Rust's `uuid` crate does (hyphenated, simple, braced, urn); lowercase hyphenated, or `null`. */
export function parseUuid(text: string): string | null {
  let hyphenated = text;
  if (text.length === 32) {
    hyphenated = `${text.slice(0, 8)}-${text.slice(8, 12)}-${text.slice(12, 16)}-${text.slice(16, 20)}-${text.slice(20)}`;
  } else if (text.length === 38 && text.startsWith("{") && text.endsWith("}")) {
    hyphenated = text.slice(1, -1);
  } else if (text.length === 45 && text.startsWith("urn:uuid:")) {
    hyphenated = text.slice(9);
  }
  if (hyphenated.length !== 36) return null;
  const parts = hyphenated.split("-");
  if (parts.length !== 5 || parts.map((x) => x.length).join() !== "8,4,4,4,12") return null;
  const hex = parts.join("");
  if (!HEX.test(hex)) return null;
  return hyphenated.toLowerCase();
}

function jsonField(text: string, field: "payload" | "headers"): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch (e) {
    throw new EntryError("bad_json", field, `field \`${field}\` is not JSON: ${(e as Error).message}`);
  }
}

/** How to read an entry: its stream id, and the topic of its stream (a CloudEvents entry names none). */
export interface ParseOptions {
  streamId: string;
  /** The topic of the stream it came from. */
  topic?: string;
  /** The stream it came from. */
  stream?: string;
}

/**
 * Parses an entry from its fields, in order as Redis returned them (pairs), or as an object.
 * Unknown fields are ignored. Throws an {@link EntryError} naming the field at fault.
 */
export function parseEntry(
  fields: ReadonlyArray<readonly [string, FieldValue]> | Readonly<Record<string, FieldValue>>,
  options: ParseOptions,
): Entry {
  const pairs: ReadonlyArray<readonly [string, FieldValue]> = Array.isArray(fields)
    ? (fields as ReadonlyArray<readonly [string, FieldValue]>)
    : Object.entries(fields as Record<string, FieldValue>);
  const text = new Map<string, string>();
  for (const [name, value] of pairs) {
    if (!KNOWN.has(name)) continue;
    const t = fieldText(value);
    if (t === null) throw new EntryError("not_text", name, `field \`${name}\` is not UTF-8 text`);
    text.set(name, t);
  }
  const take = (name: string): string => {
    const v = text.get(name);
    if (v === undefined) throw new EntryError("missing_field", name, `field \`${name}\` is missing`);
    text.delete(name);
    return v;
  };
  const idText = take(FIELDS.id);
  const id = parseUuid(idText);
  if (id === null) throw new EntryError("bad_id", FIELDS.id, `field \`id\` is not a uuid: ${idText}`);
  const base = {
    streamId: options.streamId,
    stream: options.stream ?? "",
    id,
    deliveries: 1,
    group: "",
    lease: null,
  };
  const event = text.get(FIELDS.cloudevent);
  if (event !== undefined) {
    const topic = text.get(FIELDS.topic) ?? options.topic;
    if (topic === undefined) throw new EntryError("missing_field", FIELDS.topic, "field `topic` is missing");
    return { ...base, ...readCloudEvent(id, topic, event) };
  }
  const topic = take(FIELDS.topic);
  const payload = jsonField(take(FIELDS.payload), "payload");
  const headers = jsonField(take(FIELDS.headers), "headers");
  const createdText = take(FIELDS.createdAt);
  const created = parseRfc3339(createdText);
  if (created === null) {
    throw new EntryError(
      "bad_created_at",
      FIELDS.createdAt,
      `field \`created_at\` is not an RFC 3339 time: ${createdText}`,
    );
  }
  return {
    ...base,
    topic,
    key: text.get(FIELDS.key) ?? null,
    payload,
    headers,
    createdAt: created.date,
    createdAtText: created.text,
    cloudevent: null,
  };
}

function ceError(code: EntryErrorCode, message: string, attribute?: string): EntryError {
  return new EntryError(code, FIELDS.cloudevent, `field \`cloudevent\`: ${message}`, attribute);
}

const TEXT_ATTRIBUTES = [
  "specversion",
  "id",
  "source",
  "type",
  "time",
  "datacontenttype",
  "subject",
  "partitionkey",
  "traceparent",
  "tracestate",
] as const;

/** Rust's `{:?}` of a string: quoted, with its escapes. */
function debugString(s: string): string {
  return JSON.stringify(s);
}

function readCloudEvent(
  id: string,
  topic: string,
  event: string,
): Pick<Entry, "topic" | "key" | "payload" | "headers" | "createdAt" | "createdAtText" | "cloudevent"> {
  let wire: unknown;
  try {
    wire = JSON.parse(event);
  } catch (e) {
    throw ceError("cloudevent_not_json", `not a CloudEvents JSON object: ${(e as Error).message}`);
  }
  if (typeof wire !== "object" || wire === null || Array.isArray(wire)) {
    throw ceError("cloudevent_not_json", "not a CloudEvents JSON object: not a JSON object");
  }
  const object = wire as Record<string, unknown>;
  const attrs: Partial<Record<(typeof TEXT_ATTRIBUTES)[number], string>> = {};
  for (const name of TEXT_ATTRIBUTES) {
    const v = object[name];
    if (v === undefined || v === null) continue;
    if (typeof v !== "string") {
      throw ceError("cloudevent_not_json", `not a CloudEvents JSON object: attribute \`${name}\` is not a string`);
    }
    attrs[name] = v;
  }
  const extensions: Record<string, unknown> = {};
  for (const [name, v] of Object.entries(object)) {
    if ((TEXT_ATTRIBUTES as readonly string[]).includes(name) || name === "data" || name === "data_base64") continue;
    extensions[name] = v;
  }
  if (attrs.specversion === undefined) throw ceError("cloudevent_missing_attribute", "attribute `specversion` is missing", "specversion");
  if (attrs.specversion !== "1.0") {
    throw ceError("cloudevent_bad_specversion", `specversion ${debugString(attrs.specversion)} is not 1.0`);
  }
  if (object.data_base64 !== undefined && object.data_base64 !== null) {
    throw ceError("cloudevent_binary_data", "attribute `data_base64`: binary data is not read, only JSON `data`", "data_base64");
  }
  let time: ReturnType<typeof parseRfc3339> = null;
  if (attrs.time !== undefined) {
    time = parseRfc3339(attrs.time);
    if (time === null) throw ceError("cloudevent_bad_time", `attribute \`time\` is not an RFC 3339 time: ${attrs.time}`, "time");
  }
  for (const required of ["id", "source", "type"] as const) {
    if (attrs[required] === undefined) throw ceError("cloudevent_missing_attribute", `attribute \`${required}\` is missing`, required);
  }
  const attributes: CloudEvent = {
    specversion: attrs.specversion,
    id: attrs.id as string,
    source: attrs.source as string,
    type: attrs.type as string,
    extensions,
  };
  if (time !== null) attributes.time = time.text;
  for (const name of ["datacontenttype", "subject", "partitionkey", "traceparent", "tracestate"] as const) {
    const v = attrs[name];
    if (v !== undefined) attributes[name] = v;
  }
  if (parseUuid(attributes.id) !== id) {
    throw new EntryError(
      "cloudevent_id_mismatch",
      FIELDS.cloudevent,
      `field \`cloudevent\`: its id ${debugString(attributes.id)} is not the entry's id ${id}`,
      "id",
    );
  }
  if (time === null) throw ceError("cloudevent_missing_attribute", "attribute `time` is missing", "time");
  const data = object.data === undefined ? null : object.data;
  return {
    topic,
    key: attributes.partitionkey ?? null,
    payload: data,
    headers: cloudEventHeaders(attributes, topic),
    createdAt: time.date,
    createdAtText: time.text,
    cloudevent: attributes,
  };
}

/** The headers an entry read from a CloudEvent shows: `type` when it is not the topic, `traceparent`, `tracestate`. */
export function cloudEventHeaders(attributes: CloudEvent, topic: string): Record<string, string> {
  const headers: Record<string, string> = {};
  if (attributes.type !== topic) headers.type = attributes.type;
  if (attributes.traceparent !== undefined) headers.traceparent = attributes.traceparent;
  if (attributes.tracestate !== undefined) headers.tracestate = attributes.tracestate;
  return headers;
}

/**
 * The JSON object `outbox-relay tail` prints for an entry: `{"stream_id","id","topic","key",
 * "payload","headers","created_at"}`, and `cloudevent` (the attributes, extensions inline)
 * for an entry of the CloudEvents envelope.
 */
export function entryToJSON(entry: Entry): Record<string, unknown> {
  const json: Record<string, unknown> = {
    stream_id: entry.streamId,
    id: entry.id,
    topic: entry.topic,
    key: entry.key,
    payload: entry.payload,
    headers: entry.headers,
    created_at: entry.createdAtText,
  };
  if (entry.cloudevent !== null) {
    const { extensions, ...attributes } = entry.cloudevent;
    json.cloudevent = { ...attributes, ...extensions };
  }
  return json;
}
