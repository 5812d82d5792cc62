/**
 * The inbox (docs/protocol.md, "The inbox"): exactly-once effects on at-least-once delivery.
 * For each entry, one Postgres transaction records `(group, event id)` in `outbox_inbox` and
 * runs your effect on the same client; a redelivered entry finds its row and the effect is
 * skipped. The same statements as the Rust library's `inbox::sql`, on the same tables
 * (`protocol/sql/inbox.sql`, `inbox_fences.sql`, the repository's `consumer/sql/`).
 *
 * On a partitioned topic each entry carries its partition's lease: the fence row
 * (`outbox_inbox_fences`) is raised to the lease's epoch before the first effect under it,
 * and every effect transaction checks, last before its commit, that the fence still holds its
 * epoch (`FOR SHARE`). A consumer that lost the partition cannot commit: its transaction rolls
 * back and the entry is left to the new owner.
 *
 * The inbox's own database failures (no connection, the inbox insert, BEGIN, COMMIT) are
 * outages: retried without spending a delivery. What your effect throws counts as its kind.
 */

import type { Pool, PoolClient } from "pg";
import type { Entry, Lease } from "./entry.js";
import { HandlerError, messageOf } from "./errors.js";
import type { BatchHandlerObject, HandlerObject } from "./consumer.js";
import { sql } from "./protocol.js";
import { ErrorLog, sleep } from "./backoff.js";

/** The tables' DDL, as the relay's `migrate` and the Rust library run it. */
export const TABLE_SQL = sql("inbox");
/** The fences' DDL. */
export const FENCES_SQL = sql("inbox_fences");
/** The advisory lock key held while creating the tables ("inbox-dd" in ASCII), the Rust library's. */
export const DDL_LOCK = BigInt("0x696e626f782d6464").toString();

/** How long a fenced transaction may sit idle before Postgres ends it. */
const FENCED_IDLE_TIMEOUT = "30s";
const RETENTION_BATCH = 1000;

/** An effect: runs inside the inbox's transaction on `client`; commit together or not at all. */
export type Effect = (client: PoolClient, entry: Entry) => Promise<void>;

const PRESENT =
  "SELECT to_regclass('outbox_inbox') IS NOT NULL AND to_regclass('outbox_inbox_processed_at') IS NOT NULL" +
  " AND to_regclass('outbox_inbox_fences') IS NOT NULL AS present";

/**
 * Creates `outbox_inbox` and `outbox_inbox_fences` if missing (serialized by an advisory lock).
 * Runs nothing when they exist: `CREATE INDEX IF NOT EXISTS` locks the table before it finds
 * the index, and would wait behind any effect transaction in flight.
 */
export async function ensureTables(pool: Pool): Promise<void> {
  const present = await pool.query<{ present: boolean }>(PRESENT);
  if (present.rows[0]?.present === true) return;
  const client = await pool.connect();
  try {
    await client.query("BEGIN");
    await client.query(`SELECT pg_advisory_xact_lock(${DDL_LOCK})`);
    await client.query(TABLE_SQL);
    await client.query(FENCES_SQL);
    await client.query("COMMIT");
  } catch (e) {
    await client.query("ROLLBACK").catch(() => {});
    throw e;
  } finally {
    client.release();
  }
}

/** What {@link applyOnce} did. */
export type Applied = "applied" | "already_done";

/** The effect's own failure, kept apart from the inbox's database failures. */
class EffectFailed extends Error {
  /** The rollback failed too: the connection is not to be reused. */
  rollbackFailed = false;
  constructor(readonly error: unknown) {
    super("the effect failed");
  }
}

/** A fence refused the commit (`fenced`), or was never raised to this epoch (`not_raised`). */
export class FenceError extends Error {
  override readonly name = "FenceError";
  constructor(
    readonly reason: "fenced" | "not_raised",
    readonly topic: string,
    readonly partition: number,
    readonly epoch: number,
    readonly fence: number,
  ) {
    super(
      reason === "fenced"
        ? `inbox: partition ${partition} of \`${topic}\` is fenced at epoch ${fence}, above this consumer's ${epoch}: a newer owner holds it`
        : `inbox: partition ${partition} of \`${topic}\` was not fenced at this consumer's epoch ${epoch}: raise the fence first (inbox::raise_fences)`,
    );
  }
}

