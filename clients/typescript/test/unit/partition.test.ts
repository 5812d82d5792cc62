import { test } from "node:test";
import assert from "node:assert/strict";
import { murmur2, partitionFor } from "../../src/partition.js";

// Kafka's UtilsTest.testMurmur2, librdkafka's and Akka's vectors (as the Rust library's tests).
const HASHES: Array<[string, number]> = [
  ["21", -973932308],
  ["foobar", -790332482],
  ["a-little-bit-long-string", -985981536],
  ["a-little-bit-longer-string", -1486304829],
  ["lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971],
  ["abc", 479470107],
  ["kafka", -798503068],
  ["1", -1993445489],
  ["12", 126087238],
  ["123", -267702483],
  ["1234", -1614185708],
  ["12345", -1188365604],
];

test("murmur2 matches Kafka's", () => {
  for (const [key, want] of HASHES) assert.equal(murmur2(key), want, key);
});

test("the contract's partitions over 1000", () => {
  for (const [key, want] of [["", 681], ["a", 524], ["abc", 107], ["123456789", 566]] as const) {
    assert.equal(partitionFor(key, 1000), want, key);
  }
});

test("a partition is the positive hash modulo the count", () => {
  assert.equal(partitionFor("21", 8), ((-973932308 >>> 0) & 0x7fffffff) % 8);
  assert.equal(partitionFor("abc", 1), 0);
  assert.equal(partitionFor("abc", 0), 0);
  for (const n of [2, 3, 8, 1024]) assert.ok(partitionFor("customer-42", n) < n);
  // Bytes and text agree: a multibyte key is hashed as its UTF-8.
  assert.equal(murmur2("ключ-🔑"), murmur2(Buffer.from("ключ-🔑", "utf8")));
});
