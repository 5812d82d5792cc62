import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { PROTOCOL_DIR } from "../../src/protocol.js";

// In a checkout of the repository, the package's copies are the same bytes as the originals
// (scripts/sync_protocol.sh --check says the same; the SQL is copied by hand for now).
const REPO = `${PROTOCOL_DIR}../../../`;
// The scripts come from two folders (the consumer library's, and outbox-core's parked-key
// scripts, which the relay's admin runs too), side by side in the package's protocol/scripts.
const pairs: Array<[string[], string]> = [
  [[`${REPO}consumer/protocol/scripts/`, `${REPO}core/protocol/scripts/`], `${PROTOCOL_DIR}scripts/`],
  [[`${REPO}consumer/protocol/golden/`], `${PROTOCOL_DIR}golden/`],
  [[`${REPO}consumer/sql/`], `${PROTOCOL_DIR}sql/`],
];

test("the package's protocol files are the repository's bytes", { skip: !existsSync(`${REPO}consumer/protocol`) && "not in a checkout" }, () => {
  for (const [originals, copy] of pairs) {
    const files = originals
      .filter((dir) => existsSync(dir))
      .flatMap((dir) => readdirSync(dir).filter((n) => /\.(lua|json|sql)$/.test(n)).map((n) => [dir, n] as const));
    const names = files.map(([, n]) => n).sort();
    assert.deepEqual(readdirSync(copy).filter((n) => /\.(lua|json|sql)$/.test(n)).sort(), names, copy);
    for (const [dir, n] of files) assert.ok(readFileSync(`${dir}${n}`).equals(readFileSync(`${copy}${n}`)), `${copy}${n} differs from ${dir}${n}`);
  }
});
