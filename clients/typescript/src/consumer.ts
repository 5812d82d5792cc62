/**
 * The consumer loop (docs/protocol.md, "Reading", "Retries and delivery counting"), as the
 * Rust library runs it: this consumer's pending entries first (its failures, what it held
 * when it last stopped, what it claimed or took over), then new entries; each batch split
 * into lanes by partition key (keys concurrently, one key in stream order); an entry
 * acknowledged only after its handler returned; retries with backoff; dead letters after
 * `maxDeliveries`; outages (Redis or a handler's database away) waited out without spending a
 * delivery. On a partitioned topic the reads, takes and keeps go through the fleet's
 * lease-checking scripts.
 *
 * Delivery counting: the group's counter (the PEL's) is set to the delivery about to be made
 * (`XCLAIM ... RETRYCOUNT n JUSTID`) before a pending entry is handled again, so an entry held
 * back behind an earlier failure of its key is not charged, and an outage gives the delivery
 * back.
 */

import { type ConsumerConfig, type ConsumerOptions, type Logger, resolveConfig, deadKeyOfStream } from "./config.js";
import { type Entry, EntryError, type Lease, parseEntry } from "./entry.js";
import { asError, failureOf, type ErrorKind } from "./errors.js";
import { ErrorLog, outagePause, retryDelay, sleep } from "./backoff.js";
import { Fleet, now } from "./fleet.js";
import * as keys from "./keys.js";
import { stderrLogger } from "./log.js";
import {
  type Conn,
  type EntryRef,
  type RawEntry,
  byStream,
  connect,
  ensureGroup,
  isNoGroup,
  parseEntries,
  parseReadReply,
  refKey,
  text,
} from "./redis.js";
import { Telemetry } from "./telemetry.js";
import { Parking } from "./park.js";

/** Handles one entry; what it throws says what becomes of the entry (see {@link HandlerError}). */
export type HandlerFn = (entry: Entry) => Promise<void> | void;

/** A handler with work of its own beside handling (the inbox's retention). */
export interface HandlerObject {
  handle(entry: Entry): Promise<void>;
  /** Runs for as long as the consumer of `group` runs, until `signal` aborts. */
  maintain?(group: string, signal: AbortSignal): Promise<void>;
}

export type Handler = HandlerFn | HandlerObject;

/** Handles a whole batch, all or nothing: resolving acknowledges every entry; what it throws applies to every entry. */
export type BatchHandlerFn = (entries: Entry[]) => Promise<void> | void;

/** A batch handler with work of its own beside handling (the batch inbox's retention). */
export interface BatchHandlerObject {
  handleBatch(entries: Entry[]): Promise<void>;
  maintain?(group: string, signal: AbortSignal): Promise<void>;
}

/**
 * Runs a batch handler: `consumer.run(new Batches(handler))` hands over each batch (the
 * entries in stream order, the streams' entries merged by id) at once. Use it where one
 * transaction per batch is what keeps up (`Inbox.forBatches`); keeping one key's entries in
 * order inside the batch is the handler's part.
 */
export class Batches {
  constructor(readonly handler: BatchHandlerFn | BatchHandlerObject) {}
}

/** What the loop runs: one entry at a time, or whole batches. */
type Work = { kind: "entries"; handle: (entry: Entry) => Promise<void> } | { kind: "batches"; handle: (entries: Entry[]) => Promise<void> };

/** A stream id `ms-seq` as a sortable pair. */
function idOrder(id: string): [number, number] {
  const [ms, seq] = id.split("-");
  return [Number(ms) || 0, Number(seq) || 0];
}

/** What a run did before it returned. */
export interface RunStats {
  /** Entries handled successfully and acknowledged. */
  handled: number;
  /** Handler failures that left the entry for a later delivery. */
  failed: number;
  /** Entries moved to the dead stream. */
  deadLettered: number;
}

/** How a run stops. */
export interface RunOptions {
  /** Aborting it stops the consumer after the entries in hand (use {@link shutdownSignal} for SIGTERM/SIGINT). */
  signal?: AbortSignal;
}

/** Extra settings of the TypeScript client. */
export interface ClientOptions extends ConsumerOptions {
  /** Metrics through prom-client when it is installed (default true). */
  metrics?: boolean;
  /** Traces through @opentelemetry/api when it is installed (default true). */
  traces?: boolean;
}

/** An AbortSignal that aborts at the first SIGTERM or SIGINT (the handlers are removed after). */
export function shutdownSignal(signals: NodeJS.Signals[] = ["SIGTERM", "SIGINT"]): AbortSignal {
  const controller = new AbortController();
  const stop = (): void => {
    for (const s of signals) process.off(s, stop);
    controller.abort();
  };
  for (const s of signals) process.on(s, stop);
  return controller.signal;
}

/** One delivery of one entry. */
export interface Delivery {
  raw: RawEntry;
  parsed: Entry | EntryError;
  /** This delivery's number. */
  delivery: number;
  /** A pending entry: set the group's counter (and check it is still ours) before handling it. */
  take: boolean;
  /** The lane: stream and partition key; null for a lane of its own. */
  lane: string | null;
  /** Its key is parked in the group: hold it. */
  parked: boolean;
  /** Drained from a parked key's held list (no pending list holds it). */
  fromHeld: boolean;
}

