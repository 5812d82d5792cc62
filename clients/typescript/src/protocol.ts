/**
 * The protocol's shared files, shipped in this package under `protocol/`: the Redis scripts
 * (`protocol/scripts/*.lua`, the same bytes as the repository's `consumer/protocol/scripts`,
 * copied by `scripts/sync_protocol.sh`) and the inbox's DDL (`protocol/sql/*.sql`). Every
 * script this client runs is read from those files, never retyped.
 */

import { existsSync, readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

/** The protocol version this client speaks (docs/protocol.md). */
export const PROTOCOL_VERSION = 1;

function protocolDir(): string {
  // dist/src/protocol.js and src/protocol.ts (run from source) both find the package's folder.
  for (const up of ["../../protocol/", "../protocol/"]) {
    const dir = fileURLToPath(new URL(up, import.meta.url));
    if (existsSync(`${dir}scripts`)) return dir;
  }
  throw new Error(
    "@outbox-relay/consumer: its protocol/ folder (the shared .lua scripts) is missing: reinstall the package, or run scripts/sync_protocol.sh in a checkout",
  );
}

/** The package's `protocol/` folder. */
export const PROTOCOL_DIR = protocolDir();

/** The text of `protocol/scripts/<name>.lua`. */
export function script(name: string): string {
  return readFileSync(`${PROTOCOL_DIR}scripts/${name}.lua`, "utf8");
}

/** The text of `protocol/sql/<name>.sql`. */
export function sql(name: string): string {
  return readFileSync(`${PROTOCOL_DIR}sql/${name}.sql`, "utf8");
}
