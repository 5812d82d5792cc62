/**
 * Parked keys (docs/protocol.md, "Parked keys"; the consumer's `parkKeys`): once an entry is
 * dead-lettered, its partition key is parked in the group, in Redis where every consumer of
 * the group (in any language) and the relay's admin see it:
 * - `<prefix><topic>:{<group>}:parked`, a hash: key -> `{"dead_id","dead_entry","stream","since_ms","released"}`;
 * - `<prefix><topic>:{<group>}:held:<key>`, a list of held entries `{"stream","id","fields"}`.
 * A batch's entries of a parked key are held (appended to the list, then acknowledged); a key
 * an operator released is drained in order by one consumer at a time (`<held>:drain` lock),
 * then forgotten. The JSON is written in the Rust library's field order.
 *
 * The park, hold, unpark and pop steps are the shared scripts of `outbox_core::parked` (the
 * repository's `core/protocol/scripts`), read from this package's
 * `protocol/scripts/{park,hold,unpark,pop}.lua`; the drain lock's release is `unlock.lua`.
 */

import { existsSync } from "node:fs";
import type { ConsumerConfig, Logger } from "./config.js";
import { ConfigError } from "./config.js";
import { EntryError } from "./entry.js";
import * as keys from "./keys.js";
import { PROTOCOL_DIR, script } from "./protocol.js";
import type { Conn, RawEntry } from "./redis.js";
import { retryDelay, sleep } from "./backoff.js";
import { asError } from "./errors.js";
import type { Delivery, Fate } from "./consumer.js";
import { newDelivery } from "./consumer.js";

/** The parked-key scripts, by command name and file. */
const PARK_SCRIPTS = { outboxPark: "park", outboxHold: "hold", outboxUnpark: "unpark", outboxPop: "pop" } as const;

type ParkConn = Conn & { [K in keyof typeof PARK_SCRIPTS]: (n: number, ...args: Array<string | number>) => Promise<unknown> };

/** A parked key's state, as JSON in the parked hash. */
export interface ParkedState {
  dead_id: string;
  dead_entry: string;
  stream: string;
  since_ms: number;
  released: boolean;
}

/** One held entry, as JSON in a held list. */
export interface HeldEntry {
  stream: string;
  id: string;
  fields: Array<[string, string]>;
}

export class Parking {
  private readonly defined = new WeakSet<Conn>();

  constructor(
    private readonly config: ConsumerConfig,
    private readonly logger: Logger,
  ) {
    if (config.parkKeys) {
      const missing = Object.values(PARK_SCRIPTS).filter((f) => !existsSync(`${PROTOCOL_DIR}scripts/${f}.lua`));
      if (missing.length > 0) {
        throw new ConfigError(
          "parkKeys",
          `this package lacks the parked-key scripts (${missing.map((f) => `protocol/scripts/${f}.lua`).join(", ")})`,
        );
      }
    }
  }

  private conn(conn: Conn): ParkConn {
    if (!this.defined.has(conn)) {
      for (const [command, file] of Object.entries(PARK_SCRIPTS)) conn.defineCommand(command, { lua: script(file) });
      this.defined.add(conn);
    }
    return conn as ParkConn;
  }

  /** A delivery's topic and key, when it is well-formed and keyed. */
  topicKey(d: Delivery): [string, string] | null {
    if (d.parsed instanceof EntryError || d.parsed.key === null) return null;
    return [d.parsed.topic, d.parsed.key];
  }

  /** Marks the deliveries whose key is parked in this group (one HMGET per topic). */
  async markParked(conn: Conn, deliveries: Delivery[]): Promise<void> {
    const byTopic = new Map<string, Set<string>>();
    for (const d of deliveries) {
      const tk = this.topicKey(d);
      if (!tk) continue;
      const set = byTopic.get(tk[0]) ?? new Set<string>();
      set.add(tk[1]);
      byTopic.set(tk[0], set);
    }
    const parked = new Set<string>();
    for (const [topic, set] of byTopic) {
      const list = [...set];
      const found = await conn.hmget(keys.parkedKey(this.config.streamPrefix, topic, this.config.group), ...list);
      list.forEach((key, i) => {
        if (found[i] !== null && found[i] !== undefined) parked.add(`${topic}\n${key}`);
      });
    }
    for (const d of deliveries) {
      const tk = this.topicKey(d);
      d.parked = tk !== null && parked.has(`${tk[0]}\n${tk[1]}`);
    }
  }