export type Fate =
  | { fate: "done" }
  | { fate: "dead_lettered" }
  | { fate: "parked" }
  | { fate: "failed"; delivery: number }
  | { fate: "outage"; error: string }
  | { fate: "held_back"; fresh: boolean }
  | { fate: "lost"; error?: unknown };

interface Outcome {
  at: EntryRef;
  fate: Fate;
}

type Check = { check: "anyone" } | { check: "held"; lease: Lease } | { check: "not_mine" };

interface NewEntries {
  entries: RawEntry[];
  held: string[];
  early: EntryRef[];
}

/** A raw entry's `key` field as text (the lane of an entry that failed to parse). */
function keyField(raw: RawEntry): string | null {
  const f = raw.fields.find(([k]) => k === "key");
  return f ? f[1].toString("utf8") : null;
}

/** Builds a delivery: the entry parsed (with the topic of its stream, which a CloudEvents entry does not name). */
export function newDelivery(raw: RawEntry, topic: string | undefined, group: string, delivery: number, take: boolean): Delivery {
  let parsed: Entry | EntryError;
  try {
    parsed = parseEntry(raw.fields, { streamId: raw.streamId, topic, stream: raw.stream });
    parsed.deliveries = delivery;
    parsed.group = group;
  } catch (e) {
    parsed = e instanceof EntryError ? e : new EntryError("missing_field", "", String(e));
  }
  const key = parsed instanceof EntryError ? keyField(raw) : parsed.key;
  return {
    raw,
    parsed,
    delivery,
    take,
    lane: key === null ? null : `${raw.stream}\n${key}`,
    parked: false,
    fromHeld: false,
  };
}

/** Splits items (in stream order) into lanes: one per key in order, one per unkeyed item. */
export function lanes<T extends { lane: string | null }>(items: T[]): T[][] {
  const out: T[][] = [];
  const byKey = new Map<string, T[]>();
  for (const item of items) {
    if (item.lane === null) {
      out.push([item]);
      continue;
    }
    const lane = byKey.get(item.lane);
    if (lane) lane.push(item);
    else {
      const fresh = [item];
      byKey.set(item.lane, fresh);
      out.push(fresh);
    }
  }
  return out;
}

/** Runs `tasks` with at most `limit` at once; results in task order. */
async function pool<T>(tasks: Array<() => Promise<T>>, limit: number): Promise<T[]> {
  const results: T[] = new Array<T>(tasks.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < tasks.length) {
      const i = next++;
      results[i] = await (tasks[i] as () => Promise<T>)();
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, tasks.length) }, worker));
  return results;
}

const DRAIN_EVERY_MS = 1000;
const POLL_MS = 50;

class LoopState {
  groupReady = false;
  streams: string[] = [];
  topicOf = new Map<string, string>();
  nextDrain = 0;
  maybePending = new Set<string>();
  unacked: EntryRef[] = [];
  retryAt = new Map<string, number>();
  freshUnattempted = new Set<string>();
  nextClaim = 0;
  outageFailures = 0;
  errors = new ErrorLog(30_000);
  handlerOutages = new ErrorLog(30_000);
  stats: RunStats = { handled: 0, failed: 0, deadLettered: 0 };

  nonePending(stream: string): void {
    this.maybePending.delete(stream);
    const prefix = `${stream}\u0000`;
    for (const k of [...this.retryAt.keys()]) if (k.startsWith(prefix)) this.retryAt.delete(k);
    for (const k of [...this.freshUnattempted]) if (k.startsWith(prefix)) this.freshUnattempted.delete(k);
  }
}

/**
 * A member of a consumer group on the streams of one or more topics. Build it (the settings
 * are checked then, nothing connects), then {@link Consumer.run} it with a handler.
 */
export class Consumer {
  readonly config: ConsumerConfig;
  private readonly logger: Logger;
  private readonly options: ClientOptions;
  private conn: Conn | null = null;
  private fleetConn: Conn | null = null;
  private fleet: Fleet;
  private telemetry: Telemetry | null = null;
  private parking: Parking;
  private running = false;

  /** Checks every setting; throws a {@link ConfigError} naming the first bad one. */
  constructor(options: ClientOptions) {
    this.config = resolveConfig(options);
    this.options = options;
    this.logger = options.logger ?? stderrLogger();
    this.fleet = new Fleet(this.config.consumer, this.config.group, this.config.streamPrefix, this.config.claimIdleMs, this.logger);
    this.parking = new Parking(this.config, this.logger);
  }

