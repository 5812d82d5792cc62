/**
 * Optional metrics (prom-client) and traces (@opentelemetry/api), both peer dependencies
 * loaded when installed. Each handler call runs in a span `process <stream>` of kind
 * consumer (OpenTelemetry's messaging conventions), a child of the relay's publish span that
 * the entry's `traceparent` names; a failure sets its error status.
 */

import type { Entry } from "./entry.js";

type OtelApi = typeof import("@opentelemetry/api");
type PromClient = typeof import("prom-client");

/** What a handler call ended as, for the metrics. */
export type Outcome = "handled" | "failed" | "dead_lettered" | "outage" | "fenced" | "parked";

/** The metric names (the Rust library exports none yet: these are this client's). */
export const METRICS = {
  entries: "outbox_consumer_entries_total",
  handlerSeconds: "outbox_consumer_handler_duration_seconds",
} as const;

interface Counter {
  inc(labels: Record<string, string>, value?: number): void;
}
interface Histogram {
  observe(labels: Record<string, string>, value: number): void;
}

/** The tracer and metrics a consumer found installed. */
export class Telemetry {
  private constructor(
    private readonly otel: OtelApi | null,
    private readonly entries: Counter | null,
    private readonly seconds: Histogram | null,
  ) {}

  /** Loads what is installed: `@opentelemetry/api` and `prom-client` (each optional; `false` leaves it off). */
  static async load(options: { metrics?: boolean; traces?: boolean } = {}): Promise<Telemetry> {
    let otel: OtelApi | null = null;
    let entries: Counter | null = null;
    let seconds: Histogram | null = null;
    if (options.traces !== false) {
      try {
        otel = await import("@opentelemetry/api");
      } catch {
        otel = null;
      }
    }
    if (options.metrics !== false) {
      try {
        const prom: PromClient = await import("prom-client");
        const existing = (name: string) => prom.register.getSingleMetric(name);
        entries =
          (existing(METRICS.entries) as Counter | undefined) ??
          new prom.Counter({
            name: METRICS.entries,
            help: "Entries a consumer finished with, by outcome (handled, failed, dead_lettered, outage, fenced, parked)",
            labelNames: ["topic", "group", "outcome"],
          });
        seconds =
          (existing(METRICS.handlerSeconds) as Histogram | undefined) ??
          new prom.Histogram({
            name: METRICS.handlerSeconds,
            help: "Time of one handler call",
            labelNames: ["topic", "group"],
            buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10],
          });
      } catch {
        entries = null;
        seconds = null;
      }
    }
    return new Telemetry(otel, entries, seconds);
  }

  /** Counts an entry's outcome. */
  count(topic: string, group: string, outcome: Outcome): void {
    this.entries?.inc({ topic, group, outcome });
  }

  /** Runs one handler call in its processing span, timed; rethrows what it throws. */
  async process(stream: string, entry: Entry, call: () => Promise<void>): Promise<void> {
    const started = performance.now();
    try {
      await (this.otel ? this.traced(this.otel, stream, entry, call) : call());
    } finally {
      this.seconds?.observe({ topic: entry.topic, group: entry.group }, (performance.now() - started) / 1000);
    }
  }

  /** Runs one batch handler call in its processing span, linked to each entry's trace. */
  async processBatch(stream: string, entries: Entry[], call: () => Promise<void>): Promise<void> {
    const started = performance.now();
    const first = entries[0];
    try {
      const api = this.otel;
      if (!api) {
        await call();
        return;
      }
      const links = entries.flatMap((e) => {
        const ctx = api.trace.getSpanContext(parentContext(api, e.headers));
        return ctx ? [{ context: ctx }] : [];
      });
      const attributes = {
        "messaging.system": "redis",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": stream,
        "messaging.consumer.group.name": first?.group ?? "",
        "messaging.batch.message_count": entries.length,
      };
      await api.trace.getTracer("@outbox-relay/consumer").startActiveSpan(
        `process ${stream}`,
        { kind: api.SpanKind.CONSUMER, attributes, links },
        api.context.active(),
        async (span) => {
          try {
            await call();
          } catch (e) {
            span.setAttribute("error.type", "handler_failed");
            span.setStatus({ code: api.SpanStatusCode.ERROR, message: e instanceof Error ? e.message : String(e) });
            throw e;
          } finally {
            span.end();
          }
        },
      );
    } finally {
      if (first) this.seconds?.observe({ topic: first.topic, group: first.group }, (performance.now() - started) / 1000);
    }
  }

  private async traced(api: OtelApi, stream: string, entry: Entry, call: () => Promise<void>): Promise<void> {
    const tracer = api.trace.getTracer("@outbox-relay/consumer");
    const attributes: Record<string, string | number> = {
      "messaging.system": "redis",
      "messaging.operation.type": "process",
      "messaging.operation.name": "process",
      "messaging.destination.name": stream,
      "messaging.consumer.group.name": entry.group,
      "messaging.message.id": entry.id,
      "outbox.stream_id": entry.streamId,
      "outbox.delivery": entry.deliveries,
    };
    if (entry.lease) attributes["messaging.destination.partition.id"] = String(entry.lease.partition);
    const parent = parentContext(api, entry.headers);
    return tracer.startActiveSpan(
      `process ${stream}`,
      { kind: api.SpanKind.CONSUMER, attributes },
      parent,
      async (span) => {
        try {
          await call();
        } catch (e) {
          span.setAttribute("error.type", "handler_failed");
          span.setStatus({ code: api.SpanStatusCode.ERROR, message: e instanceof Error ? e.message : String(e) });
          throw e;
        } finally {
          span.end();
        }
      },
    );
  }
}

const TRACEPARENT = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;

/** The W3C trace context a `traceparent` header (and `tracestate`) names, as the parent; the active context when none. */
export function parentContext(api: OtelApi, headers: unknown): import("@opentelemetry/api").Context {
  const active = api.context.active();
  if (typeof headers !== "object" || headers === null) return active;
  const h = headers as Record<string, unknown>;
  const tp = typeof h.traceparent === "string" ? TRACEPARENT.exec(h.traceparent.trim().toLowerCase()) : null;
  if (!tp || tp[1] === "ff" || /^0+$/.test(tp[2] as string) || /^0+$/.test(tp[3] as string)) return active;
  const spanContext: import("@opentelemetry/api").SpanContext = {
    traceId: tp[2] as string,
    spanId: tp[3] as string,
    traceFlags: parseInt(tp[4] as string, 16) & 1,
    isRemote: true,
  };
  if (typeof h.tracestate === "string" && h.tracestate !== "") {
    spanContext.traceState = api.createTraceState(h.tracestate);
  }
  return api.trace.setSpanContext(active, spanContext);
}
