import { test } from "node:test";
import assert from "node:assert/strict";
import { Consumer, partitionFor, type Entry } from "../../src/index.js";
import { REDIS_URL, eventually, memoryLogger, publish, redisFor, stopper } from "../support.js";

const TOPIC = "fleet";
const N = 4;

test("a fleet divides a partitioned topic's partitions, keeps per-key order, and rebalances on a leave, a scale-up and a scale-down", { timeout: 60_000 }, async () => {
  const { redis, prefix, cleanup } = redisFor();
  try {
    await redis.hset(`${prefix}partitions`, TOPIC, String(N));
    const keysUsed = Array.from({ length: 12 }, (_, i) => `key-${i}`);
    let seq = 0;
    const produce = async (count: number) => {
      for (let i = 0; i < count; i++) {
        const key = keysUsed[i % keysUsed.length] as string;
        await publish(redis, `${prefix}${TOPIC}:${partitionFor(key, N)}`, { topic: TOPIC, key, payload: { seq: seq++ } });
      }
    };
    const seen: Array<{ consumer: string; entry: Entry }> = [];
    const start = (name: string) => {
      const stop = stopper();
      const c = new Consumer({
        redisUrl: REDIS_URL,
        topic: TOPIC,
        group: "g",
        consumer: name,
        streamPrefix: prefix,
        block: "200ms",
        claimIdle: "1500ms",
        logger: memoryLogger(),
      });
      const run = c.run(
        async (entry) => {
          seen.push({ consumer: name, entry });
          await new Promise((r) => setTimeout(r, 1));
        },
        { signal: stop.signal },
      );
      return { stop, run };
    };
    const a = start("a");
    const b = start("b");
    await produce(120);
    await eventually(() => seen.length >= 120, 20_000, "120 entries");
    // Each partition was handled by one consumer, under a lease.
    const byPartition = new Map<number, Set<string>>();
    for (const { consumer, entry } of seen) {
      assert.ok(entry.lease, "a lease on a divided partition");
      const set = byPartition.get(entry.lease.partition) ?? new Set<string>();
      set.add(consumer);
      byPartition.set(entry.lease.partition, set);
    }
    assert.equal(byPartition.size, N);
    const owners = await Promise.all(Array.from({ length: N }, (_, p) => redis.get(`{${prefix}${TOPIC}:${p}}:owner:g`)));
    assert.deepEqual(owners.filter((o) => o === "a").length, 2, `owners ${owners.join(",")}`);
    assert.deepEqual(owners.filter((o) => o === "b").length, 2);
    // b stops cleanly: a takes everything over at once.
    b.stop.abort();
    await b.run;
    await eventually(async () => {
      const o = await Promise.all(Array.from({ length: N }, (_, p) => redis.get(`{${prefix}${TOPIC}:${p}}:owner:g`)));
      return o.every((x) => x === "a");
    }, 10_000, "a owns every partition");
    await produce(60);
    await eventually(() => seen.length >= 180, 20_000, "180 entries");
    // Scale up: two more join; within seconds each of the three owns one or two partitions.
    const c = start("c");
    const d = start("d");
    const ownersNow = async () => Promise.all(Array.from({ length: N }, (_, p) => redis.get(`{${prefix}${TOPIC}:${p}}:owner:g`)));
    await eventually(async () => {
      const o = await ownersNow();
      return ["a", "c", "d"].every((name) => [1, 2].includes(o.filter((x) => x === name).length));
    }, 15_000, "a, c and d share the partitions");
    await produce(60);
    await eventually(() => seen.length >= 240, 20_000, "240 entries");
    // Scale down: c and d stop; a takes their partitions back.
    c.stop.abort();
    d.stop.abort();
    await Promise.all([c.run, d.run]);
    await eventually(async () => (await ownersNow()).every((x) => x === "a"), 15_000, "a owns every partition again");
    await produce(24);
    await eventually(() => seen.length >= 264, 20_000, "264 entries");
    a.stop.abort();
    await a.run;
    // Per-key order across the fleet.
    for (const key of keysUsed) {
      const order = seen.filter((s) => s.entry.key === key).map((s) => (s.entry.payload as { seq: number }).seq);
      assert.deepEqual(order, [...order].sort((x, y) => x - y), key);
      assert.equal(new Set(order).size, order.length, `${key} once each`);
    }
    const epochs = await Promise.all(Array.from({ length: N }, (_, p) => redis.get(`{${prefix}${TOPIC}:${p}}:epoch:g`)));
    assert.ok(epochs.every((e) => Number(e) >= 1));
    assert.equal(await redis.zcard(`${prefix}${TOPIC}:{g}:members`), 0, "every consumer left the members set");
    assert.equal(seen.length, 264, "each entry once");
  } finally {
    await cleanup();
  }
});