  /**
   * Runs until `signal` aborts, handing entries to `handler`. An entry is acknowledged after
   * its handler returned; a failure is retried, dead-lettered or waited out as the thrown
   * {@link HandlerError}'s kind says (any other error: a retry). On abort the handlers in
   * flight finish and their entries are acknowledged before this resolves.
   */
  async run(handler: Handler | Batches, options: RunOptions = {}): Promise<RunStats> {
    if (this.running) throw new Error("this consumer is running already");
    this.running = true;
    const signal = options.signal ?? new AbortController().signal;
    const config = this.config;
    let work: Work;
    let owner: { maintain?(group: string, signal: AbortSignal): Promise<void> } | null = null;
    if (handler instanceof Batches) {
      const inner = handler.handler;
      if (typeof inner === "function") work = { kind: "batches", handle: async (es) => inner(es) };
      else {
        work = { kind: "batches", handle: (es) => inner.handleBatch(es) };
        owner = inner;
      }
    } else if (typeof handler === "function") {
      work = { kind: "entries", handle: async (e) => handler(e) };
    } else {
      work = { kind: "entries", handle: (e) => handler.handle(e) };
      owner = handler;
    }
    this.telemetry = await Telemetry.load({ metrics: this.options.metrics, traces: this.options.traces });
    this.conn = connect(config.redisUrl, config.blockMs + 10_000, config.consumer);
    this.fleetConn = connect(config.redisUrl, Math.max(Math.floor(config.claimIdleMs / 3), 500), `${config.consumer}-fleet`);
    const beside = new AbortController();
    const heartbeat = this.fleet.heartbeat(this.fleetConn, beside.signal);
    const maintain =
      owner?.maintain
        ? owner.maintain(config.group, beside.signal).catch((e: unknown) => this.logger.warn("handler maintenance stopped", { error: String(e) }))
        : Promise.resolve();
    const state = new LoopState();
    this.logger.info("consumer started", { topics: config.topics, group: config.group, consumer: config.consumer });
    let fenced = false;
    try {
      while (!signal.aborted) {
        const end = await this.consume(fenced, work, signal, state);
        if (end === "shutdown") break;
        fenced = !fenced;
      }
      if (state.unacked.length > 0) {
        try {
          await this.ack(state.unacked);
          state.stats.handled += state.unacked.length;
          state.unacked = [];
        } catch (e) {
          this.logger.warn("acknowledgements lost at shutdown: those entries will be redelivered", {
            error: String(e),
            count: state.unacked.length,
          });
        }
      }
      // The heartbeat stops first: a beat running after the leave would join the members again.
      beside.abort();
      await heartbeat;
      if (this.fleet.isActive()) {
        try {
          await this.fleet.leave(this.fleetConn);
        } catch (e) {
          this.logger.warn("could not give the partitions back at shutdown: the others take them when the leases run out", { error: String(e) });
        }
      }
    } finally {
      beside.abort();
      await heartbeat;
      await maintain;
      this.conn.disconnect();
      this.fleetConn.disconnect();
      this.running = false;
    }
    this.logger.info("consumer stopped", { group: config.group, consumer: config.consumer, ...state.stats });
    return state.stats;
  }

  private get redis(): Conn {
    if (!this.conn) throw new Error("not running");
    return this.conn;
  }

  /** The loop on one source until shutdown, or until the topics need the other source. */
  private async consume(
    fenced: boolean,
    work: Work,
    signal: AbortSignal,
    state: LoopState,
  ): Promise<"shutdown" | "switch"> {
    while (!signal.aborted) {
      let wait = 0;
      try {
        const turn = await this.turn(fenced, work, state);
        this.redisOk(state);
        if (turn === "switch") return "switch";
        if (typeof turn === "number") wait = Math.max(0, turn - now());
      } catch (e) {
        if (isNoGroup(e)) state.groupReady = false;
        wait = this.redisFailed(state, e);
      }
      if (wait > 0) await sleep(wait, signal);
    }
    return "shutdown";
  }

  private redisOk(state: LoopState): void {
    if (state.outageFailures > 0) this.logger.info("redis answers again: consuming", { failures: state.outageFailures });
    state.outageFailures = 0;
    state.errors.reset();
  }

  private redisFailed(state: LoopState, e: unknown): number {
    state.outageFailures += 1;
    for (const s of state.streams) state.maybePending.add(s);
    const suppressed = state.errors.admit();
    if (suppressed !== null) {
      this.logger.warn("redis command failed; retrying with backoff", {
        error: e instanceof Error ? e.message : String(e),
        suppressed,
        group: this.config.group,
        consumer: this.config.consumer,
      });
    }
    return outagePause(state.outageFailures);
  }

