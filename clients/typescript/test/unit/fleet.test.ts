import { test } from "node:test";
import assert from "node:assert/strict";
import { asks, byteOrder, settle, targets, type Held } from "../../src/fleet.js";
import { lanes } from "../../src/consumer.js";
import { deadKeyOfStream, parseDuration } from "../../src/config.js";
import * as keys from "../../src/keys.js";

test("every partition goes to exactly one member and counts differ by at most one", () => {
  for (let m = 1; m <= 10; m++) {
    for (let n = 1; n <= 20; n++) {
      const members = Array.from({ length: m }, (_, i) => `c-${(i * 7) % 11}`);
      const owners = new Array<number>(n).fill(0);
      const counts = members.map((me) => {
        const mine = targets(members, me, n);
        for (const p of mine) owners[p] = (owners[p] ?? 0) + 1;
        return mine.length;
      });
      assert.ok(owners.every((x) => x === 1), `m=${m} n=${n}`);
      assert.ok(Math.max(...counts) - Math.min(...counts) <= 1);
    }
  }
  assert.deepEqual(targets(["b", "a", "c"], "b", 8), [1, 4, 7]);
  assert.deepEqual(targets(["c", "b", "a"], "b", 8), [1, 4, 7]);
  assert.deepEqual(targets(["a"], "z", 8), []);
});

test("names sort by their UTF-8 bytes, as Rust sorts them", () => {
  // UTF-16 order puts U+FF5E before U+1F600 (a surrogate pair); byte order the other way round.
  assert.ok(byteOrder("\uff5e", "\u{1f600}") < 0);
  assert.deepEqual(["\u{1f600}", "\uff5e", "Z", "a"].sort(byteOrder), ["Z", "a", "\uff5e", "\u{1f600}"]);
});

test("lease bookkeeping: take, renew, lose, change hands, give up", () => {
  const streams = ["s:0", "s:1", "s:2"];
  const held = new Map<string, Held>();
  let calls = asks(held, streams, new Set([0, 2]));
  assert.deepEqual(calls, [[0, "take"], [2, "take"]]);
  let r = settle(held, streams, new Set([0, 2]), [[[0, "take"], { held: 5 }], [[2, "take"], "refused"]], 1000);
  assert.equal(r.waiting, true);
  assert.deepEqual(r.changes, [{ change: "took", partition: 0, epoch: 5 }]);
  assert.equal(held.get("s:0")?.handedOver, false);
  calls = asks(held, streams, new Set([0]));
  assert.deepEqual(calls, [[0, "renew"]]);
  r = settle(held, streams, new Set<number>(), [[[0, "renew"], { held: 5 }]], 2000);
  assert.deepEqual(r.changes, [{ change: "giving_up", partition: 0 }]);
  assert.equal(held.get("s:0")?.keep, false);
  assert.equal(held.get("s:0")?.validUntil, 2000);
  r = settle(held, streams, new Set([0]), [[[0, "renew"], { held: 6 }]], 3000);
  assert.deepEqual(r.changes, [{ change: "changed_hands", partition: 0 }]);
  assert.equal(held.size, 0);
  settle(held, streams, new Set([1]), [[[1, "take"], { held: 1 }]], 3000);
  r = settle(held, streams, new Set([1]), [[[1, "renew"], "refused"]], 4000);
  assert.deepEqual(r.changes, [{ change: "lost", partition: 1 }]);
  settle(held, streams, new Set([1]), [[[1, "take"], { held: 2 }]], 5000);
  r = settle(held, streams, new Set([1]), [[[1, "renew"], "failed"]], 9000);
  assert.equal(held.get("s:1")?.validUntil, 5000, "a failed renewal changes nothing");
});

test("lanes: one per key in stream order, one per unkeyed item", () => {
  const items = [["a", 1], [null, 2], ["b", 3], ["a", 4], [null, 5], ["b", 6], ["a", 7]] as const;
  const got = lanes(items.map(([lane, n]) => ({ lane, n }))).map((l) => l.map((x) => x.n));
  assert.deepEqual(got, [[1, 4, 7], [2], [3, 6], [5]]);
});

test("keys and names as the Rust library spells them", () => {
  assert.equal(keys.fleetMembers("o:", "t", "g"), "o:t:{g}:members");
  assert.equal(keys.partitionOwner("o:t:3", "g"), "{o:t:3}:owner:g");
  assert.equal(keys.partitionEpoch("o:t:3", "g"), "{o:t:3}:epoch:g");
  assert.equal(keys.partitionOwner("{o}:t:3", "g"), "{o}:t:3:owner:g");
  assert.deepEqual(keys.partitionKeys("o:", "t", 2), ["o:t:0", "o:t:1"]);
  assert.deepEqual(keys.partitionKeys("o:", "t", 1), ["o:t"]);
  assert.equal(keys.parkedKey("outbox:", "orders", "billing"), "outbox:orders:{billing}:parked");
  assert.equal(keys.heldKey("outbox:", "orders", "billing", "k"), "outbox:orders:{billing}:held:k");
  const config = { topics: ["order.created"], streamPrefix: "outbox:" };
  assert.equal(deadKeyOfStream(config, "outbox:order.created:7"), "outbox:order.created:dead");
  assert.equal(deadKeyOfStream(config, "outbox:order.created"), "outbox:order.created:dead");
  assert.equal(parseDuration("1m30s"), 90_000);
  assert.equal(parseDuration("200ms"), 200);
  assert.equal(parseDuration("soon"), null);
});