function holds(topic: string, lease: Lease, fence: number): void {
  if (fence < lease.epoch) throw new FenceError("not_raised", topic, lease.partition, lease.epoch, fence);
  if (fence !== lease.epoch) throw new FenceError("fenced", topic, lease.partition, lease.epoch, fence);
}

async function readFence(client: PoolClient, group: string, topic: string, partition: number): Promise<number> {
  const r = await client.query<{ epoch: string }>(
    "SELECT epoch FROM outbox_inbox_fences WHERE consumer_group = $1 AND topic = $2 AND partition = $3",
    [group, topic, partition],
  );
  return r.rows[0] ? Number(r.rows[0].epoch) : 0;
}

/** Raises the fence of `topic`'s partition to the lease's epoch unless it is there or higher; returns the fence afterwards. */
export async function raiseFence(client: PoolClient, group: string, topic: string, lease: Lease): Promise<number> {
  const fence = await readFence(client, group, topic, lease.partition);
  if (fence >= lease.epoch) return fence;
  await client.query(
    `INSERT INTO outbox_inbox_fences (consumer_group, topic, partition, epoch)
     VALUES ($1, $2, $3, $4)
     ON CONFLICT (consumer_group, topic, partition) DO UPDATE
     SET epoch = EXCLUDED.epoch, raised_at = now()
     WHERE outbox_inbox_fences.epoch < EXCLUDED.epoch`,
    [group, topic, lease.partition, lease.epoch],
  );
  return readFence(client, group, topic, lease.partition);
}

/**
 * In one transaction on `client`: records `entry` for `group` in the inbox and, unless it was
 * there already, runs `effect` on the same client; with a lease, checks the fence last before
 * the commit. The effect's error rolls back both and is rethrown as an `EffectFailed`.
 */
export async function applyOnce(client: PoolClient, group: string, entry: Entry, effect: Effect): Promise<Applied> {
  await client.query("BEGIN");
  try {
    const inserted =
      entry.lease === null
        ? await client.query(
            "INSERT INTO outbox_inbox (consumer_group, event_id, topic) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
            [group, entry.id, entry.topic],
          )
        : await client.query(
            `INSERT INTO outbox_inbox (consumer_group, event_id, topic)
             SELECT $1, $2, $3 FROM (SELECT set_config('idle_in_transaction_session_timeout', $4, true)) AS s
             ON CONFLICT DO NOTHING`,
            [group, entry.id, entry.topic, FENCED_IDLE_TIMEOUT],
          );
    if (inserted.rowCount === 0) {
      await client.query("COMMIT");
      return "already_done";
    }
    try {
      await effect(client, entry);
    } catch (e) {
      throw new EffectFailed(e);
    }
    if (entry.lease !== null) {
      const r = await client.query<{ epoch: string }>(
        `SELECT epoch FROM outbox_inbox_fences
         WHERE consumer_group = $1 AND topic = $2 AND partition = $3
         FOR SHARE`,
        [group, entry.topic, entry.lease.partition],
      );
      holds(entry.topic, entry.lease, r.rows[0] ? Number(r.rows[0].epoch) : 0);
    }
    await client.query("COMMIT");
    return "applied";
  } catch (e) {
    try {
      await client.query("ROLLBACK");
    } catch {
      if (e instanceof EffectFailed) e.rollbackFailed = true;
    }
    throw e;
  }
}

/** An effect on a batch: runs once per batch, inside its transaction, on the entries not applied before (in stream order). */
export type BatchEffect = (client: PoolClient, entries: Entry[]) => Promise<void>;

/**
 * In one transaction on `client`: records every entry for `group` in the inbox and runs
 * `effect` once on those not recorded before (in the given order, an id repeated in the batch
 * once); with leases, checks every lease's fence last before the commit. Returns how many were new.
 */
