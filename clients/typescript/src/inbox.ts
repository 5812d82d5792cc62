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
import type { HandlerObject } from "./consumer.js";
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

/** Creates `outbox_inbox` and `outbox_inbox_fences` if missing (serialized by an advisory lock). */
export async function ensureTables(pool: Pool): Promise<void> {
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

/**
 * The inbox as a handler: `consumer.run(new Inbox(pool, effect))`. Each entry's `effect` runs
 * in a transaction with its `outbox_inbox` row; the entry is acknowledged after the commit, and
 * a redelivered entry is acknowledged without running the effect again. The tables must exist
 * ({@link ensureTables}).
 */
export class Inbox implements HandlerObject {
  private readonly raised = new Map<string, number>();
  private readonly retentionMs: number;
  private readonly cleanupIntervalMs: number;

  constructor(
    private readonly pool: Pool,
    private readonly effect: Effect,
    options: InboxOptions = {},
  ) {
    this.retentionMs = options.retentionMs ?? 7 * 24 * 3600 * 1000;
    this.cleanupIntervalMs = Math.max(1, options.cleanupIntervalMs ?? 60_000);
    // An idle client's error (Postgres restarted) would otherwise crash the process; the next
    // checkout finds the database away, which is an outage.
    if (pool.listenerCount("error") === 0) pool.on("error", () => {});
  }

  async handle(entry: Entry): Promise<void> {
    let client: PoolClient;
    try {
      client = await this.pool.connect();
    } catch (e) {
      throw HandlerError.outage(`inbox: no database connection: ${messageOf(e)}`);
    }
    let broken: Error | undefined;
    try {
      await this.raiseFence(client, entry);
      await applyOnce(client, entry.group, entry, this.effect);
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

  /** Raises the entry's partition fence once per partition and epoch. */
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
