/**
 * Which partition of a topic an event goes to: `(murmur2(key as UTF-8) & 0x7fffffff) % N`,
 * with the murmur2 of Kafka's default partitioner (seed `0x9747b28c`), as the relay computes
 * it (docs/protocol.md, "The partition function").
 *
 * All arithmetic is on unsigned 32-bit integers: `Math.imul` for the wrapping multiply and
 * `>>> 0` to bring every intermediate back to [0, 2^32).
 */

const SEED = 0x9747b28c;
const M = 0x5bd1e995;
const R = 24;

/** The most partitions a topic may have. */
export const MAX_PARTITIONS = 1024;

/** Kafka's `Utils.murmur2` of `data` (a string is hashed as its UTF-8 bytes), as a signed 32-bit integer. */
export function murmur2(data: string | Uint8Array): number {
  const bytes = typeof data === "string" ? Buffer.from(data, "utf8") : data;
  const length = bytes.length;
  let h = (SEED ^ length) >>> 0;
  const whole = length - (length % 4);
  for (let i = 0; i < whole; i += 4) {
    let k =
      ((bytes[i] as number) |
        ((bytes[i + 1] as number) << 8) |
        ((bytes[i + 2] as number) << 16) |
        ((bytes[i + 3] as number) << 24)) >>>
      0;
    k = Math.imul(k, M) >>> 0;
    k = (k ^ (k >>> R)) >>> 0;
    k = Math.imul(k, M) >>> 0;
    h = Math.imul(h, M) >>> 0;
    h = (h ^ k) >>> 0;
  }
  const tail = length - whole;
  if (tail >= 3) h = (h ^ ((bytes[whole + 2] as number) << 16)) >>> 0;
  if (tail >= 2) h = (h ^ ((bytes[whole + 1] as number) << 8)) >>> 0;
  if (tail >= 1) {
    h = (h ^ (bytes[whole] as number)) >>> 0;
    h = Math.imul(h, M) >>> 0;
  }
  h = (h ^ (h >>> 13)) >>> 0;
  h = Math.imul(h, M) >>> 0;
  h = (h ^ (h >>> 15)) >>> 0;
  return h | 0;
}

/** The partition of `key` among `partitions` (a count below 1 is taken as 1): Kafka's `toPositive(murmur2(key)) % partitions`. */
export function partitionFor(key: string | Uint8Array, partitions: number): number {
  const n = Math.max(1, Math.floor(partitions));
  return (murmur2(key) & 0x7fffffff) % n;
}
