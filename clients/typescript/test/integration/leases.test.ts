import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import { Consumer, Inbox, ensureTables, partitionFor } from "../../src/index.js";
import { REDIS_URL, eventually, freshDatabase, memoryLogger, publish, redisFor, stopper } from "../support.js";

let db: { url: string; drop: () => Promise<void> };
let pool: pg.Pool;

before(async () => {
  db = await freshDatabase();
  pool = new pg.Pool({ connectionString: db.url, max: 8 });
  await ensureTables(pool);
  await pool.query("CREATE TABLE effects (n bigserial PRIMARY KEY, event_id uuid NOT NULL, key text, seq int)");
});

after(async () => {
  await pool.end();
  await db.drop();
});

test("leases lost in Redis (as after a restart): taken again under new epochs, fences raised again, each effect once in key order", { timeout: 60_000 }, async () => {
  const { redis, prefix, cleanup } = redisFor();
  try {
    const topic = "leases";
    const N = 4;
    await redis.hset(`${prefix}partitions`, topic, String(N));
    let seq = 0;
    const produce = async (count: number) => {
      for (let i = 0; i < count; i++) {
        const key = `key-${i % 10}`;
        await publish(redis, `${prefix}${topic}:${partitionFor(key, N)}`, { topic, key, payload: { seq: seq++ } });
      }
    };
    const inbox = new Inbox(pool, async (client, e) => {
      await new Promise((r) => setTimeout(r, 2));
      await client.query("INSERT INTO effects (event_id, key, seq) VALUES ($1, $2, $3)", [e.id, e.key, (e.payload as { seq: number }).seq]);
    });
    const runs = ["a", "b"].map((name) => {
      const stop = stopper();
      const run = new Consumer({ redisUrl: REDIS_URL, topic, group: "g", consumer: name, streamPrefix: prefix, block: "200ms", claimIdle: "1s", logger: memoryLogger() }).run(inbox, { signal: stop.signal });
      return { stop, run };
    });
    await produce(100);
    await eventually(async () => (await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM effects")).rows[0]?.n === 100, 20_000, "100 effects");
    const epochsBefore = await Promise.all(Array.from({ length: N }, (_, p) => redis.get(`{${prefix}${topic}:${p}}:owner:g`).then(() => redis.get(`{${prefix}${topic}:${p}}:epoch:g`))));
    // Redis loses the leases and the members (the epoch keys live on, beside the streams), while entries arrive.
    const produced = produce(50);
    await redis.del(...Array.from({ length: N }, (_, p) => `{${prefix}${topic}:${p}}:owner:g`), `${prefix}${topic}:{g}:members`);
    await produced;
    await eventually(async () => {
      const owners = await Promise.all(Array.from({ length: N }, (_, p) => redis.get(`{${prefix}${topic}:${p}}:owner:g`)));
      const epochs = await Promise.all(Array.from({ length: N }, (_, p) => redis.get(`{${prefix}${topic}:${p}}:epoch:g`)));
      return owners.every((o) => o === "a" || o === "b") && epochs.every((e, p) => Number(e) > Number(epochsBefore[p]));
    }, 15_000, "every lease taken again under a new epoch");
    await produce(50);
    await eventually(async () => (await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM effects")).rows[0]?.n === 200, 30_000, "200 effects");
    const epochsAfter = await Promise.all(Array.from({ length: N }, (_, p) => redis.get(`{${prefix}${topic}:${p}}:epoch:g`)));
    epochsAfter.forEach((e, p) => assert.ok(Number(e) > Number(epochsBefore[p]), `partition ${p}: epoch ${epochsBefore[p]} -> ${e}`));
    for (const r of runs) r.stop.abort();
    await Promise.all(runs.map((r) => r.run));
    const rows = await pool.query<{ key: string; seq: number; d: number }>("SELECT key, seq, count(*) OVER (PARTITION BY event_id)::int AS d FROM effects ORDER BY n");
    assert.ok(rows.rows.every((r) => r.d === 1), "each effect once");
    const last = new Map<string, number>();
    for (const { key, seq } of rows.rows) {
      assert.ok((last.get(key) ?? -1) < seq, `${key}: ${seq} after ${last.get(key)}`);
      last.set(key, seq);
    }
    const fences = await pool.query<{ partition: number; epoch: string }>("SELECT partition, epoch FROM outbox_inbox_fences WHERE consumer_group = 'g' AND topic = $1", [topic]);
    // Raised before the first effect under each new lease (lazily: a lease under which nothing was handled raised nothing).
    assert.equal(fences.rows.length, N);
    for (const f of fences.rows) {
      const [was, now] = [Number(epochsBefore[f.partition]), Number(epochsAfter[f.partition])];
      assert.ok(Number(f.epoch) > was && Number(f.epoch) <= now, `fence of ${f.partition}: ${f.epoch}, epochs ${was} -> ${now}`);
    }
  } finally {
    await cleanup();
  }
});