  /** One step: claim when due, then own pending entries, else new ones. Returns "again", "switch" or a time to wait until. */
  private async turn(fenced: boolean, work: Work, state: LoopState): Promise<"again" | "switch" | number> {
    const config = this.config;
    const conn = this.redis;
    if (this.fleet.takeStale()) state.groupReady = false;
    if (!state.groupReady) {
      const topics = await this.resolvePartitions();
      state.streams = topics.flatMap(([, s]) => s);
      state.topicOf = new Map(topics.flatMap(([topic, streams]) => streams.map((s) => [s, topic] as [string, string])));
      for (const key of state.streams) await ensureGroup(conn, key, config.group);
      this.fleet.configure(topics);
      state.maybePending = new Set(state.streams);
      state.groupReady = true;
    }
    if (this.fleet.isActive() !== fenced) return "switch";
    if (fenced && this.fleet.toRelease().length > 0) await this.flush(state);
    if (fenced) {
      const changes = await this.rebalance();
      for (const s of changes.released) state.nonePending(s);
      for (const s of changes.taken) state.maybePending.add(s);
    }
    const t = now();
    if (config.parkKeys && t >= state.nextDrain) {
      await this.parking.drain(conn, (d) => this.processLanes(work, [[d]]), (s) => this.check(s));
      state.nextDrain = t + DRAIN_EVERY_MS;
    }
    const streams = fenced ? this.fleet.readable(state.streams) : [...state.streams];
    const claimDue = t >= state.nextClaim;
    const checkDue = streams.some((s) => state.maybePending.has(s));
    if (checkDue || claimDue) await this.flush(state);
    if (claimDue) {
      for (const key of streams) {
        if (this.fleet.ownerKey(key) !== undefined) continue; // taken over by a new owner, not claimed
        const claimed = await this.claimAbandoned(key);
        if (claimed > 0) {
          this.logger.info("claimed entries idle longer than claimIdle from other consumers", { claimed, stream: key });
          state.maybePending.add(key);
        }
      }
      state.nextClaim = t + Math.min(Math.max(config.claimIdleMs / 2, 100), 30_000);
    }
    const pending: Array<[string, Array<[string, number]>]> = [];
    for (const key of streams.filter((s) => state.maybePending.has(s))) {
      const mine = await this.pendingMine(key);
      if (mine.length === 0) state.nonePending(key);
      else pending.push([key, mine]);
    }
    if (pending.length > 0) return this.pendingTurn(work, state, pending);
    const read = fenced ? await this.readFenced(streams, state.unacked) : await this.readGroup(streams, state.unacked);
    state.stats.handled += state.unacked.length;
    state.unacked = [];
    for (const key of read.held) {
      this.logger.info("entries of this consumer still pending there: handling them before reading newer ones", { stream: key });
      state.maybePending.add(key);
    }
    for (const r of read.early) state.freshUnattempted.add(refKey(r));
    if (read.entries.length === 0) return "again";
    const deliveries = read.entries.map((raw) => newDelivery(raw, state.topicOf.get(raw.stream), config.group, 1, false));
    await this.handleLanes(work, state, lanes(deliveries));
    return "again";
  }

  /** Own pending entries (per stream, oldest first): the lanes not waiting out a retry delay, or when to look again. */
  private async pendingTurn(
    work: Work,
    state: LoopState,
    pending: Array<[string, Array<[string, number]>]>,
  ): Promise<"again" | number> {
    const gone: EntryRef[] = [];
    const deliveries: Delivery[] = [];
    for (const [key, mine] of pending) {
      const fetched = await this.fetch(key, mine.map(([id]) => id));
      mine.forEach(([id, count], i) => {
        const raw = fetched[i];
        if (!raw) {
          gone.push({ stream: key, id });
          return;
        }
        const fresh = count === 1 && state.freshUnattempted.has(refKey({ stream: raw.stream, id: raw.streamId }));
        deliveries.push(newDelivery(raw, state.topicOf.get(raw.stream), this.config.group, fresh ? 1 : count + 1, !fresh));
      });
    }
    if (gone.length > 0) {
      this.logger.warn("pending entries no longer in their stream (trimmed or deleted): acknowledged without handling", { count: gone.length });
      await this.ack(gone);
    }
    const t = now();
    const ready: Delivery[][] = [];
    const waiting: Delivery[][] = [];
    for (const lane of lanes(deliveries)) {
      const due = lane.every((d) => (state.retryAt.get(refKey({ stream: d.raw.stream, id: d.raw.streamId })) ?? 0) <= t);
      (due ? ready : waiting).push(lane);
    }
    if (ready.length === 0) {
      const times = waiting.flat().map((d) => state.retryAt.get(refKey({ stream: d.raw.stream, id: d.raw.streamId })) ?? t);
      return Math.min(Math.min(...times), state.nextClaim);
    }
    await this.handleLanes(work, state, ready);
    return "again";
  }

  /** Runs the lanes, then records successes for acknowledgement and the rest for a retry. */
  private async handleLanes(work: Work, state: LoopState, batch: Delivery[][]): Promise<void> {
    if (this.config.parkKeys) await this.parking.markParked(this.redis, batch.flat());
    const outcomes = await this.processLanes(work, batch);
    let redisError: unknown = null;
    let outageError: string | null = null;
    for (const { at, fate } of outcomes) {
      const k = refKey(at);
      if (!["done", "dead_lettered", "parked"].includes(fate.fate)) state.maybePending.add(at.stream);
      if (fate.fate !== "held_back") state.freshUnattempted.delete(k);
      switch (fate.fate) {
        case "done":
        case "parked":
          state.retryAt.delete(k);
          state.unacked.push(at);
          break;
        case "dead_lettered":
          state.stats.deadLettered += 1;
          state.retryAt.delete(k);
          break;
        case "failed":
          state.stats.failed += 1;
          state.retryAt.set(k, now() + retryDelay(fate.delivery, this.config.retryBaseMs, this.config.retryMaxMs));
          break;
        case "outage":
          outageError = fate.error;
          state.retryAt.set(k, now() + Math.max(outagePause(1), 1000));
          break;
        case "held_back":
          if (fate.fresh) state.freshUnattempted.add(k);
          break;
        case "lost":
          if (fate.error !== undefined) redisError = fate.error;
          break;
      }
    }
    if (outageError !== null) {
      const suppressed = state.handlerOutages.admit();
      if (suppressed !== null) this.logger.warn("handler failed on an outage; retrying without counting deliveries", { error: outageError, suppressed });
    } else {
      state.handlerOutages.reset();
    }
    if (redisError !== null) throw asError(redisError);
  }

