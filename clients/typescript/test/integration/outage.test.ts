import { test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { Consumer, type Entry } from "../../src/index.js";
import { eventually, memoryLogger, publish, redisFor, stopper } from "../support.js";

/** A TCP proxy to the local Redis that the test can cut and restore: a Redis outage without touching the shared server. */
class Proxy {
  private server: net.Server | null = null;
  private sockets = new Set<net.Socket>();
  port = 0;
  async start(): Promise<void> {
    const server = net.createServer((client) => {
      const upstream = net.connect(6379, "127.0.0.1");
      for (const s of [client, upstream]) {
        this.sockets.add(s);
        s.on("error", () => {});
        s.on("close", () => this.sockets.delete(s));
      }
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve) => server.listen(this.port, "127.0.0.1", resolve));
    this.port = (server.address() as net.AddressInfo).port;
    this.server = server;
  }
  async cut(): Promise<void> {
    const server = this.server;
    this.server = null;
    for (const s of this.sockets) s.destroy();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}

test("a Redis outage is waited out: no delivery spent, nothing dead-lettered, the entry in hand acknowledged after", { timeout: 60_000 }, async () => {
  const { redis, prefix, cleanup } = redisFor();
  const proxy = new Proxy();
  await proxy.start();
  try {
    const stream = `${prefix}t`;
    const logger = memoryLogger();
    const seen: Entry[] = [];
    const stop = stopper();
    const consumer = new Consumer({
      redisUrl: `redis://127.0.0.1:${proxy.port}`,
      topic: "t",
      group: "g",
      consumer: "c",
      streamPrefix: prefix,
      block: "200ms",
      claimIdle: "1s",
      maxDeliveries: 2,
      logger,
    });
    let cut = false;
    const run = consumer.run(
      async (e) => {
        seen.push(e);
        if ((e.payload as { cut?: boolean }).cut && !cut) {
          cut = true;
          await proxy.cut(); // Redis goes away while this entry is in hand
          await new Promise((r) => setTimeout(r, 300));
        }
      },
      { signal: stop.signal },
    );
    for (let i = 0; i < 3; i++) await publish(redis, stream, { topic: "t", key: `k${i}` });
    await eventually(() => seen.length === 3, 10_000, "3 entries before the outage");
    await publish(redis, stream, { topic: "t", key: "cut", payload: { cut: true } });
    await eventually(() => cut, 10_000, "the outage");
    for (let i = 3; i < 8; i++) await publish(redis, stream, { topic: "t", key: `k${i}` }); // published meanwhile
    await new Promise((r) => setTimeout(r, 3000));
    assert.equal(seen.length, 4, "nothing handled while Redis is away");
    await proxy.start(); // the same port
    await eventually(() => seen.length >= 9, 20_000, "the rest after the outage");
    await eventually(async () => ((await redis.xpending(stream, "g")))[0] === 0, 10_000, "all acknowledged");
    stop.abort();
    const stats = await run;
    assert.equal(seen.length, 9, "each entry handled once");
    assert.ok(seen.every((e) => e.deliveries === 1), "no delivery spent on the outage");
    assert.equal(stats.deadLettered, 0);
    assert.equal(await redis.exists(`${stream}:dead`), 0);
    assert.ok(logger.lines.some((l) => l.message === "redis command failed; retrying with backoff"));
    assert.ok(logger.lines.some((l) => l.message === "redis answers again: consuming"));
  } finally {
    await proxy.cut();
    await cleanup();
  }
});
