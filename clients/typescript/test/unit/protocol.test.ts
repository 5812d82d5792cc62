import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { PROTOCOL_DIR } from "../../src/protocol.js";

// In a checkout of the repository, the package's copies are the same bytes as the originals
// (scripts/sync_protocol.sh --check says the same; the SQL is copied by hand for now).
const REPO = `${PROTOCOL_DIR}../../../`;
const pairs: Array<[string, string]> = [
  [`${REPO}consumer/protocol/scripts/`, `${PROTOCOL_DIR}scripts/`],
  [`${REPO}consumer/protocol/golden/`, `${PROTOCOL_DIR}golden/`],
  [`${REPO}consumer/sql/`, `${PROTOCOL_DIR}sql/`],
];

test("the package's protocol files are the repository's bytes", { skip: !existsSync(`${REPO}consumer/protocol`) && "not in a checkout" }, () => {
  for (const [original, copy] of pairs) {
    const names = readdirSync(original).filter((n) => /\.(lua|json|sql)$/.test(n)).sort();
    assert.deepEqual(readdirSync(copy).filter((n) => /\.(lua|json|sql)$/.test(n)).sort(), names, copy);
    for (const n of names) assert.ok(readFileSync(`${original}${n}`).equals(readFileSync(`${copy}${n}`)), `${copy}${n} differs from ${original}${n}`);
  }
});