export async function applyBatchOnce(client: PoolClient, group: string, entries: Entry[], effect: BatchEffect): Promise<number> {
  const leases = new Map<string, [string, Lease]>();
  for (const e of entries) if (e.lease) leases.set(`${e.topic}\n${e.lease.partition}\n${e.lease.epoch}`, [e.topic, e.lease]);
  await client.query("BEGIN");
  try {
    if (leases.size > 0) await client.query("SELECT set_config('idle_in_transaction_session_timeout', $1, true)", [FENCED_IDLE_TIMEOUT]);
    const inserted = await client.query<{ event_id: string }>(
      `INSERT INTO outbox_inbox (consumer_group, event_id, topic)
       SELECT $1, id, topic FROM unnest($2::uuid[], $3::text[]) AS t(id, topic)
       ON CONFLICT DO NOTHING RETURNING event_id`,
      [group, entries.map((e) => e.id), entries.map((e) => e.topic)],
    );
    const fresh = new Set(inserted.rows.map((r) => r.event_id));
    const todo = entries.filter((e) => fresh.delete(e.id));
    if (todo.length > 0) {
      try {
        await effect(client, todo);
      } catch (e) {
        throw new EffectFailed(e);
      }
    }
    if (leases.size > 0) {
      const list = [...leases.values()];
      const r = await client.query<{ topic: string; partition: number; epoch: string }>(
        `SELECT topic, partition, epoch FROM outbox_inbox_fences
         WHERE consumer_group = $1
           AND (topic, partition) IN (SELECT * FROM unnest($2::text[], $3::int[]))
         FOR SHARE`,
        [group, list.map(([t]) => t), list.map(([, l]) => l.partition)],
      );
      for (const [topic, lease] of list) {
        const row = r.rows.find((f) => f.topic === topic && f.partition === lease.partition);
        holds(topic, lease, row ? Number(row.epoch) : 0);
      }
    }
    await client.query("COMMIT");
    return todo.length;
  } catch (e) {
    try {
      await client.query("ROLLBACK");
    } catch {
      if (e instanceof EffectFailed) e.rollbackFailed = true;
    }
    throw e;
  }
}

/** Deletes up to `limit` of `group`'s rows older than `olderThanMs`, oldest first; returns how many. */
export async function deleteOlderThan(pool: Pool, group: string, olderThanMs: number, limit: number): Promise<number> {
  const r = await pool.query(
    `DELETE FROM outbox_inbox WHERE consumer_group = $1 AND event_id IN (
       SELECT event_id FROM outbox_inbox
       WHERE consumer_group = $1 AND processed_at < now() - make_interval(secs => $2)
       ORDER BY processed_at LIMIT $3)`,
    [group, olderThanMs / 1000, limit],
  );
  return r.rowCount ?? 0;
}

/** The inbox's settings. */
export interface InboxOptions {
  /** Rows older than this (ms) are deleted; must exceed how long an entry can still be redelivered. Default 7 days. */
  retentionMs?: number;
  /** How often the retention runs (ms). Default 1 minute. */
  cleanupIntervalMs?: number;
}

/** What both inboxes share: the pool, the fences raised, the error mapping, the retention. */
abstract class InboxBase {
  private readonly raised = new Map<string, number>();
  private readonly retentionMs: number;
  private readonly cleanupIntervalMs: number;

  constructor(
    protected readonly pool: Pool,
    options: InboxOptions = {},
  ) {
    this.retentionMs = options.retentionMs ?? 7 * 24 * 3600 * 1000;
    this.cleanupIntervalMs = Math.max(1, options.cleanupIntervalMs ?? 60_000);
    // An idle client's error (Postgres restarted) would otherwise crash the process; the next
    // checkout finds the database away, which is an outage.
    if (pool.listenerCount("error") === 0) pool.on("error", () => {});
  }

