/**
 * The fleet (docs/protocol.md, "Membership", "Leases and epochs"): how the consumers of one
 * group divide a partitioned topic's partitions, each partition handled by one consumer at a
 * time. The same keys, scripts and rules as the Rust library, so consumers in either language
 * share one fleet:
 * - membership in `<prefix><topic>:{<group>}:members` (members.lua), renewed every
 *   `claimIdle / 6` (at most every second);
 * - targets: partition p goes to the member at `p mod m` of the m live names sorted (by bytes);
 * - leases `{<stream>}:owner:<group>` with epochs `{<stream>}:epoch:<group>` (lease.lua),
 *   trusted for two thirds of `claimIdle` after the renewal was sent;
 * - a partition taken is handed over (hand_over.lua) before it is read; one no longer a target
 *   is given up after the batch in hand.
 */

import type { Lease } from "./entry.js";
import * as keys from "./keys.js";
import type { Conn } from "./redis.js";
import type { Logger } from "./config.js";
import { ErrorLog, sleep } from "./backoff.js";
import { asError } from "./errors.js";

interface PartitionKeys {
  stream: string;
  owner: string;
  epoch: string;
}

interface FleetTopic {
  topic: string;
  members: string;
  partitions: PartitionKeys[];
}

/** A lease this consumer holds. */
export interface Held {
  partition: number;
  epoch: number;
  /** Until when (ms, monotonic clock) this consumer may act on it. */
  validUntil: number;
  /** Still a target; false: give it up after the batch in hand. */
  keep: boolean;
  /** The previous owner's pending entries were taken over. */
  handedOver: boolean;
}

export type LeaseOp = "renew" | "take" | "release";

/** A lease script's answer: held under an epoch, refused, or the call failed. */
export type Reply = { held: number } | "refused" | "failed";

/** The monotonic clock, in milliseconds. */
export const now = (): number => performance.now();