  /** Runs lanes concurrently (one key's entries in order) while keeping their entries claimed. */
  private async processLanes(work: Work, batch: Delivery[][]): Promise<Outcome[]> {
    const refs = batch.flat().filter((d) => !d.fromHeld).map((d) => ({ stream: d.raw.stream, id: d.raw.streamId }));
    const every = this.config.claimIdleMs / 3;
    const keeping = new AbortController();
    const keeper = (async () => {
      const errors = new ErrorLog(30_000);
      for (;;) {
        await sleep(every, keeping.signal);
        if (keeping.signal.aborted) return;
        try {
          await this.keepInHand(refs, Math.floor(every / 2));
        } catch (e) {
          if (errors.admit() !== null) this.logger.warn("could not refresh the entries in hand; another consumer may claim them", { error: String(e) });
        }
      }
    })();
    try {
      if (work.kind === "batches") return await this.wholeBatch(work.handle, batch);
      const handle = work.handle;
      const results = await pool(
        batch.map((lane) => () => this.lane(handle, lane)),
        this.config.concurrency,
      );
      return results.flat();
    } finally {
      keeping.abort();
      await keeper;
    }
  }

  /** A batch handler: one call for the batch's entries that pass the checks, all or nothing. */
  private async wholeBatch(handle: (entries: Entry[]) => Promise<void>, lanesIn: Delivery[][]): Promise<Outcome[]> {
    const all = lanesIn.flat().sort((a, b) => {
      const [x, y] = [idOrder(a.raw.streamId), idOrder(b.raw.streamId)];
      return x[0] - y[0] || x[1] - y[1];
    });
    const out: Outcome[] = [];
    const batch: Array<[Delivery, Lease | null]> = [];
    // Keys with an entry left out of the batch: their later entries wait for it.
    const blocked = new Set<string>();
    for (const d of all) {
      const at = { stream: d.raw.stream, id: d.raw.streamId };
      if (d.lane !== null && blocked.has(d.lane)) {
        out.push({ at, fate: { fate: "held_back", fresh: !d.take } });
        continue;
      }
      const before = d.parked ? await this.held(d) : await this.beforeHandling(d);
      if ("fate" in before) {
        if (!this.passes(before) && d.lane !== null) blocked.add(d.lane);
        out.push({ at, fate: before });
        continue;
      }
      batch.push([d, before.lease]);
    }
    if (batch.length === 0) return out;
    const entries = batch.flatMap(([d, lease]) => (d.parsed instanceof EntryError ? [] : [{ ...d.parsed, lease }]));
    let result: { kind: ErrorKind; error: string } | null = null;
    try {
      await (this.telemetry as Telemetry).processBatch(batch[0]?.[0].raw.stream ?? "", entries, () => handle(entries));
    } catch (e) {
      result = failureOf(e);
    }
    for (const [d] of batch) {
      const fate = await this.afterHandler(d, result);
      out.push({ at: { stream: d.raw.stream, id: d.raw.streamId }, fate });
      const outcome = fate.fate === "done" ? "handled" : fate.fate === "dead_lettered" ? "dead_lettered" : fate.fate === "failed" ? "failed" : fate.fate === "outage" ? "outage" : null;
      if (outcome && !(d.parsed instanceof EntryError)) this.telemetry?.count(d.parsed.topic, d.parsed.group, outcome);
    }
    return out;
  }

  private async lane(handle: (entry: Entry) => Promise<void>, lane: Delivery[]): Promise<Outcome[]> {
    const out: Outcome[] = [];
    let blocked = false;
    for (const d of lane) {
      let fate: Fate;
      if (blocked) fate = { fate: "held_back", fresh: !d.take };
      else if (d.parked) fate = await this.held(d);
      else fate = await this.one(handle, d);
      if (!this.passes(fate)) blocked = true;
      out.push({ at: { stream: d.raw.stream, id: d.raw.streamId }, fate });
    }
    return out;
  }

  /** Whether a lane goes on after an entry that met `fate`. */
  private passes(fate: Fate): boolean {
    if (fate.fate === "done" || fate.fate === "parked") return true;
    return fate.fate === "dead_lettered" && !this.config.parkKeys;
  }

  private async held(d: Delivery): Promise<Fate> {
    if (this.check(d.raw.stream).check === "not_mine") return { fate: "lost" };
    try {
      return (await this.parking.hold(this.redis, d)) ? { fate: "parked" } : { fate: "held_back", fresh: !d.take };
    } catch (e) {
      return { fate: "lost", error: e };
    }
  }

