import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import { Batches, Consumer, HandlerError, Inbox, ensureTables, raiseFence, type Entry } from "../../src/index.js";
import { REDIS_URL, eventually, freshDatabase, memoryLogger, publish, redisFor, stopper } from "../support.js";

let db: { url: string; drop: () => Promise<void> };
let pool: pg.Pool;

before(async () => {
  db = await freshDatabase();
  pool = new pg.Pool({ connectionString: db.url, max: 8 });
  await ensureTables(pool);
  await ensureTables(pool); // idempotent
  await pool.query("CREATE TABLE effects (event_id uuid NOT NULL, note text)");
});

after(async () => {
  await pool.end();
  await db.drop();
});

function consumer(prefix: string, topic: string, extra: Record<string, unknown> = {}): Consumer {
  return new Consumer({
    redisUrl: REDIS_URL,
    topic,
    group: "g",
    consumer: "c1",
    streamPrefix: prefix,
    block: "200ms",
    retryBase: "20ms",
    retryMax: "100ms",
    logger: memoryLogger(),
    ...extra,
  });
}

async function rows(ids: string[]): Promise<number> {
  const r = await pool.query<{ n: string }>("SELECT count(*) AS n FROM effects WHERE event_id = ANY($1::uuid[])", [ids]);
  return Number(r.rows[0]?.n);
}

test("the effect and the inbox row commit together; a redelivered event is skipped", async () => {
  const { redis, prefix, cleanup } = redisFor();
  try {
    const stream = `${prefix}t1`;
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) ids.push(await publish(redis, stream, { topic: "t1", key: `k${i % 2}` }));
    // The same events again (a replay from the dead stream, a relay crash between two writes).
    for (const id of ids.slice(0, 5)) await publish(redis, stream, { topic: "t1", id });
    let calls = 0;
    const stop = stopper();
    const inbox = new Inbox(pool, async (client, entry) => {
      calls++;
      await client.query("INSERT INTO effects (event_id) VALUES ($1)", [entry.id]);
    });
    const run = consumer(prefix, "t1").run(inbox, { signal: stop.signal });
    await eventually(async () => {
      const info = ((await redis.xinfo("GROUPS", stream)) as unknown[][])[0] ?? [];
      return info[info.indexOf("lag") + 1] === 0 && calls >= 10;
    }, 10_000, "all read");
    await eventually(async () => {
      const p = (await redis.xpending(stream, "g"));
      return p[0] === 0;
    }, 10_000, "nothing pending");
    stop.abort();
    const stats = await run;
    assert.equal(stats.handled, 15);
    assert.equal(calls, 10, "the effect ran once per event");
    assert.equal(await rows(ids), 10);
    const inboxRows = await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM outbox_inbox WHERE consumer_group = 'g' AND event_id = ANY($1::uuid[])", [ids]);
    assert.equal(inboxRows.rows[0]?.n, 10);
  } finally {
    await cleanup();
  }
});

test("the inbox's database away is an outage (no delivery spent); the effect's failure is a retry, rolled back", async () => {
  const { redis, prefix, cleanup } = redisFor();
  try {
    const stream = `${prefix}t2`;
    const id = await publish(redis, stream, { topic: "t2", key: "a" });
    // A pool whose first connections fail, as while Postgres restarts.
    let refusals = 6;
    const flaky = new pg.Pool({ connectionString: db.url, max: 2 });
    const connect = flaky.connect.bind(flaky);
    (flaky as unknown as { connect: () => Promise<pg.PoolClient> }).connect = async () => {
      if (refusals > 0) {
        refusals--;
        throw new Error("connect ECONNREFUSED 127.0.0.1:5432");
      }
      return connect();
    };
    const deliveries: number[] = [];
    const stop = stopper();
    const inbox = new Inbox(flaky, async (client, entry: Entry) => {
      deliveries.push(entry.deliveries);
      await client.query("INSERT INTO effects (event_id, note) VALUES ($1, 'attempt')", [entry.id]);
      if (deliveries.length === 1) throw new Error("the effect failed after writing");
    });
    const run = consumer(prefix, "t2", { maxDeliveries: 3 }).run(inbox, { signal: stop.signal });
    await eventually(() => deliveries.length === 2, 30_000, "two deliveries of the effect");
    await eventually(async () => ((await redis.xpending(stream, "g")))[0] === 0, 10_000, "acknowledged");
    stop.abort();
    const stats = await run;
    await flaky.end();
    assert.equal(refusals, 0);
    assert.deepEqual(deliveries, [1, 2], "six outages spent no delivery; the effect's failure spent one");
    assert.equal(stats.deadLettered, 0);
    assert.equal(await rows([id]), 1, "the failed attempt's row was rolled back");
  } finally {
    await cleanup();
  }
});

