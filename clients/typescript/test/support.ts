/** What the integration tests share: a unique key prefix per test, entries written as the relay writes them, a database per run. */

import { randomUUID } from "node:crypto";
import { Redis } from "ioredis";
import pg from "pg";

export const REDIS_URL = process.env.OUTBOX_TEST_REDIS_URL ?? "redis://127.0.0.1:6379";
export const PG_URL = process.env.OUTBOX_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432";

const stoppers = new Set<AbortController>();

/** The stop signal of a consumer a test runs: a test that fails before stopping it still has it stopped by its cleanup. */
export function stopper(): AbortController {
  const c = new AbortController();
  stoppers.add(c);
  return c;
}

/** A Redis client for the test's own commands, and a prefix no other test uses. */
export function redisFor(): { redis: Redis; prefix: string; cleanup: () => Promise<void> } {
  const redis = new Redis(REDIS_URL, { lazyConnect: false });
  const prefix = `nodetest-${randomUUID()}:`;
  return {
    redis,
    prefix,
    cleanup: async () => {
      // Consumers a failed test left running would create the keys again (MKSTREAM): stop them first.
      const running = [...stoppers].filter((c) => !c.signal.aborted);
      for (const c of running) c.abort();
      stoppers.clear();
      if (running.length > 0) await new Promise((r) => setTimeout(r, 2500));
      await deleteKeys(redis, prefix);
      redis.disconnect();
    },
  };
}

/** Deletes every key of the test: those starting with its prefix, and the fleet's `{<prefix>...}:owner/epoch` keys. Never FLUSHALL. */
export async function deleteKeys(redis: Redis, prefix: string): Promise<void> {
  for (const pattern of [`${prefix}*`, `{${prefix}*`]) {
    let cursor = "0";
    do {
      const [next, found] = await redis.scan(cursor, "MATCH", pattern, "COUNT", 1000);
      cursor = next;
      if (found.length > 0) await redis.del(...found);
    } while (cursor !== "0");
  }
}

export interface Event {
  id?: string;
  topic: string;
  key?: string | null;
  payload?: unknown;
  headers?: Record<string, unknown>;
  createdAt?: string;
}

/** XADDs an event as the relay's publish script does: id, topic, payload, headers, created_at, then key when there is one. */
export async function publish(redis: Redis, stream: string, event: Event): Promise<string> {
  const id = event.id ?? randomUUID();
  const fields = [
    "id",
    id,
    "topic",
    event.topic,
    "payload",
    JSON.stringify(event.payload ?? {}),
    "headers",
    JSON.stringify(event.headers ?? {}),
    "created_at",
    event.createdAt ?? "2026-12-02T13:57:01.123456Z",
  ];
  if (event.key !== undefined && event.key !== null) fields.push("key", event.key);
  await redis.xadd(stream, "*", ...fields);
  return id;
}

/** A fresh database for this run (dropped by `drop`). */
export async function freshDatabase(): Promise<{ url: string; drop: () => Promise<void> }> {
  const name = `nodetest_${randomUUID().replaceAll("-", "")}`;
  const admin = new pg.Client({ connectionString: `${PG_URL}/postgres` });
  await admin.connect();
  await admin.query(`CREATE DATABASE ${name}`);
  await admin.end();
  return {
    url: `${PG_URL}/${name}`,
    drop: async () => {
      const c = new pg.Client({ connectionString: `${PG_URL}/postgres` });
      await c.connect();
      await c.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
      await c.end();
    },
  };
}

/** Waits until `check` holds, polling; fails after `ms`. */
export async function eventually(check: () => Promise<boolean> | boolean, ms = 10_000, what = "condition"): Promise<void> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}`);
}

/** A logger that keeps the lines (and prints warnings when OUTBOX_TEST_LOG is set). */
export function memoryLogger(): { lines: Array<{ level: string; message: string; fields?: Record<string, unknown> }>; debug: (m: string, f?: Record<string, unknown>) => void; info: (m: string, f?: Record<string, unknown>) => void; warn: (m: string, f?: Record<string, unknown>) => void } {
  const lines: Array<{ level: string; message: string; fields?: Record<string, unknown> }> = [];
  const log = (level: string) => (message: string, fields?: Record<string, unknown>) => {
    lines.push({ level, message, fields });
    if (process.env.OUTBOX_TEST_LOG) process.stderr.write(`${level} ${message} ${JSON.stringify(fields ?? {})}\n`);
  };
  return { lines, debug: log("debug"), info: log("info"), warn: log("warn") };
}
