/** The default logger: one JSON line per message on stderr; `OUTBOX_LOG=debug|info|warn|off` (default info). */

import type { Logger } from "./config.js";

const LEVELS = { debug: 0, info: 1, warn: 2, off: 3 } as const;

function level(): number {
  const name = (process.env.OUTBOX_LOG ?? "info").toLowerCase();
  return name in LEVELS ? LEVELS[name as keyof typeof LEVELS] : LEVELS.info;
}

function line(lvl: string, message: string, fields?: Record<string, unknown>): void {
  process.stderr.write(`${JSON.stringify({ time: new Date().toISOString(), level: lvl, message, ...fields })}\n`);
}

/** Writes JSON lines to stderr. */
export function stderrLogger(): Logger {
  const min = level();
  return {
    debug: (m, f) => (min <= LEVELS.debug ? line("debug", m, f) : undefined),
    info: (m, f) => (min <= LEVELS.info ? line("info", m, f) : undefined),
    warn: (m, f) => (min <= LEVELS.warn ? line("warn", m, f) : undefined),
  };
}
