#!/usr/bin/env node
/**
 * The inbox example (contract section 15; the Rust `inbox_consumer` example's flags and table):
 * reads a topic as a member of a consumer group and, for each entry, inserts one row into
 * `example_effects` in the same transaction as the inbox record of the event, then
 * acknowledges it. A redelivered entry is skipped, so every event has exactly one row.
 *
 *   DATABASE_URL=postgres://postgres@127.0.0.1/app REDIS_URL=redis://127.0.0.1:6379 \
 *     node clients/typescript/dist/examples/inbox.js --topic order.created --group billing
 *
 * A payload with `"poison": true` makes the handler fail; after --max-deliveries it goes to
 * `<stream_prefix><topic>:dead`. SIGTERM or SIGINT stops it after the entries in hand.
 */

import { parseArgs } from "node:util";
import pg from "pg";
import { ConfigError, Consumer, Inbox, ensureTables, parseDuration, shutdownSignal } from "../src/index.js";

const USAGE = `usage: inbox.js --topic T --group G [--consumer NAME] [--claim-idle 30s] [--max-deliveries 5]
  [--park-keys] [--stream-prefix outbox:] [--batch-size 100] [--concurrency 16] [--retry-base 200ms]
  (DATABASE_URL and REDIS_URL from the environment, or --database-url / --redis-url)`;

const EFFECTS_TABLE = `CREATE TABLE IF NOT EXISTS example_effects (
    event_id uuid NOT NULL,
    topic text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`;

/** The advisory lock that serializes the creation of example_effects ("example-" in ASCII), the Rust example's. */
const EFFECTS_DDL_LOCK = BigInt("0x6578616d706c652d").toString();

function fail(message: string, code = 2): never {
  process.stderr.write(`inbox.js: ${message}\n`);
  process.exit(code);
}

function duration(flag: string, text: string): number {
  const ms = parseDuration(text);
  if (ms === null) fail(`--${flag}: not a duration: ${text} (like 200ms, 30s, 1m)\n${USAGE}`);
  return ms;
}

function count(flag: string, text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n)) fail(`--${flag}: not a whole number: ${text}\n${USAGE}`);
  return n;
}

async function main(): Promise<void> {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        topic: { type: "string" },
        group: { type: "string" },
        consumer: { type: "string" },
        "claim-idle": { type: "string", default: "30s" },
        "max-deliveries": { type: "string", default: "5" },
        "park-keys": { type: "boolean", default: false },
        "stream-prefix": { type: "string", default: process.env.OUTBOX__REDIS__STREAM_PREFIX ?? "outbox:" },
        "database-url": { type: "string", default: process.env.DATABASE_URL },
        "redis-url": { type: "string", default: process.env.REDIS_URL ?? "redis://127.0.0.1:6379" },
        "batch-size": { type: "string", default: "100" },
        concurrency: { type: "string", default: "16" },
        "retry-base": { type: "string", default: "200ms" },
        "effect-delay": { type: "string" },
        help: { type: "boolean", short: "h", default: false },
      },
      strict: true,
    }));
  } catch (e) {
    fail(`${(e as Error).message}\n${USAGE}`);
  }
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  if (!values.topic) fail(`--topic is required\n${USAGE}`);
  if (!values.group) fail(`--group is required\n${USAGE}`);
  const databaseUrl = values["database-url"];
  if (!databaseUrl) fail(`DATABASE_URL (or --database-url) is required\n${USAGE}`);
  const claimIdle = duration("claim-idle", values["claim-idle"]);
  const retryBase = duration("retry-base", values["retry-base"]);
  const retryMax = Math.max(Math.min(claimIdle / 2, 10_000), retryBase);
  const effectDelay = values["effect-delay"] === undefined ? 0 : duration("effect-delay", values["effect-delay"]);
  const concurrency = count("concurrency", values.concurrency);

  let consumer: Consumer;
  try {
    consumer = new Consumer({
      redisUrl: values["redis-url"],
      topic: values.topic,
      group: values.group,
      consumer: values.consumer,
      streamPrefix: values["stream-prefix"],
      claimIdle,
      maxDeliveries: count("max-deliveries", values["max-deliveries"]),
      parkKeys: values["park-keys"],
      batchSize: count("batch-size", values["batch-size"]),
      concurrency,
      retryBase,
      retryMax,
    });
  } catch (e) {
    if (e instanceof ConfigError) fail(e.message);
    throw e;
  }
  const signal = shutdownSignal();

  const pool = new pg.Pool({
    connectionString: databaseUrl,
    max: Math.min(Math.max(concurrency, 2), 32),
    connectionTimeoutMillis: 5000,
  });
  pool.on("error", () => {}); // a dropped idle connection: the next checkout reconnects
  const client = await pool.connect();
  try {
    // Copies starting together would race on CREATE TABLE: the example's own advisory lock.
    await client.query("BEGIN");
    await client.query(`SELECT pg_advisory_xact_lock(${EFFECTS_DDL_LOCK})`);
    await client.query(EFFECTS_TABLE);
    await client.query("COMMIT");
  } finally {
    client.release();
  }
  await ensureTables(pool);

  const inbox = new Inbox(pool, async (db, entry) => {
    const payload = entry.payload as Record<string, unknown> | null;
    if (typeof payload === "object" && payload !== null && payload.poison === true) {
      throw new Error('poison event: its payload says "poison": true');
    }
    if (effectDelay > 0) await new Promise((r) => setTimeout(r, effectDelay));
    await db.query("INSERT INTO example_effects (event_id, topic) VALUES ($1, $2)", [entry.id, entry.topic]);
  });
  const stats = await consumer.run(inbox, { signal });
  process.stderr.write(`${JSON.stringify({ level: "info", message: "stopped", handled: stats.handled, failed: stats.failed, dead_lettered: stats.deadLettered })}\n`);
  await pool.end();
}

main().catch((e: unknown) => fail(e instanceof Error ? e.message : String(e), 1));