  private async one(handle: (entry: Entry) => Promise<void>, d: Delivery): Promise<Fate> {
    const before = await this.beforeHandling(d);
    if ("fate" in before) return before;
    if (d.parsed instanceof EntryError) return { fate: "lost" };
    const entry: Entry = { ...d.parsed, lease: before.lease };
    let result: { kind: ErrorKind; error: string } | null = null;
    try {
      await (this.telemetry as Telemetry).process(d.raw.stream, entry, () => handle(entry));
    } catch (e) {
      result = failureOf(e);
    }
    const fate = await this.afterHandler(d, result);
    const outcome =
      fate.fate === "done" ? "handled" : fate.fate === "dead_lettered" ? "dead_lettered" : fate.fate === "failed" ? "failed" : fate.fate === "outage" ? "outage" : result?.kind === "fenced" ? "fenced" : null;
    if (outcome) this.telemetry?.count(entry.topic, entry.group, outcome);
    return fate;
  }

  /** What this consumer may do with an entry of `stream` now. */
  check(stream: string): Check {
    if (this.fleet.ownerKey(stream) === undefined) return { check: "anyone" };
    const lease = this.fleet.leaseInHand(stream);
    return lease ? { check: "held", lease } : { check: "not_mine" };
  }

  /** The checks before a handler: partition still ours, malformed, over the limit, taken for this delivery. */
  private async beforeHandling(d: Delivery): Promise<{ lease: Lease | null } | Fate> {
    const c = this.check(d.raw.stream);
    if (c.check === "not_mine") return { fate: "lost" };
    const max = this.config.maxDeliveries;
    let verdict: [string, number] | null = null;
    if (d.parsed instanceof EntryError) verdict = [`malformed entry: ${d.parsed.message}`, d.delivery];
    else if (d.delivery > max) {
      verdict = [
        `delivered ${d.delivery - 1} times without being acknowledged (max_deliveries ${max}): the consumers holding it stopped before finishing it; not handled again`,
        d.delivery - 1,
      ];
    }
    if (verdict) return this.deadLetter(d, verdict[0], verdict[1]);
    if (d.take) {
      try {
        if (!(await this.take(d.raw.stream, d.raw.streamId, d.delivery))) return { fate: "lost" };
      } catch (e) {
        return { fate: "lost", error: e };
      }
    }
    return { lease: c.check === "held" ? c.lease : null };
  }

  private async afterHandler(d: Delivery, result: { kind: ErrorKind; error: string } | null): Promise<Fate> {
    if (result === null) return { fate: "done" };
    const eventId = d.parsed instanceof EntryError ? "" : d.parsed.id;
    switch (result.kind) {
      case "outage":
        this.logger.debug("handler hit an outage: not counted as a delivery", { stream_id: d.raw.streamId, error: result.error });
        try {
          await this.take(d.raw.stream, d.raw.streamId, d.delivery - 1);
          return { fate: "outage", error: result.error };
        } catch (e) {
          return { fate: "lost", error: e };
        }
      case "fenced":
        this.logger.warn("a newer owner holds this partition: effect refused, partition no longer handled here", {
          stream: d.raw.stream,
          stream_id: d.raw.streamId,
          error: result.error,
        });
        this.fleet.forget(d.raw.stream);
        return { fate: "lost" };
      case "dead_letter":
        this.logger.warn("handler dead-lettered the entry", { stream_id: d.raw.streamId, event_id: eventId, delivery: d.delivery, error: result.error });
        return this.deadLetter(d, result.error, d.delivery);
      case "retry":
        this.logger.warn("handler failed", {
          stream_id: d.raw.streamId,
          event_id: eventId,
          delivery: d.delivery,
          max_deliveries: this.config.maxDeliveries,
          error: result.error,
        });
        if (d.delivery >= this.config.maxDeliveries) return this.deadLetter(d, result.error, d.delivery);
        return { fate: "failed", delivery: d.delivery };
    }
  }

  /** The dead entry's fields: the entry's own (minus error, group, deliveries), then those three. */
  deadFields(raw: RawEntry, error: string, deliveries: number): Array<string | Buffer> {
    const out: Array<string | Buffer> = [];
    for (const [k, v] of raw.fields) {
      if (k === "error" || k === "group" || k === "deliveries") continue;
      out.push(k, v);
    }
    out.push("error", error, "group", this.config.group, "deliveries", String(deliveries));
    return out;
  }