/** Compares names by their UTF-8 bytes, as Rust sorts strings. */
export function byteOrder(a: string, b: string): number {
  return Buffer.compare(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"));
}

/** The partitions of `0..partitions` that `me` should own among `members`: p goes to the member at `p mod m` of the sorted names. */
export function targets(members: readonly string[], me: string, partitions: number): number[] {
  const sorted = [...new Set(members)].sort(byteOrder);
  const index = sorted.indexOf(me);
  if (index < 0) return [];
  const out: number[] = [];
  for (let p = 0; p < partitions; p++) if (p % sorted.length === index) out.push(p);
  return out;
}

/** The lease calls for one divided topic: renew every lease held, take every target not held. */
export function asks(held: ReadonlyMap<string, Held>, streams: readonly string[], wanted: ReadonlySet<number>): Array<[number, LeaseOp]> {
  const out: Array<[number, LeaseOp]> = [];
  streams.forEach((stream, p) => {
    if (held.has(stream)) out.push([p, "renew"]);
    else if (wanted.has(p)) out.push([p, "take"]);
  });
  return out;
}

export type Change =
  | { change: "changed_hands"; partition: number }
  | { change: "giving_up"; partition: number }
  | { change: "lost"; partition: number }
  | { change: "took"; partition: number; epoch: number };

/** Applies the lease replies to the leases held (the Rust library's `leases::settle`). */
export function settle(
  held: Map<string, Held>,
  streams: readonly string[],
  wanted: ReadonlySet<number>,
  replies: ReadonlyArray<[[number, LeaseOp], Reply]>,
  validUntil: number,
): { changes: Change[]; waiting: boolean } {
  const changes: Change[] = [];
  let waiting = false;
  for (const [[p, op], reply] of replies) {
    const stream = streams[p];
    if (stream === undefined || reply === "failed" || op === "release") continue;
    const keep = wanted.has(p);
    if (op === "renew") {
      if (reply === "refused") {
        if (held.delete(stream)) changes.push({ change: "lost", partition: p });
        continue;
      }
      const h = held.get(stream);
      if (!h) continue;
      if (h.epoch !== reply.held) {
        held.delete(stream);
        changes.push({ change: "changed_hands", partition: p });
        continue;
      }
      if (h.keep && !keep) changes.push({ change: "giving_up", partition: p });
      h.validUntil = validUntil;
      h.keep = keep;
    } else if (reply === "refused") {
      waiting = true;
    } else {
      changes.push({ change: "took", partition: p, epoch: reply.held });
      held.set(stream, { partition: p, epoch: reply.held, validUntil, keep: true, handedOver: false });
    }
  }
  return { changes, waiting };
}

/** The lease script's integer reply: a positive epoch, else a refusal. */
export function replyOf(epoch: unknown): Reply {
  const n = Number(epoch);
  return Number.isInteger(n) && n > 0 ? { held: n } : "refused";
}

/** How often the heartbeat runs: six times per lease, between 20 ms and 1 s. */
export function beatEvery(leaseMs: number): number {
  return Math.min(Math.max(leaseMs / 6, 20), 1000);
}

const EAGER_MS = 100;

/** The fleet bookkeeping of one consumer, shared by the loop and the heartbeat. */
export class Fleet {
  private counts: Array<[string, number]> = [];
  private stale = false;
  private topics: FleetTopic[] = [];
  private owners = new Map<string, string>();
  readonly held = new Map<string, Held>();
  private joined = new Set<string>();
  private wake: (() => void) | null = null;

  constructor(
    readonly me: string,
    readonly group: string,
    readonly prefix: string,
    readonly leaseMs: number,
    private readonly logger: Logger,
  ) {}

  /** Sets the topics and their streams as resolved; a topic with more than one stream is divided. */
  configure(topics: ReadonlyArray<[string, string[]]>): void {
    this.counts = topics.map(([t, s]) => [t, s.length]);
    this.stale = false;
    this.topics = topics
      .filter(([, streams]) => streams.length > 1)
      .map(([topic, streams]) => ({
        topic,
        members: keys.fleetMembers(this.prefix, topic, this.group),
        partitions: streams.map((stream) => ({
          stream,
          owner: keys.partitionOwner(stream, this.group),
          epoch: keys.partitionEpoch(stream, this.group),
        })),
      }));
    this.owners = new Map(this.topics.flatMap((t) => t.partitions.map((p) => [p.stream, p.owner] as [string, string])));
    for (const stream of [...this.held.keys()]) if (!this.owners.has(stream)) this.held.delete(stream);
    const divided = new Set(this.topics.map((t) => t.topic));
    for (const t of [...this.joined]) if (!divided.has(t)) this.joined.delete(t);
    this.wake?.();
  }

  /** Whether a topic's partition count changed since {@link configure}; clears the flag. */
  takeStale(): boolean {
    const s = this.stale;
    this.stale = false;
    return s;
  }

  /** Whether any topic is divided among the group. */
  isActive(): boolean {
    return this.topics.length > 0;
  }

  /** The owner key of a fenced stream. */
  ownerKey(stream: string): string | undefined {
    return this.owners.get(stream);
  }

  /** The lease under which this consumer may handle `stream`'s entries now. */
  leaseInHand(stream: string): Lease | null {
    const h = this.held.get(stream);
    return h && h.handedOver && now() < h.validUntil ? { partition: h.partition, epoch: h.epoch } : null;
  }

  /** Of `streams`, those this consumer may read: unfenced ones, and partitions held, handed over, kept. */
  readable(streams: readonly string[]): string[] {
    const t = now();
    return streams.filter((s) => {
      if (!this.owners.has(s)) return true;
      const h = this.held.get(s);
      return h !== undefined && h.handedOver && h.keep && t < h.validUntil;
    });
  }

  /** Partitions taken, still valid, whose previous owner's entries are to be taken over. */
  toHandOver(): Array<{ stream: string; owner: string; lease: Lease }> {
    const t = now();
    const out: Array<{ stream: string; owner: string; lease: Lease }> = [];
    for (const [stream, h] of this.held) {
      const owner = this.owners.get(stream);
      if (!h.handedOver && t < h.validUntil && owner) out.push({ stream, owner, lease: { partition: h.partition, epoch: h.epoch } });
    }
    return out;
  }

  handedOver(stream: string): void {
    const h = this.held.get(stream);
    if (h) h.handedOver = true;
  }

  /** Partitions to give up, with their owner and epoch keys. */
  toRelease(): PartitionKeys[] {
    const out: PartitionKeys[] = [];
    for (const [stream, h] of this.held) {
      if (h.keep) continue;
      const p = this.topics.flatMap((t) => t.partitions).find((x) => x.stream === stream);
      if (p) out.push(p);
    }
    return out;
  }

  forget(stream: string): void {
    this.held.delete(stream);
  }

  private trustMs(): number {
    return this.leaseMs - Math.floor(this.leaseMs / 3);
  }

  /** Runs the heartbeat on `conn` until `signal` aborts. */
  async heartbeat(conn: Conn, signal: AbortSignal): Promise<void> {
    const every = beatEvery(this.leaseMs);
    const errors = new ErrorLog(30_000);
    while (!signal.aborted) {
      let next = every;
      try {
        const waiting = await this.beat(conn);
        errors.reset();
        if (waiting) next = Math.min(every, EAGER_MS);
      } catch (e) {
        const suppressed = errors.admit();
        if (suppressed !== null) {
          this.logger.warn("could not renew partition leases; partitions whose lease runs out stop being handled", {
            error: (e as Error).message,
            suppressed,
            group: this.group,
            consumer: this.me,
          });
        }
      }
      await new Promise<void>((resolve) => {
        this.wake = resolve;
        void sleep(next, signal).then(resolve);
      });
      this.wake = null;
    }
  }

  private async checkCounts(conn: Conn): Promise<void> {
    if (this.counts.length === 0) return;
    const hash = keys.partitionsHash(this.prefix);
    const pipe = conn.pipeline();
    for (const [topic] of this.counts) pipe.hget(hash, topic);
    const replies = (await pipe.exec()) ?? [];
    const changed = this.counts.some(([, was], i) => {
      const [err, value] = replies[i] ?? [null, null];
      if (err) throw err;
      return Math.max(1, Number(value ?? 1) || 1) !== was;
    });
    if (changed) {
      this.logger.info("a topic's partition count changed: reading its streams anew");
      this.stale = true;
    }
  }

  /** One round over every divided topic; true when a target is still another's (run again soon). */
  private async beat(conn: Conn): Promise<boolean> {
    await this.checkCounts(conn);
    let failure: unknown = null;
    let waiting = false;
    for (const topic of [...this.topics]) {
      const sent = now();
      const members = ((await conn.outboxMembers(1, topic.members, this.me, this.leaseMs, "join")) as unknown[]).map(String);
      if (!this.joined.has(topic.topic)) {
        // Just joined: the others starting now join too before anyone takes leases.
        this.joined.add(topic.topic);
        waiting = true;
        continue;
      }
      const wanted = new Set(targets(members, this.me, topic.partitions.length));
      const streams = topic.partitions.map((p) => p.stream);
      const calls = asks(this.held, streams, wanted);
      const replies = await Promise.all(
        calls.map(async ([p, op]): Promise<[[number, LeaseOp], Reply]> => {
          const k = topic.partitions[p] as PartitionKeys;
          try {
            return [[p, op], replyOf(await conn.outboxLease(2, k.owner, k.epoch, this.me, this.leaseMs, op))];
          } catch (e) {
            failure = e;
            return [[p, op], "failed"];
          }
        }),
      );
      const settled = settle(this.held, streams, wanted, replies, sent + this.trustMs());
      if (settled.waiting) waiting = true;
      for (const c of settled.changes) {
        const fields = { topic: topic.topic, partition: c.partition, members: members.length };
        if (c.change === "took") this.logger.info("took partition", { ...fields, epoch: c.epoch });
        else if (c.change === "giving_up") this.logger.info("giving up partition for a rebalance, after the batch in hand", fields);
        else if (c.change === "lost") this.logger.warn("partition lease lost (it ran out): no longer handled here", fields);
        else this.logger.warn("partition lease changed hands: no longer handled here", fields);
      }
    }
    if (failure !== null) throw asError(failure);
    return waiting;
  }

  /** A clean stop: leaves the members sets, then releases every lease held. */
  async leave(conn: Conn): Promise<void> {
    for (const t of this.topics) await conn.outboxMembers(1, t.members, this.me, 0, "leave");
    for (const t of this.topics) {
      for (const p of t.partitions) {
        if (this.held.has(p.stream)) await conn.outboxLease(2, p.owner, p.epoch, this.me, this.leaseMs, "release");
      }
    }
    this.held.clear();
    this.joined.clear();
  }
}
