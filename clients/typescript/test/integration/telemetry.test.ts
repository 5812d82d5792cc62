import { test } from "node:test";
import assert from "node:assert/strict";
import * as api from "@opentelemetry/api";
import prom from "prom-client";
import { Consumer, HandlerError, METRICS } from "../../src/index.js";
import { REDIS_URL, eventually, memoryLogger, publish, redisFor, stopper } from "../support.js";

interface Recorded {
  name: string;
  kind: api.SpanKind | undefined;
  attributes: api.Attributes;
  parent: api.SpanContext | undefined;
  status?: api.SpanStatus;
  ended: boolean;
}

/** A tracer provider that records the spans started through the API (no SDK needed). */
function recordingProvider(spans: Recorded[]): api.TracerProvider {
  const tracer = {
    startSpan(name: string, options: api.SpanOptions = {}, ctx: api.Context = api.context.active()): api.Span {
      const rec: Recorded = { name, kind: options.kind, attributes: { ...options.attributes }, parent: api.trace.getSpanContext(ctx), ended: false };
      spans.push(rec);
      const span = api.trace.wrapSpanContext({ traceId: rec.parent?.traceId ?? "1".repeat(32), spanId: "2".repeat(16), traceFlags: 1 });
      return Object.assign(Object.create(span) as api.Span, {
        setAttribute: (k: string, v: api.AttributeValue) => ((rec.attributes[k] = v), span),
        setStatus: (s: api.SpanStatus) => ((rec.status = s), span),
        end: () => void (rec.ended = true),
      });
    },
    startActiveSpan(name: string, options: api.SpanOptions, ctx: api.Context, fn: (span: api.Span) => unknown): unknown {
      return fn(this.startSpan(name, options, ctx));
    },
  };
  return { getTracer: () => tracer as unknown as api.Tracer };
}

test("each handler call is a consumer span continuing the entry's traceparent; outcomes are counted in prom-client", async () => {
  const spans: Recorded[] = [];
  api.trace.setGlobalTracerProvider(recordingProvider(spans));
  const { redis, prefix, cleanup } = redisFor();
  try {
    const stream = `${prefix}traced`;
    const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
    const traced = await publish(redis, stream, { topic: "traced", key: "a", headers: { traceparent: tp, tracestate: "k=v" } });
    await publish(redis, stream, { topic: "traced", key: "b", payload: { bad: true } });
    let handled = 0;
    const stop = stopper();
    const run = new Consumer({ redisUrl: REDIS_URL, topic: "traced", group: "g", streamPrefix: prefix, block: "200ms", logger: memoryLogger() }).run(
      (e) => {
        handled++;
        if ((e.payload as { bad?: boolean }).bad) throw HandlerError.deadLetter("bad");
      },
      { signal: stop.signal },
    );
    await eventually(() => handled === 2, 10_000, "both handled");
    await eventually(async () => (await redis.xlen(`${stream}:dead`)) === 1, 5000, "dead letter");
    stop.abort();
    await run;
    const span = spans.find((s) => s.attributes["messaging.message.id"] === traced);
    assert.ok(span, "a span for the traced entry");
    assert.equal(span.name, `process ${stream}`);
    assert.equal(span.kind, api.SpanKind.CONSUMER);
    assert.equal(span.parent?.traceId, "0af7651916cd43dd8448eb211c80319c");
    assert.equal(span.parent?.spanId, "b7ad6b7169203331");
    assert.equal(span.parent?.isRemote, true);
    assert.equal(span.parent?.traceState?.get("k"), "v");
    assert.equal(span.attributes["messaging.system"], "redis");
    assert.equal(span.attributes["messaging.consumer.group.name"], "g");
    assert.equal(span.attributes["messaging.destination.name"], stream);
    assert.ok(span.ended);
    const failed = spans.find((s) => s.attributes["messaging.message.id"] !== traced);
    assert.equal(failed?.status?.code, api.SpanStatusCode.ERROR);
    assert.equal(failed?.parent, undefined, "no traceparent: a trace of its own");
    const metric = await prom.register.getSingleMetricAsString(METRICS.entries);
    assert.match(metric, /outbox_consumer_entries_total\{topic="traced",group="g",outcome="handled"\} 1/);
    assert.match(metric, /outbox_consumer_entries_total\{topic="traced",group="g",outcome="dead_lettered"\} 1/);
    assert.match(await prom.register.getSingleMetricAsString(METRICS.handlerSeconds), /outbox_consumer_handler_duration_seconds_count\{topic="traced",group="g"\} 2/);
  } finally {
    api.trace.disable();
    await cleanup();
  }
});