  /** Moves `d`'s entry to the dead stream if it is still this consumer's (dead_letter.lua), parking its key first when keys park. */
  private async deadLetter(d: Delivery, error: string, deliveries: number): Promise<Fate> {
    const conn = this.redis;
    const dead = deadKeyOfStream(this.config, d.raw.stream);
    const parks = this.config.parkKeys && this.parking.topicKey(d) !== null;
    try {
      if (d.fromHeld) {
        const deadEntry = text(await conn.xadd(dead, "*", ...this.deadFields(d.raw, error, deliveries)));
        await this.parking.parkDead(conn, d, deadEntry);
        return { fate: "dead_lettered" };
      }
      if (parks) await this.parking.parkDead(conn, d, "");
      const written = await conn.outboxDeadLetter(
        2,
        d.raw.stream,
        dead,
        this.config.group,
        this.config.consumer,
        d.raw.streamId,
        ...this.deadFields(d.raw, error, deliveries),
      );
      if (typeof written === "number") return { fate: "lost" };
      const deadEntry = text(written);
      if (parks) {
        try {
          await this.parking.parkDead(conn, d, deadEntry);
        } catch (e) {
          this.logger.warn("the parked key's dead entry not recorded: a redrive will not find it", { error: String(e) });
        }
      }
      this.logger.warn("entry dead-lettered", {
        stream_id: d.raw.streamId,
        event_id: d.parsed instanceof EntryError ? "" : d.parsed.id,
        deliveries,
        error,
        dead_stream: dead,
      });
      return { fate: "dead_lettered" };
    } catch (e) {
      return { fate: "lost", error: e };
    }
  }

  // --- Redis commands (the Rust library's `source` module) -------------------------------

  /** Each topic's streams: `<prefix><topic>`, or its N partition streams as `<prefix>partitions` says. */
  private async resolvePartitions(): Promise<Array<[string, string[]]>> {
    const out: Array<[string, string[]]> = [];
    for (const topic of this.config.topics) {
      const n = Number((await this.redis.hget(keys.partitionsHash(this.config.streamPrefix), topic)) ?? 1) || 1;
      out.push([topic, keys.partitionKeys(this.config.streamPrefix, topic, n)]);
    }
    return out;
  }

  private async flush(state: LoopState): Promise<void> {
    if (state.unacked.length === 0) return;
    await this.ack(state.unacked);
    state.stats.handled += state.unacked.length;
    state.unacked = [];
  }

  private async ack(refs: EntryRef[]): Promise<void> {
    if (refs.length === 0) return;
    const pipe = this.redis.pipeline();
    for (const [stream, ids] of byStream(refs)) pipe.xack(stream, this.config.group, ...ids);
    await exec(pipe);
  }

  private xreadgroupArgs(streams: string[], block: number | null): Array<string | number> {
    const args: Array<string | number> = ["GROUP", this.config.group, this.config.consumer, "COUNT", this.config.batchSize];
    if (block !== null) args.push("BLOCK", Math.max(1, block));
    return [...args, "STREAMS", ...streams, ...streams.map(() => ">")];
  }

  /** The plain group's read: acks, a pending check per stream and XREADGROUP in one round trip; then a blocking read when nothing is new. */
  private async readGroup(streams: string[], acks: EntryRef[]): Promise<NewEntries> {
    const conn = this.redis;
    if (streams.length === 0) {
      await this.ack(acks);
      await sleep(Math.min(this.config.blockMs, POLL_MS));
      return { entries: [], held: [], early: [] };
    }
    const pipe = conn.pipeline();
    for (const [stream, ids] of byStream(acks)) pipe.xack(stream, this.config.group, ...ids);
    for (const s of streams) pipe.xpending(s, this.config.group, "-", "+", 1, this.config.consumer);
    pipe.callBuffer("XREADGROUP", ...this.xreadgroupArgs(streams, null));
    const replies = await exec(pipe);
    const body = replies.pop();
    const pendings = replies.slice(replies.length - streams.length);
    const held = streams.filter((_, i) => Array.isArray(pendings[i]) && (pendings[i] as unknown[]).length > 0);
    const read: NewEntries = { entries: [], held, early: [] };
    for (const e of parseReadReply(body)) {
      if (held.includes(e.stream)) read.early.push({ stream: e.stream, id: e.streamId });
      else read.entries.push(e);
    }
    if (read.entries.length > 0 || read.held.length > 0) return read;
    const waited = await conn.callBuffer("XREADGROUP", ...this.xreadgroupArgs(streams, this.config.blockMs));
    return { entries: parseReadReply(waited), held: [], early: [] };
  }

  /** The fenced read (read.lua): only partitions whose lease names this consumer; with nothing new, XREAD BLOCK on the last ids. */
  private async readFenced(streams: string[], acks: EntryRef[]): Promise<NewEntries> {
    const conn = this.redis;
    const pipe = conn.pipeline();
    for (const [stream, ids] of byStream(acks)) pipe.xack(stream, this.config.group, ...ids);
    const read: NewEntries = { entries: [], held: [], early: [] };
    const last: Array<[string, string]> = [];
    if (streams.length > 0) {
      const owners: string[] = [];
      const indexes: number[] = [];
      for (const s of streams) {
        const owner = this.fleet.ownerKey(s);
        if (owner === undefined) indexes.push(0);
        else {
          owners.push(owner);
          indexes.push(owners.length);
        }
      }
      void (pipe as unknown as Conn).outboxReadBuffer(
        streams.length + owners.length,
        ...streams,
        ...owners,
        this.config.group,
        this.config.consumer,
        this.config.batchSize,
        ...indexes,
      );
    }
    const replies = await exec(pipe);
    if (streams.length > 0) {
      const reply = replies[replies.length - 1];
      if (Array.isArray(reply) && reply.length > 0) {
        const tag = text(reply[0]);
        const body: unknown = reply[1];
        if (tag === "e") read.entries.push(...parseReadReply(body));
        else if (tag === "p" && Array.isArray(body)) read.held.push(...body.map(text));
        else if (tag === "w" && Array.isArray(body)) {
          for (let i = 0; i + 1 < body.length; i += 2) last.push([text(body[i]), text(body[i + 1])]);
        }
      }
    }
    if (read.entries.length === 0 && read.held.length === 0) {
      if (last.length === 0) await sleep(Math.min(this.config.blockMs, POLL_MS));
      else {
        await conn.call("XREAD", "COUNT", 1, "BLOCK", Math.max(1, this.config.blockMs), "STREAMS", ...last.map(([s]) => s), ...last.map(([, id]) => id));
      }
    }
    return read;
  }