  /** Appends `d` to its parked key's held list; false when the key is no longer parked (handle it then). */
  async hold(conn: Conn, d: Delivery): Promise<boolean> {
    const tk = this.topicKey(d);
    if (!tk) return false;
    const held: HeldEntry = {
      stream: d.raw.stream,
      id: d.raw.streamId,
      fields: d.raw.fields.map(([k, v]) => [k, v.toString("utf8")]),
    };
    const hash = keys.parkedKey(this.config.streamPrefix, tk[0], this.config.group);
    const list = keys.heldKey(this.config.streamPrefix, tk[0], this.config.group, tk[1]);
    return Number(await this.conn(conn).outboxHold(2, hash, list, tk[1], JSON.stringify(held))) === 1;
  }

  /** Parks `d`'s key behind its dead entry (`deadEntry` empty while not yet written). */
  async parkDead(conn: Conn, d: Delivery, deadEntry: string): Promise<void> {
    const tk = this.topicKey(d);
    if (!tk || d.parsed instanceof EntryError) return;
    const state: ParkedState = {
      dead_id: d.parsed.id,
      dead_entry: deadEntry,
      stream: d.raw.stream,
      since_ms: Date.now(),
      released: false,
    };
    const hash = keys.parkedKey(this.config.streamPrefix, tk[0], this.config.group);
    const parked = Number(await this.conn(conn).outboxPark(1, hash, tk[1], JSON.stringify(state))) === 1;
    if (parked && deadEntry !== "") {
      this.logger.warn("key parked behind its dead entry: its later entries are held until an operator discards or redrives it", {
        topic: tk[0],
        key: tk[1],
        event_id: d.parsed.id,
      });
    }
  }

  /** Drains every released key this consumer may handle now, through `process` (one delivery at a time). */
  async drain(
    conn: Conn,
    process: (d: Delivery) => Promise<Array<{ fate: Fate }>>,
    check: (stream: string) => { check: string },
  ): Promise<void> {
    const c = this.config;
    for (const topic of c.topics) {
      const hash = keys.parkedKey(c.streamPrefix, topic, c.group);
      const all = await conn.hgetall(hash);
      for (const key of Object.keys(all).sort()) {
        let state: ParkedState;
        try {
          state = JSON.parse(all[key] as string) as ParkedState;
        } catch {
          continue;
        }
        if (!state.released || check(state.stream).check === "not_mine") continue;
        const list = keys.heldKey(c.streamPrefix, topic, c.group, key);
        const lock = keys.drainLockKey(list);
        const got = await conn.set(lock, c.consumer, "PX", Math.max(1, c.claimIdleMs), "NX");
        if (got === null) continue;
        try {
          await this.drainKey(conn, topic, hash, list, key, process);
        } finally {
          await conn.outboxUnlock(1, lock, c.consumer);
        }
      }
    }
  }

  private async drainKey(
    conn: Conn,
    topic: string,
    hash: string,
    list: string,
    key: string,
    process: (d: Delivery) => Promise<Array<{ fate: Fate }>>,
  ): Promise<void> {
    const pc = this.conn(conn);
    for (;;) {
      const first = await conn.lindex(list, 0);
      if (first === null) {
        if (Number(await pc.outboxUnpark(2, hash, list, key)) === 1) this.logger.info("parked key drained: it flows again", { topic, key });
        return;
      }
      let held: HeldEntry;
      try {
        held = JSON.parse(first) as HeldEntry;
      } catch {
        this.logger.warn("a held entry that is not one: dropped", { topic, key });
        await pc.outboxPop(1, list, first);
        continue;
      }
      const raw: RawEntry = {
        stream: held.stream,
        streamId: held.id,
        fields: held.fields.map(([k, v]) => [k, Buffer.from(v, "utf8")]),
      };
      let delivery = 1;
      for (;;) {
        const d = newDelivery(raw, topic, this.config.group, delivery, false);
        d.fromHeld = true;
        const fate = (await process(d))[0]?.fate;
        if (fate?.fate === "done") {
          await pc.outboxPop(1, list, first);
          break;
        }
        if (fate?.fate === "dead_lettered") {
          await pc.outboxPop(1, list, first);
          return;
        }
        if (fate?.fate === "failed") {
          await sleep(retryDelay(fate.delivery, this.config.retryBaseMs, this.config.retryMaxMs));
          delivery = fate.delivery + 1;
          continue;
        }
        if (fate?.fate === "lost" && fate.error !== undefined) throw asError(fate.error);
        return;
      }
    }
  }
}
