import { test } from "node:test";
import assert from "node:assert/strict";
import { Consumer, type Entry } from "../../src/index.js";
import { REDIS_URL, eventually, memoryLogger, publish, redisFor, stopper } from "../support.js";

test("one consumer over several topics: keys are per topic, dead letters go to each topic's dead stream", async () => {
  const { redis, prefix, cleanup } = redisFor();
  try {
    const seen: Entry[] = [];
    for (let i = 0; i < 10; i++) {
      await publish(redis, `${prefix}orders`, { topic: "orders", key: "42", payload: { i } });
      await publish(redis, `${prefix}payments`, { topic: "payments", key: "42", payload: { i } });
    }
    await publish(redis, `${prefix}payments`, { topic: "payments", key: "x", payload: { poison: true } });
    const stop = stopper();
    const run = new Consumer({
      redisUrl: REDIS_URL,
      topics: ["orders", "payments"],
      group: "g",
      streamPrefix: prefix,
      block: "200ms",
      maxDeliveries: 1,
      logger: memoryLogger(),
    }).run(
      (e) => {
        if ((e.payload as { poison?: boolean }).poison) throw new Error("poison");
        seen.push(e);
      },
      { signal: stop.signal },
    );
    await eventually(() => seen.length === 20, 10_000, "20 entries");
    await eventually(async () => (await redis.xlen(`${prefix}payments:dead`)) === 1, 5000, "the poison in payments' dead stream");
    stop.abort();
    await run;
    for (const topic of ["orders", "payments"]) {
      const order = seen.filter((e) => e.topic === topic).map((e) => (e.payload as { i: number }).i);
      assert.deepEqual(order, [...Array(10).keys()], topic);
    }
    assert.equal(await redis.exists(`${prefix}orders:dead`), 0);
  } finally {
    await cleanup();
  }
});
