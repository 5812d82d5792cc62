import { test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { randomUUID } from "node:crypto";
import pg from "pg";
import { Redis } from "ioredis";
import { REDIS_URL, deleteKeys, eventually, freshDatabase } from "../support.js";
import { haveRelay, migrate, relay, stop, tsExample, type Proc } from "./procs.js";

const skip = !haveRelay && "target/debug/outbox-relay is not built (cargo build)";

async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

test("--park-keys: the relay's admin API lists the key the TypeScript example parked, and a discard releases its held events in order", { skip, timeout: 90_000 }, async () => {
  const db = await freshDatabase();
  const redis = new Redis(REDIS_URL);
  const prefix = `nodetest-${randomUUID()}:`;
  const pool = new pg.Pool({ connectionString: db.url, max: 2 });
  const port = await freePort();
  const admin = `http://127.0.0.1:${port}/api/v1/topics/e2e.park/groups/g/parked`;
  let relayProc: Proc | null = null;
  let consumer: Proc | null = null;
  try {
    migrate(db.url);
    relayProc = relay(db.url, REDIS_URL, prefix, { OUTBOX__GROUPS: "e2e.park:g", OUTBOX__ADMIN__ADDR: `127.0.0.1:${port}` });
    consumer = tsExample(db.url, REDIS_URL, ["--topic", "e2e.park", "--group", "g", "--stream-prefix", prefix, "--park-keys", "--max-deliveries", "2", "--retry-base", "20ms", "--consumer", "parker"]);
    const insert = (seq: number, key: string, poison = false) =>
      pool.query("INSERT INTO outbox (topic, payload, partition_key) VALUES ('e2e.park', $1, $2) RETURNING id::text", [JSON.stringify(poison ? { seq, poison: true } : { seq }), key]).then((r) => r.rows[0] as { id: string });
    const dead = await insert(0, "p", true);
    const held = [await insert(1, "p"), await insert(2, "p")];
    const other = await insert(3, "q");
    const applied = async (ids: string[]) =>
      (await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM example_effects WHERE event_id = ANY($1::uuid[])", [ids]).catch(() => ({ rows: [{ n: 0 }] }))).rows[0]?.n ?? 0;
    await eventually(async () => (await applied([other.id])) === 1, 30_000, "the other key flows");
    let listed: { keys: Array<{ key: string; dead_id: string; held: number }> } = { keys: [] };
    await eventually(async () => {
      const res = await fetch(admin).catch(() => null);
      if (!res?.ok) return false;
      listed = (await res.json()) as typeof listed;
      return listed.keys.length === 1 && listed.keys[0]?.held === 2;
    }, 20_000, "the admin lists the parked key with 2 held");
    assert.deepEqual(listed.keys, [{ key: "p", dead_id: dead.id, held: 2 }]);
    assert.equal(await applied(held.map((h) => h.id)), 0, "held, not applied");
    const res = await fetch(`${admin}/p/discard`, { method: "POST" });
    assert.equal(res.status, 200, await res.clone().text());
    assert.deepEqual(await res.json(), { released: 2 });
    await eventually(async () => (await applied(held.map((h) => h.id))) === 2, 20_000, "the held events applied");
    const order = await pool.query<{ event_id: string }>("SELECT event_id::text FROM example_effects WHERE event_id = ANY($1::uuid[]) ORDER BY applied_at, ctid", [held.map((h) => h.id)]);
    assert.deepEqual(order.rows.map((r) => r.event_id), held.map((h) => h.id), "in their order");
    await eventually(async () => ((await (await fetch(admin)).json()) as typeof listed).keys.length === 0, 10_000, "the key flows again");
    assert.equal(await applied([dead.id]), 0, "the discarded event stays dead");
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
