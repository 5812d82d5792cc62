import { test } from "node:test";
import assert from "node:assert/strict";
import { Consumer, HandlerError, type Entry } from "../../src/index.js";
import { REDIS_URL, eventually, memoryLogger, publish, redisFor, stopper } from "../support.js";

const TOPIC = "orders";

function consumer(prefix: string, extra: Record<string, unknown> = {}): Consumer {
  return new Consumer({
    redisUrl: REDIS_URL,
    topic: TOPIC,
    group: "g",
    consumer: "c1",
    streamPrefix: prefix,
    block: "200ms",
    retryBase: "20ms",
    retryMax: "100ms",
    claimIdle: "1s",
    logger: memoryLogger(),
    ...extra,
  });
}

test("handles every entry once, one key in stream order, and acknowledges", async () => {
  const { redis, prefix, cleanup } = redisFor();
  try {
    const stream = `${prefix}${TOPIC}`;
    const ids: string[] = [];
    for (let i = 0; i < 30; i++) ids.push(await publish(redis, stream, { topic: TOPIC, key: `k${i % 3}`, payload: { i } }));
    const seen: Entry[] = [];
    const stop = stopper();
    const c = consumer(prefix);
    const run = c.run(
      async (e) => {
        await new Promise((r) => setTimeout(r, Math.random() * 3));
        seen.push(e);
      },
      { signal: stop.signal },
    );
    await eventually(() => seen.length >= 30, 10_000, "30 entries");
    stop.abort();
    const stats = await run;
    assert.equal(stats.handled, 30);
    assert.deepEqual(new Set(seen.map((e) => e.id)), new Set(ids));
    for (const k of ["k0", "k1", "k2"]) {
      const order = seen.filter((e) => e.key === k).map((e) => (e.payload as { i: number }).i);
      assert.deepEqual(order, [...order].sort((a, b) => a - b), `key ${k} in order`);
    }
    const pending = (await redis.xpending(stream, "g"));
    assert.equal(pending[0], 0);
  } finally {
    await cleanup();
  }
});

test("retries with backoff, counts deliveries, dead-letters after maxDeliveries with the Rust library's fields", async () => {
  const { redis, prefix, cleanup } = redisFor();
  try {
    const stream = `${prefix}${TOPIC}`;
    const flaky = await publish(redis, stream, { topic: TOPIC, key: "a", payload: { flaky: true } });
    const poison = await publish(redis, stream, { topic: TOPIC, key: "b", payload: { poison: true } });
    const after = await publish(redis, stream, { topic: TOPIC, key: "b", payload: {} });
    await redis.xadd(stream, "*", "id", "not-a-uuid", "topic", TOPIC, "key", "c");
    const deliveries = new Map<string, number[]>();
    const done: string[] = [];
    const stop = stopper();
    const c = consumer(prefix, { maxDeliveries: 3 });
    const run = c.run(
      (e) => {
        deliveries.set(e.id, [...(deliveries.get(e.id) ?? []), e.deliveries]);
        const p = e.payload as { flaky?: boolean; poison?: boolean };
        if (p.poison) throw new Error("poison event");
        if (p.flaky && e.deliveries < 3) throw new Error("not yet");
        done.push(e.id);
      },
      { signal: stop.signal },
    );
    await eventually(() => done.includes(flaky) && done.includes(after), 10_000, "flaky and after handled");
    stop.abort();
    const stats = await run;
    assert.deepEqual(deliveries.get(flaky), [1, 2, 3]);
    assert.deepEqual(deliveries.get(poison), [1, 2, 3]);
    assert.equal(stats.deadLettered, 2);
    const dead = await redis.xrange(`${stream}:dead`, "-", "+");
    assert.equal(dead.length, 2);
    const fields = dead.map(([, f]) => {
      const o: Record<string, string> = {};
      for (let i = 0; i < f.length; i += 2) o[f[i] as string] = f[i + 1] as string;
      return { names: f.filter((_, i) => i % 2 === 0), o };
    });
    const byId = new Map(fields.map((x) => [x.o.id, x]));
    const p = byId.get(poison);
    assert.ok(p);
    assert.deepEqual(p.names, ["id", "topic", "payload", "headers", "created_at", "key", "error", "group", "deliveries"]);
    assert.equal(p.o.error, "poison event");
    assert.equal(p.o.group, "g");
    assert.equal(p.o.deliveries, "3");
    const bad = byId.get("not-a-uuid");
    assert.ok(bad);
    assert.equal(bad.o.error, "malformed entry: field `id` is not a uuid: not-a-uuid");
    assert.equal(bad.o.deliveries, "1");
    const pending = (await redis.xpending(stream, "g"));
    assert.equal(pending[0], 0);
  } finally {
    await cleanup();
  }
});

