import { test } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import { Redis } from "ioredis";
import { REDIS_URL, deleteKeys, eventually, freshDatabase } from "../support.js";
import { haveRelay, migrate, relay, stop, tsExample, type Proc } from "./procs.js";
import { randomUUID } from "node:crypto";

const skip = !haveRelay && "target/debug/outbox-relay is not built (cargo build)";

test("relay -> TypeScript inbox example: each non-poison event once in example_effects through SIGKILLs, poison in the dead stream", { skip, timeout: 120_000 }, async () => {
  const db = await freshDatabase();
  const redis = new Redis(REDIS_URL);
  const prefix = `nodetest-${randomUUID()}:`;
  const pool = new pg.Pool({ connectionString: db.url, max: 2 });
  let relayProc: Proc | null = null;
  const consumers: Proc[] = [];
  try {
    migrate(db.url);
    relayProc = relay(db.url, REDIS_URL, prefix, { OUTBOX__GROUPS: "e2e.orders:billing" });
    const args = ["--topic", "e2e.orders", "--group", "billing", "--claim-idle", "2s", "--max-deliveries", "3", "--retry-base", "20ms", "--stream-prefix", prefix];
    const launch = (name: string) => {
      const p = tsExample(db.url, REDIS_URL, [...args, "--consumer", name]);
      consumers.push(p);
      return p;
    };
    let a = launch("ts-a");
    let b = launch("ts-b");
    const total = 400;
    const poison = 3;
    for (let i = 0; i < total; i += 50) {
      const values: string[] = [];
      for (let j = i; j < i + 50; j++) {
        const payload = j < poison ? `{"poison": true, "seq": ${j}}` : `{"seq": ${j}}`;
        values.push(`('e2e.orders', '${payload}'::jsonb, 'key-${j % 17}')`);
      }
      await pool.query(`INSERT INTO outbox (topic, payload, partition_key) VALUES ${values.join(", ")}`);
      await new Promise((r) => setTimeout(r, 100));
      if (i === 100) {
        a.child.kill("SIGKILL");
        await a.exited;
        a = launch("ts-a"); // the same name: finishes its own pending entries first
      }
      if (i === 250) {
        b.child.kill("SIGKILL");
        await b.exited;
        b = launch("ts-c"); // a new name: ts-b's entries are claimed after claim idle
      }
    }
    // Until the examples created example_effects, there is nothing to count.
    const effects = async () =>
      (await pool.query<{ n: number; d: number }>("SELECT count(*)::int AS n, count(DISTINCT event_id)::int AS d FROM example_effects").catch(() => ({ rows: [] }))).rows[0];
    await eventually(async () => (await effects())?.n === total - poison, 60_000, "every non-poison event applied");
    await eventually(async () => (await redis.xlen(`${prefix}e2e.orders:dead`)) === poison, 20_000, "the poison events dead-lettered");
    // No late duplicate: a little more time, then the count again.
    await new Promise((r) => setTimeout(r, 1500));
    const e = await effects();
    assert.equal(e?.n, total - poison);
    assert.equal(e?.d, total - poison, "each once");
    const missing = await pool.query<{ n: number }>(
      "SELECT count(*)::int AS n FROM outbox o WHERE o.topic = 'e2e.orders' AND NOT (o.payload ? 'poison') AND NOT EXISTS (SELECT 1 FROM example_effects e WHERE e.event_id = o.id)",
    );
    assert.equal(missing.rows[0]?.n, 0);
    const dead = await redis.xrange(`${prefix}e2e.orders:dead`, "-", "+");
    for (const [, f] of dead) {
      const o = Object.fromEntries(f.flatMap((x, i) => (i % 2 === 0 ? [[x, f[i + 1]]] : [])) as Array<[string, string]>);
      assert.equal(o.group, "billing");
      assert.equal(o.deliveries, "3");
      assert.match(o.error ?? "", /poison event/);
      assert.equal(o.topic, "e2e.orders");
    }
    // SIGTERM: a clean stop, exit code 0.
    assert.equal(await stop(a), 0, a.output());
    assert.equal(await stop(b), 0, b.output());
  } finally {
    for (const c of consumers) await stop(c, "SIGKILL");
    if (relayProc) await stop(relayProc);
    await pool.end();
    await deleteKeys(redis, prefix);
    redis.disconnect();
    await db.drop();
  }
});

test("relay -> TypeScript inbox example on a CloudEvents topic: each event once, read with its stream's topic", { skip, timeout: 60_000 }, async () => {
  const db = await freshDatabase();
  const redis = new Redis(REDIS_URL);
  const prefix = `nodetest-${randomUUID()}:`;
  const pool = new pg.Pool({ connectionString: db.url, max: 2 });
  let relayProc: Proc | null = null;
  let consumer: Proc | null = null;
  try {
    migrate(db.url);
    relayProc = relay(db.url, REDIS_URL, prefix, { OUTBOX__REDIS__ENVELOPE: "cloudevents", OUTBOX__GROUPS: "e2e.ce:g" });
    const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const values = Array.from({ length: 20 }, (_, i) => `('e2e.ce', '{"n": ${i}}'::jsonb, ${i % 2 ? `'k${i % 3}'` : "NULL"}, '{"type": "com.shop.ce", "traceparent": "${tp}"}'::jsonb)`);
    await pool.query(`INSERT INTO outbox (topic, payload, partition_key, headers) VALUES ${values.join(", ")}`);
    consumer = tsExample(db.url, REDIS_URL, ["--topic", "e2e.ce", "--group", "g", "--stream-prefix", prefix, "--consumer", "ce"]);
    await eventually(async () => (await redis.xlen(`${prefix}e2e.ce`)) === 20, 20_000, "20 CloudEvents entries");
    const [, first] = (await redis.xrange(`${prefix}e2e.ce`, "-", "+", "COUNT", 1))[0] ?? ["", []];
    assert.deepEqual(first.filter((_, i) => i % 2 === 0), ["id", "cloudevent"], "the relay wrote the CloudEvents envelope");
    const count = async () =>
      (await pool.query<{ n: number; d: number; t: number }>(
        "SELECT count(*)::int AS n, count(DISTINCT event_id)::int AS d, count(*) FILTER (WHERE topic = 'e2e.ce')::int AS t FROM example_effects",
      ).catch(() => ({ rows: [] }))).rows[0];
    await eventually(async () => (await count())?.n === 20, 30_000, "every event applied");
    const c = await count();
    assert.equal(c?.d, 20);
    assert.equal(c?.t, 20, "the topic is the stream's");
    assert.equal(await redis.exists(`${prefix}e2e.ce:dead`), 0, "nothing malformed");
    assert.equal(await stop(consumer), 0, consumer.output());
  } finally {
    if (consumer) await stop(consumer, "SIGKILL");
    if (relayProc) await stop(relayProc);
    await pool.end();
    await deleteKeys(redis, prefix);
    redis.disconnect();
    await db.drop();
  }
});
