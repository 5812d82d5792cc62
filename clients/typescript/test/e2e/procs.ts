/** Processes of the end-to-end tests: the real relay binary and the inbox examples (TypeScript, and Rust's when built). */

import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

/** The package's folder (clients/typescript), from dist/test/e2e. */
export const PACKAGE = fileURLToPath(new URL("../../../", import.meta.url));
const REPO = `${PACKAGE}../../`;
export const RELAY = process.env.OUTBOX_RELAY_BIN ?? `${REPO}target/debug/outbox-relay`;
export const RUST_EXAMPLE = process.env.OUTBOX_RUST_EXAMPLE_BIN ?? `${REPO}target/debug/examples/inbox_consumer`;
export const TS_EXAMPLE = `${PACKAGE}dist/examples/inbox.js`;

export const haveRelay = existsSync(RELAY);

/** `outbox-relay migrate` on `databaseUrl`. */
export function migrate(databaseUrl: string): void {
  const r = spawnSync(RELAY, ["migrate"], { env: { ...process.env, DATABASE_URL: databaseUrl }, encoding: "utf8", timeout: 60_000 });
  if (r.status !== 0) throw new Error(`outbox-relay migrate failed: ${r.stderr}`);
}

export interface Proc {
  child: ChildProcess;
  output: () => string;
  exited: Promise<number | null>;
}

function start(command: string, args: string[], env: Record<string, string>): Proc {
  const child = spawn(command, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  child.stdout?.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr?.on("data", (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
  return { child, output: () => out, exited };
}

/** `outbox-relay run` publishing `databaseUrl`'s outbox to Redis under `prefix`. */
export function relay(databaseUrl: string, redisUrl: string, prefix: string, env: Record<string, string> = {}): Proc {
  return start(RELAY, ["run"], {
    DATABASE_URL: databaseUrl,
    REDIS_URL: redisUrl,
    OUTBOX__REDIS__STREAM_PREFIX: prefix,
    OUTBOX__ADMIN__ADDR: "127.0.0.1:0",
    RUST_LOG: "warn",
    ...env,
  });
}

/** The TypeScript inbox example. */
export function tsExample(databaseUrl: string, redisUrl: string, args: string[]): Proc {
  return start(process.execPath, [TS_EXAMPLE, ...args], { DATABASE_URL: databaseUrl, REDIS_URL: redisUrl, OUTBOX_LOG: "warn" });
}

/** The Rust inbox example (target/debug/examples/inbox_consumer). */
export function rustExample(databaseUrl: string, redisUrl: string, args: string[]): Proc {
  return start(RUST_EXAMPLE, args, { DATABASE_URL: databaseUrl, REDIS_URL: redisUrl, RUST_LOG: "warn" });
}

export async function stop(p: Proc, signal: NodeJS.Signals = "SIGTERM"): Promise<number | null> {
  if (p.child.exitCode === null && p.child.signalCode === null) p.child.kill(signal);
  return p.exited;
}