test("an outage is not a delivery; dead_letter and fenced kinds are honoured", async () => {
  const { redis, prefix, cleanup } = redisFor();
  try {
    const stream = `${prefix}${TOPIC}`;
    const id = await publish(redis, stream, { topic: TOPIC, key: "a" });
    const refused = await publish(redis, stream, { topic: TOPIC, key: "b", payload: { refuse: true } });
    const seen: number[] = [];
    let ok = false;
    const stop = stopper();
    const c = consumer(prefix, { maxDeliveries: 2 });
    const run = c.run(
      (e) => {
        if ((e.payload as { refuse?: boolean }).refuse) throw HandlerError.deadLetter("refused by a rule");
        seen.push(e.deliveries);
        if (seen.length < 4) throw HandlerError.outage(new Error("database away"));
        ok = true;
      },
      { signal: stop.signal },
    );
    await eventually(() => ok, 20_000, "handled after the outage");
    stop.abort();
    const stats = await run;
    assert.deepEqual(seen, [1, 1, 1, 1], "no delivery spent on the outage");
    assert.equal(stats.deadLettered, 1);
    const dead = await redis.xrange(`${stream}:dead`, "-", "+");
    assert.equal(dead.length, 1);
    assert.ok(dead[0]?.[1].includes(refused));
    assert.ok(dead[0]?.[1].includes("refused by a rule"));
    assert.ok(dead[0]?.[1].includes(id) === false);
  } finally {
    await cleanup();
  }
});

test("claims entries idle longer than claimIdle from a dead consumer", async () => {
  const { redis, prefix, cleanup } = redisFor();
  try {
    const stream = `${prefix}${TOPIC}`;
    await redis.xgroup("CREATE", stream, "g", "0", "MKSTREAM");
    const id = await publish(redis, stream, { topic: TOPIC, key: "a" });
    // A consumer that read it and died.
    await redis.xreadgroup("GROUP", "g", "ghost", "COUNT", 10, "STREAMS", stream, ">");
    const seen: Entry[] = [];
    const stop = stopper();
    const started = Date.now();
    const run = consumer(prefix, { claimIdle: "500ms" }).run((e) => void seen.push(e), { signal: stop.signal });
    await eventually(() => seen.length === 1, 10_000, "the claimed entry");
    stop.abort();
    await run;
    assert.equal(seen[0]?.id, id);
    assert.equal(seen[0]?.deliveries, 2, "its second delivery");
    assert.ok(Date.now() - started >= 400, "after claimIdle");
  } finally {
    await cleanup();
  }
});

test("a stop finishes the entries in hand and acknowledges them", async () => {
  const { redis, prefix, cleanup } = redisFor();
  try {
    const stream = `${prefix}${TOPIC}`;
    for (let i = 0; i < 5; i++) await publish(redis, stream, { topic: TOPIC, key: `k${i}` });
    const stop = stopper();
    let started = 0;
    let finished = 0;
    const run = consumer(prefix).run(
      async () => {
        started++;
        await new Promise((r) => setTimeout(r, 300));
        finished++;
      },
      { signal: stop.signal },
    );
    await eventually(() => started === 5, 5000, "handlers started");
    stop.abort();
    const stats = await run;
    assert.equal(finished, 5);
    assert.equal(stats.handled, 5);
    const pending = (await redis.xpending(stream, "g"));
    assert.equal(pending[0], 0);
  } finally {
    await cleanup();
  }
});

test("a wrong setting fails at construction, naming it", () => {
  const bad = (extra: Record<string, unknown>, setting: string) =>
    assert.throws(
      () => new Consumer({ redisUrl: REDIS_URL, topic: "t", group: "g", ...extra }),
      (e: unknown) => e instanceof Error && e.name === "ConfigError" && (e as { setting?: string }).setting === setting,
      setting,
    );
  bad({ batchSize: 0 }, "batchSize");
  bad({ maxDeliveries: 0 }, "maxDeliveries");
  bad({ redisUrl: "http://x" }, "redisUrl");
  bad({ consumer: "a b" }, "consumer");
  bad({ claimIdle: "soon" }, "claimIdle");
  bad({ claimIdle: 10 }, "claimIdle");
  bad({ retryBase: "20s", retryMax: "1s" }, "retryBase");
  bad({ topic: "a b" }, "topic");
  bad({ concurrency: 1.5 }, "concurrency");
});