test("the fence: an effect under an older epoch than the partition's fence is refused and rolled back", async () => {
  const topic = "t3";
  const entry = (epoch: number, id: string): Entry => ({
    streamId: "1-0",
    stream: "s:3",
    id,
    topic,
    key: "k",
    payload: {},
    headers: {},
    createdAt: new Date(),
    createdAtText: "",
    deliveries: 1,
    group: "fg",
    lease: { partition: 3, epoch },
    cloudevent: null,
  });
  const ids = ["11111111-1111-4111-8111-111111111111", "22222222-2222-4222-8222-222222222222"];
  const inbox = new Inbox(pool, async (client, e) => {
    await client.query("INSERT INTO effects (event_id) VALUES ($1)", [e.id]);
  });
  await inbox.handle(entry(2, ids[0] as string));
  // A newer owner raises the fence to 3.
  const client = await pool.connect();
  try {
    assert.equal(await raiseFence(client, "fg", topic, { partition: 3, epoch: 3 }), 3);
    assert.equal(await raiseFence(client, "fg", topic, { partition: 3, epoch: 2 }), 3, "a fence never goes down");
  } finally {
    client.release();
  }
  await assert.rejects(
    () => new Inbox(pool, async (c, e) => void (await c.query("INSERT INTO effects (event_id) VALUES ($1)", [e.id]))).handle(entry(2, ids[1] as string)),
    (e: unknown) => e instanceof HandlerError && e.kind === "fenced" && /fenced at epoch 3, above this consumer's 2/.test(e.message),
  );
  // The same inbox, which raised epoch 2 itself before: its check before the commit refuses.
  await assert.rejects(() => inbox.handle(entry(2, ids[1] as string)), (e: unknown) => e instanceof HandlerError && e.kind === "fenced");
  // A batch under the stale epoch is refused whole too.
  const batch = Inbox.forBatches(pool, async (c, es) => {
    for (const e of es) await c.query("INSERT INTO effects (event_id) VALUES ($1)", [e.id]);
  });
  await assert.rejects(() => batch.handleBatch([entry(2, ids[1] as string)]), (e: unknown) => e instanceof HandlerError && e.kind === "fenced");
  await batch.handleBatch([entry(3, ids[1] as string)]);
  assert.equal(await rows(ids), 2, "under the current epoch it commits");
  const fence = await pool.query<{ e: number }>("SELECT epoch::int AS e FROM outbox_inbox_fences WHERE consumer_group = 'fg' AND topic = $1 AND partition = 3", [topic]);
  assert.equal(fence.rows[0]?.e, 3);
});

test("batches with the inbox: one transaction per batch, a failing batch retried whole, a redelivered event skipped", async () => {
  const { redis, prefix, cleanup } = redisFor();
  try {
    const stream = `${prefix}t4`;
    const ids: string[] = [];
    for (let i = 0; i < 60; i++) ids.push(await publish(redis, stream, { topic: "t4", key: `k${i % 4}` }));
    for (const id of ids.slice(0, 10)) await publish(redis, stream, { topic: "t4", id });
    const calls: number[] = [];
    let failOnce = true;
    const stop = stopper();
    const inbox = Inbox.forBatches(pool, async (client, entries) => {
      calls.push(entries.length);
      for (const e of entries) await client.query("INSERT INTO effects (event_id, note) VALUES ($1, 'batch')", [e.id]);
      if (failOnce) {
        failOnce = false;
        throw new Error("the first batch fails after writing");
      }
    });
    const run = consumer(prefix, "t4", { batchSize: 25 }).run(new Batches(inbox), { signal: stop.signal });
    await eventually(async () => (await rows(ids)) === 60, 15_000, "60 effects");
    await eventually(async () => ((await redis.xpending(stream, "g")))[0] === 0, 10_000, "all acknowledged");
    stop.abort();
    const stats = await run;
    assert.equal(stats.handled, 70);
    assert.equal(stats.failed, 25, "the first batch failed whole");
    assert.ok(calls.length <= 6, `a few transactions, not one per event: ${calls.join(",")}`);
    assert.equal(await rows(ids), 60, "each once: the failed batch rolled back, the redelivered skipped");
  } finally {
    await cleanup();
  }
});
