import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { randomUUID } from "node:crypto";
import pg from "pg";
import { Redis } from "ioredis";
import { partitionFor } from "../../src/index.js";
import { REDIS_URL, deleteKeys, eventually, freshDatabase } from "../support.js";
import { RUST_EXAMPLE, haveRelay, migrate, relay, rustExample, stop, tsExample, type Proc } from "./procs.js";

const haveRust = existsSync(RUST_EXAMPLE);
const skip = !haveRelay ? "target/debug/outbox-relay is not built (cargo build)" : false;

test(
  `a partitioned topic (4 partitions) in one fleet of ${haveRust ? "a Rust and two TypeScript" : "three TypeScript"} inbox examples: each event once, per-key order, through a SIGKILL`,
  { skip, timeout: 150_000 },
  async () => {
    const db = await freshDatabase();
    const redis = new Redis(REDIS_URL);
    const prefix = `nodetest-${randomUUID()}:`;
    const topic = "e2e.part";
    const pool = new pg.Pool({ connectionString: db.url, max: 2 });
    let relayProc: Proc | null = null;
    const consumers: Proc[] = [];
    try {
      migrate(db.url);
      relayProc = relay(db.url, REDIS_URL, prefix, { OUTBOX__TOPICS: `${topic}:4`, OUTBOX__GROUPS: `${topic}:fleet` });
      const args = ["--topic", topic, "--group", "fleet", "--claim-idle", "2s", "--max-deliveries", "3", "--retry-base", "20ms", "--stream-prefix", prefix];
      const launch = (name: string, rust = false) => {
        const all = [...args, "--consumer", name];
        const p = rust ? rustExample(db.url, REDIS_URL, all) : tsExample(db.url, REDIS_URL, all);
        consumers.push(p);
        return p;
      };
      const r = haveRust ? launch("rust-1", true) : launch("ts-0");
      let a = launch("ts-1");
      const b = launch("ts-2");
      const total = 300;
      for (let i = 0; i < total; i += 30) {
        const values: string[] = [];
        for (let j = i; j < i + 30; j++) values.push(`('${topic}', '{"seq": ${j}}'::jsonb, 'key-${j % 13}')`);
        await pool.query(`INSERT INTO outbox (topic, payload, partition_key) VALUES ${values.join(", ")}`);
        await new Promise((res) => setTimeout(res, 150));
        if (i === 120) {
          a.child.kill("SIGKILL");
          await a.exited;
          a = launch("ts-1");
        }
      }
      const count = async () =>
        (await pool.query<{ n: number; d: number }>("SELECT count(*)::int AS n, count(DISTINCT event_id)::int AS d FROM example_effects").catch(() => ({ rows: [] }))).rows[0];
      await eventually(async () => (await count())?.d === total, 90_000, "every event applied");
      await new Promise((res) => setTimeout(res, 1500));
      const c = await count();
      assert.equal(c?.n, total, "each event once");
      // Per key, the effects committed in the order the events were produced.
      const rows = await pool.query<{ key: string; seq: number }>(
        `SELECT o.partition_key AS key, (o.payload->>'seq')::int AS seq
         FROM example_effects e JOIN outbox o ON o.id = e.event_id ORDER BY e.applied_at, e.ctid`,
      );
      const last = new Map<string, number>();
      for (const { key, seq } of rows.rows) {
        assert.ok((last.get(key) ?? -1) < seq, `key ${key}: ${seq} after ${last.get(key)}`);
        last.set(key, seq);
      }
      // The relay put each key where this client's partition function says.
      for (let p = 0; p < 4; p++) {
        for (const [, f] of await redis.xrange(`${prefix}${topic}:${p}`, "-", "+", "COUNT", 50)) {
          const key = f[f.indexOf("key") + 1] as string;
          assert.equal(partitionFor(key, 4), p, key);
        }
      }
      // Balanced within a few seconds: three live members, four partitions, each holds one or two.
      const names = [haveRust ? "rust-1" : "ts-0", "ts-1", "ts-2"];
      let owners: Array<string | null> = [];
      await eventually(async () => {
        owners = await Promise.all([0, 1, 2, 3].map((p) => redis.get(`{${prefix}${topic}:${p}}:owner:fleet`)));
        return names.every((name) => [1, 2].includes(owners.filter((o) => o === name).length));
      }, 30_000, "a balanced fleet").catch((e: unknown) => {
        throw new Error(`${String(e)}: owners ${owners.join(",")}\n${b.output().slice(-3000)}`);
      });
      assert.equal(await stop(a), 0, a.output());
      assert.equal(await stop(b), 0, b.output());
      assert.equal(await stop(r), 0, r.output());
    } finally {
      for (const p of consumers) await stop(p, "SIGKILL");
      if (relayProc) await stop(relayProc);
      await pool.end();
      await deleteKeys(redis, prefix);
      redis.disconnect();
      await db.drop();
    }
  },
);
