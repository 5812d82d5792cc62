/**
 * The Redis side: connections (ioredis), the protocol's scripts defined as commands (EVALSHA,
 * falling back to EVAL on NOSCRIPT), and the replies parsed as bytes so that a dead letter
 * copies a field exactly as the relay wrote it.
 */

import { Redis, type RedisOptions } from "ioredis";
import { script } from "./protocol.js";

/** One entry as Redis returned it: its stream, its id and its fields in order (values as bytes). */
export interface RawEntry {
  stream: string;
  streamId: string;
  fields: Array<[string, Buffer]>;
}

/** An entry's place: its stream and its id there. */
export interface EntryRef {
  stream: string;
  id: string;
}

/** A map key for an {@link EntryRef}. */
export function refKey(ref: EntryRef): string {
  return `${ref.stream}\u0000${ref.id}`;
}

/** The scripts of the protocol this client runs, by command name and file. */
const SCRIPTS = {
  outboxMembers: "members",
  outboxLease: "lease",
  outboxRead: "read",
  outboxClaim: "claim",
  outboxHandOver: "hand_over",
  outboxDeadLetter: "dead_letter",
  outboxAckIfMine: "ack_if_mine",
  outboxUnlock: "unlock",
} as const;

type ScriptCall = (numKeys: number, ...args: Array<string | number | Buffer>) => Promise<unknown>;

/** A connection with the protocol's scripts as commands (each takes the number of keys first). */
export type Conn = Redis & { [K in keyof typeof SCRIPTS]: ScriptCall } & {
  [K in keyof typeof SCRIPTS as `${K}Buffer`]: ScriptCall;
};

/** Opens a connection: commands fail (instead of queueing forever) while Redis is away, so the loop backs off. */
export function connect(url: string, commandTimeoutMs: number, name: string): Conn {
  const options: RedisOptions = {
    lazyConnect: true,
    maxRetriesPerRequest: 1,
    enableOfflineQueue: true,
    commandTimeout: commandTimeoutMs,
    connectTimeout: 2000,
    connectionName: name,
    retryStrategy: (times) => Math.min(100 * 2 ** Math.min(times, 6), 2000),
  };
  const conn = new Redis(url, options);
  // Errors are reported by the commands that fail; without a listener ioredis prints them all.
  conn.on("error", () => {});
  for (const [command, file] of Object.entries(SCRIPTS)) {
    conn.defineCommand(command, { lua: script(file) });
  }
  return conn as Conn;
}

/** Bytes or text as text (Redis replies to text commands). */
export function text(value: unknown): string {
  if (Buffer.isBuffer(value)) return value.toString("utf8");
  if (typeof value === "string") return value;
  if (typeof value === "number") return String(value);
  return "";
}

/** The entries of an XRANGE-style array `[[id, [field, value, ...]], ...]`; deleted entries (nil fields) are left out. */
export function parseEntries(stream: string, list: unknown): RawEntry[] {
  if (!Array.isArray(list)) return [];
  const out: RawEntry[] = [];
  for (const item of list) {
    if (!Array.isArray(item) || item.length !== 2 || !Array.isArray(item[1])) continue;
    const flat = item[1] as unknown[];
    const fields: Array<[string, Buffer]> = [];
    for (let i = 0; i + 1 < flat.length; i += 2) {
      const v = flat[i + 1];
      fields.push([text(flat[i]), Buffer.isBuffer(v) ? v : Buffer.from(text(v))]);
    }
    out.push({ stream, streamId: text(item[0]), fields });
  }
  return out;
}

/** The entries of an XREADGROUP reply, stream after stream. */
export function parseReadReply(reply: unknown): RawEntry[] {
  if (!Array.isArray(reply)) return [];
  return reply.flatMap((s: unknown) =>
    Array.isArray(s) && s.length === 2 ? parseEntries(text(s[0]), s[1]) : [],
  );
}

/** The ids of `refs` per stream, streams in order of first appearance. */
export function byStream(refs: Iterable<EntryRef>): Array<[string, string[]]> {
  const out = new Map<string, string[]>();
  for (const r of refs) {
    const ids = out.get(r.stream);
    if (ids) ids.push(r.id);
    else out.set(r.stream, [r.id]);
  }
  return [...out];
}

/** `XGROUP CREATE key group 0 MKSTREAM`; an existing group is left as it is. */
export async function ensureGroup(conn: Redis, stream: string, group: string): Promise<void> {
  try {
    await conn.xgroup("CREATE", stream, group, "0", "MKSTREAM");
  } catch (e) {
    if (!String((e as Error).message).startsWith("BUSYGROUP")) throw e;
  }
}

/** Whether `e` says the group (or its stream) is gone. */
export function isNoGroup(e: unknown): boolean {
  return e instanceof Error && e.message.startsWith("NOGROUP");
}
