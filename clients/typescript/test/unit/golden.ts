/** The protocol's golden data, as shipped in this package (protocol/golden, copied from the repository's consumer/protocol/golden). */

import { readFileSync } from "node:fs";
import { PROTOCOL_DIR } from "../../src/protocol.js";

export function golden<T>(name: string): T {
  return JSON.parse(readFileSync(`${PROTOCOL_DIR}golden/${name}.json`, "utf8")) as T;
}
