/**
 * Redis key names that the relay and consumers in every language agree on
 * (docs/protocol.md, "Keys"): the same names as the Rust library's `outbox_core::keys` and
 * `outbox_core::parked`, so a TypeScript consumer joins a Rust fleet.
 */

/** `<prefix><topic>`: the topic's stream. */
export function streamKey(prefix: string, topic: string): string {
  return `${prefix}${topic}`;
}

/** The stream of partition `partition` of a topic with `partitions` partitions. */
export function partitionKey(prefix: string, topic: string, partition: number, partitions: number): string {
  return partitions <= 1 ? streamKey(prefix, topic) : `${prefix}${topic}:${partition}`;
}

/** Every stream of a topic with `partitions` partitions, in partition order. */
export function partitionKeys(prefix: string, topic: string, partitions: number): string[] {
  const n = Math.max(1, partitions);
  return Array.from({ length: n }, (_, p) => partitionKey(prefix, topic, p, partitions));
}

/** `<prefix>partitions`: the hash of each topic's partition count. */
export function partitionsHash(prefix: string): string {
  return `${prefix}partitions`;
}

/** `<prefix><topic>:dead`: a topic's dead stream (one, whatever its partitions). */
export function deadKey(prefix: string, topic: string): string {
  return `${streamKey(prefix, topic)}:dead`;
}

/** The `{...}` part that gives a key the cluster slot of `key`. */
export function slotTag(key: string): string {
  const open = key.indexOf("{");
  if (open >= 0) {
    const close = key.indexOf("}", open + 1);
    if (close > open + 1) return key;
  }
  return `{${key}}`;
}

/** `<prefix><topic>:{<group>}:members`: the sorted set of a group's live consumers on a topic. */
export function fleetMembers(prefix: string, topic: string, group: string): string {
  return `${prefix}${topic}:{${group}}:members`;
}

/** `{<stream>}:owner:<group>`: a partition stream's lease for a group. */
export function partitionOwner(stream: string, group: string): string {
  return `${slotTag(stream)}:owner:${group}`;
}

/** `{<stream>}:epoch:<group>`: a partition stream's fencing epoch for a group. */
export function partitionEpoch(stream: string, group: string): string {
  return `${slotTag(stream)}:epoch:${group}`;
}

/** `<prefix><topic>:{<group>}:parked`: a group's parked keys of a topic (hash). */
export function parkedKey(prefix: string, topic: string, group: string): string {
  return `${prefix}${topic}:{${group}}:parked`;
}

/** `<prefix><topic>:{<group>}:held:<key>`: the entries held behind a parked key (list). */
export function heldKey(prefix: string, topic: string, group: string, key: string): string {
  return `${prefix}${topic}:{${group}}:held:${key}`;
}

/** `<held key>:drain`: which consumer drains a released key now (expires). */
export function drainLockKey(held: string): string {
  return `${held}:drain`;
}
