import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import type { Redis } from "ioredis";
import { Consumer, PROTOCOL_DIR, type Entry } from "../../src/index.js";
import { REDIS_URL, eventually, memoryLogger, publish, redisFor, stopper } from "../support.js";

const missing = ["park", "hold", "unpark", "pop"].filter((f) => !existsSync(`${PROTOCOL_DIR}scripts/${f}.lua`));
/** What the relay's admin does to release a parked key: release.lua, as shipped in protocol/scripts. */
async function release(redis: Redis, parked: string, held: string, key: string, how: "discard" | "redrive", redriven = ""): Promise<number> {
  const lua = readFileSync(`${PROTOCOL_DIR}scripts/release.lua`, "utf8");
  return Number(await redis.eval(lua, 2, parked, held, key, how, redriven));
}

const skip = missing.length > 0 && `protocol/scripts lacks ${missing.join(", ")}.lua (the parked-key scripts are not in the repository's consumer/protocol yet)`;

test("parkKeys: a dead entry parks its key, its later entries are held, other keys flow; a released key drains in order and flows again", { skip, timeout: 60_000 }, async () => {
  const { redis, prefix, cleanup } = redisFor();
  try {
    const topic = "parking";
    const stream = `${prefix}${topic}`;
    const parked = `${prefix}${topic}:{g}:parked`;
    const held = `${prefix}${topic}:{g}:held:a`;
    const poison = await publish(redis, stream, { topic, key: "a", payload: { n: 1, poison: true } });
    const a2 = await publish(redis, stream, { topic, key: "a", payload: { n: 2 } });
    const a3 = await publish(redis, stream, { topic, key: "a", payload: { n: 3 } });
    const b1 = await publish(redis, stream, { topic, key: "b", payload: { n: 1 } });
    const handled: Entry[] = [];
    const stop = stopper();
    const run = new Consumer({
      redisUrl: REDIS_URL,
      topic,
      group: "g",
      consumer: "c",
      streamPrefix: prefix,
      block: "200ms",
      retryBase: "20ms",
      retryMax: "50ms",
      maxDeliveries: 2,
      parkKeys: true,
      logger: memoryLogger(),
    }).run(
      (e) => {
        if ((e.payload as { poison?: boolean }).poison) throw new Error("poison");
        handled.push(e);
      },
      { signal: stop.signal },
    );
    await eventually(async () => (await redis.llen(held)) === 2 && handled.some((e) => e.id === b1), 15_000, "a parked with 2 held, b handled");
    assert.deepEqual(handled.map((e) => e.id), [b1], "only the other key flowed");
    const state = JSON.parse((await redis.hget(parked, "a")) ?? "{}") as Record<string, unknown>;
    assert.equal(state.dead_id, poison);
    assert.equal(state.stream, stream);
    assert.equal(state.released, false);
    const dead = await redis.xrange(`${stream}:dead`, "-", "+");
    assert.equal(state.dead_entry, dead[0]?.[0]);
    const list = (await redis.lrange(held, 0, -1)).map((x) => JSON.parse(x) as { stream: string; id: string; fields: Array<[string, string]> });
    assert.deepEqual(list.map((h) => h.fields.find(([k]) => k === "id")?.[1]), [a2, a3]);
    assert.deepEqual(Object.keys(list[0] ?? {}), ["stream", "id", "fields"]);
    await eventually(async () => ((await redis.xpending(stream, "g")))[0] === 0, 5000, "held entries acknowledged in the stream");
    // A later entry of the parked key is held too.
    const a4 = await publish(redis, stream, { topic, key: "a", payload: { n: 4 } });
    await eventually(async () => (await redis.llen(held)) === 3, 5000, "a4 held");
    // The operator discards.
    assert.equal(await release(redis, parked, held, "a", "discard"), 3);
    await eventually(async () => (await redis.hexists(parked, "a")) === 0, 10_000, "drained and forgotten");
    assert.deepEqual(handled.map((e) => e.id), [b1, a2, a3, a4], "the held entries in their order");
    const a5 = await publish(redis, stream, { topic, key: "a", payload: { n: 5 } });
    await eventually(() => handled.some((e) => e.id === a5), 5000, "the key flows again");
    // Poison again on key c: a redrive handles the dead entry first; it dies again, and the key stays parked.
    const c1 = await publish(redis, stream, { topic, key: "c", payload: { poison: true } });
    const c2 = await publish(redis, stream, { topic, key: "c", payload: { n: 2 } });
    const heldC = `${prefix}${topic}:{g}:held:c`;
    await eventually(async () => (await redis.llen(heldC)) === 1, 10_000, "c parked, c2 held");
    const cState = JSON.parse((await redis.hget(parked, "c")) ?? "{}") as { dead_entry: string; stream: string };
    const [, deadFields] = (await redis.xrange(`${stream}:dead`, cState.dead_entry, cState.dead_entry))[0] ?? ["", []];
    const fields: Array<[string, string]> = [];
    for (let i = 0; i < deadFields.length; i += 2) {
      const k = deadFields[i] as string;
      if (!["error", "group", "deliveries"].includes(k)) fields.push([k, deadFields[i + 1] as string]);
    }
    const redriven = JSON.stringify({ stream: cState.stream, id: cState.dead_entry, fields });
    assert.equal(await release(redis, parked, heldC, "c", "redrive", redriven), 2);
    await eventually(async () => (await redis.xlen(`${stream}:dead`)) === 3, 15_000, "c1 dead again");
    await eventually(async () => {
      const st = JSON.parse((await redis.hget(parked, "c")) ?? "{}") as { released?: boolean; dead_id?: string };
      return st.released === false && st.dead_id === c1;
    }, 10_000, "c parked again");
    assert.equal(await redis.llen(heldC), 1, "c2 still held");
    assert.ok(!handled.some((e) => e.id === c2), "c2 did not take effect");
    stop.abort();
    await run;
    assert.equal(await redis.exists(held), 0);
  } finally {
    await cleanup();
  }
});
