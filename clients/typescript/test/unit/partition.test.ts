import { test } from "node:test";
import assert from "node:assert/strict";
import { murmur2, partitionFor } from "../../src/partition.js";
import { golden } from "./golden.js";

interface Vectors {
  counts: number[];
  vectors: Array<{ note: string; key: string; utf8_bytes: number; murmur2: number; partitions: Record<string, number> }>;
}

const data = golden<Vectors>("partitions");

test("golden partition vectors: murmur2 and the partition of every count", () => {
  assert.ok(data.vectors.length > 20);
  for (const v of data.vectors) {
    const label = `${v.note}: ${JSON.stringify(v.key.slice(0, 40))}`;
    assert.equal(Buffer.byteLength(v.key, "utf8"), v.utf8_bytes, label);
    assert.equal(murmur2(v.key), v.murmur2, label);
    assert.equal(murmur2(Buffer.from(v.key, "utf8")), v.murmur2, label);
    for (const n of data.counts) assert.equal(partitionFor(v.key, n), v.partitions[String(n)], `${label} over ${n}`);
  }
});

test("the contract's own vectors over 1000 partitions", () => {
  for (const [key, want] of [["", 681], ["a", 524], ["abc", 107], ["123456789", 566]] as const) {
    assert.equal(partitionFor(key, 1000), want, key);
  }
  assert.equal(partitionFor("abc", 0), 0, "a count of 0 is taken as 1");
});
