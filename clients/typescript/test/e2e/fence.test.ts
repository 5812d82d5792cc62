import { test } from "node:test";
import assert from "node:assert/strict";
import pg from "pg";
import { REDIS_URL, eventually, freshDatabase, publish, redisFor } from "../support.js";
import { stop, tsExample, type Proc } from "./procs.js";

test("a frozen owner's late effect is refused by the fence; the new owner applies it once", { timeout: 60_000 }, async () => {
  const db = await freshDatabase();
  const { redis, prefix, cleanup } = redisFor();
  const pool = new pg.Pool({ connectionString: db.url, max: 2 });
  const procs: Proc[] = [];
  try {
    const topic = "fenced";
    await redis.hset(`${prefix}partitions`, topic, "2");
    const args = ["--topic", topic, "--group", "g", "--claim-idle", "1s", "--stream-prefix", prefix];
    // The first owner holds its effect's transaction open for 1.5 s: long enough to be frozen in it.
    const first = tsExample(db.url, REDIS_URL, [...args, "--consumer", "first", "--effect-delay", "1500ms"]);
    procs.push(first);
    // Started before the freeze: a consumer starting while another is frozen inside an effect
    // transaction waits in ensureTables (CREATE INDEX IF NOT EXISTS locks the inbox table) until
    // Postgres ends that transaction (idle_in_transaction_session_timeout, 30 s).
    const second = tsExample(db.url, REDIS_URL, [...args, "--consumer", "second"]);
    procs.push(second);
    // Sorted names: first owns partition 0, second partition 1.
    await eventually(async () => (await redis.get(`{${prefix}${topic}:0}:owner:g`)) === "first", 15_000, "first owns partition 0");
    await eventually(async () => (await redis.get(`{${prefix}${topic}:1}:owner:g`)) === "second", 15_000, "second owns partition 1");
    const id = await publish(redis, `${prefix}${topic}:0`, { topic, key: "k" });
    // Inside the effect's transaction: the inbox row is written, not committed.
    await eventually(async () => {
      const r = await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_locks l JOIN pg_stat_activity a USING (pid) WHERE a.datname = current_database() AND a.state LIKE 'idle in transaction%'");
      return (r.rows[0]?.n ?? 0) > 0;
    }, 10_000, "the effect's transaction open");
    first.child.kill("SIGSTOP");
    // The lease runs out; the second takes both partitions with newer epochs and raises the fences.
    await eventually(async () => (await redis.get(`{${prefix}${topic}:0}:owner:g`)) === "second", 15_000, "second owns partition 0");
    await eventually(async () => {
      const r = await pool.query<{ e: number }>("SELECT epoch::int AS e FROM outbox_inbox_fences WHERE consumer_group = 'g' AND topic = $1 AND partition = 0", [topic]);
      return (r.rows[0]?.e ?? 0) >= 2;
    }, 15_000, "the fence raised to the new epoch");
    first.child.kill("SIGCONT");
    await eventually(async () => {
      const r = await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM example_effects WHERE event_id = $1", [id]);
      return r.rows[0]?.n === 1;
    }, 20_000, "the effect applied");
    await eventually(() => /newer owner holds this partition|partition lease/.test(first.output()), 10_000, "the first told it was fenced");
    await new Promise((r) => setTimeout(r, 1000));
    const r = await pool.query<{ n: number }>("SELECT count(*)::int AS n FROM example_effects WHERE event_id = $1", [id]);
    assert.equal(r.rows[0]?.n, 1, "once");
    assert.match(first.output(), /fenced at epoch \d+, above this consumer's 1|newer owner/, first.output());
    assert.equal(await stop(second), 0, second.output());
    assert.equal(await stop(first), 0, first.output());
  } finally {
    for (const p of procs) {
      p.child.kill("SIGCONT");
      await stop(p, "SIGKILL");
    }
    await pool.end();
    await cleanup();
    await db.drop();
  }
});