  /** Between batches: gives up partitions no longer targets, takes over new ones (hand_over.lua). */
  private async rebalance(): Promise<{ released: string[]; taken: string[] }> {
    const conn = this.redis;
    const changes = { released: [] as string[], taken: [] as string[] };
    for (const p of this.fleet.toRelease()) {
      await conn.outboxLease(2, p.owner, p.epoch, this.config.consumer, 0, "release");
      this.fleet.forget(p.stream);
      this.logger.info("gave up partition for a rebalance", { stream: p.stream });
      changes.released.push(p.stream);
    }
    for (const { stream, owner, lease } of this.fleet.toHandOver()) {
      const taken = Number(await conn.outboxHandOver(2, stream, owner, this.config.group, this.config.consumer));
      if (taken >= 0) {
        this.fleet.handedOver(stream);
        this.logger.info("partition handed over: its unacknowledged entries first, in order", {
          stream,
          partition: lease.partition,
          epoch: lease.epoch,
          taken,
        });
        changes.taken.push(stream);
      } else {
        this.fleet.forget(stream);
      }
    }
    return changes;
  }

  /** This consumer's pending entries of `stream`, oldest first, with their delivery counts. */
  private async pendingMine(stream: string): Promise<Array<[string, number]>> {
    const reply = (await this.redis.xpending(stream, this.config.group, "-", "+", this.config.batchSize, this.config.consumer));
    return reply.map((p) => {
      const row = p as unknown[];
      return [text(row[0]), Number(row[3])];
    });
  }

  /** The entries with these ids (XRANGE id id each), `undefined` for one trimmed or deleted. */
  private async fetch(stream: string, ids: string[]): Promise<Array<RawEntry | undefined>> {
    if (ids.length === 0) return [];
    const pipe = this.redis.pipeline();
    for (const id of ids) pipe.callBuffer("XRANGE", stream, id, id);
    const replies = await exec(pipe);
    return replies.map((r) => parseEntries(stream, r)[0]);
  }

  /** Takes pending entry `id` for delivery number `deliveries` (lease-checked on a divided partition); false when no longer ours. */
  private async take(stream: string, id: string, deliveries: number): Promise<boolean> {
    const owner = this.fleet.ownerKey(stream);
    const c = this.config;
    const reply =
      owner === undefined
        ? await this.redis.call("XCLAIM", stream, c.group, c.consumer, 0, id, "RETRYCOUNT", Math.max(0, deliveries), "JUSTID")
        : await this.redis.outboxClaim(2, stream, owner, c.group, c.consumer, 0, id, "RETRYCOUNT", Math.max(0, deliveries), "JUSTID");
    return Array.isArray(reply) && reply.length > 0;
  }

  /** Restarts the idle time of the entries in hand (idle at least `minIdle`). */
  private async keepInHand(refs: EntryRef[], minIdle: number): Promise<void> {
    const c = this.config;
    for (const [stream, ids] of byStream(refs)) {
      const owner = this.fleet.ownerKey(stream);
      if (owner === undefined) await this.redis.call("XCLAIM", stream, c.group, c.consumer, minIdle, ...ids, "JUSTID");
      else await this.redis.outboxClaim(2, stream, owner, c.group, c.consumer, minIdle, ...ids, "JUSTID");
    }
  }

  /** Claims entries of `stream` idle longer than `claimIdle` (XAUTOCLAIM ... JUSTID, no delivery counted). */
  private async claimAbandoned(stream: string): Promise<number> {
    const c = this.config;
    let cursor = "0-0";
    let claimed = 0;
    for (let round = 0; round < 10; round++) {
      const reply = (await this.redis.call("XAUTOCLAIM", stream, c.group, c.consumer, c.claimIdleMs, cursor, "COUNT", c.batchSize, "JUSTID")) as unknown[];
      if (!Array.isArray(reply) || reply.length < 2) break;
      claimed += Array.isArray(reply[1]) ? reply[1].length : 0;
      cursor = text(reply[0]);
      if (cursor === "0-0" || claimed >= c.batchSize) break;
    }
    return claimed;
  }
}

/** Runs a pipeline; the first error is thrown. */
async function exec(pipe: ReturnType<Conn["pipeline"]>): Promise<unknown[]> {
  const replies = (await pipe.exec()) ?? [];
  return replies.map(([err, value]) => {
    if (err) throw err;
    return value;
  });
}