  /** Runs `apply` on a client from the pool, the inbox's failures as outages, the effect's as it said. */
  protected async withClient(entries: Entry[], apply: (client: PoolClient) => Promise<unknown>): Promise<void> {
    let client: PoolClient;
    try {
      client = await this.pool.connect();
    } catch (e) {
      throw HandlerError.outage(`inbox: no database connection: ${messageOf(e)}`);
    }
    let broken: Error | undefined;
    try {
      for (const entry of entries) await this.raiseFence(client, entry);
      await apply(client);
    } catch (e) {
      if (e instanceof EffectFailed) {
        if (e.rollbackFailed) broken = new Error("rollback failed");
        throw e.error;
      }
      if (e instanceof HandlerError) throw e;
      if (e instanceof FenceError) {
        throw e.reason === "fenced" ? HandlerError.fenced(e.message) : HandlerError.retry(e.message);
      }
      broken = e instanceof Error ? e : new Error(String(e));
      throw HandlerError.outage(`inbox: database error: ${messageOf(e)}`);
    } finally {
      // A client whose connection failed is destroyed, not reused.
      client.release(broken);
    }
  }

  /** Raises the entry's partition fence once per partition and epoch (the Rust library raises each once per topic, partition and epoch). */
  private async raiseFence(client: PoolClient, entry: Entry): Promise<void> {
    const lease = entry.lease;
    if (lease === null) return;
    const slot = `${entry.topic}\n${lease.partition}`;
    if (this.raised.get(slot) === lease.epoch) return;
    let fence: number;
    try {
      fence = await raiseFence(client, entry.group, entry.topic, lease);
    } catch (e) {
      throw HandlerError.outage(`inbox: raising the fence: ${messageOf(e)}`);
    }
    if (fence !== lease.epoch) throw HandlerError.fenced(new FenceError("fenced", entry.topic, lease.partition, lease.epoch, fence).message);
    this.raised.set(slot, lease.epoch);
  }

  /** The retention: every `cleanupIntervalMs`, deletes the group's rows older than `retentionMs`, in batches. */
  async maintain(group: string, signal: AbortSignal): Promise<void> {
    const errors = new ErrorLog(60_000);
    while (!signal.aborted) {
      await sleep(this.cleanupIntervalMs, signal);
      if (signal.aborted) return;
      try {
        for (;;) {
          const n = await deleteOlderThan(this.pool, group, this.retentionMs, RETENTION_BATCH);
          if (n < RETENTION_BATCH || signal.aborted) break;
        }
      } catch (e) {
        if (errors.admit() !== null) process.stderr.write(`inbox retention failed; retrying next round: ${messageOf(e)}\n`);
      }
    }
  }
}

/**
 * The inbox as a handler: `consumer.run(new Inbox(pool, effect))`. Each entry's `effect` runs
 * in a transaction with its `outbox_inbox` row; the entry is acknowledged after the commit, and
 * a redelivered entry is acknowledged without running the effect again. The tables must exist
 * ({@link ensureTables}).
 */
export class Inbox extends InboxBase implements HandlerObject {
  constructor(
    pool: Pool,
    private readonly effect: Effect,
    options: InboxOptions = {},
  ) {
    super(pool, options);
  }

  /**
   * The inbox around an effect on whole batches, one transaction per batch:
   * `consumer.run(new Batches(Inbox.forBatches(pool, effect)))`. A failing batch is retried
   * whole, and dead-lettered whole after `maxDeliveries`.
   */
  static forBatches(pool: Pool, effect: BatchEffect, options: InboxOptions = {}): BatchInbox {
    return new BatchInbox(pool, effect, options);
  }

  async handle(entry: Entry): Promise<void> {
    await this.withClient([entry], (client) => applyOnce(client, entry.group, entry, this.effect));
  }
}

/** The inbox on whole batches: see {@link Inbox.forBatches}. */
export class BatchInbox extends InboxBase implements BatchHandlerObject {
  constructor(
    pool: Pool,
    private readonly effect: BatchEffect,
    options: InboxOptions = {},
  ) {
    super(pool, options);
  }

  async handleBatch(entries: Entry[]): Promise<void> {
    const group = entries[0]?.group;
    if (group === undefined) return;
    await this.withClient(entries, (client) => applyBatchOnce(client, group, entries, this.effect));
  }
}

